"""The WebSocket transport: `GET /api/chat/ws`, the frame protocol of ai 7's `WebSocketChatTransport`.

Frames in: `send`, `resume`, `abort` (plus the live extension: `live-*` frames and binary PCM).
Frames out: `start`, `chunk{requestId, sequence}`, `end`, `error{requestId, errorText, code}`,
`no-active`. Many requests share one socket and are told apart by `requestId`.

How it works: the handler (`chat_socket`) reads the socket's frames in its own task and hands
each to the socket's `SocketSession`, which reads it (`adk_gateway.transports.websocket_frames`: a validated
frame, or a refusal answered with an `error` frame) and dispatches it. Each `send` plans and
starts a run through the chat service (the same path as SSE) and spawns a delivery task owned by
the socket's registry connection; each `resume` spawns a delivery from the chat's stream log.
Live frames and binary audio go to the socket's live extension (`adk_gateway.transports.websocket_live`),
which opens a live session with one service call and passes it its frames and audio; the
session's log is delivered the same way. When the socket closes — by the client, a failed
heartbeat, or shutdown — leaving the registry connection stops every run it started (unless runs
detach on disconnect), ends a live session, and cancels and awaits every delivery task.

Writes: every request's frames go out through the socket's one `SocketWriter`
(`adk_gateway.transports.websocket_writer`): one write at a time, chunks already waiting in a request's log
back to back under one hold of the socket, one frame each (see `adk_gateway.transports.base`, "Writes are
coalesced").

Memory: an idle socket holds one coroutine frame of ours (the handler's: it passes the door
itself, takes the slot, upgrades, enters the registry connection, which binds the log context, and
reads, with no other coroutine of ours left on the stack: not the app's middleware, not a reading
loop), two slotted objects (the session, its registry connection), one id, its log context and its
caller's user id, beside aiohttp's and asyncio's own objects for the connection (what each costs:
docs/perf/memory-per-connection.md). What a socket needs only once it talks is created by its
first frame: the connection's task group and the writer with its guard and send lock (both before
anything can be written, so that a slow-reader cut, which may come from a timer, finds the group
open), the frame reader, the request maps, the send window; the live extension by the first live
or binary frame.

Slow readers: the socket has one `SlowReaderGuard` (adk_gateway.transports.base) over all its requests and
frames, its writer's. A cut socket stops its deliveries and runs and closes with 4008 "slow"; if
the close frame cannot be flushed within `CUT_TIMEOUT_S` the guard aborts the socket, so a blocked
write never keeps the close from happening.

Bad frames: a frame that is not JSON, of an unknown type, or with wrong field types gets an
`error` frame (with its `requestId` when one can be read) and the socket stays open; after
`MAX_BAD_FRAMES` bad frames the socket is closed with 1008. Oversized frames are closed by
aiohttp with 1009. Other sockets are never affected.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import structlog
from aiohttp import WSCloseCode, WSMessage, WSMsgType, web
from pydantic import ValidationError

from adk_gateway.config import origin_key
from adk_gateway.core import encoding
from adk_gateway.core.errors import GatewayError, LimitReached, OriginRefused, SlowReader, Unauthorized
from adk_gateway.core.requests import AbortFrame, ClientFrame, ResumeFrame, SendFrame
from adk_gateway.keys import AUTH, METRICS, SERVICE, SETTINGS
from adk_gateway.services.auth import Authenticator, bearer_token
from adk_gateway.services.chat import RequestContext
from adk_gateway.services.live import Deliver
from adk_gateway.services.registry import ChatRun, Connection, SendVerdict
from adk_gateway.services.streams import Follower, LogEntry, StreamLog
from adk_gateway.tracing import frame_span
from adk_gateway.transports import admission
from adk_gateway.transports.base import Transport, deliver
from adk_gateway.transports.chat_steps import client_major, public_origin
from adk_gateway.transports.websocket_frames import FrameReader, Refusal
from adk_gateway.transports.websocket_live import LiveExtension
from adk_gateway.transports.websocket_writer import SocketWriter

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.services.chat import ChatService

__all__ = ["SocketSession", "WebSocketRequestTransport", "chat_socket", "origin_allowed"]

log = structlog.get_logger("adk_gateway.transports.websocket")

# What ends `async for message in ws` (aiohttp's `__anext__`); `serve` reads with `receive()`.
_CLOSING: Final = frozenset({WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED})


class WebSocketRequestTransport(Transport):
    """Carries one request's chunks over a shared socket."""

    __slots__ = ("chunk_head", "major", "request_id", "sequence", "writer")

    def __init__(self, writer: SocketWriter, request_id: str, major: int, first_sequence: int = 0) -> None:
        self.writer = writer
        self.request_id = request_id
        self.chunk_head = encoding.ws_chunk_head(request_id)
        self.major = major
        self.sequence = first_sequence

    async def open(self) -> None:
        await self.writer.send(encoding.ws_start(self.request_id))

    async def send(self, chunks: Iterable[LogEntry]) -> None:
        """Every chunk waiting, one frame each, back to back under one hold of the socket."""
        await self.writer.send_frames(self._frames(chunks))

    def _frames(self, chunks: Iterable[LogEntry]) -> Iterator[bytes]:
        # Numbered as sent (not as logged): a client sees no gap even when a chunk was dropped
        # for an ai 6 client.
        for entry in chunks:
            frame = encoding.ws_chunk_encoded(self.chunk_head, self.sequence, entry.data)
            self.sequence += 1
            yield frame

    async def keepalive(self) -> None:
        """Idle sockets are kept alive by WebSocket pings (aiohttp's heartbeat)."""

    async def close(self, last: Sequence[LogEntry] = (), *, cut: GatewayError | None = None) -> None:
        """`end` after the last chunks. A cut request sends nothing: the socket itself closes with
        4008 (`SocketWriter._on_slow`)."""
        if cut is not None:
            return
        if last:
            await self.send(last)
        await self.writer.send(encoding.ws_end(self.request_id))


