"""The approvals and standing permissions of one chat (`ApprovalBook`; see `adk_gateway.core.approval`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from adk_gateway.core.approval.table import (
    INITIAL,
    MAX_ANSWERED_KEPT,
    REJECTED_TEXT,
    REPORTED_EVENTS,
    TIMEOUT_TEXT,
    AgentReply,
    ApprovalRefused,
    AwaitClient,
    CallEvent,
    CallRecord,
    CallState,
    Confirmation,
    Decision,
    FunctionResult,
    Permission,
    RunInBrowser,
    ToolOutcome,
    ToolPolicy,
    browser_result,
    decision_from_response,
    interrupt_result,
    tool_policy,
)
from adk_gateway.core.errors import BadRequest
from adk_gateway.core.kinds import ToolKind

__all__ = ["Answer", "AnsweredPart", "ApprovalAnswer", "ApprovalBook", "Continuation"]

# --- a continuation: the client's answers ------------------------------------------------------------


class ApprovalAnswer(Protocol):
    """The `approval` of a posted tool part (`adk_gateway.core.requests.ApprovalPart`)."""

    @property
    def id(self) -> str: ...

    @property
    def approved(self) -> bool | None: ...

    @property
    def reason(self) -> str | None: ...


class AnsweredPart(Protocol):
    """A posted tool part (`adk_gateway.core.requests.ToolPart`), as far as the book reads it."""

    @property
    def toolCallId(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def input(self) -> Any: ...

    @property
    def output(self) -> Any: ...

    @property
    def errorText(self) -> str | None: ...

    @property
    def approval(self) -> ApprovalAnswer | None: ...

    @property
    def providerExecuted(self) -> bool | None: ...

    @property
    def preliminary(self) -> bool | None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """One call a continuation answers, checked against the book (see `ApprovalBook.answers`)."""

    record: CallRecord
    # None: a browser tool's result for a call that was approved before, or never asked about.
    decision: Decision | None
    # The browser's result, for a part in `output-available` / `output-error`; None: not run yet.
    result: dict[str, Any] | None = None
    failed: bool = False
    input: Any = None


@dataclass(frozen=True, slots=True)
class Continuation:
    """What a continuation's answers lead to."""

    # What the client is shown before anything runs, in order.
    shown: tuple[ToolOutcome | RunInBrowser, ...] = ()
    # What the agent is told: one new user message, or — `interrupted` — function responses
    # appended to the session with no model call ("deny and stop").
    replies: tuple[AgentReply, ...] = ()
    interrupted: bool = False
    # The users' decisions, in order (answers that came too late have none).
    decisions: tuple[Decision, ...] = ()
    # For the chat's approval audit (bookkeeping beside what the continuation leads to): the
    # approvals answered (call id, decision), those that had expired, and those a "deny and stop"
    # ended unanswered.
    answered: tuple[tuple[str, Decision], ...] = field(default=(), compare=False)
    expired: tuple[str, ...] = field(default=(), compare=False)
    stopped: tuple[str, ...] = field(default=(), compare=False)

    @property
    def awaiting_client(self) -> list[str]:
        """Calls the response ends waiting for: approved browser tools that have not run yet."""
        return [item.tool_call_id for item in self.shown if isinstance(item, RunInBrowser)]


# --- the book of one chat ----------------------------------------------------------------------------


