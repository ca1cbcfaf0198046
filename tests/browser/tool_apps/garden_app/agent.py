"""A garden helper on the offline `scripted` model, with tools of its own (none of the demo's).

| tool                  | arguments          | kind                               |
| water_plants()        | none               | server                             |
| plant_seeds(plant, n) | `plant` required   | server                             |
| harvest()             | none               | server, asks for approval (ADK's)  |
| ask_gardener(q)       | `question` required| long-running (the answer comes later) |
"""

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool

import adk_gateway.agents.scripted  # noqa: F401  (registers the offline `scripted` model with ADK)


def water_plants() -> dict[str, Any]:
    """Waters every plant in the garden."""
    return {"watered": ["tomatoes", "basil"]}


def plant_seeds(plant: str, count: int = 3) -> dict[str, Any]:
    """Plants seeds of a plant in the garden.

    Args:
        plant: What to plant.
        count: How many seeds.
    """
    return {"planted": plant, "count": count}


def harvest() -> dict[str, Any]:
    """Harvests what is ripe."""
    return {"harvested": ["tomatoes"]}


def ask_gardener(question: str) -> dict[str, Any]:
    """Asks the gardener a question; the answer comes later."""
    return {"status": "pending", "question": question}


root_agent = LlmAgent(
    name="garden_agent",
    model="scripted",
    description="Looks after a garden.",
    instruction="You look after the user's garden with your tools.",
    tools=[
        FunctionTool(water_plants),
        FunctionTool(plant_seeds),
        FunctionTool(harvest, require_confirmation=True),
        LongRunningFunctionTool(ask_gardener),
    ],
)
