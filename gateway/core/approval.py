"""The approval authority: one tool call's life, the approvals of one chat, and the calls a live
session holds. Everything that decides how an approval goes lives in this module.

Theory of operation
-------------------
Rule 1: one table decides. Every tool call the gateway follows moves through `CallState` (the AI
SDK's tool part states, so the book and the client speak of the same thing). The legal moves are
the `TRANSITIONS` table and nothing else: `CallRecord.fire(event)` looks the pair up, and an
illegal pair raises `InvalidTransition` and leaves the record as it was (h11's `_state.py` rule).
The diagram and the table in docs/design/0002-approvals.md are drawn from `TRANSITIONS` by
docs/design/approval_states.py; a unit test fails when they are stale.

Rule 2: callers decide nothing. They hand this module what happened — an answer a client posted,
a result the agent reported, a barge-in, the clock — and get back plain values (`ToolOutcome`,
`RunInBrowser`, `AwaitClient` for the client; `FunctionResult`, `Confirmation` for the agent;
`Resume` for a live session's waiting tool) that they map onto chunks and ADK types. Refusals are
`ApprovalRefused` (a client's answer that does not match what was asked) and `BadRequest` (a
malformed answer); a caller never sees `InvalidTransition` unless the agent reports something
impossible (a tool that ran while its approval was still open).

`ApprovalBook` holds the calls of one chat and its standing permissions ("always" / "never" per
tool). An ADK session belongs to one user and one chat, so everything in a book is bound to that
pair; the book serialises to plain JSON (`to_state` / `from_state`) in the session's state.

- Asking: `ask()` when the agent wants a call approved (or, with "always", lets it run unasked).
- Answering a continuation, in two steps so that a refused request changes nothing:
  `answers(parts)` pairs each tool part of the posted message with the book's record and checks
  it — an approval id never issued here, issued for another call, already answered, or given
  twice, and a browser result for a call still waiting for its approval, are refused — then
  `answer(answers, now=, timeout_s=)` applies them. An answer that came after the approval
  timeout is an `expire` event (the call ends as an error); "deny and stop" is a `stop` event for
  every open call of the turn (no model call follows); anything else is `respond` followed by
  what that answer leads to.
- Outcomes the agent reports: `reported(call, outcome)` records it and says whether it is new;
  a call that already has its outcome (e.g. an expired approval that ADK then rejects) keeps the
  first one, and the client is not shown a second.
- `abandon_all()`: a new user message leaves the previous turn's open calls behind.

`LiveBook` is the same authority for a live (audio) session, whose tools run inside ADK's
`run_live` while the client answers over the socket: `agents.tools.PermissionPlugin` *holds* a
call (waits for the user's answer, or for the browser's result) until the session resolves it.
The book keeps the call states and which calls are held; the session keeps only the asyncio
futures, and wakes them as `Resume` values say. See `LiveBook` for its methods.

No I/O, no asyncio, no ADK, no clock: callers pass ids and times in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol, TypeAlias

from gateway.core.errors import BadRequest

__all__ = [
    "BROWSER_FAILED_TEXT",
    "CUT_TEXT",
    "ENDED_TEXT",
    "INITIAL",
    "INTERRUPT_TEXT",
    "REJECTED_TEXT",
    "TERMINAL",
    "TIMEOUT_TEXT",
    "TRANSITIONS",
    "AgentReply",
    "Answer",
    "AnsweredPart",
    "ApprovalAnswer",
    "ApprovalBook",
    "ApprovalRefused",
    "AwaitClient",
    "CallEvent",
    "CallRecord",
    "CallState",
    "Confirmation",
    "Continuation",
    "Decision",
    "FunctionResult",
    "HeldAnswer",
    "Hold",
    "InvalidTransition",
    "LiveApproval",
    "LiveBook",
    "LiveStep",
    "Permission",
    "Resume",
    "RunInBrowser",
    "Shown",
    "ToolOutcome",
    "browser_result",
    "decision_from_response",
    "interrupt_result",
    "permanently_denied_text",
]

INTERRUPT_TEXT: Final = "[Request interrupted by user for tool use]"
INTERRUPT_EXPLANATION: Final = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected. "
    "STOP what you are doing and wait for the user to tell you how to proceed."
)
# ADK's own text for a call whose confirmation was refused; a denied browser tool gets it too.
REJECTED_TEXT: Final = "This tool call is rejected."
TIMEOUT_TEXT: Final = "The approval timed out."
BROWSER_FAILED_TEXT: Final = "The browser tool failed."
ENDED_TEXT: Final = "The live session ended."
CUT_TEXT: Final = "Interrupted by the user."
MAX_ANSWERED_KEPT: Final = 200


def permanently_denied_text(tool_name: str) -> str:
    return f"Permission to use {tool_name} has been permanently denied"


def interrupt_result() -> str:
    return f"{INTERRUPT_TEXT}\n\n{INTERRUPT_EXPLANATION}"


# --- the table ------------------------------------------------------------------------------------


class CallState(enum.Enum):
    INPUT_AVAILABLE = "input-available"
    APPROVAL_REQUESTED = "approval-requested"
    APPROVAL_RESPONDED = "approval-responded"
    OUTPUT_AVAILABLE = "output-available"
    OUTPUT_ERROR = "output-error"
    OUTPUT_DENIED = "output-denied"


class CallEvent(enum.Enum):
    REQUEST_APPROVAL = "request_approval"  # the gateway asks the user
    RESPOND = "respond"  # the user answers in time (allow or deny, once or for good, or deny and stop)
    EXPIRE = "expire"  # the answer came after the approval timeout, or never came (live)
    OUTPUT = "output"  # the tool's result: the agent's, or the browser's
    DENY = "deny"  # the call is denied: ADK's rejection, or a denied browser tool
    FAIL = "fail"  # the tool failed
    STOP = "stop"  # the user chose "deny and stop": every open call of the turn ends, no model call
    CUT = "cut"  # a live barge-in ended the turn: a pending question is denied, anything else fails
    ABANDON = "abandon"  # nothing will answer it any more: a new user message, or the live session ended


S = CallState
E = CallEvent

# WARNING: docs/design/0002-approvals.md is drawn from this table; after changing it, run
# `python docs/design/approval_states.py` (tests/unit/test_approval_diagram.py checks it).
TRANSITIONS: Final[Mapping[CallState, Mapping[CallEvent, CallState]]] = {
    S.INPUT_AVAILABLE: {
        E.REQUEST_APPROVAL: S.APPROVAL_REQUESTED,
        E.OUTPUT: S.OUTPUT_AVAILABLE,
        E.DENY: S.OUTPUT_DENIED,
        E.FAIL: S.OUTPUT_ERROR,
        E.STOP: S.OUTPUT_DENIED,
        E.CUT: S.OUTPUT_ERROR,
        E.ABANDON: S.OUTPUT_ERROR,
    },
    # No `output` here: a tool does not run while its approval is open.
    S.APPROVAL_REQUESTED: {
        E.RESPOND: S.APPROVAL_RESPONDED,
        E.EXPIRE: S.OUTPUT_ERROR,
        E.DENY: S.OUTPUT_DENIED,
        E.FAIL: S.OUTPUT_ERROR,
        E.STOP: S.OUTPUT_DENIED,
        E.CUT: S.OUTPUT_DENIED,
        E.ABANDON: S.OUTPUT_ERROR,
    },
    S.APPROVAL_RESPONDED: {
        E.OUTPUT: S.OUTPUT_AVAILABLE,
        E.DENY: S.OUTPUT_DENIED,
        E.FAIL: S.OUTPUT_ERROR,
        E.STOP: S.OUTPUT_DENIED,
        E.CUT: S.OUTPUT_ERROR,
        E.ABANDON: S.OUTPUT_ERROR,
    },
    S.OUTPUT_AVAILABLE: {},
    S.OUTPUT_ERROR: {},
    S.OUTPUT_DENIED: {},
}

# Where a call starts: `track` (a call is shown) puts it in this state.
INITIAL: Final = S.INPUT_AVAILABLE
TERMINAL: Final = frozenset(state for state, moves in TRANSITIONS.items() if not moves)

# The outcome a client is shown (a `tool-output-*` chunk) -> the event that records it.
_REPORTED: Final[Mapping[CallState, CallEvent]] = {
    S.OUTPUT_AVAILABLE: E.OUTPUT,
    S.OUTPUT_DENIED: E.DENY,
    S.OUTPUT_ERROR: E.FAIL,
}


class InvalidTransition(Exception):
    """An event that the call's current state does not allow. Nothing was changed."""

    def __init__(self, state: CallState, event: CallEvent) -> None:
        super().__init__(f"can't handle {event.value} in state {state.value}")
        self.state = state
        self.event = event


