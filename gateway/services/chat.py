"""The chat service: turns one client request into one agent run, for every transport.

How it works
------------
`ChatService.start()` picks the request's app (`request.app`, absent: the default; an unknown one
is refused with `UnknownApp` before anything else), claims the chat (one run per chat — a chat id
belongs to one app), *plans* the turn (`adk_gateway.services.planning`: a bad request is refused with
a status before anything is streamed, and nothing runs) and starts it as the chat's run
(`adk_gateway.services.turn`: the agent's events become the message's chunks in the chat's stream
log, which transports follow).

Every run of the process — a chat's turn, and a live session (`adk_gateway.services.live`) — is
opened the same way: `open_run` claims the chat in the registry, prepares what must be ready
before anything streams (a failure releases the chat and is the request's answer) and makes the
run's log the chat's resumable stream; `start_run` starts its task, with what every run gets:
its span, its log context (chat and request ids) and its metrics (started, ended by outcome,
duration; chat runs and live sessions counted apart).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from adk_gateway.agents.adk import AgentApps, AgentHost
from adk_gateway.core.requests import ChatRequest
from adk_gateway.metrics import Metrics
from adk_gateway.services.planning import RequestContext, TurnPlanner
from adk_gateway.services.registry import ChatRun, Connection, Registry
from adk_gateway.services.streams import ChatKey, StreamLog, StreamStore
from adk_gateway.services.turn import ChatTurn, TurnExtras
from adk_gateway.tracing import run_span

__all__ = ["ChatService", "RequestContext"]

log = structlog.get_logger("adk_gateway.services.chat")

T = TypeVar("T")


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
        extras: TurnExtras | None = None,
        client_state_keys: frozenset[str] = frozenset(),
    ) -> None:
        self.apps = apps if isinstance(apps, AgentApps) else AgentApps.single(apps)
        self.registry = registry
        self.streams = streams
        self.approval_timeout_s = approval_timeout_s
        self.stream_max_bytes = stream_max_bytes
        self.max_json_depth = max_json_depth
        self.metrics = metrics or Metrics()
        self.extras = extras
        self.client_state_keys = client_state_keys
        self.planner = TurnPlanner(approval_timeout_s=approval_timeout_s, max_json_depth=max_json_depth,
                                   metrics=self.metrics, client_state_keys=client_state_keys)

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
        run, plan = await self.open_run(key, conn, stream_log, lambda: self.planner.plan(host, request, ctx))
        stream_log.replay_prefix = plan.replay_prefix
        turn = ChatTurn(host, run, plan, ctx, request.id, metrics=self.metrics, extras=self.extras)
        # The answer's first chunks are in the log before the run's task has taken a step: the
        # request's own handler writes them at once, instead of a busy event loop's turn or two
        # later (the run's first step, then the handler's wake-up).
        turn.begin()

        async def body() -> str:
            await turn.execute()
            return turn.outcome

        self.start_run(run, body, chat_id=request.id, request_id=ctx.request_id)
        return run

    async def stop(self, key: ChatKey) -> dict[str, bool]:
        """Stops the chat's active run (`POST /api/chat/{chatId}/stop`) and says what happened:
        `stopped` when it ran here; else the stop goes to the process running it, if any, through
        the stream store (`forwarded`)."""
        if await self.registry.stop(key):
            log.info("chat_stop", chat_id=key[1], stopped=True)
            return {"stopped": True}
        heard = await self.streams.broadcast_stop(key)
        log.info("chat_stop", chat_id=key[1], stopped=False, forwarded_to=heard)
        return {"stopped": False, "forwarded": True} if heard else {"stopped": False}

    # --- every run ---------------------------------------------------------------------------

    async def open_run(
        self, key: ChatKey, conn: Connection, stream_log: StreamLog, prepare: Callable[[], Awaitable[T]], *,
        live: bool = False,
    ) -> tuple[ChatRun, T]:
        """Claims the chat for a run of `conn` (one run per chat), then `prepare`s it; a failure
        of either is the request's answer, and a claimed chat is released again. The run's log
        is then the chat's resumable stream. A live session never outlives its connection.

        Raises:
            GatewayError: the chat is busy, a cap is reached, or `prepare` refused the request.
        """
        run = await self.registry.claim(key, conn, stream_log, live=live)
        if live:
            run.detached = False
        try:
            prepared = await prepare()
            self.streams.add(stream_log)
        except BaseException:
            self.registry.release_unstarted(run)
            raise
        return run, prepared

    def start_run(
        self, run: ChatRun, body: Callable[[], Awaitable[str]], *, chat_id: str, request_id: str | None = None,
        live: bool = False,
    ) -> None:
        """Starts the run's task: `body` returns how the run ended (a cancelled run: `stopped`)."""
        metrics = self.metrics
        # Live sessions are counted apart from chat runs (`adk_gateway_runs_*`): a session lasts
        # minutes and has turns of its own, so summed with chat runs it would skew their rates
        # and durations.
        if live:
            started, finished, seconds = (metrics.live_sessions_started, metrics.live_sessions_finished,
                                          metrics.live_session_seconds)
        else:
            started, finished, seconds = metrics.runs_started, metrics.runs_finished, metrics.run_seconds
        ids = {"chat_id": chat_id} if request_id is None else {"chat_id": chat_id, "request_id": request_id}
        attributes = {} if request_id is None else {"gateway.request_id": request_id}

        async def bookkept() -> None:
            structlog.contextvars.bind_contextvars(**ids)
            began = time.monotonic()
            started.inc()
            span = run_span("live session" if live else "chat run", chat_id, **attributes)
            outcome = "stopped"  # unless the body says otherwise: cancelled by a stop, a disconnect, shutdown
            try:
                outcome = await body()
            finally:
                finished.labels(outcome=outcome).inc()
                seconds.observe(time.monotonic() - began)
                if span is not None:
                    span.end(outcome)
                structlog.contextvars.unbind_contextvars(*ids)

        self.registry.start(run, bookkept())
