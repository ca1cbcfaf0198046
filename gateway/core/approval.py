"""The approval state machine: one tool call's life, and the book of approvals of one chat.

Theory of operation
-------------------
Every tool call the gateway shows to a client moves through `CallState`. The legal moves are the
`TRANSITIONS` table and nothing else: `CallRecord.fire(event)` looks the pair up, and an illegal
pair raises `InvalidTransition` and leaves the record untouched (as h11's `_state.py` does).

    INPUT_STREAMING --input_complete--> INPUT_AVAILABLE --request_approval--> APPROVAL_REQUESTED
    APPROVAL_REQUESTED --respond--> APPROVAL_RESPONDED --output--> OUTPUT_AVAILABLE
                                                        --deny---> OUTPUT_DENIED
    (any open state) --fail--> OUTPUT_ERROR      INPUT_AVAILABLE --output--> OUTPUT_AVAILABLE

`ApprovalBook` holds the records of one chat (an ADK session belongs to one user and one chat,
so everything in a book is bound to that pair) and the chat's standing permissions ("always" and
"never" per tool). It checks every approval a client sends against what the gateway itself
issued: an id it never issued, one issued for another call, or one already answered is refused
with `ApprovalRefused` and changes nothing. The book serialises to plain JSON (`to_state` /
`from_state`) so it is stored in the ADK session's state and survives a restart of the gateway.

This module does no I/O and knows nothing of asyncio, ADK or HTTP; callers pass ids and times in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

__all__ = [
    "TRANSITIONS",
    "ApprovalBook",
    "ApprovalRefused",
    "CallEvent",
    "CallRecord",
    "CallState",
    "Decision",
    "InvalidTransition",
    "Permission",
    "decision_from_response",
]

INTERRUPT_TEXT: Final = "[Request interrupted by user for tool use]"
INTERRUPT_EXPLANATION: Final = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected. "
    "STOP what you are doing and wait for the user to tell you how to proceed."
)
REJECTED_TEXT: Final = "This tool call is rejected."
MAX_ANSWERED_KEPT: Final = 200


def permanently_denied_text(tool_name: str) -> str:
    return f"Permission to use {tool_name} has been permanently denied"


def interrupt_result() -> str:
    return f"{INTERRUPT_TEXT}\n\n{INTERRUPT_EXPLANATION}"


class CallState(enum.Enum):
    INPUT_STREAMING = "input-streaming"
    INPUT_AVAILABLE = "input-available"
    APPROVAL_REQUESTED = "approval-requested"
    APPROVAL_RESPONDED = "approval-responded"
    OUTPUT_AVAILABLE = "output-available"
    OUTPUT_ERROR = "output-error"
    OUTPUT_DENIED = "output-denied"


class CallEvent(enum.Enum):
    INPUT_DELTA = "input_delta"
    INPUT_COMPLETE = "input_complete"
    REQUEST_APPROVAL = "request_approval"
    RESPOND = "respond"
    OUTPUT = "output"
    DENY = "deny"
    FAIL = "fail"


S = CallState
E = CallEvent

TRANSITIONS: Final[Mapping[CallState, Mapping[CallEvent, CallState]]] = {
    S.INPUT_STREAMING: {
        E.INPUT_DELTA: S.INPUT_STREAMING,
        E.INPUT_COMPLETE: S.INPUT_AVAILABLE,
        E.FAIL: S.OUTPUT_ERROR,
    },
    S.INPUT_AVAILABLE: {
        E.REQUEST_APPROVAL: S.APPROVAL_REQUESTED,
        E.OUTPUT: S.OUTPUT_AVAILABLE,
        E.FAIL: S.OUTPUT_ERROR,
    },
    S.APPROVAL_REQUESTED: {
        E.RESPOND: S.APPROVAL_RESPONDED,
        E.FAIL: S.OUTPUT_ERROR,
    },
    S.APPROVAL_RESPONDED: {
        E.OUTPUT: S.OUTPUT_AVAILABLE,
        E.DENY: S.OUTPUT_DENIED,
        E.FAIL: S.OUTPUT_ERROR,
    },
    S.OUTPUT_AVAILABLE: {},
    S.OUTPUT_ERROR: {},
    S.OUTPUT_DENIED: {},
}

TERMINAL: Final = frozenset(state for state, moves in TRANSITIONS.items() if not moves)


class InvalidTransition(Exception):
    """An event that the call's current state does not allow. Nothing was changed."""

    def __init__(self, state: CallState, event: CallEvent) -> None:
        super().__init__(f"can't handle {event.value} in state {state.value}")
        self.state = state
        self.event = event


