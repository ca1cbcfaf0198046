"""Tool kinds the gateway understands, and the plugin that enforces a chat's standing permissions.

- `BrowserTool`: a tool the browser runs. ADK sees a long-running tool that returns nothing, so
  the invocation pauses after the call; the browser's `addToolOutput` comes back as the call's
  function response. `needs_approval=True` makes the gateway ask the user first.
- Server tools that need approval use ADK's own `require_confirmation`.
- `PermissionPlugin` reads the chat's permissions (kept in session state by the gateway): a tool
  the user "never" allows is refused without running or asking; a tool the user "always" allows
  is confirmed without asking.
- Live (`run_live`) invocations: ADK cannot confirm a tool inside a live session (its TODO in
  `live/_live_llm_flow.py`), and a long-running tool's result cannot come back as a new message.
  A live session therefore attaches a `LiveToolGate` for its `LiveRequestQueue`
  (`attach_live` / `detach_live`); for calls of that invocation the plugin itself holds a tool that
  needs approval until the gate has the user's answer, and answers a browser tool with the output
  the browser sent, so ADK hands the model a real result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from gateway.approval import REJECTED_TEXT, ApprovalBook, Decision, Permission, permanently_denied_text
from gateway.converter import ToolKind

__all__ = [
    "APPROVALS_STATE_KEY",
    "PLUGIN_NAME",
    "BrowserTool",
    "LiveApproval",
    "LiveToolGate",
    "PermissionPlugin",
    "tool_kind",
]

PLUGIN_NAME: Final = "gateway_permissions"

# Session-state key of the chat's `ApprovalBook` (see gateway.approval).
APPROVALS_STATE_KEY: Final = "gateway:approvals"


class BrowserTool(LongRunningFunctionTool):
    """A tool executed in the browser; `func` documents it and is never expected to return."""

    def __init__(self, func: Callable[..., Any], *, needs_approval: bool = False) -> None:
        super().__init__(func)
        self.needs_approval = needs_approval


def tool_kind(tool: BaseTool | None) -> ToolKind:
    if isinstance(tool, BrowserTool):
        return ToolKind(browser=True, needs_approval=tool.needs_approval)
    return ToolKind()


def _needs_confirmation(tool: BaseTool) -> bool:
    return isinstance(tool, FunctionTool) and bool(getattr(tool, "_require_confirmation", False))


@dataclass(frozen=True, slots=True)
class LiveApproval:
    """A live session's answer for a held call."""

    approved: bool
    # The user's decision; None when the call ended without one (timeout, interrupt, session end).
    decision: Decision | None = None
    # When set, the call ends with this error instead of running.
    error: str | None = None


class LiveToolGate(Protocol):
    """What a live session offers the plugin for the calls of its invocation."""

    async def request_approval(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveApproval:
        """Asks the user; returns once answered, timed out, interrupted or the session ended."""
        ...

    async def browser_output(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        """Waits for the browser's result of a browser tool (an `{"error": ...}` dict if it never comes)."""
        ...


def _live_queue(tool_context: Any) -> object | None:
    get_context = getattr(tool_context, "get_invocation_context", None)
    if get_context is None:
        return None
    try:
        return getattr(get_context(), "live_request_queue", None)
    except (AttributeError, ValueError):
        return None


class PermissionPlugin(BasePlugin):
    """Applies "always" / "never" decisions before a tool runs, and holds live calls (see module)."""

    def __init__(self) -> None:
        super().__init__(name=PLUGIN_NAME)
        self._live_gates: dict[object, LiveToolGate] = {}

    def attach_live(self, queue: object, gate: LiveToolGate) -> None:
        """Routes the tool calls of the live invocation fed by `queue` through `gate`."""
        self._live_gates[queue] = gate

    def detach_live(self, queue: object) -> None:
        self._live_gates.pop(queue, None)

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        book = tool_context.state.get(APPROVALS_STATE_KEY) or {}
        permission = (book.get("permissions") or {}).get(tool.name)
        confirmation = tool_context.tool_confirmation
        if permission == Permission.NEVER.value and not (confirmation is not None and not confirmation.confirmed):
            # (The call the user has just denied with "never" gets ADK's own rejection instead.)
            return {"error": permanently_denied_text(tool.name)}
        queue = _live_queue(tool_context) if self._live_gates else None
        gate = self._live_gates.get(queue) if queue is not None else None
        if gate is not None:
            return await self._live_call(gate, tool, tool_args, tool_context, permission)
        if (
            permission == Permission.ALWAYS.value
            and _needs_confirmation(tool)
            and tool_context.tool_confirmation is None
        ):
            tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        return None

    async def _live_call(
        self, gate: LiveToolGate, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any, permission: Any
    ) -> dict[str, Any] | None:
        browser = isinstance(tool, BrowserTool)
        confirm = not browser and await tool.check_require_confirmation(tool_args, tool_context) is True
        ask = (tool.needs_approval if isinstance(tool, BrowserTool) else confirm) and (
            permission != Permission.ALWAYS.value
        )
        call_id = tool_context.function_call_id or ""
        if ask:
            answer = await gate.request_approval(call_id, tool.name, browser=browser)
            if answer.decision is not None:
                _remember(tool_context, tool.name, answer.decision)
            if answer.error is not None:
                return {"error": answer.error}
            if not answer.approved:
                return {"error": REJECTED_TEXT}
        if confirm:
            tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        if browser:
            return await gate.browser_output(call_id, tool.name)
        return None


def _remember(tool_context: Any, tool_name: str, decision: Decision) -> None:
    """Stores an "always" / "never" answer in the chat's book (it rides on the tool's response event)."""
    permission = {Decision.ALLOW_ALWAYS: Permission.ALWAYS, Decision.DENY_NEVER: Permission.NEVER}.get(decision)
    if permission is None:
        return
    book = ApprovalBook.from_state(tool_context.state.get(APPROVALS_STATE_KEY))
    book.permissions[tool_name] = permission
    tool_context.state[APPROVALS_STATE_KEY] = book.to_state()
