"""SIGTERM: a real `python -m adk_gateway` process drains and exits 0, and nothing that was sent is lost.

With 50 SSE streams, 50 sockets streaming and 10 detached runs open, SIGTERM must: end every SSE
stream with a terminal chunk and `[DONE]`, close every socket with 1001, exit 0 within the
shutdown timeout; and after a restart on the same SQLite file every approval that was sent before
the signal is still answerable.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.gateway_process import start_gateway_process, stop_process

from .support import Conversation, LiveStream, chat_body, new_id, user_message

SHUTDOWN_TIMEOUT_S = 2.0
STREAMS, SOCKETS, DETACHED, APPROVALS = 50, 50, 10, 5
LONG = "/stream 100000 500"  # far longer than the test: only the shutdown ends it
TERMINAL = {"abort", "error", "finish"}


async def active_runs(http: aiohttp.ClientSession) -> float:
    async with http.get("/metrics") as response:
        match = re.search(r"^adk_gateway_active_runs (\S+)$", await response.text(), re.M)
    return float(match.group(1)) if match else -1.0


async def wait_until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def open_socket(http: aiohttp.ClientSession, index: int) -> tuple[aiohttp.ClientWebSocketResponse, list[Any]]:
    ws = await http.ws_connect("/api/chat/ws")
    await ws.send_json({"type": "send", "requestId": f"r{index}", "id": new_id("ws"), "headers": {}, "body": {},
                        "trigger": "submit-message", "messages": [user_message(LONG)]})
    frames: list[Any] = []
    while not any(f.get("type") == "chunk" for f in frames):
        frames.append(json.loads((await ws.receive(timeout=10)).data))
    return ws, frames


async def socket_close_code(ws: aiohttp.ClientWebSocketResponse, frames: list[Any]) -> int | None:
    async for message in ws:
        frames.append(json.loads(message.data))
    return ws.close_code


def test_sigterm_drains_every_stream_and_keeps_approvals(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    args = ("--session-store", f"sqlite:///{db}", "--detach-on-disconnect",
            "--shutdown-timeout-s", str(SHUTDOWN_TIMEOUT_S), "--max-runs", "1000", "--max-runs-per-user", "1000",
            "--max-sockets-per-user", "1000")
    gateway = start_gateway_process(*args, log=tmp_path / "first.log")
    pending: list[dict[str, Any]] = []

    async def before_signal() -> tuple[list[LiveStream], list[tuple[aiohttp.ClientWebSocketResponse, list[Any]]]]:
        http = aiohttp.ClientSession(base_url=gateway.url, connector=aiohttp.TCPConnector(limit=0))
        sessions.append(http)
        for _ in range(APPROVALS):
            chat = Conversation(http, new_id("pay"))  # type: ignore[arg-type]
            reply = await chat.send('/tool process_payment {"amount": 5, "recipient": "bob"}')
            assert reply.finish_reason == "tool-calls" and chat.pending_approvals(), reply.types
            chat.answer(chat.pending_approvals()[0], True)
            pending.append(chat.continuation_body())
        streams = [await LiveStream.open(http, chat_body(new_id("sse"), [user_message(LONG)]))  # type: ignore[arg-type]
                   for _ in range(STREAMS + DETACHED)]
        for stream in streams:
            await stream.take(1)
        for stream in streams[STREAMS:]:
            stream.close()  # detached: the run goes on without its client
        streams = streams[:STREAMS]
        sockets = [await open_socket(http, i) for i in range(SOCKETS)]

        async def all_running() -> bool:
            return await active_runs(http) == STREAMS + SOCKETS + DETACHED

        await wait_until(all_running, "every run to be active")
        return streams, sockets

    sessions: list[aiohttp.ClientSession] = []

    async def scenario() -> tuple[list[Any], list[Any], float, int | None]:
        streams, sockets = await before_signal()
        signalled = time.monotonic()
        gateway.proc.send_signal(signal.SIGTERM)
        replies = await asyncio.gather(*(stream.rest() for stream in streams))
        codes = await asyncio.gather(*(socket_close_code(ws, frames) for ws, frames in sockets))
        exit_code = await asyncio.to_thread(gateway.proc.wait, SHUTDOWN_TIMEOUT_S + 20)
        elapsed = time.monotonic() - signalled
        for http in sessions:
            await http.close()
        return list(zip(replies, streams, strict=True)), list(zip(codes, sockets, strict=True)), elapsed, exit_code

    try:
        streams, sockets, elapsed, exit_code = asyncio.run(scenario())
    finally:
        stop_process(gateway.proc)
    log_tail = gateway.log_tail()
    assert exit_code == 0, log_tail
    assert elapsed < SHUTDOWN_TIMEOUT_S + 15, (elapsed, log_tail)
    for reply, _ in streams:
        assert reply.done and reply.chunks and reply.chunks[-1]["type"] in TERMINAL, (reply.types[-3:], reply.done)
    for code, (_, frames) in sockets:
        assert code == 1001, code
        ends = [f for f in frames if f.get("type") in ("end", "error")]
        assert ends, frames[-3:]
    assert '"drain_done"' in gateway.log.read_text()

    # After a restart on the same file, every approval sent before the signal is answered.
    again = start_gateway_process(*args, log=tmp_path / "second.log")

    async def answer_all() -> list[Any]:
        async with aiohttp.ClientSession(base_url=again.url) as http:
            results = []
            for body in pending:
                async with http.post("/api/chat", json=body) as response:
                    text = await response.text()
                    results.append((response.status, text))
            return results

    try:
        answers = asyncio.run(answer_all())
    finally:
        stop_process(again.proc)
    for status, text in answers:
        assert status == 200 and '"tool-output-available"' in text, (status, text[:300])

