"""Planning a chat turn: what a request asks for, checked before anything is streamed.

How it works
------------
`TurnPlanner.plan()` reads the chat's ADK session (under the request's app) and its
`ApprovalBook`, and decides the turn, so that a bad request (a forged or replayed approval, a
continuation with nothing new) is refused with a status and nothing runs:

- last message from the user: a new turn. The session is synced with the posted history first
  (imported for an unknown chat, rebuilt after an edit or a regenerate); approvals still open
  from the last turn are abandoned. The session's state keeps how many posted messages it has
  run and their `history_digest`; a history that begins with exactly those, followed only by the
  assistant's answers, is in sync, and nothing of it but the last message is validated or
  converted, and nothing of what the session ran is even parsed (a turn costs what is new, not
  the chat's length). Anything else — an edited or removed message, a user message the session
  never ran, a regenerate — rebuilds the session from the posted history.
- last message from the assistant: a continuation of that message. The chat's `ApprovalBook`
  (gateway.core.approval, the one authority on approvals) checks every approval and browser tool
  output in it and says what each leads to: what the client is shown first (an outcome, or a
  re-announced browser tool) and what the agent is told (ADK's confirmation for server tools,
  the tool's result for browser tools) — or, for "deny and stop", the interrupt results that are
  appended to the session without calling the model. The planner decides none of it.

The turn's bookkeeping rides in the session's state (`TURN_STATE_KEY`): how many questions the
message asked and how many continuations answered them (a continuation past that is refused), and
what the message's end reports again after a continuation (when it began, its agent, its usage).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from agents.adk import AgentHost, Turn
from agents.tools import APPROVALS_STATE_KEY
from gateway.core.approval import AgentReply, ApprovalBook, ApprovalRefused, RunInBrowser, ToolOutcome
from gateway.core.converter import message_replay_chunks
from gateway.core.errors import ApprovalInvalid, BadRequest, ContinuationRefused
from gateway.core.jsonparse import JsonRejected
from gateway.core.requests import (
    ChatRequest,
    UIMessage,
    ValidationError,
    checked_heads,
    describe,
    history_digests,
    validated_history,
)
from gateway.metrics import Metrics
from gateway.services.signin import SignIns

__all__ = ["HISTORY_STATE_KEY", "TURN_STATE_KEY", "RequestContext", "TurnPlan", "TurnPlanner", "now_ms"]

log = structlog.get_logger("gateway.services.chat")

# [count, digest]: how many posted messages the session has run, and their `history_digest`.
HISTORY_STATE_KEY: Final = "gateway:history"
TURN_STATE_KEY: Final = "gateway:turn"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asks, under which request id, with which `ai` major version, and the gateway's origin as
    the client reaches it (for links the message hands out; empty: paths only)."""

    user_id: str
    request_id: str
    major: int = 6
    origin: str = ""


@dataclass(slots=True)
class TurnPlan:
    message_id: str
    book: ApprovalBook
    # What the run is given (None: nothing runs, e.g. an approved browser tool re-announced).
    new_message: Turn | None = None
    state_delta: dict[str, Any] = field(default_factory=dict)
    # What the book says to show before the run (outcomes, re-announced browser tools), in order.
    shown: tuple[ToolOutcome | RunInBrowser, ...] = ()
    awaiting_client: list[str] = field(default_factory=list)
    # Replies appended to the session without running the model ("deny and stop").
    interrupt_responses: tuple[AgentReply, ...] = ()
    interrupted: bool = False
    # The message's bookkeeping (see the module docstring): asks, continuations, createdAt, agent, usage.
    turn: dict[str, Any] = field(default_factory=lambda: {"asks": 0, "continuations": 0})
    replay_prefix: list[dict[str, Any]] = field(default_factory=list)
    # The session state keys the client sees, their values before the run, and those the request sets.
    client_state_keys: frozenset[str] = frozenset()
    client_state: dict[str, Any] = field(default_factory=dict)
    requested_state: dict[str, Any] = field(default_factory=dict)


