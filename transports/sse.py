"""The SSE transport: `POST /api/chat`, `GET /api/chat/{chatId}/stream`, `POST /api/chat/{chatId}/stop`.

Disconnects: the app runs with aiohttp's `handler_cancellation`, so a client that goes away
cancels its handler at once; leaving `registry.connection()` then stops the run (unless runs
detach on disconnect) and waits for it, so no tool runs after the client is gone.

Writes: the headers and `: stream-open` go out with the chunks waiting when the response opens (a
chat's `start` chunk is always there); chunks already waiting in the log go out as one `write` of
their events (see `adk_gateway.transports.base`, "Writes are coalesced"); once the run has ended, its last
chunks, `[DONE]` and the end of the chunked body are one write (`finish`).

Memory: a held stream keeps its handler's frame and the objects below (a slotted transport, the
guard, the registry connection, the run); the parsed request body is let go once the run has
started. See docs/perf/memory-per-connection.md.

Slow readers: each response has a `SlowReaderGuard` (adk_gateway.transports.base). A cut response gets an
`error` chunk and `[DONE]` if they can still be written in time, then its connection is closed
(or aborted, when it cannot flush); the handler returns and the run stops as on a disconnect.

The steps that do not depend on HTTP (reading the body, refusing, answering with the run's log,
stopping) are `adk_gateway.transports.chat_steps`'s, shared with the in-memory client (adk_gateway.transports.memory).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import structlog
from aiohttp import web

from adk_gateway import logs
from adk_gateway.core import encoding
from adk_gateway.core.errors import GatewayError, PayloadTooLarge
from adk_gateway.core.requests import ChatRequest
from adk_gateway.keys import AUTH, IDENTITY, SERVICE, SETTINGS
from adk_gateway.services.auth import AnonymousAuth
from adk_gateway.services.chat import RequestContext
from adk_gateway.services.registry import ChatRun, Connection
from adk_gateway.services.streams import LogEntry
from adk_gateway.transports.base import SlowReaderGuard, Transport, stop_runs
from adk_gateway.transports.chat_steps import (
    client_major,
    public_origin,
    read_chat_request,
    refused,
    respond,
    stop_chat,
)

__all__ = ["SSETransport", "caller_of", "chat_post", "chat_resume", "chat_stop", "client_major", "slow_reader_guard"]

log = structlog.get_logger("adk_gateway.transports.sse")


class SSETransport(Transport):
    __slots__ = ("guard", "major", "preamble", "request", "response")

    def __init__(self, request: web.Request, major: int, guard: SlowReaderGuard | None = None) -> None:
        self.request = request
        self.major = major
        self.guard = guard
        self.response = web.StreamResponse(status=200, headers=encoding.SSE_HEADERS)
        # The first bytes, held back by `open` to go out with the first write (aiohttp sends
        # the prepared headers with it too).
        self.preamble = b""

    def _after_preamble(self, data: bytes) -> bytes:
        """`data`, behind the first bytes `open` held back if they have not gone out yet."""
        if not self.preamble:
            return data
        data, self.preamble = self.preamble + data, b""
        return data

    async def _write(self, data: bytes) -> None:
        data = self._after_preamble(data)
        if self.guard is None:
            await self.response.write(data)
            return
        with self.guard.writing():
            await self.response.write(data)

    async def open(self) -> None:
        """Prepares the response; the headers and a first byte (`: stream-open`, so proxies and
        clients see the stream open) go out with the first chunks, or on their own at `flush`."""
        if self.request.version >= (1, 1):
            self.response.headers["Connection"] = "keep-alive"
        await self.response.prepare(self.request)
        self.preamble = encoding.SSE_OPEN

    async def flush(self) -> None:
        if self.preamble:
            await self._write(b"")

    async def send(self, chunks: Iterable[LogEntry]) -> None:
        """Every chunk waiting, as the events of one write."""
        if events := _events(chunks):
            await self._write(events)

    async def keepalive(self) -> None:
        await self._write(encoding.SSE_KEEPALIVE)

    async def close(self, last: Sequence[LogEntry] = (), *, cut: GatewayError | None = None) -> None:
        """The last chunks, `[DONE]` and the end of the body in one write; a cut stream instead
        ends as `_cut` says."""
        if cut is not None:
            await self._cut(cut)
            return
        data = self._after_preamble(_events(last) + encoding.SSE_DONE)
        if self.guard is None:
            await self.response.write_eof(data)
            return
        with self.guard.writing():
            await self.response.write_eof(data)

    async def _cut(self, error: GatewayError) -> None:
        """A cut stream: an `error` chunk and `[DONE]` if they can still be written (the guard
        aborts the connection `CUT_TIMEOUT_S` after the cut, which ends a write that cannot),
        then the connection is closed instead of kept alive."""
        self.response.force_close()
        if not self.response.prepared:
            return
        try:
            await self.response.write(encoding.sse_event({"type": "error", "errorText": error.message})
                                      + encoding.SSE_DONE)
            await self.response.write_eof()
        except ConnectionError:
            log.debug("slow_reader_error_not_sent")


def _events(chunks: Iterable[LogEntry]) -> bytes:
    """The SSE events of chunks (their JSON as the client gets it)."""
    parts: list[bytes] = []
    for entry in chunks:
        parts += (b"data: ", entry.data, b"\n\n")
    return b"".join(parts)


def slow_reader_guard(request: web.Request, user_id: str, conn: Connection | None = None) -> SlowReaderGuard:
    """The guard of one SSE response (`--max-pending-bytes`, `--slow-reader-grace-s`); a cut
    stops the runs `conn` owns."""
    settings = request.app[SETTINGS]
    connection = request.transport
    return SlowReaderGuard(
        connection if isinstance(connection, asyncio.Transport) else None,
        max_pending_bytes=settings.max_pending_bytes,
        grace_s=settings.slow_reader_grace_s,
        transport="sse",
        user_id=user_id,
        metrics=request.app[SERVICE].metrics,
        on_cut=None if conn is None else lambda _error: stop_runs(conn),
    )


def caller_of(request: web.Request, body: dict[str, Any] | None = None) -> str:
    """The user a request acts as: the authenticated identity; with `--auth none`, who it claims
    to be (the user header, else a `userId` body field)."""
    auth = request.app[AUTH]
    if isinstance(auth, AnonymousAuth):
        return auth.claimed(request.headers, body).user_id
    return request[IDENTITY].user_id


def error_response(error: GatewayError) -> web.Response:
    return web.json_response(error.body(), status=error.status, headers=error.headers())


async def _read_body(request: web.Request) -> ChatRequest:
    """The request's `ChatRequest` (`chat_steps.read_chat_request`); a body over the limit is refused
    as soon as its announced length or the bytes read pass it, before it is all read."""
    settings = request.app[SETTINGS]
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge()
    raw = bytearray()
    async for piece in request.content.iter_chunked(64 * 1024):
        raw += piece
        if len(raw) > limit:
            raise PayloadTooLarge()
    return await read_chat_request(raw, settings)


async def _start_run(request: web.Request, request_id: str, conn: Connection) -> tuple[ChatRun, RequestContext]:
    """Reads the body and starts its run (a `GatewayError` before anything streams). A frame of
    its own, so that the parsed body is let go once the run has started."""
    body = await _read_body(request)
    ctx = RequestContext(user_id=caller_of(request, body.model_extra), request_id=request_id,
                         major=client_major(request.headers),
                         origin=public_origin(request.scheme, request.host, request.app[SETTINGS]))
    structlog.contextvars.bind_contextvars(chat_id=body.id)
    return await request.app[SERVICE].start(body, ctx, conn), ctx


async def chat_post(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    service = request.app[SERVICE]
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
    service.metrics.requests.labels(transport="sse").inc()
    # Bound and reset with a token (`adk_gateway.logs.bind`): no context manager's frame stays behind
    # for the life of the stream.
    log_token = logs.bind("request_id", request_id)
    try:
        async with service.registry.connection("sse") as conn:
            try:
                run, ctx = await _start_run(request, request_id, conn)
            except GatewayError as exc:
                refused(service.metrics, exc)
                return error_response(exc)
            # Attached before the next await, so the log keeps every chunk of the run for us.
            guard = slow_reader_guard(request, ctx.user_id, conn)
            transport = SSETransport(request, ctx.major, guard)
            with run.log.attach(0, budget=guard.max_pending_bytes) as follower:
                await respond(follower, transport, keepalive_s=settings.keepalive_s, guard=guard)
        # Also when the connection ended because a task of its own failed (it spawns none today).
        return transport.response
    finally:
        logs.unbind("request_id", log_token)


async def chat_resume(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    service = request.app[SERVICE]
    chat_id = request.match_info["chat_id"]
    user_id = caller_of(request)
    stream_log = await service.streams.lookup((user_id, chat_id))
    if stream_log is None:
        return web.Response(status=204)
    guard = slow_reader_guard(request, user_id)
    transport = SSETransport(request, client_major(request.headers), guard)
    with stream_log.attach(0, replay=True, budget=guard.max_pending_bytes) as follower:
        async with service.registry.connection("sse-resume"):
            await respond(follower, transport, keepalive_s=settings.keepalive_s, guard=guard)
    return transport.response


async def chat_stop(request: web.Request) -> web.Response:
    answer = await stop_chat(request.app[SERVICE], (caller_of(request), request.match_info["chat_id"]))
    return web.json_response(answer)
