"""deliver() coalesces writes: chunks already waiting in the log go out together.

A transport double records what each batch (`send`, or `close` with the last chunks) carried;
the SSE transport writes to a fake response that records its writes; the WebSocket transport
sends to a fake socket. Nothing waits on time: a write is held and released with events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, cast

from aiohttp import WSMsgType
from aiohttp.test_utils import make_mocked_request

from adk_gateway.config import Settings
from adk_gateway.core import encoding
from adk_gateway.core.errors import GatewayError
from adk_gateway.metrics import Metrics
from adk_gateway.services.registry import Registry
from adk_gateway.services.streams import LogEntry, StreamLog
from adk_gateway.transports.base import MAX_BATCH_BYTES, Transport, deliver
from adk_gateway.transports.sse import SSETransport
from adk_gateway.transports.websocket import SocketSession, WebSocketRequestTransport


def delta(text: str) -> dict[str, Any]:
    return {"type": "text-delta", "id": "t", "delta": text}


def new_log(*chunks: dict[str, Any], closed: bool = False) -> StreamLog:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 22)
    for chunk in chunks:
        log.append(chunk)
    if closed:
        log.close()
    return log


class RecordingTransport(Transport):
    """Records the sequences each batch carried. `turn`: the call waits for it
    before taking its chunks (a socket busy with another request). `drain`: after writing a
    batch, the call waits for it (a socket that takes a while to accept the bytes)."""

    def __init__(self, *, turn: asyncio.Event | None = None, drain: asyncio.Event | None = None) -> None:
        self.major = 7
        self.turn = turn
        self.drain = drain
        self.waiting = asyncio.Event()  # set while a call waits for its turn or its drain
        self.batches: list[list[int]] = []
        self.closed = False

    async def open(self) -> None:
        pass

    async def send(self, entries: Iterable[LogEntry]) -> None:
        if self.turn is not None:
            self.waiting.set()
            await self.turn.wait()
            self.turn = None
        self.batches.append([entry.sequence for entry in entries])
        if self.drain is not None:
            self.waiting.set()
            await self.drain.wait()
            self.drain = None

    async def keepalive(self) -> None:
        pass

    async def close(self, last: Sequence[LogEntry] = (), *, cut: GatewayError | None = None) -> None:
        if last:
            await self.send(last)
        self.closed = True


async def test_chunks_already_waiting_go_out_in_one_write() -> None:
    log = new_log(*(delta(f"w{i} ") for i in range(5)), closed=True)
    transport = RecordingTransport()
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=None)
    assert transport.batches == [[0, 1, 2, 3, 4]]
    assert transport.closed and log.delivered


async def test_chunks_that_arrive_while_a_write_drains_go_out_together_next() -> None:
    log = new_log()
    drain = asyncio.Event()
    transport = RecordingTransport(drain=drain)
    with log.attach(0) as follower:
        delivery = asyncio.ensure_future(deliver(follower, transport, keepalive_s=None))
        log.append(delta("first "))
        await transport.waiting.wait()  # chunk 0 is written; its drain has not come yet
        for i in range(3):
            log.append(delta(f"then{i} "))
        log.close()
        drain.set()
        await delivery
    assert transport.batches == [[0], [1, 2, 3]]


async def test_chunks_stay_in_the_log_until_the_write_that_carries_them() -> None:
    """A transport that waits for its turn (a shared socket) takes the chunks after the first one
    only then: meanwhile they count in the follower's backlog, as the slow-reader guard expects."""
    log = new_log()
    turn = asyncio.Event()
    transport = RecordingTransport(turn=turn)
    with log.attach(0) as follower:
        delivery = asyncio.ensure_future(deliver(follower, transport, keepalive_s=None))
        log.append(delta("first "))
        await transport.waiting.wait()  # chunk 0 taken; the transport waits for its turn
        sizes = [len(encoding.chunk_json(delta(f"later{i} "))) for i in range(2)]
        for i in range(2):
            log.append(delta(f"later{i} "))
        assert follower.backlog == sum(sizes)
        log.close()
        turn.set()
        await delivery
        assert follower.backlog == 0
    assert transport.batches == [[0, 1, 2]]