def _new_message_id() -> str:
    return f"msg-{uuid.uuid4().hex}"


class TurnPlanner:
    """Plans the turns of the chat service (see the module docstring)."""

    def __init__(self, *, approval_timeout_s: float, max_json_depth: int, metrics: Metrics,
                 client_state_keys: frozenset[str] = frozenset()) -> None:
        self.approval_timeout_s = approval_timeout_s
        self.max_json_depth = max_json_depth
        self.metrics = metrics
        self.client_state_keys = client_state_keys

    def _requested_state(self, request: ChatRequest) -> dict[str, Any]:
        """The request's `state`, applied before the run: only keys the client may see and set."""
        state = request.state or {}
        refused = sorted(key for key in state if key not in self.client_state_keys)
        if refused:
            raise BadRequest(f"These state keys may not be set by the client: {', '.join(refused[:5])}.",
                             code="state_key_refused")
        return dict(state)

    def _client_state(self, plan: TurnPlan, state: Mapping[str, Any], requested: dict[str, Any]) -> None:
        """What the client sees of the session's state (`--client-state`), and what it sets."""
        if not self.client_state_keys:
            return
        plan.client_state_keys = self.client_state_keys
        plan.client_state = {key: state[key] for key in self.client_state_keys if key in state}
        plan.requested_state = requested
        plan.state_delta.update(requested)

    async def plan(self, host: AgentHost, request: ChatRequest, ctx: RequestContext) -> TurnPlan:
        """The turn a request asks for, checked against the chat's session and book; raises a
        `GatewayError` for a request that must be refused (nothing was changed then)."""
        last = request.last
        if last.role == "assistant":
            return await self._plan_continuation(host, request, ctx, last)
        if last.role != "user":
            raise BadRequest("The last message must come from the user or the assistant.")
        return await self._plan_new_turn(host, request, ctx, last)

    async def _plan_new_turn(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage
    ) -> TurnPlan:
        user, chat = ctx.user_id, request.id
        earlier = request.earlier
        requested = self._requested_state(request)
        session = await host.get_session(user, chat, events=False)
        synced = _synced(session.state.get(HISTORY_STATE_KEY)) if session is not None else None
        # The client's history is the truth: an unknown chat imports it; a regenerate, an edited
        # message or any other divergence from the turns this session ran rebuilds the session.
        # One pass of the hash over the posted messages' bytes gives both fingerprints: of those
        # the session says it ran (to check them) and of all of them (for the state this turn records).
        ran_digest, posted_digest = history_digests(request.messages, synced[0] if synced else 0)
        with _refusing_bad_history():
            in_sync = request.trigger != "regenerate-message" and _continues(earlier, synced, ran_digest)
        if session is None or not in_sync:
            if session is not None:
                reason = "regenerate" if request.trigger == "regenerate-message" else "diverged"
                self.metrics.sessions_rebuilt.labels(reason=reason).inc()
                log.info("session_rebuilt", chat_id=chat, reason=reason)
            history = await self._validated(earlier)
            session = await host.reset_session(user, chat, exists=session is not None)
            if history:
                await host.import_history(session, history)
        book = ApprovalBook.from_state(session.state.get(APPROVALS_STATE_KEY))
        for abandoned in book.abandon_all():
            log.info("approval_abandoned", chat_id=chat, tool_call_id=abandoned.tool_call_id)
        plan = TurnPlan(message_id=_new_message_id(), book=book, new_message=last)
        plan.turn["createdAt"] = now_ms()
        plan.state_delta = {
            APPROVALS_STATE_KEY: book.to_state(),
            HISTORY_STATE_KEY: [len(request.messages), posted_digest],
            TURN_STATE_KEY: dict(plan.turn),
        }
        self._client_state(plan, session.state, requested)
        return plan

    async def _validated(self, earlier: list[Any]) -> list[UIMessage]:
        """The earlier messages a chat is imported or rebuilt from, validated in full."""
        with _refusing_bad_history():
            return await validated_history(earlier, max_depth=self.max_json_depth)

    async def _plan_continuation(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage
    ) -> TurnPlan:
        user, chat = ctx.user_id, request.id
        requested = self._requested_state(request)
        session = await host.get_session(user, chat, events=False)
        # No session for this user and chat: nothing was asked here, so any approval in the
        # message was issued elsewhere (another user or chat) and is refused as such below.
        state = session.state if session is not None else {}
        book = ApprovalBook.from_state(state.get(APPROVALS_STATE_KEY))
        turn = dict(state.get(TURN_STATE_KEY) or {"asks": 0, "continuations": 0})
        replay_prefix = message_replay_chunks(last.parts)
        try:
            # Every part is checked before anything is applied: a refusal changes nothing.
            answers = book.answers(last.tool_parts())
        except ApprovalRefused as exc:
            self.metrics.approvals_refused.inc()
            log.warning("approval_refused", chat_id=chat, approval_id=exc.approval_id, reason=exc.reason)
            raise ApprovalInvalid(detail=str(exc)) from None
        if session is None:
            raise ContinuationRefused("This chat has nothing waiting for an answer.")
        if not answers:
            raise ContinuationRefused()
        if turn.get("continuations", 0) + 1 > max(turn.get("asks", 0), 1):
            log.warning("continuation_refused", chat_id=chat, turn=turn)
            raise ContinuationRefused("More continuations than questions asked in this turn.")
        turn["continuations"] = turn.get("continuations", 0) + 1

        continuation = book.answer(answers, now=time.time(), timeout_s=self.approval_timeout_s)
        for decision in continuation.decisions:
            self.metrics.approvals_answered.labels(decision=decision.value).inc()
        # An approved browser tool told to run now is a question the next continuation answers.
        turn["asks"] = turn.get("asks", 0) + len(continuation.awaiting_client)
        # The answer to a sign-in becomes what ADK wants (the callback the gateway recorded).
        replies = SignIns.resolve(turn.get("signIns") or {}, continuation.replies)
        plan = TurnPlan(
            message_id=last.id,
            book=book,
            turn=turn,
            replay_prefix=replay_prefix,
            shown=continuation.shown,
            awaiting_client=continuation.awaiting_client,
        )
        if continuation.interrupted:
            plan.interrupted = True
            plan.interrupt_responses = replies
        elif replies:
            plan.new_message = replies
        plan.state_delta = {APPROVALS_STATE_KEY: book.to_state(), TURN_STATE_KEY: dict(turn)}
        self._client_state(plan, state, requested)
        return plan


