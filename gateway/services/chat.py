"""The chat service: turns one client request into one agent run, for every transport.

How it works
------------
`ChatService.start()` picks the request's app (`request.app`, absent: the default; an unknown one
is refused with `UnknownApp` before anything else), claims the chat (one run per chat — a chat id
belongs to one app), reads the chat's ADK session (under that app) and its
`ApprovalBook`, and *plans* the turn before anything is streamed, so that a bad request (a forged
or replayed approval, a continuation with nothing new) is refused with a status and nothing runs:

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
  appended to the session without calling the model. This service decides none of it: what is
  shown goes through the response's converter (`ResponseConverter.show`, the one writer of
  chunks), what the agent is told becomes ADK function responses.

The run itself is a task owned by the registry that converts ADK events to chunks (every chunk,
the approval requests and the final `finish` / `error` / `abort` included, comes from the
converter) and appends them to the chat's stream log; transports follow that log. The converter
records each tool result in the book (`ApprovalBook.reported`), so a call shows one outcome. The
book is saved to the session before the final chunk — `finish`, and also `error` and `abort` when
the run fails or is stopped — so a client that answers an approval it received finds it stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from agents.adk import AgentApps, AgentHost, ModelCallsExhausted, Turn
from agents.tools import APPROVALS_STATE_KEY
from gateway.core.approval import (
    AgentReply,
    ApprovalBook,
    ApprovalRefused,
    RunInBrowser,
    ToolOutcome,
)
from gateway.core.chunks import Chunk
from gateway.core.converter import BrowserCall, NeedsApproval, ResponseConverter, message_replay_chunks
from gateway.core.errors import ApprovalInvalid, BadRequest, ContinuationRefused, GatewayError, ModelTimedOut
from gateway.core.events import AgentEvent
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
from gateway.services.registry import ChatRun, Connection, Registry
from gateway.services.streams import ChatKey, StreamLog, StreamStore
from gateway.tracing import run_span

__all__ = ["ChatService", "RequestContext"]

log = structlog.get_logger("gateway.services.chat")

# [count, digest]: how many posted messages the session has run, and their `history_digest`.
HISTORY_STATE_KEY: Final = "gateway:history"
TURN_STATE_KEY: Final = "gateway:turn"


@dataclass(frozen=True, slots=True)
class RequestContext:
    user_id: str
    request_id: str
    major: int = 6


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
    turn: dict[str, int] = field(default_factory=lambda: {"asks": 0, "continuations": 0})
    replay_prefix: list[dict[str, Any]] = field(default_factory=list)


def _new_message_id() -> str:
    return f"msg-{uuid.uuid4().hex}"


def _new_approval_id() -> str:
    return f"apr-{secrets.token_urlsafe(18)}"


class ChatService:
    """Runs chats on the apps it serves: `apps` (or one `AgentHost`, served as the only app)."""

    def __init__(
        self,
        apps: AgentApps | AgentHost,
        registry: Registry,
        streams: StreamStore,
        *,
        approval_timeout_s: float = 0.0,
        stream_max_bytes: int = 8 * 1024 * 1024,
        max_json_depth: int = 64,
        metrics: Metrics | None = None,
    ) -> None:
        self.apps = apps if isinstance(apps, AgentApps) else AgentApps.single(apps)
        self.registry = registry
        self.streams = streams
        self.approval_timeout_s = approval_timeout_s
        self.stream_max_bytes = stream_max_bytes
        self.max_json_depth = max_json_depth
        self.metrics = metrics or Metrics()

    @property
    def host(self) -> AgentHost:
        """The default app's host."""
        return self.apps.default_host

    # --- entry point -----------------------------------------------------------------------

    async def start(self, request: ChatRequest, ctx: RequestContext, conn: Connection) -> ChatRun:
        """Plans and starts a run on the request's app. Raises a `GatewayError` before anything is
        streamed (`UnknownApp` before the chat is claimed)."""
        host = self.apps.host(request.app)
        key: ChatKey = (ctx.user_id, request.id)
        stream_log = StreamLog(key=key, max_bytes=self.stream_max_bytes)
        run = await self.registry.claim(key, conn, stream_log)
        try:
            plan = await self._plan(host, request, ctx)
        except BaseException:
            self.registry.release_unstarted(run)
            raise
        stream_log.replay_prefix = plan.replay_prefix
        self.streams.add(stream_log)
        self.metrics.runs_started.inc()
        converter = ResponseConverter(
            message_id=plan.message_id, tool_kinds=host.tool_kind, refused_tools=plan.book.refused_tools(),
            reported=plan.book.reported,
        )
        # The answer's first chunks are in the log before the run's task has taken a step: the
        # request's own handler writes them at once, instead of a busy event loop's turn or two
        # later (the run's first step, then the handler's wake-up).
        stream_log.append_chunks(converter.start())
        stream_log.append_chunks(converter.show(plan.shown))
        self.registry.start(run, self._execute(host, run, plan, ctx, request.id, converter=converter))
        return run

    # --- planning --------------------------------------------------------------------------

    async def _plan(self, host: AgentHost, request: ChatRequest, ctx: RequestContext) -> TurnPlan:
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
        plan.state_delta = {
            APPROVALS_STATE_KEY: book.to_state(),
            HISTORY_STATE_KEY: [len(request.messages), posted_digest],
            TURN_STATE_KEY: dict(plan.turn),
        }
        return plan

    async def _validated(self, earlier: list[Any]) -> list[UIMessage]:
        """The earlier messages a chat is imported or rebuilt from, validated in full."""
        with _refusing_bad_history():
            return await validated_history(earlier, max_depth=self.max_json_depth)

    async def _plan_continuation(
        self, host: AgentHost, request: ChatRequest, ctx: RequestContext, last: UIMessage
    ) -> TurnPlan:
        user, chat = ctx.user_id, request.id
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
        replies = continuation.replies
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
        return plan

    # --- running ---------------------------------------------------------------------------

    async def _execute(
        self, host: AgentHost, run: ChatRun, plan: TurnPlan, ctx: RequestContext, chat_id: str, *,
        converter: ResponseConverter,
    ) -> None:
        """Runs a planned turn whose first chunks (`start`, what the plan shows) `start` has logged."""
        book = plan.book
        turn = plan.turn

        emit = run.log.append_chunks

        structlog.contextvars.bind_contextvars(chat_id=chat_id, request_id=ctx.request_id)
        started = time.monotonic()
        outcome = "ok"
        span = run_span("chat run", chat_id, **{"gateway.request_id": ctx.request_id})
        try:
            for call_id in plan.awaiting_client:
                converter.await_client(call_id)
            if plan.interrupted:
                await host.append_replies(ctx.user_id, chat_id, plan.interrupt_responses)
                await self._save(host, ctx.user_id, chat_id, book, turn)
                emit(converter.finish("interrupted"))
                return
            if plan.new_message is not None:
                # ADK hands over the events a model yields without waiting in between: a model that
                # does not wait between tokens would have the whole answer converted before the
                # handler writes its first token. Giving way once, after the first event that logged
                # chunks, sends that token at once; the rest goes out at the run's next wait. A stop
                # can now land between events too, so the run's generator is closed explicitly.
                waiting_for_first = True
                logged = run.log.end
                events = host.run(ctx.user_id, chat_id, plan.new_message, state_delta=plan.state_delta)
                async with aclosing(events):
                    async for event in events:
                        self._convert(event, converter, book, turn, emit)
                        if waiting_for_first and run.log.end > logged:
                            waiting_for_first = False
                            await asyncio.sleep(0)
            # The run's first event wrote the plan's state; a run that changed nothing of it (no
            # approval asked or settled, no ask counted: most turns) needs no second write, and the
            # session one event fewer per turn. A plan that ran nothing (an approved browser tool
            # re-announced) writes here only.
            if plan.new_message is None or self._changed(plan, book, turn):
                await self._save(host, ctx.user_id, chat_id, book, turn)
            emit(converter.finish())
        except ModelCallsExhausted:
            outcome = "limit"
            log.warning("llm_call_limit", chat_id=chat_id, limit=host.max_llm_calls)
            await self._save_quietly(host, ctx.user_id, chat_id, book, turn)
            emit(converter.finish("length", {"finishDetail": "max_llm_calls"}))
        except asyncio.CancelledError:
            outcome = "stopped"
            await self._save_while_stopping(host, ctx.user_id, chat_id, book, turn)
            emit(converter.abort("stopped"))
            raise
        except Exception as exc:
            # A bound that fired (model or store timeout) says so; anything else is a bug or an
            # agent failure, logged with its traceback and told to the client in general terms.
            known = _gateway_error(exc)
            if known is None:
                outcome, text = "error", "The agent failed while answering."
                log.exception("run_failed", chat_id=chat_id, error=repr(exc))
            else:
                outcome = "timeout" if isinstance(known, ModelTimedOut) else known.error_code
                text = known.message
                log.warning("run_failed", chat_id=chat_id, code=known.error_code, detail=known.detail)
            await self._save_quietly(host, ctx.user_id, chat_id, book, turn)
            emit(converter.error(text))
        finally:
            if converter.errored and outcome == "ok":
                outcome = "model_error"
            run.log.close()
            elapsed = time.monotonic() - started
            self.metrics.runs_finished.labels(outcome=outcome).inc()
            self.metrics.run_seconds.observe(elapsed)
            # One line per run: who, which chat, how it ended, how long it took and the tokens it
            # used (never the prompt).
            log.info("run_finished", user_id=ctx.user_id, chat_id=chat_id, outcome=outcome,
                     duration_ms=round(elapsed * 1000, 1), detached=run.detached, usage=converter.usage)
            structlog.contextvars.unbind_contextvars("chat_id", "request_id")
            if span is not None:
                span.end(outcome)

    def _convert(
        self,
        event: AgentEvent,
        converter: ResponseConverter,
        book: ApprovalBook,
        turn: dict[str, int],
        emit: Callable[[Iterable[Chunk]], None],
    ) -> None:
        result = converter.convert(event)
        emit(result.chunks)
        for effect in result.effects:
            if isinstance(effect, NeedsApproval):
                ask = book.ask(
                    effect.tool_call_id, effect.tool_name, browser=effect.browser,
                    confirmation_id=effect.confirmation_id, approval_id=_new_approval_id(), now=time.time(),
                )
                if ask is None:
                    continue
                turn["asks"] = turn.get("asks", 0) + 1
                # Without an approval id the tool is "always allowed" in this chat: not asked. The
                # call is announced as a browser tool to run now, and a page that answered "always"
                # runs it at once (ai 6 has no chunk for an automatic approval; ai 7's request +
                # response pair would cost an extra round trip before the browser may run it).
                if ask.approval_id is not None:
                    self.metrics.approvals_issued.inc()
                emit(converter.show([ask]))
            elif isinstance(effect, BrowserCall):
                book.track(effect.tool_call_id, effect.tool_name, browser=True)
                turn["asks"] = turn.get("asks", 0) + 1

    @staticmethod
    def _changed(plan: TurnPlan, book: ApprovalBook, turn: dict[str, int]) -> bool:
        """Whether the book or the turn's counts differ from what the plan's state delta wrote."""
        return (plan.state_delta.get(APPROVALS_STATE_KEY) != book.to_state()
                or plan.state_delta.get(TURN_STATE_KEY) != turn)

    async def _save(self, host: AgentHost, user: str, chat: str, book: ApprovalBook, turn: dict[str, int]) -> None:
        await host.save_state(user, chat, {APPROVALS_STATE_KEY: book.to_state(), TURN_STATE_KEY: turn})

    async def _save_quietly(
        self, host: AgentHost, user: str, chat: str, book: ApprovalBook, turn: dict[str, int]
    ) -> None:
        try:
            await self._save(host, user, chat, book, turn)
        except Exception as exc:
            log.warning("state_save_failed", chat_id=chat, error=repr(exc))

    async def _save_while_stopping(
        self, host: AgentHost, user: str, chat: str, book: ApprovalBook, turn: dict[str, int]
    ) -> None:
        """Saves the book of a run being stopped: approvals its client already received stay
        answerable. The save (bounded by the store timeout) is shielded: a second cancellation,
        e.g. at shutdown, stops the wait for it, not the save."""
        save = asyncio.ensure_future(self._save_quietly(host, user, chat, book, turn))
        try:
            await asyncio.shield(save)
        except asyncio.CancelledError:
            log.info("state_save_continues_after_stop", chat_id=chat)


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


def _gateway_error(exc: BaseException) -> GatewayError | None:
    """The `GatewayError` behind a run failure (ADK may wrap what a store or plugin raised)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, GatewayError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
