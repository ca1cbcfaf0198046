"""The in-memory transport: the gateway's chat endpoints without sockets (as httpx's MockTransport
is an HTTP client without a network).

How it works
------------
`MemoryClient` is a client of the gateway's services (`ChatService`, with its `Registry` and
`StreamStore`) that takes the steps the SSE endpoints take, through the same code
(`adk_gateway.transports.chat_steps`, `adk_gateway.transports.base.deliver`):

- `post(body)` is `POST /api/chat`: the body is read and validated as a POST body is, the run is
  started by `ChatService.start`, and the run's log is delivered into a `MemoryTransport`, in a
  registry connection of its own, with keep-alives while it is idle and a slow-reader guard.
- `resume(chat_id)` is `GET /api/chat/{chatId}/stream`: a full replay, then live chunks; None
  where the endpoint answers 204.
- `stop(chat_id)` is `POST /api/chat/{chatId}/stop`.

Each response is answered by a task of its own, as aiohttp runs each request's handler in one:
`MemoryResponse.disconnect()` cancels it, which is what a client that drops its socket does to a
handler (`handler_cancellation`), so leaving the registry connection stops the run and frees the
chat exactly as on a real disconnect.

`MemoryTransport` keeps what reached it — chunks, keep-alives, the end — in arrival order, and
wakes whoever waits for more (`MemoryResponse.next()`). It never makes a writer wait: a memory
client reads everything at once, so its slow-reader guard never sees bytes pending in a socket.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from adk_gateway.core.errors import GatewayError
from adk_gateway.services.auth import ANONYMOUS
from adk_gateway.services.chat import RequestContext
from adk_gateway.services.registry import ChatRun, Connection
from adk_gateway.services.streams import Follower, LogEntry, Wakeup
from adk_gateway.transports.base import SlowReaderGuard, Transport, stop_runs
from adk_gateway.transports.chat_steps import client_major, read_chat_request, refused, respond, stop_chat

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.services.chat import ChatService

__all__ = ["KEEPALIVE", "MemoryClient", "MemoryResponse", "MemoryTransport"]

Json = dict[str, Any]

# How a keep-alive shows in `MemoryTransport.order` (SSE writes it as the comment `: keep-alive`).
KEEPALIVE = "keep-alive"


class MemoryTransport(Transport):
    """One response, kept in memory in the order a client would read it."""

    __slots__ = ("_arrived", "chunks", "closed", "cut", "keepalives", "major", "opened", "order")

    def __init__(self, major: int = 6) -> None:
        self.major = major
        self.opened = False
        self.closed = False  # ended normally (SSE's `[DONE]`, a WebSocket's `end` frame)
        self.cut: GatewayError | None = None  # ended by a slow-reader cut
        self.keepalives = 0
        self.chunks: list[Json] = []
        self.order: list[str] = []  # chunk types and KEEPALIVE, as they came
        self._arrived = Wakeup()

    async def open(self) -> None:
        self.opened = True
        self._arrived.wake()

    async def send(self, chunks: Iterable[LogEntry]) -> None:
        for entry in chunks:
            self._add(json.loads(entry.data))

    async def keepalive(self) -> None:
        self.keepalives += 1
        self.order.append(KEEPALIVE)
        self._arrived.wake()

    async def close(self, last: Sequence[LogEntry] = (), *, cut: GatewayError | None = None) -> None:
        """Ends the response after `last`; a cut one ends with an `error` chunk, as SSE ends one."""
        await self.send(last)
        if cut is not None:
            self.cut = cut
            self._add({"type": "error", "errorText": cut.message})
            return
        self.closed = True
        self._arrived.wake()

    def _add(self, chunk: Json) -> None:
        self.chunks.append(chunk)
        self.order.append(str(chunk.get("type")))
        self._arrived.wake()

    def types(self) -> list[str]:
        return [str(chunk["type"]) for chunk in self.chunks]

    async def arrival(self) -> None:
        """Until something more reaches the transport (or `wake()`)."""
        await self._arrived.wait()

    def wake(self) -> None:
        self._arrived.wake()


class MemoryResponse:
    """One answer of a `MemoryClient`: a status like an HTTP response's, then its chunks.

    `status`: 200 once the stream is open; 204 for a resume with nothing to resume; a refusal's
    status (with `error`) when the request was refused before any chunk.
    """

    __slots__ = ("_read", "error", "status", "task", "transport")

    def __init__(self, major: int) -> None:
        self.transport = MemoryTransport(major)
        self.status: int | None = None
        self.error: GatewayError | None = None
        self.task: asyncio.Task[None] | None = None
        self._read = 0

    @property
    def chunks(self) -> list[Json]:
        return self.transport.chunks

    @property
    def done(self) -> bool:
        """The response ended normally."""
        return self.transport.closed

    @property
    def ended(self) -> bool:
        """Nothing more will come: it ended, was cut, refused, or its task is over."""
        transport = self.transport
        return (transport.closed or transport.cut is not None or self.status not in (None, 200)
                or self.task is None or self.task.done())

    def _answer(self, status: int, error: GatewayError | None = None) -> None:
        self.status, self.error = status, error
        self.transport.wake()

    def _answered_by(self, task: asyncio.Task[None]) -> None:
        self.task = task
        # Once the task is over, whoever waits for more learns that nothing more comes.
        task.add_done_callback(lambda _task: self.transport.wake())

    async def _opened(self) -> None:
        """Until the status is known (a client's wait for the response's headers)."""
        while self.status is None:
            if self.task is not None and self.task.done():
                self.task.result()  # a failure of the answer's own is the caller's
                raise RuntimeError("the response ended without a status")
            await self.transport.arrival()

    async def next(self) -> Json | None:
        """The next chunk, or None once the response has ended and every chunk was read."""
        while True:
            if self._read < len(self.transport.chunks):
                chunk = self.transport.chunks[self._read]
                self._read += 1
                return chunk
            if self.ended:
                return None
            await self.transport.arrival()

    async def rest(self) -> list[Json]:
        """Every chunk until the end (the ones not read yet)."""
        chunks = []
        while (chunk := await self.next()) is not None:
            chunks.append(chunk)
        return chunks

    async def disconnect(self) -> None:
        """Drops the response the way a client that goes away does: its task (the connection's
        handler) is cancelled, and this returns once the connection has been left."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class MemoryClient:
    """A client of the chat endpoints that needs no socket; see the module docstring.

    Args:
        service: the gateway's chat service (its registry and stream store come with it).
        settings: the gateway's settings (body and history bounds, keep-alive interval, slow-reader bounds).
        user_id: who the client is (an authenticated identity: no header or body field changes it).
        headers: sent with every request (e.g. `x-ai-sdk-major: 7`); a request's own add to them.
    """

    def __init__(self, service: ChatService, settings: Settings, *, user_id: str = ANONYMOUS,
                 headers: Mapping[str, str] | None = None) -> None:
        self.service = service
        self.settings = settings
        self.user_id = user_id
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return self.headers | {k.lower(): v for k, v in (extra or {}).items()}

    async def post(self, body: Json | bytes, *, headers: Mapping[str, str] | None = None) -> MemoryResponse:
        """`POST /api/chat`; returns once the response has its status (the stream goes on)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        request_headers = self._headers(headers)
        response = MemoryResponse(client_major(request_headers))
        response._answered_by(asyncio.get_running_loop().create_task(
            self._answer_post(raw, request_headers, response), name="memory-post"
        ))
        await response._opened()
        return response

    async def resume(self, chat_id: str, *, headers: Mapping[str, str] | None = None) -> MemoryResponse:
        """`GET /api/chat/{chatId}/stream`: status 204 (and no chunks) when nothing is active."""
        response = MemoryResponse(client_major(self._headers(headers)))
        stream_log = await self.service.streams.lookup((self.user_id, chat_id))
        if stream_log is None:
            response._answer(204)
            return response
        # Attached before the next await, as the SSE resume is: the log keeps every chunk for it.
        follower = stream_log.attach(0, replay=True, budget=self.settings.max_pending_bytes)
        response._answered_by(asyncio.get_running_loop().create_task(
            self._answer_resume(follower, response), name="memory-resume"
        ))
        await response._opened()
        return response

    async def stop(self, chat_id: str) -> dict[str, bool]:
        """`POST /api/chat/{chatId}/stop`: its JSON answer."""
        return await stop_chat(self.service, (self.user_id, chat_id))

    # --- the handlers ------------------------------------------------------------------------

    def _guard(self, conn: Connection | None) -> SlowReaderGuard:
        return SlowReaderGuard(
            None,
            max_pending_bytes=self.settings.max_pending_bytes,
            grace_s=self.settings.slow_reader_grace_s,
            transport="memory",
            user_id=self.user_id,
            metrics=self.service.metrics,
            on_cut=None if conn is None else lambda _error: stop_runs(conn),
        )

    async def _start_run(self, raw: bytes, headers: Mapping[str, str], conn: Connection) -> ChatRun:
        body = await read_chat_request(raw, self.settings)
        ctx = RequestContext(user_id=self.user_id, request_id=headers.get("x-request-id") or uuid.uuid4().hex[:16],
                             major=client_major(headers))
        return await self.service.start(body, ctx, conn)

    async def _answer_post(self, raw: bytes, headers: Mapping[str, str], response: MemoryResponse) -> None:
        service = self.service
        async with service.registry.connection("memory") as conn:
            try:
                run = await self._start_run(raw, headers, conn)
            except GatewayError as exc:
                refused(service.metrics, exc)
                response._answer(exc.status, exc)
                return
            guard = self._guard(conn)
            with run.log.attach(0, budget=guard.max_pending_bytes) as follower:
                response._answer(200)
                await respond(follower, response.transport, keepalive_s=self.settings.keepalive_s, guard=guard)

    async def _answer_resume(self, follower: Follower, response: MemoryResponse) -> None:
        with follower:
            async with self.service.registry.connection("memory-resume"):
                response._answer(200)
                await respond(follower, response.transport, keepalive_s=self.settings.keepalive_s,
                              guard=self._guard(None))
