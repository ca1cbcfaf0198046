"""Slow readers: a client that stops reading is cut, and what the gateway holds for it stays bounded.

The agent here floods: its model answers a message `N` with N text deltas of 64 KiB (10 MiB for
160, `FloodLlm`), yielding to the event loop between them as a real model's network stream does.
The slow clients use a socket with a small, fixed receive buffer (`quiet_session`), so what the
kernel takes before the gateway's writes block is small and the same from run to run. What must
happen (transports/base.py, gateway/services/streams.py):

- a run waits for a reader that has half its log's cap unread (backpressure): a reader slower than
  the agent is never outrun, and the log holds at most half its cap (plus a chunk) for it, and
  nothing once nobody reads it;
- a reader whose socket does not drain is cut with the documented reason: over SSE an `error`
  chunk when it can still be written, and the connection is closed; a socket gets close code 4008,
  or is dropped when even the close frame cannot get out;
- the conditions that cut: `stalled` (a write blocked for the grace), `pending` (unsent bytes over
  `--max-pending-bytes` for the grace), `overrun` (a follower the run does not wait for fell
  behind past the log's budget: tests/unit/test_stream_log.py);
- the cut is counted by reason and logged once, its run is stopped unless it detaches, and the
  registry and the tasks go back to where they were. A reader that keeps up is never cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tracemalloc
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType
from aiohttp.test_utils import TestClient
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.genai import types
from structlog.testing import capture_logs

from adk_gateway.agents.adk import AgentHost
from adk_gateway.core import encoding
from adk_gateway.core.errors import SlowReader
from adk_gateway.keys import METRICS, REGISTRY, SERVICE
from adk_gateway.services.streams import MemoryStreamStore, StreamLog
from adk_gateway.transports.base import CUT_TIMEOUT_S

from .conftest import StartGateway
from .support import LiveStream, chat_body, read_reply, settings, user_message, wait_for

USER = "anonymous"
KIB = 1024
MIB = 1024 * KIB
DELTA_BYTES = 64 * KIB
# One logged text delta of DELTA_BYTES: the "one chunk" a log may keep past its cap.
CHUNK_BYTES = len(encoding.chunk_json({"type": "text-delta", "id": "text-" + "x" * 60, "delta": "x" * DELTA_BYTES}))
SLOW_READER_TEXT = SlowReader.default_message
CUT_WITHIN_S = 30.0  # a bound on waiting for an event, never a speed assertion
ENDED_WITHIN_S = CUT_TIMEOUT_S + 10.0


class FloodLlm(BaseLlm):
    """Answers a user message `N` with N text deltas of `delta_bytes` each (anything else: one),
    then a short final response."""

    model: str = "flood"
    delta_bytes: int = DELTA_BYTES
    pause_s: float = 0.0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = (llm_request.contents or [types.Content()])[-1]
        text = "".join(part.text or "" for part in last.parts or [])
        piece = "x" * self.delta_bytes
        for _ in range(int(text) if text.isdigit() else 1):
            await asyncio.sleep(self.pause_s)  # a network stream: other tasks run between deltas
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=piece)]), partial=True)
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text="done")]),
            partial=False,
            turn_complete=True,
            finish_reason=types.FinishReason.STOP,
        )


def flood_host(**llm: Any) -> AgentHost:
    agent = LlmAgent(name="flood_agent", model=FloodLlm(**llm), instruction="Floods.")
    return AgentHost(agent, InMemorySessionService(), max_llm_calls=5)


def cuts(client: TestClient[Any, Any], transport: str, reason: str) -> float:
    value = client.app[METRICS].registry.get_sample_value(
        "adk_gateway_slow_readers_cut_total", {"transport": transport, "reason": reason}
    )
    return value or 0.0


def all_cuts(client: TestClient[Any, Any]) -> float:
    return sum(cuts(client, t, r) for t in ("sse", "ws") for r in ("pending", "stalled", "overrun"))


def runs_stopped(client: TestClient[Any, Any]) -> float:
    registry = client.app[METRICS].registry
    return registry.get_sample_value("adk_gateway_runs_finished_total", {"outcome": "stopped"}) or 0.0


def registry_empty(client: TestClient[Any, Any]) -> bool:
    counts: dict[str, int] = client.app[REGISTRY].counts()
    return counts == {"connections": 0, "runs": 0}


def leftover_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t not in baseline and t is not asyncio.current_task() and not t.done()}


def stream_log(client: TestClient[Any, Any], chat_id: str) -> StreamLog:
    store = client.app[SERVICE].streams
    assert isinstance(store, MemoryStreamStore)
    log = store.latest((USER, chat_id))
    assert log is not None
    return log


async def warm_up(client: TestClient[Any, Any]) -> set[asyncio.Task[Any]]:
    """One complete exchange (pools, agent), then the baseline of tasks."""
    reply = LiveStream(await client.post("/api/chat", json=chat_body("warm", [user_message("hi")])))
    assert (await reply.rest()).done
    await wait_for(lambda: registry_empty(client), what="the warm-up run to end")
    return set(asyncio.all_tasks())


async def assert_released(client: TestClient[Any, Any], baseline: set[asyncio.Task[Any]]) -> None:
    await wait_for(lambda: registry_empty(client), ENDED_WITHIN_S, "the registry to be empty")
    await wait_for(lambda: not leftover_tasks(baseline), ENDED_WITHIN_S, "the connection's tasks to end")


def _small_receive_buffer(addr_info: Any) -> socket.socket:
    family, kind, proto, _name, _address = addr_info
    sock = socket.socket(family=family, type=kind, proto=proto)
    # Set before connecting, so the kernel does not grow it: what the socket takes before the
    # gateway's writes block stays small and the same from run to run.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KIB)
    return sock


@contextlib.asynccontextmanager
async def quiet_session() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session for clients that stop reading: small socket and read buffers."""
    connector = aiohttp.TCPConnector(socket_factory=_small_receive_buffer)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=16 * KIB) as session:
        yield session