class ApprovalRefused(Exception):
    """A client's approval does not match anything this chat is waiting for."""

    def __init__(self, reason: str, approval_id: str) -> None:
        super().__init__(f"approval {approval_id!r} refused: {reason}")
        self.reason = reason
        self.approval_id = approval_id


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


class Permission(enum.Enum):
    ALWAYS = "always"
    NEVER = "never"


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


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call the gateway asked the user about."""

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


@dataclass(slots=True)
class ApprovalBook:
    """The approvals and standing permissions of one chat. Mutated only through its methods."""

    calls: dict[str, CallRecord] = field(default_factory=dict)  # by tool call id
    permissions: dict[str, Permission] = field(default_factory=dict)  # by tool name

    # --- issuing ---------------------------------------------------------------------------

    def track(self, tool_call_id: str, tool_name: str, *, browser: bool) -> CallRecord:
        """Starts tracking a call whose input is complete (idempotent for a known call)."""
        existing = self.calls.get(tool_call_id)
        if existing is not None:
            return existing
        record = CallRecord(tool_call_id, tool_name, CallState.INPUT_AVAILABLE, browser=browser)
        self.calls[tool_call_id] = record
        return record

    def request_approval(
        self,
        tool_call_id: str,
        approval_id: str,
        *,
        now: float,
        confirmation_id: str | None = None,
    ) -> CallRecord:
        record = self.calls[tool_call_id].fire(CallEvent.REQUEST_APPROVAL)
        record = replace(record, approval_id=approval_id, confirmation_id=confirmation_id, issued_at=now)
        self.calls[tool_call_id] = record
        return record

    # --- answering --------------------------------------------------------------------------

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
        record = self.check(approval_id, tool_call_id)
        record = replace(record.fire(CallEvent.RESPOND), decision=decision)
        self.calls[tool_call_id] = record
        if decision is Decision.ALLOW_ALWAYS:
            self.permissions[record.tool_name] = Permission.ALWAYS
        elif decision is Decision.DENY_NEVER:
            self.permissions[record.tool_name] = Permission.NEVER
        return record

    def settle(self, tool_call_id: str, event: CallEvent) -> CallRecord:
        """Moves a call to its outcome (output, deny or fail)."""
        record = self.calls[tool_call_id].fire(event)
        self.calls[tool_call_id] = record
        return record

    def pending(self) -> list[CallRecord]:
        return [r for r in self.calls.values() if r.state not in TERMINAL]

    def awaiting_approval(self) -> list[CallRecord]:
        return [r for r in self.calls.values() if r.state is CallState.APPROVAL_REQUESTED]

    def expired(self, now: float, timeout_s: float) -> list[CallRecord]:
        if timeout_s <= 0:
            return []
        return [r for r in self.awaiting_approval() if now - r.issued_at >= timeout_s]

    def abandon_all(self) -> list[CallRecord]:
        """Ends every open call as an error (a new user message leaves them behind)."""
        abandoned = []
        for record in self.pending():
            self.calls[record.tool_call_id] = record.fire(CallEvent.FAIL)
            abandoned.append(record)
        return abandoned

    def permission(self, tool_name: str) -> Permission | None:
        return self.permissions.get(tool_name)

    # --- persistence ------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        answered = [r for r in self.calls.values() if r.state in TERMINAL]
        keep = {r.tool_call_id for r in answered[-MAX_ANSWERED_KEPT:]} | {
            r.tool_call_id for r in self.pending()
        }
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
