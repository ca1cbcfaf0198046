"""Long-running tools: ADK's human_in_loop sample (a manager approves reimbursements over $100)."""

from typing import Any

from gemini_like import GeminiLike
from google.adk.agents import Agent
from google.adk.tools import ToolContext
from google.adk.tools.long_running_tool import LongRunningFunctionTool

from .script import script


def reimburse(purpose: str, amount: float) -> dict[str, Any]:
    """Reimburse the amount of money to the employee."""
    return {"status": "ok", "purpose": purpose, "amount": amount}


def ask_for_approval(purpose: str, amount: float, tool_context: ToolContext) -> dict[str, Any]:
    """Ask for approval for the reimbursement."""
    return {
        "status": "pending",
        "approver": "manager@example.com",
        "purpose": purpose,
        "amount": amount,
        "ticket_id": "reimbursement-ticket-001",
    }


root_agent = Agent(
    name="reimbursement_agent",
    model=GeminiLike(script=script),
    instruction="""
      You are an agent whose job is to handle the reimbursement process for
      the employees. If the amount is less than $100, you will automatically
      approve the reimbursement.

      If the amount is greater than $100, you will
      ask for approval from the manager. If the manager approves, you will
      call reimburse() to reimburse the amount to the employee. If the manager
      rejects, you will inform the employee of the rejection.
""",
    tools=[reimburse, LongRunningFunctionTool(func=ask_for_approval)],
)
