"""The tool calls a live session holds for its client: approvals, and the browser tools' results.

How it works
------------
ADK runs tools inside `run_live` but cannot confirm them there, so `PermissionPlugin`
(adk_gateway.agents.tools) asks the session (its `LiveToolGate`) about each call and waits: `request_approval`
for a call that needs the user's answer, `browser_output` for a tool the browser runs. The
session's `HeldCalls` keeps the chat's `LiveBook` (adk_gateway.core.approval, the one approval
authority), which decides everything about those calls; `HeldCalls` only tells the book what
happened and carries out the `LiveStep`s it returns (`_apply_step`): what is to be shown goes into
the session's open turn (`show`), and the waits the step resumes are woken. Anything about a call
is written only into the turn that announced it (the client's reader refuses a chunk for a call
it does not know): a call whose turn ended while it was held gets nothing more.

A held call waits on a future (one per call id). A call that needs approval gets its
`tool-approval-request` once the model's call has been announced in the turn, and waits for
`answer_approval`, at most `approval_timeout_s` after it was issued (then the book ends it as a
tool error); a browser tool waits for `tool_output`, which becomes the tool's result. A cut turn
(`cut`) or the session's end (`close`) ends every wait with an error result, and a closed book
answers a call held later at once. The book always hears that a waiter is gone (`release`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

import structlog

from adk_gateway.core.approval import (
    AwaitClient,
    CallState,
    HeldAnswer,
    Hold,
    LiveApproval,
    LiveBook,
    LiveStep,
    ToolNotice,
    ToolPolicy,
)
from adk_gateway.core.effects import CallAnnounced
from adk_gateway.core.events import AgentEvent, FunctionCall
from adk_gateway.core.kinds import ToolKind
from adk_gateway.metrics import Metrics

__all__ = ["HeldCalls"]

log = structlog.get_logger("adk_gateway.services.live")


def _new_approval_id() -> str:
    return f"apr-{secrets.token_urlsafe(18)}"


class HeldCalls:
    """The calls of one live session's turns; see the module docstring.

    Args:
        is_browser_tool: whether the browser runs a tool of this name (`AgentHost.tool_kind`).
        open_calls: the calls the session's open turn has announced.
        show: writes an item about one of those calls into the open turn.
        approval_timeout_s: how long an issued approval waits for its answer (0: no limit).
        metrics: where approvals issued and answered are counted.
    """

    __slots__ = ("_book", "_is_browser_tool", "_open_calls", "_show", "_waiting", "approval_timeout_s", "metrics")

    def __init__(
        self,
        *,
        is_browser_tool: Callable[[str], bool],
        open_calls: Callable[[], Container[str]],
        show: Callable[[ToolNotice], None],
        approval_timeout_s: float = 0.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.approval_timeout_s = approval_timeout_s
        self.metrics = metrics
        self._is_browser_tool = is_browser_tool
        self._open_calls = open_calls
        self._show = show
        self._book = LiveBook()
        self._waiting: dict[str, asyncio.Future[HeldAnswer]] = {}

    def load(self, stored: Mapping[str, Any] | None) -> None:
        """Takes the chat's standing permissions (its session state); a book closed meanwhile
        (the session stopped before it read its chat) stays closed."""
        if not self._book.closed:
            self._book = LiveBook.for_chat(stored)

    # --- what the session's turns tell the book ------------------------------------------------

    def tool_kind(self, tool_name: str) -> ToolKind:
        """How a turn shows the tool's calls (long-running tools run inside the live invocation)."""
        return ToolKind(browser=True) if self._is_browser(tool_name) else ToolKind()

    def reported(self, tool_call_id: str, outcome: CallState) -> bool:
        """Whether a tool's result is to be shown: once, for a call the open turn announced."""
        return self._book.reported(tool_call_id, outcome) and self._in_turn(tool_call_id, "tool_result")

    def announce(self, call: CallAnnounced) -> None:
        """The model calls a tool: the book hears of it (and issues it, if the plugin holds it already)."""
        self._apply_step(self._book.announce(call.tool_call_id, call.tool_name, browser=call.client,
                                            input=call.input, now=time.time()))

    def cut(self, tool_call_ids: Iterable[str]) -> None:
        """The turn with these calls was cut: their waits end."""
        self._apply_step(self._book.cut(tool_call_ids))

    def drop(self, event: AgentEvent) -> None:
        """Calls the model still makes for a cut turn never run (and are never shown)."""
        for part in event.parts:
            if isinstance(part, FunctionCall) and part.id:
                name = part.name or "unknown"
                self._apply_step(self._book.drop(part.id, name, browser=self._is_browser(name)))

    def forget(self, tool_call_ids: Iterable[str]) -> None:
        """The turn with these calls has ended."""
        self._book.forget(tool_call_ids)

    def close(self) -> None:
        """The session ends: every wait ends, and calls held from now on are refused at once."""
        self._apply_step(self._book.close())

    # --- the client's answers ------------------------------------------------------------------

    def answer_approval(self, approval_id: str, approved: bool, reason: str | None) -> None:
        """Answers a `tool-approval-request` of this session; raises `ApprovalRefused` otherwise."""
        step = self._book.answer(approval_id, approved, reason)
        if self.metrics is not None:
            for decision in step.decisions:
                self.metrics.approvals_answered.labels(decision=decision.value).inc()
        self._apply_step(step)

    def tool_output(self, tool_call_id: str, output: Any = None, error_text: str | None = None) -> None:
        """The browser's result for a browser tool call; the book ignores one it does not expect."""
        step = self._book.browser_output(tool_call_id, output, error_text)
        if step is None:
            log.warning("live_tool_output_ignored", tool_call_id=tool_call_id)
            return
        self._apply_step(step)

    # --- the plugin's waits --------------------------------------------------------------------

    async def request_approval(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveApproval:
        answer = await self._hold(tool_call_id, tool_name, browser=browser, hold=Hold.APPROVAL)
        assert isinstance(answer, LiveApproval)  # the book answers a hold in its kind
        return answer

    async def browser_output(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        answer = await self._hold(tool_call_id, tool_name, browser=True, hold=Hold.OUTPUT)
        assert not isinstance(answer, LiveApproval)
        return answer

    async def _hold(self, tool_call_id: str, tool_name: str, *, browser: bool, hold: Hold) -> HeldAnswer:
        """Waits until the book resumes the call (or answers it at once); an approval waits at
        most until the book's deadline for it (`approval_timeout_s` after it was issued; 0: no
        limit). The book always hears that the waiter is gone."""
        step = self._book.hold(tool_call_id, tool_name, browser=browser, hold=hold, approval_id=_new_approval_id(),
                               now=time.time())
        if step.answer is not None:
            return step.answer
        future: asyncio.Future[HeldAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[tool_call_id] = future
        try:
            self._apply_step(step)
            if hold is Hold.APPROVAL and self.approval_timeout_s > 0:
                return await self._until_deadline(tool_call_id, future)
            return await future
        finally:
            if self._waiting.get(tool_call_id) is future:
                del self._waiting[tool_call_id]
            self._book.release(tool_call_id)

    async def _until_deadline(self, tool_call_id: str, future: asyncio.Future[HeldAnswer]) -> HeldAnswer:
        # (Held before the model's call was announced, the approval is not issued yet: it expires
        # as long after now as it would after its issue.)
        deadline = self._book.deadline(tool_call_id, self.approval_timeout_s) or (time.time() + self.approval_timeout_s)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + max(0.0, deadline - time.time())):
                return await future
        except TimeoutError:
            # (The timeout cancels the future it interrupts; one resumed just before stands.)
            if future.done() and not future.cancelled():
                return future.result()
            log.info("live_approval_timeout", tool_call_id=tool_call_id)
            expired = self._book.expire(tool_call_id)
            self._apply_step(expired)
            assert expired.answer is not None
            return expired.answer

    def _apply_step(self, step: LiveStep) -> None:
        """Shows what the book says to show, in the open turn, and wakes the waiters it resumes."""
        for item in step.shown:
            if self._in_turn(item.tool_call_id, type(item).__name__):
                self._show(item)
                # Counted as a chat run counts its questions: when the client is asked.
                if isinstance(item, AwaitClient) and item.approval_id is not None and self.metrics is not None:
                    self.metrics.approvals_issued.inc()
        for resume in step.resumes:
            future = self._waiting.pop(resume.tool_call_id, None)
            if future is not None and not future.done():
                future.set_result(resume.answer)

    def _in_turn(self, tool_call_id: str, what: str) -> bool:
        """Whether the open turn announced the call (see the module docstring)."""
        if tool_call_id in self._open_calls():
            return True
        log.warning("live_call_outside_turn", tool_call_id=tool_call_id, shown=what)
        return False

    def _is_browser(self, tool_name: str) -> bool:
        """Announced for the browser to run: a browser tool the chat does not refuse ("never")."""
        return (self._is_browser_tool(tool_name)
                and self._book.policy(tool_name, needs_approval=False) is not ToolPolicy.REFUSE)