async def test_a_batch_takes_at_most_max_batch_bytes_after_its_first_chunk() -> None:
    size = MAX_BATCH_BYTES // 3
    chunks = [delta("x" * size) for _ in range(7)]
    log = new_log(*chunks, closed=True)
    transport = RecordingTransport()
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=None)
    assert [seq for batch in transport.batches for seq in batch] == list(range(7))
    assert len(transport.batches) > 1
    sizes = [len(encoding.chunk_json(chunk)) for chunk in chunks]
    for batch in transport.batches:
        assert sum(sizes[seq] for seq in batch[:-1]) < MAX_BATCH_BYTES


# --- SSE ---------------------------------------------------------------------------------------


class FakeResponse:
    """Stands for aiohttp's StreamResponse: records each write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.eof = False
        self.headers: dict[str, str] = {}
        self.prepared = False

    async def prepare(self, request: object) -> None:
        self.prepared = True

    async def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            self.writes.append(bytes(data))
        self.eof = True


def sse_transport(major: int) -> tuple[SSETransport, FakeResponse]:
    transport = SSETransport(make_mocked_request("POST", "/api/chat"), major)
    response = FakeResponse()
    transport.response = cast(Any, response)
    return transport, response


def sse_data(raw: bytes) -> list[dict[str, Any]]:
    events = raw.decode("utf-8").split("\n\n")
    assert events[-1] == ""
    assert all(event.startswith("data: ") for event in events[:-1])
    return [json.loads(event.removeprefix("data: ")) for event in events[:-1]]


def without_done(raw: bytes) -> bytes:
    assert raw.endswith(encoding.SSE_DONE)
    return raw[: -len(encoding.SSE_DONE)]


async def test_sse_writes_the_events_of_every_waiting_chunk_of_an_ended_log_and_done_in_one_write() -> None:
    chunks = [{"type": "start", "messageId": "m"}, delta("a "), delta("b "), {"type": "finish", "finishReason": "stop"}]
    log = new_log(*chunks, closed=True)
    transport, response = sse_transport(7)
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=15.0)
    assert len(response.writes) == 1 and response.eof
    assert sse_data(without_done(response.writes[0])) == chunks


async def test_an_opened_sse_response_writes_its_first_bytes_with_the_chunks_waiting() -> None:
    chunks = [{"type": "start", "messageId": "m"}, delta("a ")]
    log = new_log(*chunks)
    transport, response = sse_transport(7)
    await transport.open()
    assert response.prepared and response.writes == []
    with log.attach(0) as follower:
        delivery = asyncio.create_task(deliver(follower, transport, keepalive_s=None))
        while not response.writes:
            await asyncio.sleep(0)
        log.close()
        await delivery
    assert response.writes[0].startswith(encoding.SSE_OPEN)
    assert sse_data(response.writes[0].removeprefix(encoding.SSE_OPEN)) == chunks
    assert response.writes[1:] == [encoding.SSE_DONE]


async def test_an_opened_sse_response_with_nothing_to_send_yet_flushes_before_it_waits() -> None:
    log = new_log()
    transport, response = sse_transport(7)
    await transport.open()
    with log.attach(0) as follower:
        delivery = asyncio.create_task(deliver(follower, transport, keepalive_s=15.0))
        while not response.writes:
            await asyncio.sleep(0)
        # Out before any chunk: a proxy sees the stream open while the model thinks.
        assert response.writes == [encoding.SSE_OPEN]
        log.append({"type": "start", "messageId": "m"})
        log.close()
        await delivery
    assert sse_data(without_done(response.writes[1])) == [{"type": "start", "messageId": "m"}]
    assert len(response.writes) == 2


async def test_sse_ends_with_a_write_of_its_own_when_the_log_ends_after_its_last_chunk_was_sent() -> None:
    log = new_log({"type": "start", "messageId": "m"}, delta("a "))
    transport, response = sse_transport(7)
    with log.attach(0) as follower:
        delivery = asyncio.create_task(deliver(follower, transport, keepalive_s=None))
        while len(response.writes) < 1:
            await asyncio.sleep(0)
        log.append({"type": "finish", "finishReason": "stop"})
        log.close()
        await delivery
    assert response.eof
    assert sse_data(response.writes[0]) == [{"type": "start", "messageId": "m"}, delta("a ")]
    assert sse_data(without_done(response.writes[1])) == [{"type": "finish", "finishReason": "stop"}]
    assert len(response.writes) == 2


async def test_sse_batch_is_adapted_for_an_ai_6_client() -> None:
    chunks = [
        {"type": "start"},
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},
        delta("ok "),
        {"type": "finish", "finishReason": "interrupted"},
    ]
    log = new_log(*chunks, closed=True)
    transport, response = sse_transport(6)
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=None)
    assert sse_data(without_done(response.writes[0])) == [
        {"type": "start"}, delta("ok "), {"type": "finish", "finishReason": "stop"}]


async def test_sse_batch_of_chunks_an_ai_6_client_does_not_get_writes_nothing() -> None:
    log = new_log({"type": "tool-approval-response", "approvalId": "a", "approved": False}, closed=True)
    transport, response = sse_transport(6)
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=None)
    assert response.writes == [encoding.SSE_DONE]


# --- WebSocket ---------------------------------------------------------------------------------


class FakeSocketSession:
    """What `WebSocketRequestTransport` needs of the socket's writer (`SocketWriter`): records frames per call."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def send(self, text: str) -> None:
        self.calls.append([json.loads(text)])

    async def send_frame(self, text: bytes) -> None:
        self.calls.append([json.loads(text)])

    async def send_frames(self, frames: Iterable[bytes]) -> None:
        self.calls.append([json.loads(frame) for frame in frames])