@dataclass(slots=True)
class ApprovalBook:
    """The calls and standing permissions of one chat. Mutated only through its methods."""

    calls: dict[str, CallRecord] = field(default_factory=dict)  # by tool call id
    permissions: dict[str, Permission] = field(default_factory=dict)  # by tool name

    # --- the table ---------------------------------------------------------------------------

    def fire(self, tool_call_id: str, event: CallEvent) -> CallRecord:
        """Moves a call by `event`; raises `InvalidTransition` (changing nothing) when illegal."""
        record = self.calls[tool_call_id].fire(event)
        self.calls[tool_call_id] = record
        return record

    def get(self, tool_call_id: str) -> CallRecord | None:
        return self.calls.get(tool_call_id)

    def forget(self, tool_call_id: str) -> CallRecord | None:
        """Drops an ended call (a live turn's, once its message is complete); an open one stays."""
        record = self.calls.get(tool_call_id)
        if record is None or record.open:
            return None
        del self.calls[tool_call_id]
        return record

    def track(self, tool_call_id: str, tool_name: str, *, browser: bool) -> CallRecord:
        """Starts following a call whose input is complete (idempotent for a known call)."""
        existing = self.calls.get(tool_call_id)
        if existing is not None:
            return existing
        record = CallRecord(tool_call_id, tool_name, INITIAL, browser=browser)
        self.calls[tool_call_id] = record
        return record

    # --- asking ------------------------------------------------------------------------------

    def request_approval(
        self, tool_call_id: str, approval_id: str, *, now: float, confirmation_id: str | None = None
    ) -> CallRecord:
        record = self.calls[tool_call_id].fire(CallEvent.REQUEST_APPROVAL)
        record = replace(record, approval_id=approval_id, confirmation_id=confirmation_id, issued_at=now)
        self.calls[tool_call_id] = record
        return record

    def ask(
        self,
        tool_call_id: str,
        tool_name: str,
        *,
        browser: bool,
        confirmation_id: str | None,
        approval_id: str,
        now: float,
    ) -> AwaitClient | None:
        """The agent wants a call approved. Returns what the client is told: an approval request
        under `approval_id`, or — a browser tool "always" allowed in this chat — that the browser
        runs it unasked. None when the call was asked about already (nothing new)."""
        record = self.track(tool_call_id, tool_name, browser=browser)
        if record.state is not CallState.INPUT_AVAILABLE:
            return None
        if browser and self.policy(tool_name, needs_approval=True) is ToolPolicy.RUN:
            return AwaitClient(tool_call_id)
        self.request_approval(tool_call_id, approval_id, now=now, confirmation_id=confirmation_id)
        return AwaitClient(tool_call_id, approval_id)

    # --- checking a client's answers ---------------------------------------------------------

    def find(self, approval_id: str) -> CallRecord | None:
        return next((r for r in self.calls.values() if r.approval_id == approval_id), None)

    def check(self, approval_id: str, tool_call_id: str) -> CallRecord:
        """Returns the pending record an approval answers, or raises `ApprovalRefused`."""
        record = self.find(approval_id)
        if record is None:
            raise ApprovalRefused("unknown", approval_id)
        if record.tool_call_id != tool_call_id:
            raise ApprovalRefused("mismatch", approval_id)
        if record.state is not CallState.APPROVAL_REQUESTED:
            raise ApprovalRefused("answered", approval_id)
        return record

    def respond(self, approval_id: str, tool_call_id: str, decision: Decision) -> CallRecord:
        """Records the user's answer to an approval (checked first) and the permission it gives."""
        return self.record_decision(self.check(approval_id, tool_call_id), decision)

    def record_decision(self, record: CallRecord, decision: Decision) -> CallRecord:
        """Records the user's answer to the pending approval `record` (one this book's `find` or
        `check` returned) and the permission it gives."""
        record = replace(record.fire(CallEvent.RESPOND), decision=decision)
        self.calls[record.tool_call_id] = record
        self.remember(record.tool_name, decision)
        return record

    def answers(self, parts: Iterable[AnsweredPart]) -> list[Answer]:
        """Pairs each tool part of a posted assistant message with the call it answers.

        Raises `ApprovalRefused` for an approval that does not match a question this chat has
        open, for a browser tool's result that skips its open approval, and for a call answered
        twice in one message; `BadRequest` for an approval part without an answer. Changes nothing:
        a refused request leaves the book as it was.
        """
        answered: list[Answer] = []
        seen: set[str] = set()
        for part in parts:
            answer = self._pair(part)
            if answer is None:
                continue
            if part.toolCallId in seen:
                raise ApprovalRefused("answered", part.approval.id if part.approval else part.toolCallId)
            seen.add(part.toolCallId)
            answered.append(answer)
        return answered

    def _pair(self, part: AnsweredPart) -> Answer | None:
        approval = part.approval
        if part.state == "approval-responded":
            if approval is None or approval.approved is None:
                raise BadRequest("An approval-responded part needs approval.id and approval.approved.")
            asked = self.check(approval.id, part.toolCallId)
            return Answer(asked, decision_from_response(approval.approved, approval.reason), input=part.input)
        record = self.calls.get(part.toolCallId)
        if part.state not in ("output-available", "output-error"):
            return None  # a part the client merely carries along
        if record is None:
            if part.providerExecuted is not True and part.preliminary is not True:
                # A result for a call the client would answer, that this chat never asked for
                # (a forged toolCallId, or another chat's): refused, as a forged approval is.
                raise ApprovalRefused("unknown", part.toolCallId)
            return None
        if not record.browser:
            return None  # a server tool's result, carried along
        failed = part.state == "output-error"
        result = browser_result(part.output, part.errorText, failed=failed)
        if record.state is CallState.APPROVAL_REQUESTED:
            # The browser ran a tool whose approval is open: only with that approval, approved.
            if approval is None or approval.approved is not True:
                raise ApprovalRefused("unapproved", record.approval_id or "")
            record = self.check(approval.id, part.toolCallId)
            return Answer(record, decision_from_response(True, approval.reason), result, failed, part.input)
        if record.state in (CallState.INPUT_AVAILABLE, CallState.APPROVAL_RESPONDED):
            return Answer(record, None, result, failed, part.input)
        return None  # already ended: an earlier answer the message still shows

    # --- applying them -----------------------------------------------------------------------

    def answer(self, answers: Sequence[Answer], *, now: float, timeout_s: float) -> Continuation:
        """Applies the answers `answers()` returned (for this book, unchanged since).

        - An approval answered `timeout_s` or more after it was issued expires: the call ends as
          an error, and the agent hears ADK's rejection (server tools) or the timeout (browser).
        - "Deny and stop" in any timely answer: the other decisions are recorded (with their
          permissions), then every open call of the turn — approved ones too — is stopped: shown
          as denied, and given the interrupt result, which is appended without a model call.
        - Otherwise each answer is recorded and leads to: ADK's confirmation (server tools); a
          denial with ADK's rejection text (browser tools); the browser's result; or, approved
          but not run yet, the browser's signal to run it.
        """
        stop = any(
            a.decision is Decision.DENY_AND_STOP and not self.expired(a.record, now, timeout_s) for a in answers
        )
        shown: list[ToolOutcome | RunInBrowser] = []
        replies: list[AgentReply] = []
        decisions: list[Decision] = []
        answered: list[tuple[str, Decision]] = []
        expired: list[str] = []
        stopped: list[str] = []
        for answer in answers:
            record = self.calls[answer.record.tool_call_id]
            if self.expired(record, now, timeout_s):
                expired.append(record.tool_call_id)
                record = self.fire(record.tool_call_id, CallEvent.EXPIRE)
                shown.append(ToolOutcome(record.tool_call_id, record.state, TIMEOUT_TEXT, record.browser))
                if record.confirmation_id is not None and not stop:
                    replies.append(Confirmation(record.confirmation_id, confirmed=False))
                else:
                    replies.append(FunctionResult(record.tool_call_id, record.tool_name, {"error": TIMEOUT_TEXT}))
                continue
            if answer.decision is not None:
                decisions.append(answer.decision)
                if record.state is CallState.APPROVAL_REQUESTED:
                    answered.append((record.tool_call_id, answer.decision))
                    record = self.record_decision(record, answer.decision)
            if not stop:
                self._act_on_answer(record, answer, shown, replies)
        if stop:
            for record in self.pending():
                if record.state is CallState.APPROVAL_REQUESTED:
                    stopped.append(record.tool_call_id)
                record = self.fire(record.tool_call_id, CallEvent.STOP)
                shown.append(ToolOutcome(record.tool_call_id, record.state, browser=record.browser))
                replies.append(FunctionResult(record.tool_call_id, record.tool_name, {"error": interrupt_result()}))
        return Continuation(tuple(shown), tuple(replies), interrupted=stop, decisions=tuple(decisions),
                            answered=tuple(answered), expired=tuple(expired), stopped=tuple(stopped))

    def _act_on_answer(
        self, record: CallRecord, answer: Answer, shown: list[ToolOutcome | RunInBrowser], replies: list[AgentReply]
    ) -> None:
        """What one timely answer leads to (see `answer`)."""
        approved = answer.decision is None or answer.decision.approved
        if record.confirmation_id is not None:  # a server tool: ADK runs it, or rejects it
            replies.append(Confirmation(record.confirmation_id, confirmed=approved))
            return
        if not approved:
            record = self.fire(record.tool_call_id, CallEvent.DENY)
            shown.append(ToolOutcome(record.tool_call_id, record.state, browser=record.browser))
            replies.append(FunctionResult(record.tool_call_id, record.tool_name, {"error": REJECTED_TEXT}))
        elif answer.result is not None:
            self.fire(record.tool_call_id, CallEvent.FAIL if answer.failed else CallEvent.OUTPUT)
            replies.append(FunctionResult(record.tool_call_id, record.tool_name, answer.result))
        else:
            shown.append(RunInBrowser(record.tool_call_id, record.tool_name, answer.input))

    @staticmethod
    def deadline(record: CallRecord, timeout_s: float) -> float | None:
        """When the pending approval `record` expires (None: it does not): the one expiry rule,
        checked when a chat's answer comes (`expired`) and waited for by a live session's hold."""
        if timeout_s <= 0 or record.state is not CallState.APPROVAL_REQUESTED:
            return None
        return record.issued_at + timeout_s

    @classmethod
    def expired(cls, record: CallRecord, now: float, timeout_s: float) -> bool:
        deadline = cls.deadline(record, timeout_s)
        return deadline is not None and now >= deadline

    # --- outcomes and endings ----------------------------------------------------------------

    def reported(self, tool_call_id: str, outcome: CallState) -> bool:
        """Records the outcome the agent reported for a call (`OUTPUT_AVAILABLE`, `OUTPUT_DENIED`
        or `OUTPUT_ERROR`: the `tool-output-*` chunk about to be shown). Returns whether it is new:
        False when the call already ended (its first outcome stands and this one is not shown);
        True for a call the book does not follow (a server tool that needs no approval)."""
        record = self.calls.get(tool_call_id)
        if record is None:
            return True
        if not record.open:
            return False
        self.fire(tool_call_id, REPORTED_EVENTS[outcome])
        return True

    def pending(self) -> list[CallRecord]:
        return [r for r in self.calls.values() if r.open]

    def awaiting_approval(self) -> list[CallRecord]:
        return [r for r in self.calls.values() if r.state is CallState.APPROVAL_REQUESTED]

    def abandon_all(self) -> list[CallRecord]:
        """Ends every open call as an error (a new user message leaves them behind)."""
        abandoned = self.pending()
        for record in abandoned:
            self.fire(record.tool_call_id, CallEvent.ABANDON)
        return abandoned

    # --- standing permissions ----------------------------------------------------------------

    def permission(self, tool_name: str) -> Permission | None:
        return self.permissions.get(tool_name)

    def policy(self, tool_name: str, *, needs_approval: bool) -> ToolPolicy:
        """Whether a call of the tool is asked about, runs unasked, or is refused in this chat."""
        return tool_policy(self.permission(tool_name), needs_approval=needs_approval)

    def shown_kind(self, tool_name: str, kind: ToolKind) -> ToolKind:
        """How a call of the tool is shown in this chat: one it refuses is a server tool (the
        client never runs or answers it; the agent hears the refusal)."""
        if self.permission(tool_name) is Permission.NEVER:
            return ToolKind()
        return kind

    @staticmethod
    def stored_policy(state: Mapping[str, Any] | None, tool_name: str, *, needs_approval: bool) -> ToolPolicy:
        """`policy`, read from a stored book without loading its calls (the permission plugin's
        view, before every tool call)."""
        return tool_policy(ApprovalBook.stored_permission(state, tool_name), needs_approval=needs_approval)

    def remember(self, tool_name: str, decision: Decision) -> bool:
        """Keeps the standing permission a decision gives ("always" / "never"); True if it did."""
        permission = decision.permission
        if permission is None:
            return False
        self.permissions[tool_name] = permission
        return True

    def refused_tools(self) -> frozenset[str]:
        """Tools this chat never allows: refused without asking, and never run by the browser."""
        return frozenset(name for name, p in self.permissions.items() if p is Permission.NEVER)

    @staticmethod
    def stored_permission(state: Mapping[str, Any] | None, tool_name: str) -> Permission | None:
        """A tool's standing permission, read from a stored book without loading its calls."""
        stored = ((state or {}).get("permissions") or {}).get(tool_name)
        try:
            return Permission(stored) if stored is not None else None
        except ValueError:
            return None

    # --- persistence -------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        answered = [r for r in self.calls.values() if not r.open]
        keep = {r.tool_call_id for r in answered[-MAX_ANSWERED_KEPT:]} | {r.tool_call_id for r in self.pending()}
        return {
            "calls": [r.to_json() for r in self.calls.values() if r.tool_call_id in keep],
            "permissions": {name: p.value for name, p in self.permissions.items()},
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any] | None) -> ApprovalBook:
        if not data:
            return cls()
        calls: Iterable[Mapping[str, Any]] = data.get("calls", ())
        book = cls()
        for raw in calls:
            record = CallRecord.from_json(raw)
            book.calls[record.tool_call_id] = record
        for name, value in dict(data.get("permissions", {})).items():
            book.permissions[str(name)] = Permission(value)
        return book
