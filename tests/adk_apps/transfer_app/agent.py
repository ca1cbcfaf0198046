"""Multi-agent transfer: a coordinator hands the conversation to its sub-agents with `transfer_to_agent`."""

from gemini_like import GeminiLike
from google.adk.agents import Agent

from .script import script


def get_weather(city: str) -> dict:
    """Retrieves the current weather report for a specified city."""
    return {"status": "success", "city": city, "forecast": "sunny", "temperature_c": 22}


greeter = Agent(
    name="greeter",
    model=GeminiLike(script=script),
    description="Greets the user.",
    instruction="You greet the user warmly.",
)

weather = Agent(
    name="weather",
    model=GeminiLike(script=script),
    description="Answers questions about the weather in a city.",
    instruction="You answer questions about the weather. Use the get_weather tool.",
    tools=[get_weather],
)

root_agent = Agent(
    name="coordinator",
    model=GeminiLike(script=script),
    description="Routes the user to the right agent.",
    instruction="""
      You are a coordinator. Delegate greetings to the greeter agent and questions
      about the weather to the weather agent.
    """,
    sub_agents=[greeter, weather],
)
