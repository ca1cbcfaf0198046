"""The approval authority: one tool call's life, the approvals of one chat, and the calls a live
session holds. Everything that decides how an approval goes lives in this package: the table
(`table`), the chat's book (`book`) and a live session's (`live`).

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
- `policy(tool, needs_approval=)`: the one rule for what a call leads to — asked, run unasked, or
  refused ("never") — used by the chat, the live session and the permission plugin alike.
- `deadline(record, timeout_s)`: the one expiry rule. A chat checks it when the answer comes
  (`expired`); a live session, whose tool waits inside ADK, waits until it.

`LiveBook` is the same authority for a live (audio) session, whose tools run inside ADK's
`run_live` while the client answers over the socket: `adk_gateway.agents.tools.PermissionPlugin` *holds* a
call (waits for the user's answer, or for the browser's result) until the session resolves it.
The book keeps the call states and which calls are held; the session keeps only the asyncio
futures, and wakes them as `Resume` values say. See `LiveBook` for its methods.

No I/O, no asyncio, no ADK, no clock: callers pass ids and times in.
"""

from __future__ import annotations

from adk_gateway.core.approval.book import (
    Answer,
    AnsweredPart,
    ApprovalAnswer,
    ApprovalBook,
    Continuation,
)
from adk_gateway.core.approval.live import (
    HeldAnswer,
    Hold,
    LiveApproval,
    LiveBook,
    LiveStep,
    Resume,
)
from adk_gateway.core.approval.table import (
    BROWSER_FAILED_TEXT,
    CUT_TEXT,
    ENDED_TEXT,
    INITIAL,
    INTERRUPT_TEXT,
    MAX_ANSWERED_KEPT,
    REJECTED_TEXT,
    REPORTED_EVENTS,
    TERMINAL,
    TIMEOUT_TEXT,
    TRANSITIONS,
    AgentReply,
    ApprovalRefused,
    AwaitClient,
    CallEvent,
    CallRecord,
    CallState,
    Confirmation,
    Decision,
    FunctionResult,
    InvalidTransition,
    Permission,
    RunInBrowser,
    ToolNotice,
    ToolOutcome,
    ToolPolicy,
    browser_result,
    decision_from_response,
    interrupt_result,
    permanently_denied_text,
    tool_policy,
)

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
    "ToolNotice",
    "ToolOutcome",
    "ToolPolicy",
    "browser_result",
    "decision_from_response",
    "interrupt_result",
    "permanently_denied_text",
    "tool_policy",
]