def origin_allowed(request: web.Request, settings: Settings) -> bool:
    """The gateway's own origin, or one of `--allowed-origins` (and `--cors-origins`), each compared
    whole (scheme, host, port: `admission.is_own_origin`, `config.origin_key`). No Origin: not a
    browser, allowed (browsers always send Origin on a WebSocket handshake)."""
    origin = request.headers.get("Origin")
    if origin is None or "*" in settings.origins:
        return True
    return admission.is_own_origin(request, origin) or origin_key(origin) in settings.origin_keys


class SocketSession:
    """One socket's requests; see the module docstring. `handle()` takes each frame the handler reads."""

    __slots__ = ("_deliveries", "_frames", "_live", "_runs", "_writer", "auth", "conn", "connection",
                 "handshake_major", "origin", "service", "settings", "user_id", "ws")

    # Made by the first frame (`open`), as the writer and the frame reader are.
    _deliveries: dict[str, asyncio.Task[Any]]  # the responses being written, by requestId
    _runs: dict[str, ChatRun]  # their runs (a `resume` of a chat with no run has none), by requestId

    def __init__(
        self,
        ws: web.WebSocketResponse,
        conn: Connection,
        service: ChatService,
        settings: Settings,
        request: web.Request,
        *,
        user_id: str,
    ) -> None:
        self.user_id = user_id  # fixed at the handshake: no frame changes it
        self.ws = ws
        self.conn = conn
        self.service = service
        self.settings = settings
        # What the socket needs of its handshake, taken now; the request (its query holds the
        # token) is not kept: the caller (above), the `ai` version its headers name, the origin
        # its links are made for (`--public-url`, else its scheme and Host), its connection.
        self.auth: Authenticator | None = request.app.get(AUTH)
        self.handshake_major = client_major(request.headers)
        self.origin = public_origin(request.scheme, request.host, settings)
        connection = request.transport
        self.connection = connection if isinstance(connection, asyncio.Transport) else None
        # Made by the first frame (`open`): see the module docstring.
        self._writer: SocketWriter | None = None
        self._frames: FrameReader | None = None
        self._live: LiveExtension | None = None

    @property
    def writer(self) -> SocketWriter:
        """The socket's writer (with its slow-reader guard), made by its first frame (`open`)."""
        if self._writer is None:
            raise RuntimeError("the socket's writer is made by its first frame")
        return self._writer

    @property
    def live(self) -> LiveExtension:
        """The socket's live extension, made by its first live or binary frame."""
        if self._live is None:
            self._live = LiveExtension(self)
        return self._live

    async def open(self) -> None:
        """Makes the socket's writer and frame reader, once, and opens the connection's task group
        first: the writer's guard spawns the 4008 close from whatever task or callback a cut
        happens in, and that spawn must find the group open. Called in the handler's task by the
        first frame, before anything can be written."""
        if self._writer is None:
            await self.conn.open_tasks()
            self._writer = SocketWriter(self.ws, self.conn, self.connection, settings=self.settings,
                                        user_id=self.user_id, metrics=self.service.metrics)
            self._frames = FrameReader(self.settings, self.service.metrics)
            self._deliveries, self._runs = {}, {}

    def close(self) -> None:
        """The socket has closed: its writer's guard stops (no more timers, no more cuts)."""
        if self._writer is not None:
            self._writer.close()

    async def send(self, text: str) -> None:
        await self.writer.send(text)

    async def handle(self, message: WSMessage) -> bool:
        """Handles one message the handler read; False: the socket is done (it closed, failed, or
        was closed here for too many bad frames)."""
        if message.type in _CLOSING:
            return False
        if message.type is WSMsgType.TEXT:
            await self.open()
            assert self._frames is not None
            frame = await self._frames.read(message.data)
            if isinstance(frame, Refusal):
                await self.refuse(frame)
            else:
                await self._dispatch(frame)
        elif message.type is WSMsgType.BINARY:
            await self.open()
            await self.live.on_audio(message.data)
        elif message.type is WSMsgType.ERROR:
            log.info("socket_error", error=repr(self.ws.exception()))
            return False
        if self._frames is not None and self._frames.exhausted:
            await self.ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"too many bad frames")
            return False
        return True

    async def refuse(self, refusal: Refusal) -> None:
        """Answers a frame that is not carried out with an `error` frame (counted: `FrameReader.refused`)."""
        assert self._frames is not None  # (made by the first frame)
        await self.send(self._frames.refused(refusal))

    # --- requests --------------------------------------------------------------------------

    async def _dispatch(self, frame: ClientFrame) -> None:
        """Handles one frame. Whatever fails inside (a session store that raises, a bug) ends that
        request with an `error` frame; the socket and its other requests carry on."""
        try:
            if isinstance(frame, SendFrame):
                await self._on_send(frame)
            elif isinstance(frame, ResumeFrame):
                await self._on_resume(frame)
            elif isinstance(frame, AbortFrame):
                await self._on_abort(frame)
            else:
                await self.live.on_frame(frame)
        except GatewayError as exc:
            self.service.metrics.request_errors.labels(code=exc.error_code).inc()
            if not isinstance(exc, LimitReached):  # a cap's refusal was logged where it was decided
                log.info("request_refused", code=exc.error_code, detail=exc.detail, request_id=frame.requestId)
            await self.send(encoding.ws_error(frame.requestId, exc.message, exc.error_code))
        except Exception as exc:
            self.service.metrics.request_errors.labels(code="internal_error").inc()
            log.exception("request_failed", request_id=frame.requestId, frame_type=frame.type, error=repr(exc))
            await self.send(encoding.ws_error(frame.requestId, "The request failed; try again.", "internal_error"))

    async def context(self, headers: dict[str, str], request_id: str) -> RequestContext | None:
        """The request's context: always the socket's own user. Frame headers only pick the `ai`
        version; one whose `authorization` proves another identity (or none) is refused with an
        `error` frame, and the socket carries on. None: refused."""
        frame_headers = {k.lower(): v for k, v in headers.items()}
        token = bearer_token(frame_headers)
        auth = self.auth
        if token is not None and auth is not None and auth.requires_credential:
            try:
                claimed = (await auth.verify(token)).user_id
            except Unauthorized as exc:
                claimed, detail = None, exc.detail
            else:
                detail = "the frame's credential names another user"
            if claimed != self.user_id:
                self.service.metrics.auth_refused.labels(reason="frame_identity").inc()
                log.warning("frame_identity_refused", request_id=request_id, detail=detail)
                await self.send(encoding.ws_error(request_id, "This frame's credential does not match the "
                                                  "socket's user.", "unauthorized"))
                return None
        major = client_major(frame_headers) if "x-ai-sdk-major" in frame_headers else self.handshake_major
        return RequestContext(user_id=self.user_id, request_id=request_id, major=major, origin=self.origin)

    async def _refuse_duplicate(self, request_id: str) -> bool:
        """Refuses a `send` or `resume` whose requestId names a response still running on this socket."""
        if request_id not in self._deliveries and (self._live is None or not self._live.owns(request_id)):
            return False
        await self.refuse(Refusal(request_id, "This requestId is already in use.", "duplicate_request", "duplicate"))
        return True

    async def _on_send(self, frame: SendFrame) -> None:
        verdict = self.service.registry.admit_send(self.conn, self.user_id)
        if verdict is not SendVerdict.ADMIT:
            await self.send(encoding.ws_error(frame.requestId, "Too many messages on this socket; slow down.",
                                              "rate_limited"))
            if verdict is SendVerdict.CLOSE:
                await self.ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"too many sends")
            return
        if await self._refuse_duplicate(frame.requestId):
            return
        self.service.metrics.requests.labels(transport="ws").inc()
        ctx = await self.context(frame.headers, frame.requestId)
        if ctx is None:
            return
        try:
            # The run starts inside the frame's span: its spans join the client's trace.
            with frame_span("chat send", frame.headers, **{"gateway.request_id": frame.requestId}):
                run = await self.service.start(frame.chat_request(), ctx, self.conn)
        except ValidationError as exc:
            await self.refuse(Refusal(frame.requestId, f"Invalid send frame: {exc.errors()[0]['msg']}.",
                                      "invalid_frame", "invalid_fields"))
            return
        self._runs[frame.requestId] = run
        transport = WebSocketRequestTransport(self.writer, frame.requestId, ctx.major)
        self._deliver(frame.requestId, run, transport, start=0)

    async def _on_resume(self, frame: ResumeFrame) -> None:
        if await self._refuse_duplicate(frame.requestId):
            return
        ctx = await self.context(frame.headers, frame.requestId)
        if ctx is None:
            return
        stream_log = await self.service.streams.lookup((ctx.user_id, frame.id))
        if stream_log is None:
            await self.send(encoding.ws_no_active(frame.requestId))
            return
        start = 0 if frame.lastSequence is None else frame.lastSequence + 1
        run = self.service.registry.active_run((ctx.user_id, frame.id))
        if run is not None:
            self._runs[frame.requestId] = run
        transport = WebSocketRequestTransport(self.writer, frame.requestId, ctx.major, first_sequence=start)
        self._deliver(frame.requestId, run, transport, start=start, stream_log=stream_log)

    async def _on_abort(self, frame: AbortFrame) -> None:
        run = self._runs.get(frame.requestId)
        if run is not None:
            log.info("abort", request_id=frame.requestId, chat_id=run.key[1])
            await run.stop()
        elif self._live is not None:
            self._live.stop(frame.requestId)

    # --- responses -------------------------------------------------------------------------

    def _deliver(self, request_id: str, run: ChatRun | None, transport: WebSocketRequestTransport, *, start: int,
                 stream_log: StreamLog | None = None) -> None:
        """Spawns the response to `request_id`: the run's log from `start`, or `stream_log`'s (a resume)."""
        source = stream_log if stream_log is not None else run.log if run is not None else None
        if source is None:
            return
        # Attached now, before any await, so the log keeps every chunk from `start` for us.
        follower = source.attach(start, replay=stream_log is not None, budget=self.writer.guard.max_pending_bytes)
        task = self.conn.spawn(self._respond(request_id, follower, transport), f"deliver:{request_id}",
                               delivery=True)
        task.add_done_callback(lambda _task: follower.detach())  # also when cancelled before it ran
        self._deliveries[request_id] = task

    def delivery_for(self, request_id: str, major: int) -> Deliver:
        """How a live session's log reaches the client: as the response to `request_id`."""
        transport = WebSocketRequestTransport(self.writer, request_id, major)

        async def deliver_live(stream_log: StreamLog) -> None:
            follower = stream_log.attach(0, budget=self.writer.guard.max_pending_bytes)
            await self._respond(request_id, follower, transport)

        return deliver_live

    async def _respond(self, request_id: str, follower: Follower, transport: WebSocketRequestTransport) -> None:
        """One request's response: `start`, its log's chunks, `end`."""
        try:
            await transport.open()
            await deliver(follower, transport, keepalive_s=None, guard=self.writer.guard)
        except SlowReader:
            pass  # the socket is closing with 4008; the guard counted and logged the cut
        finally:
            follower.detach()
            self._deliveries.pop(request_id, None)
            self._runs.pop(request_id, None)