class ApprovalRefused(Exception):
    """A client's approval does not match anything this chat is waiting for. Nothing was changed."""

    def __init__(self, reason: str, approval_id: str) -> None:
        super().__init__(f"approval {approval_id!r} refused: {reason}")
        self.reason = reason
        self.approval_id = approval_id


# --- answers and permissions ----------------------------------------------------------------------


class Permission(enum.Enum):
    ALWAYS = "always"
    NEVER = "never"


class Decision(enum.Enum):
    """What the user answered; reachable from a stock client through `approved` + `reason`."""

    ALLOW_ONCE = "allow-once"
    ALLOW_ALWAYS = "allow-always"
    DENY = "deny"
    DENY_AND_STOP = "deny-and-stop"
    DENY_NEVER = "deny-never"

    @property
    def approved(self) -> bool:
        return self in (Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS)

    @property
    def permission(self) -> Permission | None:
        """The standing permission this answer gives the tool in this chat, if any."""
        if self is Decision.ALLOW_ALWAYS:
            return Permission.ALWAYS
        if self is Decision.DENY_NEVER:
            return Permission.NEVER
        return None


_ALWAYS_WORDS: Final = frozenset({"always", "always-allow", "allow-always", "allow always", "always allow"})
_NEVER_WORDS: Final = frozenset({"never", "never-allow", "deny-never", "never allow", "deny never"})
_STOP_WORDS: Final = frozenset({"stop", "deny-stop", "deny-and-stop", "deny and stop", "stop-and-deny"})


