"""The WebSocket transport: `GET /api/chat/ws`, the frame protocol of ai 7's `WebSocketChatTransport`.

Frames in: `send`, `resume`, `abort` (plus the live extension: `live-*` frames and binary PCM).
Frames out: `start`, `chunk{requestId, sequence}`, `end`, `error{requestId, errorText, code}`,
`no-active`. Many requests share one socket and are told apart by `requestId`.

How it works: the handler (`chat_socket`) reads the socket's frames in its own task and hands
each to the socket's `SocketSession`. Each `send` plans and starts a run through the chat service
(the same path as SSE) and spawns a delivery task owned by the socket's registry connection;
each `resume` spawns a delivery from the chat's stream log. A `live-start` opens a live session
with one service call (`start_live`), whose log is delivered the same way; the socket only passes
the session its frames and audio. When the socket closes — by the client, a failed heartbeat, or
shutdown — leaving the registry connection stops every run it started (unless runs detach on
disconnect), ends a live session, and cancels and awaits every delivery task.

Writes: chunks already waiting in a request's log go out back to back under one hold of the
socket, one frame each (see `transports.base`, "Writes are coalesced").

Memory: an idle socket holds one coroutine frame of ours (the handler's: it passes the door
itself, takes the slot, upgrades, enters the registry connection, which binds the log context, and
reads, with no other coroutine of ours left on the stack: not the app's middleware, not a reading
loop), two slotted objects (the session, its registry connection), one id, its log context and its
caller's user id; aiohttp's and asyncio's objects for the connection are about 14 KiB (see
docs/perf/memory-per-connection.md). What a socket needs only once it talks is created by its
first frame: the guard and the connection's task group (both before anything can be written, so
that a slow-reader cut, which may come from a timer, finds the group open), the request maps, the
send lock, the send window.

Slow readers: the socket has one `SlowReaderGuard` (transports.base) over all its requests and
frames. A cut socket stops its deliveries and closes with 4008 "slow"; if the close frame cannot
be flushed within `CUT_TIMEOUT_S` the guard aborts the socket, so a blocked write never keeps the
close from happening.

Bad frames: a frame that is not JSON, of an unknown type, or with wrong field types gets an
`error` frame (with its `requestId` when one can be read) and the socket stays open; after
`MAX_BAD_FRAMES` bad frames the socket is closed with 1008. Oversized frames are closed by
aiohttp with 1009. Other sockets are never affected.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import structlog
from aiohttp import WSCloseCode, WSMessage, WSMsgType, web
from pydantic import ValidationError

from gateway.config import origin_key
from gateway.core import encoding, jsonparse
from gateway.core.errors import GatewayError, HistoryTooLong, LimitReached, OriginRefused, SlowReader, Unauthorized
from gateway.core.requests import (
    LIVE_FRAME_TYPES,
    AbortFrame,
    ClientFrame,
    LiveImageFrame,
    LiveStartFrame,
    ResumeFrame,
    SendFrame,
    message_count,
    validate_frame,
)
from gateway.keys import AUTH, METRICS, SERVICE, SETTINGS
from gateway.services.auth import Authenticator, bearer_token
from gateway.services.chat import RequestContext
from gateway.services.live import LiveFrame, LiveHandle, LiveOptions, start_live
from gateway.services.registry import ChatRun, Connection, SendVerdict
from gateway.services.streams import Follower, LogEntry, StreamLog
from gateway.tracing import frame_span
from transports import door
from transports.base import SlowReaderGuard, Transport, adapt_entry, deliver, stop_runs
from transports.handling import client_major, public_origin

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.services.chat import ChatService

__all__ = ["SocketSession", "WebSocketRequestTransport", "chat_socket", "origin_allowed"]

log = structlog.get_logger("transports.websocket")

MAX_BAD_FRAMES: Final = 10
KNOWN_FRAME_TYPES: Final = frozenset({"send", "resume", "abort", *LIVE_FRAME_TYPES})
# What ends `async for message in ws` (aiohttp's `__anext__`); `serve` reads with `receive()`.
_CLOSING: Final = frozenset({WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED})


class WebSocketRequestTransport(Transport):
    """Carries one request's chunks over a shared socket."""

    __slots__ = ("chunk_head", "major", "request_id", "sequence", "socket")

    def __init__(self, socket: SocketSession, request_id: str, major: int, first_sequence: int = 0) -> None:
        self.socket = socket
        self.request_id = request_id
        self.chunk_head = encoding.ws_chunk_head(request_id)
        self.major = major
        self.sequence = first_sequence

    async def open(self) -> None:
        await self.socket.send(encoding.ws_start(self.request_id))

    async def send(self, chunk: dict[str, Any]) -> None:
        await self.send_encoded(encoding.chunk_json(chunk))

    async def send_encoded(self, chunk: bytes) -> None:
        # Number chunks per request as sent (not as logged): a client sees no gap even when a
        # chunk was dropped for an ai 6 client.
        await self.socket.send_frame(encoding.ws_chunk_encoded(self.chunk_head, self.sequence, chunk))
        self.sequence += 1

    async def send_entries(self, entries: Iterable[LogEntry]) -> None:
        """Every chunk waiting, one frame each, back to back under one hold of the socket."""
        await self.socket.send_frames(self._frames(entries))

    def _frames(self, entries: Iterable[LogEntry]) -> Iterator[bytes]:
        for entry in entries:
            data = adapt_entry(entry, self.major)
            if data is not None:
                frame = encoding.ws_chunk_encoded(self.chunk_head, self.sequence, data)
                self.sequence += 1
                yield frame

    async def keepalive(self) -> None:
        """Idle sockets are kept alive by WebSocket pings (aiohttp's heartbeat)."""

    async def abort(self, error: GatewayError) -> None:
        """A cut request: the socket itself closes with 4008 (`SocketSession._on_slow`)."""

    async def close(self) -> None:
        await self.socket.send(encoding.ws_end(self.request_id))


