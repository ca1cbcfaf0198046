"""Google Search grounding: ADK's built-in `google_search` tool (as ADK's google_search_agent sample)."""

from gemini_like import GeminiLike
from google.adk.agents import Agent
from google.adk.tools import google_search

from .script import script

root_agent = Agent(
    name="search_agent",
    model=GeminiLike(script=script),
    description="An agent that answers questions with Google Search.",
    instruction="""You are an agent whose job is to perform Google search queries and answer questions about
    the results.""",
    tools=[google_search],
)