def decision_from_response(approved: bool, reason: str | None) -> Decision:
    """Maps the AI SDK's `{approved, reason}` to a decision.

    `reason` is free text in the SDK; these words (case-insensitive, surrounding space ignored)
    select the standing decisions: `always` with approved=true; `never` or `stop` with
    approved=false. Anything else is a one-off allow or deny.
    """
    word = (reason or "").strip().lower()
    if approved:
        return Decision.ALLOW_ALWAYS if word in _ALWAYS_WORDS else Decision.ALLOW_ONCE
    if word in _NEVER_WORDS:
        return Decision.DENY_NEVER
    if word in _STOP_WORDS:
        return Decision.DENY_AND_STOP
    return Decision.DENY


def browser_result(output: Any, error_text: str | None, *, failed: bool = False) -> dict[str, Any]:
    """A browser tool's result as the agent's function response: its error, its output when that
    is an object, else the output wrapped as `{"result": output}`."""
    if failed or error_text is not None:
        return {"error": error_text or BROWSER_FAILED_TEXT}
    return output if isinstance(output, dict) else {"result": output}


# --- what callers get back -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """Show the client how a call ended (`tool-output-denied`, or `tool-output-error` with the text)."""

    tool_call_id: str
    state: CallState  # OUTPUT_DENIED or OUTPUT_ERROR
    error_text: str | None = None
    browser: bool = False  # announced as a browser tool (no `providerExecuted`)


@dataclass(frozen=True, slots=True)
class RunInBrowser:
    """Announce the call again (`tool-input-available`): the browser's signal to run it now."""

    tool_call_id: str
    tool_name: str
    input: Any = None


