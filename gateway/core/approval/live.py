"""The calls a live session holds inside ADK's tool pipeline (`LiveBook`; see `adk_gateway.core.approval`)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from adk_gateway.core.approval.book import ApprovalBook
from adk_gateway.core.approval.table import (
    CUT_TEXT,
    ENDED_TEXT,
    MAX_ANSWERED_KEPT,
    REJECTED_TEXT,
    TIMEOUT_TEXT,
    ApprovalRefused,
    AwaitClient,
    CallEvent,
    CallState,
    Decision,
    Permission,
    RunInBrowser,
    ToolNotice,
    ToolOutcome,
    ToolPolicy,
    browser_result,
    decision_from_response,
    interrupt_result,
)

__all__ = ["HeldAnswer", "Hold", "LiveApproval", "LiveBook", "LiveStep", "Resume"]

class Hold(enum.Enum):
    """What a held live call waits for."""

    APPROVAL = "approval"  # the user's answer (`LiveBook.answer`)
    OUTPUT = "output"  # the browser's result (`LiveBook.browser_output`)


@dataclass(frozen=True, slots=True)
class LiveApproval:
    """The answer a live call held for approval gets."""

    approved: bool
    # The user's decision; None when the call ended without one (timeout, interrupt, session end).
    decision: Decision | None = None
    # When set, the call ends with this error instead of running.
    error: str | None = None

    @classmethod
    def of(cls, decision: Decision) -> LiveApproval:
        if decision is Decision.DENY_AND_STOP:
            return cls(approved=False, decision=decision, error=interrupt_result())
        return cls(approved=decision.approved, decision=decision)

    def refusal(self) -> dict[str, Any] | None:
        """The tool's result when the call must not run (None: it runs)."""
        if self.error is not None:
            return {"error": self.error}
        if not self.approved:
            return {"error": REJECTED_TEXT}
        return None


# A held call's answer: a `LiveApproval` (held for approval) or the tool's result (held for output).
HeldAnswer: TypeAlias = LiveApproval | dict[str, Any]


def _ended(hold: Hold, text: str) -> HeldAnswer:
    """The answer of a held call that ends without one."""
    return LiveApproval(approved=False, error=text) if hold is Hold.APPROVAL else {"error": text}


@dataclass(frozen=True, slots=True)
class Resume:
    """Wake the waiter of a held call with `answer`."""

    tool_call_id: str
    answer: HeldAnswer


@dataclass(frozen=True, slots=True)
class LiveStep:
    """What one `LiveBook` move leads to."""

    shown: tuple[ToolNotice, ...] = ()  # show the client, in order
    resumes: tuple[Resume, ...] = ()  # wake these waiters
    # For `hold`: the call is not held but answered at once; for `expire`: the waiter's answer.
    answer: HeldAnswer | None = None
    # For `answer`: the user's decision, as a chat's `Continuation.decisions`.
    decisions: tuple[Decision, ...] = ()


@dataclass(frozen=True, slots=True)
class _Held:
    hold: Hold
    approval_id: str
    issued: bool = False