async def _close_at_expiry(ws: web.WebSocketResponse, expires_at: float) -> None:
    """A socket lives no longer than the token that opened it: at its `exp`, close with 1008 (the
    client reconnects with a fresh token)."""
    await asyncio.sleep(max(0.0, expires_at - time.time()))
    log.info("socket_token_expired")
    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"token expired")


def _origin_refusal(request: web.Request) -> web.Response | None:
    """The answer to a handshake from an origin that may not open a socket; None: allowed."""
    if origin_allowed(request, request.app[SETTINGS]):
        return None
    request.app[METRICS].auth_refused.labels(reason="socket_origin").inc()
    log.warning("origin_refused", origin=request.headers.get("Origin", "")[:200], peer=request.remote,
                path=admission.loggable_target(request))
    error = OriginRefused()
    return web.json_response(error.body(), status=error.status)


def _socket_response(request: web.Request) -> web.WebSocketResponse:
    settings = request.app[SETTINGS]
    return web.WebSocketResponse(heartbeat=settings.ws_heartbeat_s, max_msg_size=settings.max_ws_frame_bytes,
                                 compress=False)


def _log_open(request: web.Request, user_id: str) -> None:
    # The query's names only, never its values (`admission.loggable_target`), parsed without aiohttp
    # caching anything on the request for its life.
    log.info("socket_open", user_id=user_id, path=admission.loggable_target(request),
             origin=request.headers.get("Origin", "")[:200] or None, peer=request.remote)