@dataclass(frozen=True, slots=True)
class AwaitClient:
    """The call now waits for the client: send `tool-approval-request` when `approval_id` is set
    (else the browser runs it unasked), and, in a live turn, end the step."""

    tool_call_id: str
    approval_id: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionResult:
    """Tell the agent the call's result (a function response for the call itself)."""

    tool_call_id: str
    tool_name: str
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Confirmation:
    """Answer ADK's `adk_request_confirmation` call for a server tool; ADK then runs or rejects it."""

    confirmation_id: str
    confirmed: bool


Shown: TypeAlias = ToolOutcome | RunInBrowser | AwaitClient
AgentReply: TypeAlias = FunctionResult | Confirmation


# --- one call --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call the gateway follows."""

    tool_call_id: str
    tool_name: str
    state: CallState
    approval_id: str | None = None
    # ADK's `adk_request_confirmation` call id for server tools; None for browser tools.
    confirmation_id: str | None = None
    browser: bool = False
    issued_at: float = 0.0
    decision: Decision | None = None

    def fire(self, event: CallEvent) -> CallRecord:
        """Returns the record after `event`; raises `InvalidTransition` for an illegal event."""
        try:
            target = TRANSITIONS[self.state][event]
        except KeyError:
            raise InvalidTransition(self.state, event) from None
        return replace(self, state=target)

    @property
    def open(self) -> bool:
        return self.state not in TERMINAL

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "state": self.state.value,
            "browser": self.browser,
            "issuedAt": self.issued_at,
        }
        if self.approval_id is not None:
            data["approvalId"] = self.approval_id
        if self.confirmation_id is not None:
            data["confirmationId"] = self.confirmation_id
        if self.decision is not None:
            data["decision"] = self.decision.value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallRecord:
        decision = data.get("decision")
        return cls(
            tool_call_id=str(data["toolCallId"]),
            tool_name=str(data["toolName"]),
            state=CallState(data["state"]),
            approval_id=data.get("approvalId"),
            confirmation_id=data.get("confirmationId"),
            browser=bool(data.get("browser", False)),
            issued_at=float(data.get("issuedAt", 0.0)),
            decision=Decision(decision) if decision else None,
        )


# --- a continuation: the client's answers ------------------------------------------------------------


class ApprovalAnswer(Protocol):
    """The `approval` of a posted tool part (`gateway.core.requests.ApprovalPart`)."""

    @property
    def id(self) -> str: ...

    @property
    def approved(self) -> bool | None: ...

    @property
    def reason(self) -> str | None: ...