async def read_to_the_end(response: aiohttp.ClientResponse) -> tuple[bytes, bool]:
    """Everything the client can still read, and whether the body ended cleanly."""
    data = bytearray()
    try:
        async with asyncio.timeout(CUT_WITHIN_S):
            async for piece in response.content.iter_any():
                data += piece
    except aiohttp.ClientPayloadError:
        return bytes(data), False
    return bytes(data), True


# --- SSE ------------------------------------------------------------------------------------------

TEN_MIB = str(160)  # deltas of 64 KiB


async def test_sse_client_that_never_reads_is_waited_for_then_cut_and_holds_little(gateway: StartGateway) -> None:
    cap = 256 * KIB
    client = await gateway(
        settings(stream_buffer_bytes=cap, max_pending_bytes=128 * KIB, slow_reader_grace_s=0.5), host=flood_host()
    )
    baseline = await warm_up(client)
    async with quiet_session() as session:
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            body = chat_body("flood", [user_message(TEN_MIB)])
            response = await session.post(client.make_url("/api/chat"), json=body)
            assert response.status == 200
            # The client reads nothing: aiohttp stops reading its socket, the gateway's writes
            # block, and the run waits once half the log's cap is unread behind them.
            await wait_for(lambda: all_cuts(client) == 1, CUT_WITHIN_S, "the slow reader to be cut")
            await assert_released(client, baseline)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # The connection was cut: the client reads what was in flight, then a body that stops short.
        received, clean = await read_to_the_end(response)
        assert not clean and encoding.SSE_DONE not in received
    assert cuts(client, "sse", "stalled") == 1  # its socket did not drain: cut after the grace
    log = stream_log(client, "flood")
    # The run waited for its reader: half the cap unread, and the chunks under way then (the one
    # being logged, the one ADK had queued).
    assert log.peak_bytes <= cap // 2 + 2 * CHUNK_BYTES
    assert log.kept_bytes == 0, "nobody follows the log any more: it should keep nothing"
    assert runs_stopped(client) == 1
    assert log.appended_bytes < 160 * DELTA_BYTES, "the run went on after its reader was cut"
    # What the process held at its peak for this stream (both ends of the socket live in this
    # process), against the 10 MiB offered: the log, aiohttp's buffers, a few chunks in flight.
    assert peak - before < 4 * MIB, peak - before


