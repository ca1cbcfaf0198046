"""One tool call's life: its states, the events that move it and the one table of legal moves,
and the plain values the approval books hand their callers (see `adk_gateway.core.approval`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypeAlias

__all__ = [
    "BROWSER_FAILED_TEXT",
    "CUT_TEXT",
    "ENDED_TEXT",
    "INITIAL",
    "INTERRUPT_TEXT",
    "MAX_ANSWERED_KEPT",
    "REJECTED_TEXT",
    "REPORTED_EVENTS",
    "TERMINAL",
    "TIMEOUT_TEXT",
    "TRANSITIONS",
    "AgentReply",
    "ApprovalRefused",
    "AwaitClient",
    "CallEvent",
    "CallRecord",
    "CallState",
    "Confirmation",
    "Decision",
    "FunctionResult",
    "InvalidTransition",
    "Permission",
    "RunInBrowser",
    "ToolNotice",
    "ToolOutcome",
    "ToolPolicy",
    "browser_result",
    "decision_from_response",
    "interrupt_result",
    "permanently_denied_text",
    "tool_policy",
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
REPORTED_EVENTS: Final[Mapping[CallState, CallEvent]] = {
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


class ToolPolicy(enum.Enum):
    """What happens when the agent calls a tool, in a chat (`ApprovalBook.policy`)."""

    ASK = "ask"  # the user is asked first
    RUN = "run"  # it runs unasked: it needs no approval, or the chat allows it "always"
    REFUSE = "refuse"  # it never runs: the chat answered "never"


def tool_policy(permission: Permission | None, *, needs_approval: bool) -> ToolPolicy:
    """The one rule: "never" refuses, "always" runs, anything else asks when the tool needs it."""
    if permission is Permission.NEVER:
        return ToolPolicy.REFUSE
    if needs_approval and permission is not Permission.ALWAYS:
        return ToolPolicy.ASK
    return ToolPolicy.RUN


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


ToolNotice: TypeAlias = ToolOutcome | RunInBrowser | AwaitClient
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
