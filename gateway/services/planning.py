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
  (adk_gateway.core.approval, the one authority on approvals) checks every approval and browser tool
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

from adk_gateway.agents.adk import AgentHost, Turn, ui_message_dict
from adk_gateway.agents.tools import APPROVALS_STATE_KEY
from adk_gateway.core.approval import AgentReply, ApprovalBook, ApprovalRefused, CallState, RunInBrowser, ToolOutcome
from adk_gateway.core.converter import message_replay_chunks
from adk_gateway.core.errors import ApprovalInvalid, BadRequest, ContinuationRefused
from adk_gateway.core.jsonparse import JsonRejected
from adk_gateway.core.requests import (
    ChatRequest,
    UIMessage,
    ValidationError,
    checked_heads,
    describe,
    history_digests,
    message_value,
    validated_history,
)
from adk_gateway.core.transcript import Transcript
from adk_gateway.metrics import Metrics
from adk_gateway.services.signin import SignIns

__all__ = ["HISTORY_STATE_KEY", "TURN_STATE_KEY", "RequestContext", "TurnPlan", "TurnPlanner", "now_ms"]

log = structlog.get_logger("adk_gateway.services.chat")

# [count, digest]: how many posted messages the session has run, and their `history_digest`.
HISTORY_STATE_KEY: Final = "gateway:history"
TURN_STATE_KEY: Final = "gateway:turn"
# {"createdAt", "preview", "title"?}: what the list of a user's chats shows of the chat.
CHAT_STATE_KEY: Final = "gateway:chat"
PREVIEW_CHARS: Final = 80


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
    # What the chat's record gets besides the answer: the messages before it (a new turn's user
    # message), the message a continuation continues (as the client posted it), and the approval
    # audit's entries of the planning (answers, expiries, abandoned questions).
    recorded: tuple[dict[str, Any], ...] = ()
    continued: dict[str, Any] | None = None
    audit: list[dict[str, Any]] = field(default_factory=list)