def _synced(state: Any) -> tuple[int, str] | None:
    """The session state's [count, digest] of the posted messages it has run; None: none recorded."""
    if isinstance(state, list) and len(state) == 2 and isinstance(state[0], int):
        return state[0], state[1]
    return None


@contextlib.contextmanager
def _refusing_bad_history() -> Iterator[None]:
    """An earlier message that is not JSON, or not a message, refuses the request (400)."""
    try:
        yield
    except ValidationError as exc:
        raise BadRequest(describe(exc), code="invalid_body") from None
    except JsonRejected as exc:
        raise BadRequest(exc.message, code="invalid_json", detail=exc.reason) from None


def _continues(earlier: list[Any], synced: tuple[int, str] | None, ran_digest: str) -> bool:
    """True when the posted messages before the last begin with the ones the session has run
    (`synced`: their count and digest; `ran_digest`: the `history_digest` of that many posted
    messages) and add only the assistant's answers to them, which are parsed and checked here
    (ValidationError, JsonRejected: see `checked_heads`)."""
    if synced is None:
        return not earlier  # a session with no history of ours: in sync only with none posted
    count, digest = synced
    if not 0 < count <= len(earlier) or not ran_digest or ran_digest != digest:
        return False
    return all(message.get("role") == "assistant" for message in checked_heads(earlier, count))
