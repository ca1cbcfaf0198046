"""The demo agent: four tools covering every approval path (see CONTRACT.md, "The demo agent").

| tool              | runs where | approval |
| get_weather       | server     | no       |
| process_payment   | server     | yes (ADK confirmation) |
| change_bgm        | browser    | yes (gateway) |
| get_location      | browser    | yes (gateway) |
"""

from __future__ import annotations

import hashlib
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool

import adk_gateway.agents.scripted  # noqa: F401  (registers the `scripted` model with ADK)
from adk_gateway.agents.tools import BrowserTool

__all__ = ["build_demo_agent"]

INSTRUCTION = (
    "You are a helpful assistant in a demo chat. Use get_weather for weather questions, "
    "process_payment to send money (the user must approve it), change_bgm to change the "
    "background music and get_location to find where the user is (both run in the browser)."
)


async def get_weather(location: str) -> dict[str, Any]:
    """Returns the current weather for a location.

    Args:
        location: A city or place name.
    """
    # Deterministic offline "weather", so tests and load runs are repeatable.
    digest = hashlib.sha256(location.strip().lower().encode()).digest()
    conditions = ["sunny", "cloudy", "rainy", "windy", "snowy"]
    return {
        "location": location,
        "temperature_c": 5 + digest[0] % 25,
        "condition": conditions[digest[1] % len(conditions)],
    }


async def process_payment(amount: float, recipient: str) -> dict[str, Any]:
    """Sends a payment. Needs the user's approval.

    Args:
        amount: Amount in USD.
        recipient: Who receives the money.
    """
    digest = hashlib.sha256(f"{amount}:{recipient}".encode()).hexdigest()[:12]
    return {"status": "completed", "amount": amount, "recipient": recipient, "transaction_id": f"txn_{digest}"}


def change_bgm(track: int) -> None:
    """Changes the background music in the user's browser.

    Args:
        track: Track number to play.
    """


def get_location() -> None:
    """Returns the user's location, as the browser reports it."""


def build_demo_agent(model: str = "scripted") -> LlmAgent:
    return LlmAgent(
        name="demo_agent",
        model=model,
        description="Demo agent with server and browser tools.",
        instruction=INSTRUCTION,
        tools=[
            FunctionTool(get_weather),
            FunctionTool(process_payment, require_confirmation=True),
            BrowserTool(change_bgm, needs_approval=True),
            BrowserTool(get_location, needs_approval=True),
        ],
    )
