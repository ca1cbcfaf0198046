"""Tool kinds the gateway understands, and the plugin that enforces a chat's standing permissions.

- `BrowserTool`: a tool the browser runs. ADK sees a long-running tool that returns nothing, so
  the invocation pauses after the call; the browser's `addToolOutput` comes back as the call's
  function response. `needs_approval=True` makes the gateway ask the user first.
- Server tools that need approval use ADK's own `require_confirmation`.
- `PermissionPlugin` reads the chat's permissions (kept in session state by the gateway): a tool
  the user "never" allows is refused without running or asking; a tool the user "always" allows
  is confirmed without asking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from gateway.approval import Permission, permanently_denied_text
from gateway.converter import ToolKind

__all__ = ["APPROVALS_STATE_KEY", "BrowserTool", "PermissionPlugin", "tool_kind"]

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


class PermissionPlugin(BasePlugin):
    """Applies "always" / "never" decisions before a tool runs."""

    def __init__(self) -> None:
        super().__init__(name="gateway_permissions")

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        book = tool_context.state.get(APPROVALS_STATE_KEY) or {}
        permission = (book.get("permissions") or {}).get(tool.name)
        if permission == Permission.NEVER.value:
            return {"error": permanently_denied_text(tool.name)}
        if (
            permission == Permission.ALWAYS.value
            and _needs_confirmation(tool)
            and tool_context.tool_confirmation is None
        ):
            tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        return None
