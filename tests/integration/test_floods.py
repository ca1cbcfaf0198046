"""A flood never holds the process: a run, a history import and a replay give the loop a turn.

The scripted model at `/stream N 0` answers N text deltas without ever waiting, as a load test
or a fast local model does. Each test here runs a `Turns` task beside the work: it wakes every
time the event loop gives it a turn and records how far the work got since its last turn. The
most work done between two turns is the stall, counted in items (model responses, messages,
batches), never timed: `adk_gateway.core.pacing` promises a turn every `EVERY` items, and the tests
allow twice that. (The wall-clock figures — `/healthz` p99 during a flood — are `make bench`'s.)

The memory tests start a real gateway process and read its peak resident set from
/proc/PID/status (`VmHWM`, reset after a warm-up turn through /proc/PID/clear_refs): a flood read
at full speed, and one whose client stops reading (cut as a slow reader once its socket stops
draining for `--slow-reader-grace-s`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService

from adk_gateway.agents.adk import AgentHost
from adk_gateway.core.pacing import EVERY
from adk_gateway.core.requests import validated_history
from adk_gateway.services.streams import StreamLog
from adk_gateway.transports.base import REPLAY_BATCHES_PER_TURN, Transport, deliver
from tests.gateway_process import start_gateway_process, stop_process
from tests.turns import CountedMessages, Turns

from .conftest import StartGateway
from .support import ToolLog, chat_body, counting_agent, post_chat, settings, user_message, wait_for

FLOOD = 20_000  # deltas of the in-process floods (the property does not depend on the length)
MiB = 1024 * 1024


def counted_model_responses() -> tuple[list[int], Callable[..., None]]:
    """A counter of model responses and the agent callback that bumps it (it runs in ADK's task)."""
    count = [0]

    def after_model(callback_context: CallbackContext, llm_response: LlmResponse) -> None:
        count[0] += 1

    return count, after_model


def flood_host() -> tuple[AgentHost, list[int]]:
    count, after_model = counted_model_responses()
    agent = counting_agent(ToolLog(), after_model_callback=after_model)
    return AgentHost(agent, InMemorySessionService(), max_llm_calls=5), count


# --- a run yields -------------------------------------------------------------------------------------


async def test_a_flood_over_sse_gives_the_loop_a_turn_every_few_model_responses(gateway: StartGateway) -> None:
    host, responses = flood_host()
    client = await gateway(host=host)
    with Turns(lambda: responses[0]) as turns:
        reply = await post_chat(client, chat_body("flood", [user_message(f"/stream {FLOOD} 0")]))
    assert reply.status == 200 and reply.done and not reply.of_type("error")
    assert len(reply.of_type("text-delta")) == FLOOD
    assert responses[0] >= FLOOD
    assert turns.widest <= 2 * EVERY, f"{turns.widest} model responses between two turns of another task"


async def test_a_flood_over_the_websocket_gives_the_loop_a_turn_every_few_model_responses(
    gateway: StartGateway,
) -> None:
    host, responses = flood_host()
    client = await gateway(host=host)
    deltas, ended = 0, None
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": "flood", "trigger": "submit-message",
                            "messages": [user_message(f"/stream {FLOOD} 0")], "headers": {}, "body": {}})
        with Turns(lambda: responses[0]) as turns:
            async with asyncio.timeout(60):
                while ended is None:
                    message = await ws.receive()
                    assert message.type is WSMsgType.TEXT, message
                    frame = json.loads(message.data)
                    if frame["type"] == "chunk":
                        assert frame["chunk"]["type"] != "error", frame
                        deltas += frame["chunk"]["type"] == "text-delta"
                    elif frame["type"] in ("end", "error"):
                        ended = frame
    assert ended == {"type": "end", "requestId": "r1"}
    assert deltas == FLOOD
    assert turns.widest <= 2 * EVERY, f"{turns.widest} model responses between two turns of another task"


async def test_a_flood_leaves_another_chat_answered_before_it_ends(gateway: StartGateway) -> None:
    """Not a timing: the other chat's whole answer arrives while the flood is still running."""
    host, responses = flood_host()
    client = await gateway(settings(max_runs_per_user=10), host=host)
    flood = asyncio.create_task(post_chat(client, chat_body("flood", [user_message(f"/stream {FLOOD} 0")])))
    await wait_for(lambda: responses[0] > 100, what="the flood to start")
    echo = await post_chat(client, chat_body("echo", [user_message("/echo still here")]))
    assert echo.status == 200 and echo.text == "still here"
    assert not flood.done() and responses[0] < FLOOD, "the other chat waited for the flood"
    assert len((await flood).of_type("text-delta")) == FLOOD


# --- a history import yields ----------------------------------------------------------------------------


def history(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"h{index}", "role": "user" if index % 2 == 0 else "assistant",
         "parts": [{"type": "text", "text": f"message {index}"}]}
        for index in range(count)
    ]


