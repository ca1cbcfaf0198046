"""Tool kinds the gateway understands, and the plugin that enforces a chat's standing permissions.

- `BrowserTool`: a tool the browser runs. ADK sees a long-running tool that returns nothing, so
  the invocation pauses after the call; the browser's `addToolOutput` comes back as the call's
  function response. `needs_approval=True` makes the gateway ask the user first.
- Server tools that need approval use ADK's own `require_confirmation`.
- `PermissionPlugin` carries out the chat's policy for each call (`ApprovalBook.stored_policy`,
  from the book the gateway keeps in session state): a tool the user "never" allows is refused
  without running or asking; a tool the user "always" allows is confirmed without asking.
- Live (`run_live`) invocations: ADK cannot confirm a tool inside a live session (its TODO in
  `live/_live_llm_flow.py`), and a long-running tool's result cannot come back as a new message.
  A live session therefore attaches a `LiveToolGate` for its `LiveRequestQueue`
  (`attach_live` / `detach_live`); for calls of that invocation the plugin itself holds a tool that
  needs approval until the gate has the user's answer, and answers a browser tool with the output
  the browser sent, so ADK hands the model a real result. What an answer means — run, refuse with
  ADK's rejection or the interrupt result, remember "always" / "never" — is decided by
  `adk_gateway.core.approval` (`LiveApproval.refusal`, `Decision.permission`), not here.
- `BoundsPlugin` bounds how long model and tool calls may take (see its docstring), and answers
  a tool that raised with a general message and an error id (the exception goes to the log only).
  It is the first plugin of the runner, so its callbacks always run: ADK stops at the first plugin
  callback that returns a value. Before answering a tool's error itself, it asks the app's own
  error callbacks (the later plugins, the agent's), so theirs still win.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

import structlog
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from adk_gateway.core.approval import ApprovalBook, Decision, LiveApproval, ToolPolicy, permanently_denied_text
from adk_gateway.core.kinds import ToolInfo, ToolKind

__all__ = [
    "APPROVALS_STATE_KEY",
    "BOUNDS_PLUGIN_NAME",
    "PLUGIN_NAME",
    "TOOL_FAILED",
    "Bounds",
    "BoundsPlugin",
    "BrowserTool",
    "LiveApproval",
    "LiveToolGate",
    "PermissionPlugin",
    "ToolTimedOut",
    "tool_info",
    "tool_kind",
]

log = structlog.get_logger("adk_gateway.agents.tools")

PLUGIN_NAME: Final = "gateway_permissions"
# What the client and the model are told when a server tool raised (with an error id the log has).
TOOL_FAILED: Final = "The tool failed."
BOUNDS_PLUGIN_NAME: Final = "gateway_bounds"

# Session-state key of the chat's `ApprovalBook` (see adk_gateway.core.approval).
APPROVALS_STATE_KEY: Final = "gateway:approvals"


class BrowserTool(LongRunningFunctionTool):
    """A tool executed in the browser; `func` documents it and is never expected to return."""

    def __init__(self, func: Callable[..., Any], *, needs_approval: bool = False) -> None:
        super().__init__(func)
        self.needs_approval = needs_approval


def tool_kind(tool: BaseTool | None) -> ToolKind:
    if isinstance(tool, BrowserTool):
        return ToolKind(browser=True, needs_approval=tool.needs_approval)
    if tool is not None and tool.is_long_running:
        return ToolKind(long_running=True)
    return ToolKind()


def tool_info(tool: BaseTool) -> ToolInfo:
    """How `GET /api/apps` lists a tool."""
    kind = tool_kind(tool)
    description = (tool.description or "").strip().splitlines()
    return ToolInfo(name=tool.name, description=description[0] if description else "",
                    needs_approval=kind.needs_approval or _needs_confirmation(tool), browser=kind.browser,
                    long_running=kind.long_running, parameters=_parameters(tool))


def _parameters(tool: BaseTool) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, from the declaration ADK gives the model."""
    try:
        declaration = tool._get_declaration()
    except Exception:  # a tool whose declaration needs a run's context: say nothing of its arguments
        declaration = None
    schema: Any = None
    if declaration is not None:
        schema = declaration.parameters_json_schema
        if schema is None and declaration.parameters is not None:
            schema = declaration.parameters.model_dump(exclude_none=True, mode="json")
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    return {key: value for key, value in schema.items() if key != "title"}


