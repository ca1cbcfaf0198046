"""The demo agent with a slow `process_payment`, for resuming a continuation while it streams.

Served by a second gateway in test_resume.py (`--agent tests.e2e.slow_agent:root_agent`): after
the approval, the continuation's stream opens with `start` and then waits SLOW_PAYMENT_S for the
tool, which gives a second client time to resume it mid-stream without racing the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool

import adk_gateway.agents.scripted  # noqa: F401  (registers the `scripted` model with ADK)
from adk_gateway.agents import demo
from adk_gateway.agents.tools import BrowserTool

SLOW_PAYMENT_S = 1.5


async def process_payment(amount: float, recipient: str) -> dict[str, Any]:
    """Sends a payment, slowly. Needs the user's approval.

    Args:
        amount: Amount in USD.
        recipient: Who receives the money.
    """
    await asyncio.sleep(SLOW_PAYMENT_S)
    return await demo.process_payment(amount, recipient)


root_agent = LlmAgent(
    name="demo_agent",
    model="scripted",
    description="The demo agent, with a slow process_payment.",
    instruction=demo.INSTRUCTION,
    tools=[
        FunctionTool(demo.get_weather),
        FunctionTool(process_payment, require_confirmation=True),
        BrowserTool(demo.change_bgm, needs_approval=True),
        BrowserTool(demo.get_location, needs_approval=True),
    ],
)