class AnsweredPart(Protocol):
    """A posted tool part (`gateway.core.requests.ToolPart`), as far as the book reads it."""

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
        if browser and self.permission(tool_name) is Permission.ALWAYS:
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
        return self._respond(self.check(approval_id, tool_call_id), decision)

    def _respond(self, record: CallRecord, decision: Decision) -> CallRecord:
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
        if part.state not in ("output-available", "output-error") or record is None or not record.browser:
            return None  # nothing this book asked about, or a part the client merely carries along
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
            a.decision is Decision.DENY_AND_STOP and not self._expired(a.record, now, timeout_s) for a in answers
        )
        shown: list[ToolOutcome | RunInBrowser] = []
        replies: list[AgentReply] = []
        decisions: list[Decision] = []
        for answer in answers:
            record = self.calls[answer.record.tool_call_id]
            if self._expired(record, now, timeout_s):
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
                    record = self._respond(record, answer.decision)
            if not stop:
                self._lead(record, answer, shown, replies)
        if stop:
            for record in self.pending():
                record = self.fire(record.tool_call_id, CallEvent.STOP)
                shown.append(ToolOutcome(record.tool_call_id, record.state, browser=record.browser))
                replies.append(FunctionResult(record.tool_call_id, record.tool_name, {"error": interrupt_result()}))
        return Continuation(tuple(shown), tuple(replies), interrupted=stop, decisions=tuple(decisions))

    def _lead(
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
    def _expired(record: CallRecord, now: float, timeout_s: float) -> bool:
        return (
            timeout_s > 0
            and record.state is CallState.APPROVAL_REQUESTED
            and now - record.issued_at >= timeout_s
        )

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
        self.fire(tool_call_id, _REPORTED[outcome])
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


# --- a live session's held calls ---------------------------------------------------------------------


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

    shown: tuple[Shown, ...] = ()  # show the client, in order
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

    def held(self, tool_call_id: str) -> Hold | None:
        held = self._held.get(tool_call_id)
        return held.hold if held is not None else None

    # --- the call is shown, and held -----------------------------------------------------------

    def announce(self, tool_call_id: str, tool_name: str, *, browser: bool, input: Any = None) -> LiveStep:
        self.book.track(tool_call_id, tool_name, browser=browser)
        self._inputs[tool_call_id] = input
        return self._issue(tool_call_id)

    def hold(self, tool_call_id: str, tool_name: str, *, browser: bool, hold: Hold, approval_id: str) -> LiveStep:
        if self.closed:
            return LiveStep(answer=_ended(hold, ENDED_TEXT))
        record = self.book.calls.get(tool_call_id)
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
        return self._issue(tool_call_id)

    def _issue(self, tool_call_id: str) -> LiveStep:
        held = self._held.get(tool_call_id)
        if held is None or held.issued or tool_call_id not in self._inputs:
            return LiveStep()
        self._held[tool_call_id] = replace(held, issued=True)
        if held.hold is Hold.OUTPUT:
            return LiveStep(shown=(AwaitClient(tool_call_id),))
        self.book.request_approval(tool_call_id, held.approval_id, now=0.0)
        return LiveStep(shown=(AwaitClient(tool_call_id, held.approval_id),))

    # --- the client answers --------------------------------------------------------------------

    def answer(self, approval_id: str, approved: bool, reason: str | None) -> LiveStep:
        record = self.book.find(approval_id)
        if record is None:
            raise ApprovalRefused("answered" if approval_id in self._answered_ids else "unknown", approval_id)
        if record.state is not CallState.APPROVAL_REQUESTED:
            raise ApprovalRefused("answered", approval_id)
        decision = decision_from_response(approved, reason)
        record = self.book._respond(record, decision)
        self._held.pop(record.tool_call_id, None)
        shown: tuple[Shown, ...] = ()
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
        record = self.book.calls.get(tool_call_id)
        if record is None or tool_call_id not in self._inputs or not record.open or not record.browser:
            return None
        self._early[tool_call_id] = result
        return LiveStep()

    # --- holds that end otherwise ----------------------------------------------------------------

    def expire(self, tool_call_id: str) -> LiveStep:
        self._held.pop(tool_call_id, None)
        record = self.book.calls.get(tool_call_id)
        shown: tuple[Shown, ...] = ()
        if record is not None and record.state is CallState.APPROVAL_REQUESTED:
            record = self.book.fire(tool_call_id, CallEvent.EXPIRE)
            shown = (ToolOutcome(tool_call_id, record.state, TIMEOUT_TEXT, record.browser),)
        # Not issued yet (never shown): nothing to show; ADK's response will carry the outcome.
        return LiveStep(shown, answer=LiveApproval(approved=False, error=TIMEOUT_TEXT))

    def cut(self, tool_call_ids: Iterable[str]) -> LiveStep:
        shown: list[Shown] = []
        resumes: list[Resume] = []
        for call_id in tool_call_ids:
            record = self.book.calls.get(call_id)
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
        record = self.book.calls.get(tool_call_id)
        if record is not None and record.open:
            self.book.fire(tool_call_id, CallEvent.ABANDON)

    def close(self) -> LiveStep:
        self.closed = True
        shown: list[Shown] = []
        resumes: list[Resume] = []
        for call_id in list(self._held):
            record = self.book.calls.get(call_id)
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
            record = self.book.calls.get(call_id)
            if record is None or record.open or call_id in self._held:
                continue
            del self.book.calls[call_id]
            self._inputs.pop(call_id, None)
            self._early.pop(call_id, None)
            if record.approval_id is not None:
                self._answered_ids[record.approval_id] = None
                while len(self._answered_ids) > MAX_ANSWERED_KEPT:
                    del self._answered_ids[next(iter(self._answered_ids))]