async def test_a_detached_run_outlives_its_cut_reader_and_keeps_nothing_for_it(gateway: StartGateway) -> None:
    cap = 256 * KIB
    client = await gateway(
        settings(stream_buffer_bytes=cap, max_pending_bytes=128 * KIB, slow_reader_grace_s=0.5,
                 detach_on_disconnect=True),
        host=flood_host(),
    )
    baseline = await warm_up(client)
    async with quiet_session() as session:
        body = chat_body("detached", [user_message(TEN_MIB)])
        response = await session.post(client.make_url("/api/chat"), json=body)
        await wait_for(lambda: all_cuts(client) == 1, CUT_WITHIN_S, "the slow reader to be cut")
        await assert_released(client, baseline)  # the run too: it went on to its end
        response.close()
    registry = client.app[METRICS].registry
    assert runs_stopped(client) == 0
    assert registry.get_sample_value("adk_gateway_runs_finished_total", {"outcome": "ok"}) == 2  # with the warm-up
    log = stream_log(client, "detached")
    assert log.appended_bytes > 160 * DELTA_BYTES  # all of it, with nobody left to read it
    assert log.peak_bytes <= cap + CHUNK_BYTES and log.kept_bytes == 0


async def test_sse_reader_slower_than_the_agent_is_waited_for_not_cut(gateway: StartGateway) -> None:
    client = await gateway(
        settings(stream_buffer_bytes=2 * MIB, max_pending_bytes=256 * KIB, slow_reader_grace_s=2.0),
        host=flood_host(),
    )
    baseline = await warm_up(client)
    async with quiet_session() as session:
        response = await session.post(client.make_url("/api/chat"), json=chat_body("slow", [user_message("160")]))
        # A reader slower than the agent (10 MiB as fast as it can): its socket drains, each write
        # goes through within a fraction of the grace, and the run waits for it instead of
        # outrunning it. It is no slow reader: it gets the whole answer.
        received = bytearray()
        async with asyncio.timeout(CUT_WITHIN_S * 2):
            while chunk := await response.content.read(64 * KIB):
                received += chunk
                await asyncio.sleep(0.005)  # the client's pace
    assert all_cuts(client) == 0
    assert received.endswith(b"data: [DONE]\n\n")
    assert received.count(b'"type":"text-delta"') == 160
    log = stream_log(client, "slow")
    assert log.peak_bytes <= 2 * MIB + CHUNK_BYTES  # (what it keeps for a resume: its cap)
    await assert_released(client, baseline)


async def test_sse_writer_blocked_after_the_run_ended_is_cut(gateway: StartGateway) -> None:
    """The issue's case: the run is over, the client reads nothing, the handler sat in `write`."""
    client = await gateway(
        settings(stream_buffer_bytes=64 * MIB, max_pending_bytes=64 * MIB, slow_reader_grace_s=0.5),
        host=flood_host(),
    )
    baseline = await warm_up(client)
    async with quiet_session() as session:
        response = await session.post(client.make_url("/api/chat"), json=chat_body("stall", [user_message(TEN_MIB)]))
        await wait_for(lambda: all_cuts(client) == 1, CUT_WITHIN_S, "the stalled reader to be cut")
        assert cuts(client, "sse", "stalled") == 1  # never over max_pending: the blocked write did it
        await assert_released(client, baseline)
        body, clean = await read_to_the_end(response)
        assert not clean and encoding.SSE_DONE not in body


async def test_a_reader_that_keeps_up_reads_past_the_cap_and_is_never_cut(gateway: StartGateway) -> None:
    cap = 64 * KIB
    client = await gateway(
        settings(stream_buffer_bytes=cap, max_pending_bytes=4 * KIB, slow_reader_grace_s=1.0),
        host=flood_host(delta_bytes=4 * KIB),
    )
    reply = await read_reply(await client.post("/api/chat", json=chat_body("fast", [user_message("100")])))
    assert reply.done and reply.finish_reason == "stop"
    assert reply.text == "x" * (100 * 4 * KIB)
    assert all_cuts(client) == 0
    log = stream_log(client, "fast")
    assert log.overflowed  # 400 KiB through a 64 KiB log: the chunks read were dropped as it went
    assert log.peak_bytes <= cap + 5 * KIB
    assert log.kept_bytes == 0