async def test_ws_sends_every_waiting_chunk_in_one_call_numbered_as_sent() -> None:
    chunks = [
        {"type": "start"},
        delta("a "),
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},  # not for ai 6
        delta("b "),
    ]
    log = new_log(*chunks, closed=True)
    socket = FakeSocketSession()
    transport = WebSocketRequestTransport(cast(Any, socket), "r1", 6)
    with log.attach(0) as follower:
        await deliver(follower, transport, keepalive_s=None)
    batch, end = socket.calls
    assert [frame["sequence"] for frame in batch] == [0, 1, 2]
    assert [frame["chunk"] for frame in batch] == [chunks[0], chunks[1], chunks[3]]
    assert end == [{"type": "end", "requestId": "r1"}]


class FakeWebSocket:
    """Stands for aiohttp's WebSocketResponse: records frames in the order they are sent."""

    def __init__(self, close_after: int | None = None) -> None:
        self.closed = False
        self.close_after = close_after  # the peer closes after this many frames
        self.sent: list[str] = []
        self.during_first_frame: Any = None  # awaited while the first frame is being sent

    async def send_frame(self, message: bytes, opcode: WSMsgType) -> None:
        assert opcode is WSMsgType.TEXT and not self.closed
        self.sent.append(message.decode())
        if len(self.sent) == self.close_after:
            self.closed = True
        if self.during_first_frame is not None:
            step, self.during_first_frame = self.during_first_frame, None
            await step()

    async def send_str(self, data: str) -> None:
        self.sent.append(data)


@contextlib.asynccontextmanager
async def socket_session(ws: FakeWebSocket) -> AsyncIterator[SocketSession]:
    """A socket's session on an entered registry connection, opened as its first frame opens it."""
    service = type("Service", (), {"metrics": Metrics()})()
    request = make_mocked_request("GET", "/api/chat/ws")
    async with Registry().connection("ws") as conn:
        session = SocketSession(cast(Any, ws), conn, cast(Any, service), Settings(), request, user_id="u")
        await session.open()
        yield session
        session.close()


async def test_socket_frames_of_one_batch_go_out_back_to_back() -> None:
    """Another request's frame sent while a batch is being written waits until the whole batch is
    out: the batch holds the socket once, not once per frame."""
    ws = FakeWebSocket()
    other: list[asyncio.Future[None]] = []

    async def another_request_sends() -> None:
        started = asyncio.Event()

        async def send_other() -> None:
            started.set()
            await session.send("other")

        other.append(asyncio.ensure_future(send_other()))
        await started.wait()  # the other send now waits for the socket

    ws.during_first_frame = another_request_sends
    async with socket_session(ws) as session:
        await session.writer.send_frames(iter([b"f0", b"f1", b"f2"]))
        await other[0]
    assert ws.sent == ["f0", "f1", "f2", "other"]


async def test_socket_frames_are_not_taken_once_the_socket_has_closed() -> None:
    ws = FakeWebSocket(close_after=2)
    taken: list[int] = []

    def frames() -> Iterable[bytes]:
        for i in range(4):
            taken.append(i)
            yield f"f{i}".encode()

    async with socket_session(ws) as session:
        await session.writer.send_frames(frames())
    assert ws.sent == ["f0", "f1"] and taken == [0, 1]
