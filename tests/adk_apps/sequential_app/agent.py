"""A SequentialAgent: a writer drafts, then a reviewer reviews the draft (as ADK's simple_sequential_agent)."""

from gemini_like import GeminiLike
from google.adk.agents import Agent, SequentialAgent

from .script import script

writer = Agent(
    name="writer",
    model=GeminiLike(script=script),
    description="Writes a short draft.",
    instruction="Write a two-line poem about the user's topic.",
    output_key="draft",
)

reviewer = Agent(
    name="reviewer",
    model=GeminiLike(script=script),
    description="Reviews the draft.",
    instruction="""Review this draft in one sentence:

    {draft}
    """,
    output_key="review",
)

root_agent = SequentialAgent(
    name="writing_pipeline",
    sub_agents=[writer, reviewer],
    # The agents run in the order provided: writer -> reviewer
)