async def _session(ws: web.WebSocketResponse, conn: Connection, service: ChatService, request: web.Request, *,
                   user_id: str, expires_at: float | None) -> SocketSession:
    """The socket's session, its socket listed on its registry connection, its close at the token's
    expiry (`expires_at`) scheduled (which opens the connection's tasks at once)."""
    settings = request.app[SETTINGS]
    conn.socket = ws  # the one list of open sockets is the registry's (shutdown closes them)
    session = SocketSession(ws, conn, service, settings, request, user_id=user_id)
    if expires_at is not None:
        await conn.open_tasks()
        conn.spawn(_close_at_expiry(ws, expires_at), "token-expiry")
    return session


@admission.passes_door_itself
async def chat_socket(request: web.Request) -> web.StreamResponse:
    """The socket's whole life in one coroutine: the door's checks, the handshake, then its
    frames until it closes.

    No coroutine of ours but this one stays on the stack while the socket idles (see "Memory" in
    the module docstring): it passes the door itself (`adk_gateway.transports.admission`: the checks, and its
    answers to what they or the handshake raise) instead of under the app's middleware, reads
    the frames here, and the helpers above keep the steps that need no waiting out of this frame,
    which lives as long as the socket.
    """
    try:
        identity = await admission.admit(request, keep=False)
        assert identity is not None  # an `/api/` route
        # Only what the socket needs of its caller stays in this frame, which lives as long as it.
        user_id, expires_at = identity.user_id, identity.expires_at
        del identity
        refusal = _origin_refusal(request)
        if refusal is not None:
            return refusal
        service = request.app[SERVICE]
        # Over the user's socket cap this raises before the upgrade: answered 429 + Retry-After.
        # The slot is held until the handler ends.
        with service.registry.socket_slot(user_id):
            ws = _socket_response(request)
            try:
                await ws.prepare(request)
            except ConnectionError:
                log.info("socket_gone_before_handshake", peer=request.remote)
                return web.Response(status=400)  # nobody to read it; aiohttp drops it quietly
            service.metrics.connections.labels(kind="ws").inc()
            try:
                # The connection binds its id (`ws-N`) to every log line of the socket.
                async with service.registry.connection("ws") as conn:
                    _log_open(request, user_id)
                    session = await _session(ws, conn, service, request, user_id=user_id, expires_at=expires_at)
                    try:
                        # `receive()` rather than `async for`: no `__anext__` frame while idle.
                        while await session.handle(await ws.receive()):
                            pass
                    finally:
                        session.close()
            finally:
                service.metrics.connections.labels(kind="ws").dec()
                if not ws.closed:
                    await ws.close()
        return ws
    except Exception as exc:
        return admission.answer(request, exc)