async def test_resume_of_a_stream_past_its_cap_answers_nothing_active(gateway: StartGateway) -> None:
    client = await gateway(settings(stream_buffer_bytes=16 * KIB), host=flood_host(delta_bytes=4 * KIB, pause_s=0.01))
    live = LiveStream(await client.post("/api/chat", json=chat_body("big", [user_message("400")])))
    await live.until(lambda chunk: chunk["type"] == "text-delta")
    log = stream_log(client, "big")
    await wait_for(lambda: log.overflowed, CUT_WITHIN_S, "the log to pass its cap")
    assert client.app[REGISTRY].active_run((USER, "big")) is not None
    with capture_logs() as logs:
        response = await client.get("/api/chat/big/stream")
        assert response.status == 204
        async with client.ws_connect("/api/chat/ws") as ws:
            await ws.send_json({"type": "resume", "requestId": "r1", "id": "big"})
            assert await ws.receive_json(timeout=CUT_WITHIN_S) == {"type": "no-active", "requestId": "r1"}
    refused = [entry for entry in logs if entry["event"] == "resume_refused"]
    assert [entry["reason"] for entry in refused] == ["over_budget", "over_budget"], refused
    # The first reader goes on to the end.
    reply = await live.rest()
    assert reply.done and reply.finish_reason == "stop" and len(reply.text) == 400 * 4 * KIB
    assert all_cuts(client) == 0


# --- WebSocket ------------------------------------------------------------------------------------


async def test_ws_client_that_stops_reading_is_closed_with_4008(gateway: StartGateway) -> None:
    client = await gateway(
        settings(stream_buffer_bytes=256 * KIB, max_pending_bytes=128 * KIB, slow_reader_grace_s=0.5),
        host=flood_host(),
    )
    baseline = await warm_up(client)
    async with quiet_session() as session, session.ws_connect(client.make_url("/api/chat/ws")) as ws:
        with capture_logs() as logs:
            await ws.send_json({"type": "send", "requestId": "q1", "id": "ws-flood", "trigger": "submit-message",
                                "messages": [user_message(TEN_MIB)]})
            await wait_for(lambda: all_cuts(client) == 1, CUT_WITHIN_S, "the slow socket to be cut")
        # A socket that does not drain: its blocked write ("stalled") and its unsent bytes over
        # --max-pending-bytes ("pending") both last the grace here; which timer fires first
        # depends on when the loop ran the write, and either cuts it once.
        [reason] = [r for r in ("stalled", "pending") if cuts(client, "ws", r) == 1]
        # One line for the cut: who, which chat, how much was pending.
        lines = [entry for entry in logs if "slow_reader" in entry["event"]]
        assert [(e["event"], e["user_id"], e["chat_id"], e["reason"]) for e in lines] == [
            ("slow_reader_cut", USER, "ws-flood", reason)
        ]
        assert lines[0]["pending_bytes"] > 0
        # Reading again, the client gets what was in flight, then the close frame.
        kinds: list[WSMsgType] = []
        async with asyncio.timeout(CUT_WITHIN_S):
            async for message in ws:
                kinds.append(message.type)
        assert ws.close_code == 4008
        assert set(kinds) <= {WSMsgType.TEXT}
    await assert_released(client, baseline)
    assert runs_stopped(client) == 1
    log = stream_log(client, "ws-flood")
    # The run waited at half its cap (and the chunks under way then); nothing kept after.
    assert log.peak_bytes <= 128 * KIB + 2 * CHUNK_BYTES and log.kept_bytes == 0


async def test_ws_client_that_never_reads_again_is_aborted(gateway: StartGateway) -> None:
    """The close frame cannot get past the unread data: the socket is aborted instead, and the
    handler ends anyway."""
    client = await gateway(
        settings(stream_buffer_bytes=256 * KIB, max_pending_bytes=128 * KIB, slow_reader_grace_s=0.5),
        host=flood_host(),
    )
    baseline = await warm_up(client)
    async with quiet_session() as session, session.ws_connect(client.make_url("/api/chat/ws")) as ws:
        await ws.send_json({"type": "send", "requestId": "q1", "id": "ws-stall", "trigger": "submit-message",
                            "messages": [user_message(TEN_MIB)]})
        await wait_for(lambda: all_cuts(client) == 1, CUT_WITHIN_S, "the slow socket to be cut")
        await assert_released(client, baseline)
        async with asyncio.timeout(CUT_WITHIN_S):
            async for _message in ws:
                pass
        # The close frame never got past the unread data: the connection was dropped.
        assert ws.close_code == WSCloseCode.ABNORMAL_CLOSURE
    assert runs_stopped(client) == 1