def preview_of(message: Mapping[str, Any]) -> str:
    """A message's text on one line, at most `PREVIEW_CHARS` characters (a chat's default title)."""
    text = " ".join("".join(str(p.get("text", "")) for p in message.get("parts") or ()
                            if isinstance(p, Mapping) and p.get("type") == "text").split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _chat_meta(state: Mapping[str, Any], posted: list[Any], last: UIMessage) -> dict[str, Any] | None:
    """The chat's list entry to record, when the session has none yet: created now, previewed by
    its first user message (of the posted history, else the new one)."""
    if isinstance(state.get(CHAT_STATE_KEY), dict):
        return None
    first_user: Mapping[str, Any] = ui_message_dict(last)
    for message in posted[:-1]:
        try:
            value = message_value(message)
        except ValueError:
            continue
        if isinstance(value, Mapping) and value.get("role") == "user":
            first_user = value
            break
    return {"createdAt": now_ms(), "preview": preview_of(first_user)}


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
        if last.role not in ("user", "assistant"):
            raise BadRequest("The last message must come from the user or the assistant.")
        if request.last_only:
            await self._check_against_server_history(host, request, ctx, last)
        if last.role == "assistant":
            return await self._plan_continuation(host, request, ctx, last)
        return await self._plan_new_turn(host, request, ctx, last)

    async def _check_against_server_history(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage
    ) -> None:
        """A last-message request acts on the server's history: its message is new (a new turn),
        the chat's last answer (a continuation), or names a message to run again (a regenerate, or
        an edit: `messageId` names it), for which the session is first rewound to before it
        (ADK's rewind, which also undoes the state changes since). Anything else is refused."""
        transcript = await host.transcript(ctx.user_id, request.id) or Transcript()
        if last.role == "assistant":
            latest = transcript.last
            if latest is None or latest.get("id") != last.id:
                raise ContinuationRefused("Only the chat's last answer can be continued.")
            return
        invocation = transcript.invocation_of(last.id)
        again = request.trigger == "regenerate-message" or (invocation is not None and request.messageId == last.id)
        if invocation is None:
            if request.trigger == "regenerate-message":
                raise ContinuationRefused("There is no such message to regenerate from.")
            return  # a new message
        if not again:
            raise ContinuationRefused("This message is in the chat already; to edit it, name it in messageId.")
        log.info("session_rewound", chat_id=request.id, to_before=invocation)
        self.metrics.sessions_rebuilt.labels(reason="rewind").inc()
        before = await host.get_session(ctx.user_id, request.id, events=False)
        meta = before.state.get(CHAT_STATE_KEY) if before is not None else None
        await host.rewind(ctx.user_id, request.id, invocation)
        if isinstance(meta, dict):
            # The chat's list entry (its age, its title) is not a turn's to undo.
            await host.save_state(ctx.user_id, request.id, {CHAT_STATE_KEY: meta})

    async def _plan_new_turn(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage
    ) -> TurnPlan:
        user, chat = ctx.user_id, request.id
        earlier = request.earlier
        requested = self._requested_state(request)
        session = await host.get_session(user, chat, events=False)
        if request.last_only:
            return await self._plan_on_server_history(host, request, ctx, last, requested)
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
            meta = session.state.get(CHAT_STATE_KEY) if session is not None else None
            session = await host.reset_session(user, chat, exists=session is not None)
            if history:
                await host.import_history(session, history)
            if isinstance(meta, dict):
                session.state[CHAT_STATE_KEY] = meta  # (a rebuilt chat keeps its title and age)
        plan = self._new_turn_plan(session.state, last, requested, chat)
        plan.state_delta[HISTORY_STATE_KEY] = [len(request.messages), posted_digest]
        if history_meta := _chat_meta(session.state, request.messages, last):
            plan.state_delta[CHAT_STATE_KEY] = history_meta
        return plan

    async def _plan_on_server_history(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage, requested: dict[str, Any],
    ) -> TurnPlan:
        """A new turn of a last-message request: the session is the history (rewound already, for
        a regenerate or an edit)."""
        session = await host.get_session(ctx.user_id, request.id, events=False)
        if session is None:
            session = await host.create_session(ctx.user_id, request.id)
        plan = self._new_turn_plan(session.state, last, requested, request.id)
        if meta := _chat_meta(session.state, [], last):
            plan.state_delta[CHAT_STATE_KEY] = meta
        return plan

    def _new_turn_plan(self, state: Mapping[str, Any], last: UIMessage, requested: dict[str, Any],
                       chat: str) -> TurnPlan:
        book = ApprovalBook.from_state(state.get(APPROVALS_STATE_KEY))
        plan = TurnPlan(message_id=_new_message_id(), book=book, new_message=last)
        for abandoned in book.abandon_all():
            log.info("approval_abandoned", chat_id=chat, tool_call_id=abandoned.tool_call_id)
            if abandoned.approval_id is not None and abandoned.state is CallState.APPROVAL_REQUESTED:
                plan.audit.append({"toolCallId": abandoned.tool_call_id, "decision": "stopped"})
        plan.turn["createdAt"] = now_ms()
        plan.recorded = (ui_message_dict(last),)
        plan.state_delta = {APPROVALS_STATE_KEY: book.to_state(), TURN_STATE_KEY: dict(plan.turn)}
        self._client_state(plan, state, requested)
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

        answered_at = now_ms()
        continuation = book.answer(answers, now=time.time(), timeout_s=self.approval_timeout_s)
        for decision in continuation.decisions:
            self.metrics.approvals_answered.labels(decision=decision.value).inc()
        audit: list[dict[str, Any]] = [
            {"toolCallId": call_id, "decision": decision.value, "answeredBy": user, "answeredAt": answered_at}
            for call_id, decision in continuation.answered
        ]
        audit += [{"toolCallId": call_id, "decision": "expired"} for call_id in continuation.expired]
        audit += [{"toolCallId": call_id, "decision": "stopped"} for call_id in continuation.stopped]
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
            continued=ui_message_dict(last),
            audit=audit,
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