async def test_a_history_of_ten_thousand_messages_is_validated_and_imported_a_few_messages_per_turn() -> None:
    raw = CountedMessages(history(10_000))
    with Turns(lambda: raw.taken) as turns:
        messages = await validated_history(raw, max_depth=64)
    assert len(messages) == 10_000
    assert turns.widest <= 2 * EVERY, f"{turns.widest} messages validated between two turns of another task"

    host = AgentHost(counting_agent(ToolLog()), InMemorySessionService(), max_llm_calls=5)
    session = await host.create_session("u", "imported")
    imported = CountedMessages(list(messages))
    with Turns(lambda: imported.taken) as turns:
        await host.import_history(session, imported)
    assert imported.taken == 10_000
    assert turns.widest <= 2 * EVERY, f"{turns.widest} messages imported between two turns of another task"
    stored = await host.get_session("u", "imported")
    assert stored is not None and len(stored.events) >= 10_000


# --- a replay yields --------------------------------------------------------------------------------------


class CountingTransport(Transport):
    """Takes every batch at once (a socket that never makes the writer wait) and counts them."""

    def __init__(self) -> None:
        self.major = 7
        self.batches = 0
        self.chunks = 0
        self.closed = False

    async def open(self) -> None:
        pass

    async def send(self, entries: Any) -> None:
        self.batches += 1
        self.chunks += sum(1 for _entry in entries)

    async def keepalive(self) -> None:
        pass

    async def close(self, last: Any = (), *, cut: Any = None) -> None:
        if last:
            await self.send(last)
        self.closed = True


async def test_a_long_replay_gives_the_loop_a_turn_every_few_batches() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=64 * MiB)
    for index in range(100_000):
        log.append({"type": "text-delta", "id": "t", "delta": f"word{index} "})
    log.close()
    transport = CountingTransport()
    with log.attach(0, replay=True) as follower, Turns(lambda: transport.batches) as turns:
        await deliver(follower, transport, keepalive_s=None)
    assert transport.chunks == 100_000 and transport.closed
    assert transport.batches > 10 * REPLAY_BATCHES_PER_TURN  # long enough for the count to mean something
    assert turns.widest <= REPLAY_BATCHES_PER_TURN, f"{turns.widest} batches between two turns of another task"


# --- memory of a long answer --------------------------------------------------------------------------------


def peak_growth_mib(pid: int, base_kib: int) -> float:
    return (_status_kib(pid, "VmHWM") - base_kib) / 1024


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def reset_peak(pid: int) -> int:
    """Resets the process's peak resident set to its current one (returned, KiB)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kib(pid, "VmRSS")


async def sse_deltas(response: aiohttp.ClientResponse) -> tuple[int, bool, list[dict[str, Any]]]:
    deltas, done, errors = 0, False, []
    async for line in response.content:
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        deltas += chunk["type"] == "text-delta"
        if chunk["type"] == "error":
            errors.append(chunk)
    return deltas, done, errors


def post(session: aiohttp.ClientSession, url: str, chat_id: str, text: str) -> Any:
    return session.post(f"{url}/api/chat", json=chat_body(chat_id, [user_message(text)]))


pytestmark_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytestmark_linux
async def test_a_flood_read_at_full_speed_arrives_whole_and_grows_the_process_little(tmp_path: Path) -> None:
    gateway = start_gateway_process(log=tmp_path / "gateway.log")
    try:
        async with aiohttp.ClientSession() as session:
            async with post(session, gateway.url, "warm", "/stream 500 0") as response:
                assert (await sse_deltas(response))[:2] == (500, True)  # lazy imports happen here
            base = reset_peak(gateway.proc.pid)
            async with asyncio.timeout(120), post(session, gateway.url, "flood", "/stream 50000 0") as response:
                deltas, done, errors = await sse_deltas(response)
        assert (deltas, done, errors) == (50_000, True, [])
        growth = peak_growth_mib(gateway.proc.pid, base)
        assert growth <= 64, f"the process grew {growth:.0f} MiB"
    finally:
        stop_process(gateway.proc)


@pytestmark_linux
async def test_a_client_that_stops_reading_a_flood_is_cut_and_the_process_grows_little(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    gateway = start_gateway_process("--slow-reader-grace-s", "2", log=log)
    try:
        async with aiohttp.ClientSession() as session:
            async with post(session, gateway.url, "warm", "/stream 500 0") as response:
                assert (await sse_deltas(response))[:2] == (500, True)
            base = reset_peak(gateway.proc.pid)
            async with post(session, gateway.url, "flood", "/stream 100000 0") as response:
                assert response.status == 200
                await response.content.readline()  # the first line, then nothing more is read

                def cut() -> bool:
                    return any('"slow_reader_cut"' in line and '"flood"' in line
                               for line in log.read_text().splitlines())

                await wait_for(cut, timeout=90, what="the reader to be cut")
                # The client reads again: what the sockets still held, then the cut's error (when
                # it made it into the socket before the abort), never the rest of the answer.
                async with asyncio.timeout(30):
                    try:
                        deltas, done, errors = await sse_deltas(response)
                    except aiohttp.ClientPayloadError:
                        deltas, done, errors = 0, False, []
        assert deltas < 100_000
        assert not done or [error["errorText"] for error in errors] == [
            "The connection was too slow to keep up with the stream, so it was cut."], errors
        cuts = [json.loads(line) for line in log.read_text().splitlines() if '"slow_reader_cut"' in line]
        assert [cut_line["reason"] for cut_line in cuts] == ["stalled"]
        growth = peak_growth_mib(gateway.proc.pid, base)
        assert growth <= 48, f"the process grew {growth:.0f} MiB"
    finally:
        stop_process(gateway.proc)