def origin_allowed(request: web.Request, settings: Settings) -> bool:
    """The gateway's own origin, or one of `--allowed-origins` and `--cors-origins`, each compared
    whole (scheme, host, port: `door.is_own_origin`, `config.origin_key`). No Origin: not a
    browser, allowed (browsers always send Origin on a WebSocket handshake)."""
    origin = request.headers.get("Origin")
    if origin is None or "*" in settings.origins or "*" in settings.cors:
        return True
    return door.is_own_origin(request, origin) or origin_key(origin) in settings.socket_origin_keys


class SocketSession:
    """One socket's requests; see the module docstring. `handle()` takes each frame the handler reads."""

    __slots__ = ("_deliveries", "_guard", "_runs", "_send_lock", "_slow_close", "auth", "bad_frames", "conn",
                 "connection", "handshake_major", "live", "live_request_id", "origin", "service", "settings", "user_id",
                 "ws")

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
        # Created by the first frame (`handle`), or the first use: see the module docstring.
        self._deliveries: dict[str, asyncio.Task[Any]] | None = None
        self._runs: dict[str, ChatRun] | None = None
        self._guard: SlowReaderGuard | None = None
        self._send_lock: asyncio.Lock | None = None  # created by the first frame sent
        self.live: LiveHandle | None = None
        self.live_request_id: str | None = None
        self.bad_frames = 0
        self._slow_close: asyncio.Task[Any] | None = None

    @property
    def deliveries(self) -> dict[str, asyncio.Task[Any]]:
        """The responses being written, by requestId."""
        if self._deliveries is None:
            self._deliveries = {}
        return self._deliveries

    @property
    def runs(self) -> dict[str, ChatRun]:
        """The runs of those responses (a `resume` of a chat with no run has none), by requestId."""
        if self._runs is None:
            self._runs = {}
        return self._runs

    @property
    def guard(self) -> SlowReaderGuard:
        """The socket's slow-reader guard, made by its first frame (`open`)."""
        if self._guard is None:
            raise RuntimeError("the socket's guard is made by its first frame")
        return self._guard

    async def open(self) -> None:
        """Makes the socket's guard, once, and opens the connection's task group with it: the
        guard's cut spawns the 4008 close from whatever task or callback it happens in, and that
        spawn must find the group open. Called in the handler's task by the first frame, before
        anything can be written."""
        if self._guard is None:
            await self.conn.open_tasks()
            self._guard = SlowReaderGuard(
                self.connection,
                max_pending_bytes=self.settings.max_pending_bytes,
                grace_s=self.settings.slow_reader_grace_s,
                transport="ws",
                user_id=self.user_id,
                metrics=self.service.metrics,
                on_cut=self._on_slow,
            )

    def close(self) -> None:
        """The socket has closed: its guard stops (no more timers, no more cuts)."""
        if self._guard is not None:
            self._guard.close()

    def _lock(self) -> asyncio.Lock:
        if self._send_lock is None:
            self._send_lock = asyncio.Lock()
        return self._send_lock

    async def send(self, text: str) -> None:
        async with self._lock():
            if not self.ws.closed and self.guard.error is None:
                with self.guard.writing():
                    await self.ws.send_str(text)

    async def send_frame(self, text: bytes) -> None:
        """Sends a text frame given as UTF-8 (a chunk serialised once, when it was logged)."""
        async with self._lock():
            if not self.ws.closed and self.guard.error is None:
                with self.guard.writing():
                    await self.ws.send_frame(text, WSMsgType.TEXT)

    async def send_frames(self, frames: Iterable[bytes]) -> None:
        """Sends text frames given as UTF-8 back to back, under one hold of the socket. `frames`
        is iterated only once the socket is free (see `Transport.send_entries`). aiohttp's
        `send_frame` writes each frame to the transport at once and waits for a drain only past
        its writer's limit (64 KiB), so the frames are not drained one by one."""
        async with self._lock():
            if self.ws.closed or self.guard.error is not None:
                return
            with self.guard.writing():
                for frame in frames:
                    await self.ws.send_frame(frame, WSMsgType.TEXT)
                    if self.ws.closed or self.guard.error is not None:
                        return

    def _on_slow(self, error: GatewayError) -> None:
        """The guard cut this socket: its runs stop and it closes with 4008. Not cancelled
        mid-write: the guard's timer aborts the socket if the close frame cannot be flushed in time."""
        stop_runs(self.conn)
        if self._slow_close is None:
            self._slow_close = self.conn.spawn(
                self.ws.close(code=error.close_code, message=b"slow"), "slow-close"
            )

    async def handle(self, message: WSMessage) -> bool:
        """Handles one message the handler read; False: the socket is done (it closed, failed, or
        was closed here for too many bad frames)."""
        if message.type in _CLOSING:
            return False
        if message.type is WSMsgType.TEXT:
            await self.open()
            await self._on_text(message.data)
        elif message.type is WSMsgType.BINARY:
            await self.open()
            await self._on_binary(message.data)
        elif message.type is WSMsgType.ERROR:
            log.info("socket_error", error=repr(self.ws.exception()))
            return False
        if self.bad_frames >= MAX_BAD_FRAMES:
            await self.ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"too many bad frames")
            return False
        return True

    # --- frames ----------------------------------------------------------------------------

    async def _bad_frame(self, request_id: str | None, text: str, code: str, reason: str) -> None:
        self.bad_frames += 1
        self.service.metrics.ws_frames_refused.labels(reason=reason).inc()
        log.info("frame_refused", request_id=request_id, code=code, detail=text)
        await self.send(encoding.ws_error(request_id, text, code))

    async def _on_text(self, data: str) -> None:
        try:
            raw = await jsonparse.loads_request_async(data, max_depth=self.settings.max_json_depth)
        except jsonparse.JsonRejected as exc:
            if exc.reason == "depth":
                await self._bad_frame(None, exc.message, "invalid_json", "too_deep")
            else:
                await self._bad_frame(None, "The frame is not JSON.", "invalid_json", "not_json")
            return
        request_id = raw.get("requestId") if isinstance(raw, dict) else None
        request_id = request_id if isinstance(request_id, str) else None
        if not isinstance(raw, dict):
            await self._bad_frame(None, "The frame must be a JSON object.", "invalid_frame", "not_object")
            return
        frame_type = raw.get("type")
        if frame_type not in KNOWN_FRAME_TYPES:
            await self._bad_frame(request_id, f"Unknown frame type {str(frame_type)[:40]!r}.", "unknown_type",
                                  "unknown_type")
            return
        count = message_count(raw) if frame_type == "send" else 0
        if count > self.settings.max_history_messages and request_id is not None:
            # A long history is no protocol violation: the request is refused, the socket is fine.
            error = HistoryTooLong(f"The chat history has {count} messages; at most "
                                   f"{self.settings.max_history_messages} are accepted.")
            self.service.metrics.request_errors.labels(code=error.error_code).inc()
            log.info("request_refused", code=error.error_code, request_id=request_id)
            await self.send(encoding.ws_error(request_id, error.message, error.error_code))
            return
        try:
            frame = await validate_frame(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:]) or "frame"
            await self._bad_frame(request_id, f"Invalid {frame_type} frame at '{where}': {first['msg']}.",
                                  "invalid_frame", "invalid_fields")
            return
        await self._dispatch(frame)

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
                await self._on_live(frame)
        except GatewayError as exc:
            self.service.metrics.request_errors.labels(code=exc.error_code).inc()
            if not isinstance(exc, LimitReached):  # a cap's refusal was logged where it was decided
                log.info("request_refused", code=exc.error_code, detail=exc.detail, request_id=frame.requestId)
            await self.send(encoding.ws_error(frame.requestId, exc.message, exc.error_code))
        except Exception as exc:
            self.service.metrics.request_errors.labels(code="internal_error").inc()
            log.exception("request_failed", request_id=frame.requestId, frame_type=frame.type, error=repr(exc))
            await self.send(encoding.ws_error(frame.requestId, "The request failed; try again.", "internal_error"))

    async def _context(self, headers: dict[str, str], request_id: str) -> RequestContext | None:
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
        if (self._deliveries is None or request_id not in self._deliveries) and (
                self._live() is None or request_id != self.live_request_id):
            return False
        await self._bad_frame(request_id, "This requestId is already in use.", "duplicate_request", "duplicate")
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
        ctx = await self._context(frame.headers, frame.requestId)
        if ctx is None:
            return
        try:
            # The run starts inside the frame's span: its spans join the client's trace.
            with frame_span("chat send", frame.headers, **{"gateway.request_id": frame.requestId}):
                run = await self.service.start(frame.chat_request(), ctx, self.conn)
        except ValidationError as exc:
            await self._bad_frame(frame.requestId, f"Invalid send frame: {exc.errors()[0]['msg']}.",
                                  "invalid_frame", "invalid_fields")
            return
        self.runs[frame.requestId] = run
        transport = WebSocketRequestTransport(self, frame.requestId, ctx.major)
        self._deliver(frame.requestId, run, transport, start=0)

    async def _on_resume(self, frame: ResumeFrame) -> None:
        if await self._refuse_duplicate(frame.requestId):
            return
        ctx = await self._context(frame.headers, frame.requestId)
        if ctx is None:
            return
        stream_log = await self.service.streams.lookup((ctx.user_id, frame.id))
        if stream_log is None:
            await self.send(encoding.ws_no_active(frame.requestId))
            return
        start = 0 if frame.lastSequence is None else frame.lastSequence + 1
        run = self.service.registry.active_run((ctx.user_id, frame.id))
        if run is not None:
            self.runs[frame.requestId] = run
        transport = WebSocketRequestTransport(self, frame.requestId, ctx.major, first_sequence=start)
        self._deliver(frame.requestId, run, transport, start=start, stream_log=stream_log)

    def _deliver(
        self,
        request_id: str,
        run: ChatRun | None,
        transport: WebSocketRequestTransport,
        *,
        start: int,
        stream_log: StreamLog | None = None,
    ) -> None:
        source = stream_log if stream_log is not None else run.log if run is not None else None
        if source is None:
            return
        # Attached now, before any await, so the log keeps every chunk from `start` for us.
        follower = source.attach(start, replay=stream_log is not None, budget=self.guard.max_pending_bytes)
        task = self.conn.spawn(self._delivery(request_id, follower, transport), f"deliver:{request_id}",
                               delivery=True)
        task.add_done_callback(lambda _task: follower.detach())  # also when cancelled before it ran
        self.deliveries[request_id] = task

    async def _delivery(self, request_id: str, follower: Follower, transport: WebSocketRequestTransport) -> None:
        """One request's response: `start`, its log's chunks, `end`."""
        try:
            await transport.open()
            await deliver(follower, transport, keepalive_s=None, guard=self.guard)
        except SlowReader:
            pass  # the socket is closing with 4008; the guard counted and logged the cut
        finally:
            follower.detach()
            if self._deliveries is not None:
                self._deliveries.pop(request_id, None)
            if self._runs is not None:
                self._runs.pop(request_id, None)

    async def _on_abort(self, frame: AbortFrame) -> None:
        run = self._runs.get(frame.requestId) if self._runs is not None else None
        if run is not None:
            log.info("abort", request_id=frame.requestId, chat_id=run.key[1])
            await run.stop()
        elif (live := self._live()) is not None and frame.requestId == self.live_request_id:
            live.session.stop()

    # --- live extension --------------------------------------------------------------------

    async def _on_live(self, frame: ClientFrame) -> None:
        if isinstance(frame, LiveStartFrame):
            await self._start_live(frame)
            return
        live = self._live()
        if live is None or frame.requestId != self.live_request_id:
            await self._bad_frame(frame.requestId, "No live session with this requestId.", "no_live_session",
                                  "no_live")
            return
        if isinstance(frame, LiveImageFrame):
            try:
                data = base64.b64decode(frame.data, validate=True)
            except (binascii.Error, ValueError):
                await self._bad_frame(frame.requestId, "live-image data is not base64.", "invalid_frame",
                                      "invalid_fields")
                return
            live.session.send_image(frame.mediaType, data)
        elif isinstance(frame, LiveFrame):
            live.session.apply(frame)

    async def _start_live(self, frame: LiveStartFrame) -> None:
        if self._live() is not None:
            await self._bad_frame(frame.requestId, "A live session is already open on this socket.",
                                  "live_busy", "live_busy")
            return
        ctx = await self._context(frame.headers, frame.requestId)
        if ctx is None:
            return
        request_id = frame.requestId
        transport = WebSocketRequestTransport(self, request_id, ctx.major)

        async def deliver_live(stream_log: StreamLog) -> None:
            follower = stream_log.attach(0, budget=self.guard.max_pending_bytes)
            await self._delivery(request_id, follower, transport)

        options = LiveOptions(
            input_rate=frame.sampleRate,
            hands_free=frame.handsFree,
            vad_silence_ms=self.settings.vad_silence_ms,
            vad_threshold_dbfs=self.settings.vad_threshold_dbfs,
            approval_timeout_s=self.settings.approval_timeout_s,
        )
        try:
            # As a `send` frame's run: the session starts inside the frame's span.
            with frame_span("chat live-start", frame.headers, **{"gateway.request_id": request_id}):
                live = await start_live(self.service, self.conn, user_id=ctx.user_id, chat_id=frame.id,
                                        options=options, deliver=deliver_live, app=frame.app)
        except GatewayError as exc:
            # Over `--max-live-sessions` too: an `error` frame `overloaded` for this request, not a
            # 1013 close, which would also end every other request on the socket.
            await self.send(encoding.ws_error(request_id, exc.message, exc.error_code))
            return
        self.live, self.live_request_id = live, request_id

    def _live(self) -> LiveHandle | None:
        """The socket's live session while it runs (one that has ended is let go here)."""
        if self.live is not None and not self.live.active:
            self.live, self.live_request_id = None, None
        return self.live

    async def _on_binary(self, data: bytes) -> None:
        live = self._live()
        if live is None:
            await self._bad_frame(None, "Binary frames are live audio; open a live session first.",
                                  "no_live_session", "binary_without_live")
            return
        from gateway.core.pcm import PcmFormatError

        try:
            live.session.send_audio(data)
        except PcmFormatError as exc:
            await self._bad_frame(self.live_request_id, str(exc), "invalid_audio", "invalid_audio")


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
                path=door.loggable_target(request))
    error = OriginRefused()
    return web.json_response(error.body(), status=error.status)


def _socket_response(request: web.Request) -> web.WebSocketResponse:
    settings = request.app[SETTINGS]
    return web.WebSocketResponse(heartbeat=settings.ws_heartbeat_s, max_msg_size=settings.max_ws_frame_bytes,
                                 compress=False)


def _log_open(request: web.Request, user_id: str) -> None:
    # The query's names only, never its values (`door.loggable_target`), parsed without aiohttp
    # caching anything on the request for its life.
    log.info("socket_open", user_id=user_id, path=door.loggable_target(request),
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


@door.passes_door_itself
async def chat_socket(request: web.Request) -> web.StreamResponse:
    """The socket's whole life in one coroutine: the door's checks, the handshake, then its
    frames until it closes.

    No coroutine of ours but this one stays on the stack while the socket idles (see "Memory" in
    the module docstring): it passes the door itself (`transports.door`: the checks, and its
    answers to what they or the handshake raise) instead of under the app's middleware, reads
    the frames here, and the helpers above keep the steps that need no waiting out of this frame,
    which lives as long as the socket.
    """
    try:
        identity = await door.admit(request, keep=False)
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
        return door.answer(request, exc)