@dataclass(slots=True)
class LiveBook:
    """The calls of one live session, some held inside ADK's tool pipeline until the client answers.

    How it works: a call is *announced* when its `tool-input-*` chunks are shown and *held* when
    the permission plugin waits on it; the order of the two varies. Once a call is both, it is
    *issued*: a held approval gets its approval id (`request_approval`) and the client is told
    (`AwaitClient`; the session then ends the step). Every way a hold ends — the user's answer,
    the browser's result, the approval timeout, a barge-in, the session's end, or the waiter
    giving up (cancelled) — is a method here, and returns the `Resume` for the waiter. Outcomes the
    agent reports go through `reported`, which drops the second outcome of a call. The chat's
    standing permissions come from the stored book; answers "always" / "never" update them here
    (the plugin stores them in the session).

    Methods (all synchronous; only `reported` can raise `InvalidTransition`, for a tool output
    while its approval is open, which the plugin's hold rules out):

    - `announce(call, name, browser=, input=)`: the call was shown. -> the `AwaitClient` if held.
    - `hold(call, name, browser=, hold=, approval_id=)`: the plugin waits on the call. Returns
      `answer` set when it must not wait (session ended: `ENDED_TEXT`; call cut: the interrupt
      result; a browser result that came first), else the `AwaitClient` if already announced.
    - `answer(approval_id, approved, reason)`: the user's answer; raises `ApprovalRefused`
      ("unknown", "answered"). -> `Resume(LiveApproval)`; `RunInBrowser` for an approved browser tool.
    - `browser_output(call, output, error_text)`: the browser's result (an empty object wrapped as
      `{"result": {}}`). -> `Resume(result)` when the plugin waits for it; kept for the plugin
      when it comes first; None when ignored (a call not announced, not a browser tool, or
      already ended).
    - `expire(call)`: the approval waiter's own timeout. -> `answer` (`TIMEOUT_TEXT`) and, for an
      issued approval, the `tool-output-error` to show (ADK's later response is then dropped).
    - `cut(calls)`: barge-in, for the calls of the turn being cut. -> a pending question is
      shown denied, any other open call as the error `CUT_TEXT`; held waiters get the interrupt result.
    - `drop(call, name, browser=)`: a call the model still sends for a cut turn (never shown).
    - `reported(call, outcome)`: ADK's function response; True when it is new and to be shown.
    - `release(call)`: the waiter is gone (always, in its `finally`); a hold still unresolved
      (the waiter was cancelled) abandons the call, so its approval id is refused from then on.
    - `close()`: the session ends: every held call is resumed with `ENDED_TEXT` and abandoned
      (shown as that error when it was announced); later holds are answered at once.
    - `forget(calls)`: the turn's message is complete; its ended calls are dropped, their approval
      ids still refused as "answered" (the last `MAX_ANSWERED_KEPT`).
    """

    book: ApprovalBook = field(default_factory=ApprovalBook)
    closed: bool = False
    _inputs: dict[str, Any] = field(default_factory=dict)  # announced calls and their input
    _held: dict[str, _Held] = field(default_factory=dict)  # calls a waiter waits on, unresolved
    _early: dict[str, dict[str, Any]] = field(default_factory=dict)  # browser results before the hold
    _answered_ids: dict[str, None] = field(default_factory=dict)  # approval ids of forgotten calls

    @classmethod
    def for_chat(cls, stored: Mapping[str, Any] | None) -> LiveBook:
        """A live session's book: the chat's standing permissions, none of its HTTP calls (their
        approvals are answered over HTTP, not here)."""
        return cls(ApprovalBook(permissions=dict(ApprovalBook.from_state(stored).permissions)))

    def permission(self, tool_name: str) -> Permission | None:
        return self.book.permission(tool_name)

    def policy(self, tool_name: str, *, needs_approval: bool) -> ToolPolicy:
        return self.book.policy(tool_name, needs_approval=needs_approval)

    def deadline(self, tool_call_id: str, timeout_s: float) -> float | None:
        """When the call's pending approval expires (`ApprovalBook.deadline`); None: it does not."""
        record = self.book.get(tool_call_id)
        return ApprovalBook.deadline(record, timeout_s) if record is not None else None

    def held(self, tool_call_id: str) -> Hold | None:
        held = self._held.get(tool_call_id)
        return held.hold if held is not None else None

    # --- the call is shown, and held -----------------------------------------------------------

    def announce(
        self, tool_call_id: str, tool_name: str, *, browser: bool, input: Any = None, now: float = 0.0
    ) -> LiveStep:
        self.book.track(tool_call_id, tool_name, browser=browser)
        self._inputs[tool_call_id] = input
        return self._issue(tool_call_id, now)

    def hold(
        self, tool_call_id: str, tool_name: str, *, browser: bool, hold: Hold, approval_id: str, now: float = 0.0
    ) -> LiveStep:
        if self.closed:
            return LiveStep(answer=_ended(hold, ENDED_TEXT))
        record = self.book.get(tool_call_id)
        if record is not None and not record.open:
            return LiveStep(answer=_ended(hold, interrupt_result()))
        early = self._early.pop(tool_call_id, None) if hold is Hold.OUTPUT else None
        if early is not None:
            return LiveStep(answer=early)
        if record is not None and hold is Hold.APPROVAL:
            # The same call asked again: one question per call. Answered: the same answer at once;
            # asked and open: wait for that question's answer (it is not issued a second time).
            if record.state is CallState.APPROVAL_RESPONDED and record.decision is not None:
                return LiveStep(answer=LiveApproval.of(record.decision))
            if record.state is CallState.APPROVAL_REQUESTED and record.approval_id is not None:
                self._held[tool_call_id] = _Held(hold, record.approval_id, issued=True)
                return LiveStep()
        self.book.track(tool_call_id, tool_name, browser=browser)
        self._held[tool_call_id] = _Held(hold, approval_id)
        return self._issue(tool_call_id, now)

    def _issue(self, tool_call_id: str, now: float) -> LiveStep:
        held = self._held.get(tool_call_id)
        if held is None or held.issued or tool_call_id not in self._inputs:
            return LiveStep()
        self._held[tool_call_id] = replace(held, issued=True)
        if held.hold is Hold.OUTPUT:
            return LiveStep(shown=(AwaitClient(tool_call_id),))
        self.book.request_approval(tool_call_id, held.approval_id, now=now)
        return LiveStep(shown=(AwaitClient(tool_call_id, held.approval_id),))

    # --- the client answers --------------------------------------------------------------------

    def answer(self, approval_id: str, approved: bool, reason: str | None) -> LiveStep:
        record = self.book.find(approval_id)
        if record is None:
            raise ApprovalRefused("answered" if approval_id in self._answered_ids else "unknown", approval_id)
        if record.state is not CallState.APPROVAL_REQUESTED:
            raise ApprovalRefused("answered", approval_id)
        decision = decision_from_response(approved, reason)
        record = self.book.record_decision(record, decision)
        self._held.pop(record.tool_call_id, None)
        shown: tuple[ToolNotice, ...] = ()
        if record.browser and decision.approved:
            shown = (RunInBrowser(record.tool_call_id, record.tool_name, self._inputs.get(record.tool_call_id)),)
        return LiveStep(shown, (Resume(record.tool_call_id, LiveApproval.of(decision)),), decisions=(decision,))

    def browser_output(self, tool_call_id: str, output: Any = None, error_text: str | None = None) -> LiveStep | None:
        result = browser_result(output, error_text)
        if not result:
            # Held, the result is what the plugin answers for a long-running tool, and ADK takes
            # an empty one for "no result yet": the call would never end. (Over HTTP, where the
            # result is a function response of its own, `{}` stays as it is.)
            result = {"result": result}
        held = self._held.get(tool_call_id)
        if held is not None and held.hold is Hold.OUTPUT:
            del self._held[tool_call_id]
            return LiveStep(resumes=(Resume(tool_call_id, result),))
        record = self.book.get(tool_call_id)
        if record is None or tool_call_id not in self._inputs or not record.open or not record.browser:
            return None
        self._early[tool_call_id] = result
        return LiveStep()

    # --- holds that end otherwise ----------------------------------------------------------------

    def expire(self, tool_call_id: str) -> LiveStep:
        self._held.pop(tool_call_id, None)
        record = self.book.get(tool_call_id)
        shown: tuple[ToolNotice, ...] = ()
        if record is not None and record.state is CallState.APPROVAL_REQUESTED:
            record = self.book.fire(tool_call_id, CallEvent.EXPIRE)
            shown = (ToolOutcome(tool_call_id, record.state, TIMEOUT_TEXT, record.browser),)
        # Not issued yet (never shown): nothing to show; ADK's response will carry the outcome.
        return LiveStep(shown, answer=LiveApproval(approved=False, error=TIMEOUT_TEXT))

    def cut(self, tool_call_ids: Iterable[str]) -> LiveStep:
        shown: list[ToolNotice] = []
        resumes: list[Resume] = []
        for call_id in tool_call_ids:
            record = self.book.get(call_id)
            if record is None or not record.open:
                continue
            record = self.book.fire(call_id, CallEvent.CUT)
            if call_id in self._inputs:
                text = CUT_TEXT if record.state is CallState.OUTPUT_ERROR else None
                shown.append(ToolOutcome(call_id, record.state, text, record.browser))
            resumes += self._wake(call_id, interrupt_result())
        return LiveStep(tuple(shown), tuple(resumes))

    def drop(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveStep:
        record = self.book.track(tool_call_id, tool_name, browser=browser)
        if record.open:
            self.book.fire(tool_call_id, CallEvent.CUT)
        return LiveStep(resumes=tuple(self._wake(tool_call_id, interrupt_result())))

    def release(self, tool_call_id: str) -> None:
        if self._held.pop(tool_call_id, None) is None:
            return
        record = self.book.get(tool_call_id)
        if record is not None and record.open:
            self.book.fire(tool_call_id, CallEvent.ABANDON)

    def close(self) -> LiveStep:
        self.closed = True
        shown: list[ToolNotice] = []
        resumes: list[Resume] = []
        for call_id in list(self._held):
            record = self.book.get(call_id)
            if record is not None and record.open:
                record = self.book.fire(call_id, CallEvent.ABANDON)
                if call_id in self._inputs:
                    shown.append(ToolOutcome(call_id, record.state, ENDED_TEXT, record.browser))
            resumes += self._wake(call_id, ENDED_TEXT)
        self._early.clear()
        return LiveStep(tuple(shown), tuple(resumes))

    def _wake(self, tool_call_id: str, text: str) -> list[Resume]:
        self._early.pop(tool_call_id, None)
        held = self._held.pop(tool_call_id, None)
        return [Resume(tool_call_id, _ended(held.hold, text))] if held is not None else []

    # --- outcomes and memory ---------------------------------------------------------------------

    def reported(self, tool_call_id: str, outcome: CallState) -> bool:
        if tool_call_id not in self._inputs:
            return False  # never shown in this session, or forgotten with its turn
        self._early.pop(tool_call_id, None)
        return self.book.reported(tool_call_id, outcome)

    def forget(self, tool_call_ids: Iterable[str]) -> None:
        for call_id in tool_call_ids:
            record = self.book.get(call_id)
            if record is None or record.open or call_id in self._held:
                continue
            self.book.forget(call_id)
            self._inputs.pop(call_id, None)
            self._early.pop(call_id, None)
            if record.approval_id is not None:
                self._answered_ids[record.approval_id] = None
                while len(self._answered_ids) > MAX_ANSWERED_KEPT:
                    del self._answered_ids[next(iter(self._answered_ids))]
