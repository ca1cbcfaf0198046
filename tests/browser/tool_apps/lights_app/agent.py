"""A home-lights helper on the offline `scripted` model, with tools of its own (none of the demo's).

| tool                 | arguments        | kind                                     |
| lights_status()      | none             | server                                   |
| set_lights(room, on) | `room` required  | server                                   |
| flash_screen()       | none             | runs in the browser, asks for approval   |
"""

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool

import adk_gateway.agents.scripted  # noqa: F401  (registers the offline `scripted` model with ADK)
from adk_gateway.agents.tools import BrowserTool


def lights_status() -> dict[str, Any]:
    """Tells which lights are on."""
    return {"on": ["kitchen"], "off": ["hall", "bedroom"]}


def set_lights(room: str, on: bool = True) -> dict[str, Any]:
    """Turns the lights of a room on or off.

    Args:
        room: The room.
        on: On (true) or off (false).
    """
    return {"room": room, "on": on}


def flash_screen() -> None:
    """Flashes the user's screen."""


root_agent = LlmAgent(
    name="lights_agent",
    model="scripted",
    description="Switches the lights of a home.",
    instruction="You switch the lights of the user's home with your tools.",
    tools=[
        FunctionTool(lights_status),
        FunctionTool(set_lights),
        BrowserTool(flash_screen, needs_approval=True),
    ],
)