def _needs_confirmation(tool: BaseTool) -> bool:
    return isinstance(tool, FunctionTool) and bool(getattr(tool, "_require_confirmation", False))


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
        stored = tool_context.state.get(APPROVALS_STATE_KEY)
        confirmation = tool_context.tool_confirmation
        browser = isinstance(tool, BrowserTool)
        needs_approval = tool.needs_approval if isinstance(tool, BrowserTool) else _needs_confirmation(tool)
        policy = ApprovalBook.stored_policy(stored, tool.name, needs_approval=needs_approval)
        if policy is ToolPolicy.REFUSE and not (confirmation is not None and not confirmation.confirmed):
            # (The call the user has just denied with "never" gets ADK's own rejection instead.)
            return {"error": permanently_denied_text(tool.name)}
        queue = _live_queue(tool_context) if self._live_gates else None
        gate = self._live_gates.get(queue) if queue is not None else None
        if gate is not None:
            return await self._live_call(gate, tool, tool_args, tool_context, stored, browser=browser)
        if policy is ToolPolicy.RUN and needs_approval and not browser and confirmation is None:
            tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        return None

    async def _live_call(
        self,
        gate: LiveToolGate,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: Any,
        stored: Any,
        *,
        browser: bool,
    ) -> dict[str, Any] | None:
        confirm = not browser and await tool.check_require_confirmation(tool_args, tool_context) is True
        needs_approval = tool.needs_approval if isinstance(tool, BrowserTool) else confirm
        ask = ApprovalBook.stored_policy(stored, tool.name, needs_approval=needs_approval) is ToolPolicy.ASK
        call_id = tool_context.function_call_id or ""
        if ask:
            answer = await gate.request_approval(call_id, tool.name, browser=browser)
            if answer.decision is not None:
                _remember(tool_context, tool.name, answer.decision)
            refusal = answer.refusal()
            if refusal is not None:
                return refusal
        if confirm:
            tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        if browser:
            return await gate.browser_output(call_id, tool.name)
        return None


def _remember(tool_context: Any, tool_name: str, decision: Decision) -> None:
    """Stores an "always" / "never" answer in the chat's book (it rides on the tool's response event)."""
    if decision.permission is None:
        return
    book = ApprovalBook.from_state(tool_context.state.get(APPROVALS_STATE_KEY))
    book.remember(tool_name, decision)
    tool_context.state[APPROVALS_STATE_KEY] = book.to_state()


# --- bounds on model and tool calls ----------------------------------------------------------------


class ToolTimedOut(Exception):
    """A tool ran longer than `--tool-timeout-s`; `BoundsPlugin` turns it into the call's error result."""

    def __init__(self, tool_name: str, timeout_s: float) -> None:
        super().__init__(f"tool {tool_name!r} ran longer than {timeout_s:g} s")
        self.tool_name = tool_name
        self.timeout_s = timeout_s


class ModelClock(Protocol):
    """One run's bound on its model calls (kept by `adk_gateway.agents.adk.AgentHost`)."""

    def call_started(self) -> None: ...

    def call_ended(self) -> None: ...


@dataclass(slots=True)
class Bounds:
    """The limits `BoundsPlugin` applies; the host fills them in from the settings."""

    tool_timeout_s: float = 0.0  # 0: no limit
    cancel_timeout_s: float = 5.0
    # The model clock of each running `run_async` invocation, by (user id, chat id).
    clocks: dict[tuple[str, str], ModelClock] = field(default_factory=dict)
    # Called with "tool" or "cancel" when that bound fires (a Prometheus counter).
    fired: Callable[[str], None] = lambda _kind: None
    # Tools that ignored their cancellation past `cancel_timeout_s`: still running, no longer awaited.
    abandoned: set[asyncio.Task[Any]] = field(default_factory=set)


class BoundsPlugin(BasePlugin):
    """Bounds each model call and each server tool call.

    - Model calls: ADK has no hook around a model call, only callbacks before it and after each
      response. The plugin reports both to the run's `ModelClock` (found by user and chat: one run
      per chat), which arms and disarms a deadline on the task iterating the run. At the deadline
      the run is cancelled where it waits and ends with an `error` chunk (`AgentHost.run`).
    - Tool calls: the tool's `run_async` is wrapped, once, the first time the tool is called, so
      the tool runs in a task of its own. Past `tool_timeout_s` that task is cancelled and the call
      fails with `ToolTimedOut`, which `on_tool_error_callback` turns into the call's error result:
      the model hears the failure and the run goes on. When the run itself is cancelled (a stop),
      the wrapper waits at most `cancel_timeout_s` for the tool to end, then leaves a tool that
      ignores its cancellation behind (logged, counted, kept referenced until it ends), so a stop
      never waits on it. Browser tools are not wrapped: their server side returns at once.
    """

    def __init__(self, bounds: Bounds) -> None:
        super().__init__(name=BOUNDS_PLUGIN_NAME)
        self.bounds = bounds

    def _clock(self, callback_context: Any) -> ModelClock | None:
        if not self.bounds.clocks:
            return None
        try:
            key = (callback_context.user_id, callback_context.session.id)
        except (AttributeError, ValueError):
            return None
        return self.bounds.clocks.get(key)

    async def before_model_callback(self, *, callback_context: Any, llm_request: LlmRequest) -> LlmResponse | None:
        clock = self._clock(callback_context)
        if clock is not None:
            clock.call_started()
        return None

    async def after_model_callback(self, *, callback_context: Any, llm_response: LlmResponse) -> LlmResponse | None:
        clock = self._clock(callback_context)
        if clock is not None and not llm_response.partial:
            clock.call_ended()
        return None

    async def on_model_error_callback(
        self, *, callback_context: Any, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        clock = self._clock(callback_context)
        if clock is not None:
            clock.call_ended()
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        # Tools run after the model call that asked for them: its clock is off in any case.
        clock = self._clock(tool_context)
        if clock is not None:
            clock.call_ended()
        if not isinstance(tool, BrowserTool):
            _bound_tool(tool, self.bounds)
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> dict[str, Any] | None:
        """The call's result when its tool raised. Its own timeout says so; any other exception
        is first offered to the app's own error callbacks (the plugins after this one, then the
        agent's `on_tool_error_callback`), and if none answers, the call's result is the general
        `TOOL_FAILED` with an error id, which the log line `tool_failed` also carries, with the
        exception: neither the client nor the model sees the exception's own words. A call of a
        tool the agent does not have is left to ADK, whose answer names the tools it has."""
        if isinstance(error, ToolTimedOut):
            log.warning("tool_timeout", tool=tool.name, timeout_s=error.timeout_s)
            self.bounds.fired("tool")
            return {"error": f"The tool {tool.name} did not finish within {error.timeout_s:g} s."}
        if type(tool) is BaseTool:  # ADK's stand-in for a name the agent has no tool for
            return None
        answered = await self._app_answer(tool, tool_args, tool_context, error)
        if answered is not None:
            return answered
        error_id = f"err-{secrets.token_hex(6)}"
        log.warning("tool_failed", tool=tool.name, error_id=error_id, error=repr(error), exc_info=error)
        return {"error": f"{TOOL_FAILED} (error {error_id})"}

    async def _app_answer(
        self, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> dict[str, Any] | None:
        """What the app's own error callbacks answer, in ADK's order: the plugins after this one
        (this one runs first, and ADK asks no plugin after one that answered), then the agent's."""
        context = getattr(tool_context, "_invocation_context", None)
        if context is None:
            return None
        plugins = list(getattr(getattr(context, "plugin_manager", None), "plugins", []))
        later = plugins[plugins.index(self) + 1:] if self in plugins else []
        for plugin in later:
            answer = await plugin.on_tool_error_callback(tool=tool, tool_args=tool_args, tool_context=tool_context,
                                                         error=error)
            if answer is not None:
                return cast(dict[str, Any], answer)
        for callback in getattr(context.agent, "canonical_on_tool_error_callbacks", []):
            answer = callback(tool=tool, args=tool_args, tool_context=tool_context, error=error)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is not None:
                return cast(dict[str, Any], answer)
        return None


# The attribute of a wrapped tool that holds the `Bounds` of the host that called it last (an
# agent object may be shared by several hosts, e.g. in tests).
_BOUNDS_ATTR: Final = "_gateway_bounds"


def _bound_tool(tool: BaseTool, bounds: Bounds) -> None:
    """Wraps `tool.run_async` (see `BoundsPlugin`); a tool that takes no attributes runs unbounded."""
    wrapped = hasattr(tool, _BOUNDS_ATTR)
    try:
        setattr(tool, _BOUNDS_ATTR, bounds)
    except (AttributeError, TypeError):
        log.warning("tool_not_bounded", tool=tool.name)
        return
    if wrapped:
        return
    original = tool.run_async

    async def run_async(*, args: dict[str, Any], tool_context: Any) -> Any:
        current: Bounds = getattr(tool, _BOUNDS_ATTR)
        call = asyncio.get_running_loop().create_task(
            original(args=args, tool_context=tool_context), name=f"tool:{tool.name}"
        )
        try:
            done, _ = await asyncio.wait({call}, timeout=current.tool_timeout_s or None)
        except asyncio.CancelledError:
            await _end_call(call, tool.name, current)
            raise
        if call in done:
            return call.result()
        await _end_call(call, tool.name, current)
        raise ToolTimedOut(tool.name, current.tool_timeout_s)

    tool.run_async = run_async  # type: ignore[method-assign]


async def _end_call(call: asyncio.Task[Any], tool_name: str, bounds: Bounds) -> None:
    """Cancels a tool call and waits at most `cancel_timeout_s` for it to end."""
    bounds.abandoned.add(call)
    call.add_done_callback(_forget(bounds.abandoned, tool_name))
    call.cancel()
    done, _ = await asyncio.wait({call}, timeout=bounds.cancel_timeout_s)
    if not done:
        log.warning("tool_ignored_cancellation", tool=tool_name, waited_s=bounds.cancel_timeout_s)
        bounds.fired("cancel")


def _forget(abandoned: set[asyncio.Task[Any]], tool_name: str) -> Callable[[asyncio.Task[Any]], None]:
    def done(call: asyncio.Task[Any]) -> None:
        abandoned.discard(call)
        if not call.cancelled() and call.exception() is not None:
            log.info("abandoned_tool_failed", tool=tool_name, error=repr(call.exception()))

    return done
