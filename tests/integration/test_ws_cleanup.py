"""Closing a WebSocket mid-turn leaves nothing behind, every time.

Each scenario runs 100 times in a row on one gateway (the resume-mode variants 25 times). After
each close the registry must be back to no connections and no runs, every asyncio task must be
gone (the set of tasks equals the one taken before the first socket), and every stream log must
be closed with nobody waiting on it, each within a bounded wait.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.keys import REGISTRY, SERVICE

Frame = dict[str, Any]
Scenario = Callable[[TestClient[Any, Any], int], Awaitable[None]]

ROUNDS = 100
WAIT_S = 2.0
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'


def send_frame(request_id: str, chat_id: str, text: str) -> Frame:
    return {
        "type": "send",
        "requestId": request_id,
        "id": chat_id,
        "messages": [{"id": f"u-{request_id}", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "headers": {},
        "body": {},
    }


async def read_until(ws: aiohttp.ClientWebSocketResponse, done: Callable[[Frame], bool]) -> None:
    """Reads frames until one satisfies `done` (bounded)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            message = await ws.receive()
            assert message.type is WSMsgType.TEXT, message
            frame: Frame = json.loads(message.data)
            assert frame["type"] not in ("error", "end", "no-active"), frame
            if done(frame):
                return


def nth_chunk(n: int) -> Callable[[Frame], bool]:
    return lambda frame: frame["type"] == "chunk" and frame["sequence"] >= n - 1


def chunk_of_type(kind: str) -> Callable[[Frame], bool]:
    return lambda frame: frame["type"] == "chunk" and frame["chunk"]["type"] == kind


# --- scenarios: each leaves the socket closed mid-turn -------------------------------------


async def close_mid_stream(client: TestClient[Any, Any], i: int) -> None:
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("s", f"stream-{i}", "/stream 200 10"))
        # Close at a different point each round: right after `start` (the agent is still
        # starting) up to a few text deltas in.
        await read_until(ws, nth_chunk(1 + i % 6))
        assert client.app[REGISTRY].counts()["runs"] == 1


async def close_with_approval_pending(client: TestClient[Any, Any], i: int) -> None:
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("p", f"approval-{i}", PAYMENT))
        await read_until(ws, chunk_of_type("tool-approval-request"))


async def close_during_resume(client: TestClient[Any, Any], i: int) -> None:
    registry = client.app[REGISTRY]
    chat = f"resume-{i}"
    async with client.ws_connect("/api/chat/ws") as writer:
        await writer.send_json(send_frame("w", chat, "/stream 200 10"))
        await read_until(writer, nth_chunk(2))
        async with client.ws_connect("/api/chat/ws") as reader:
            await reader.send_json({"type": "resume", "requestId": "r", "id": chat})
            await read_until(reader, nth_chunk(1 + i % 3))
        # The resuming socket is gone; the run belongs to the writer and goes on.
        await wait_until(lambda: registry.counts() == {"connections": 1, "runs": 1}, "reader released")
        assert registry.active_run(("anonymous", chat)) is not None
        await read_until(writer, nth_chunk(5))


async def close_sender_then_abort_the_resume(client: TestClient[Any, Any], i: int) -> None:
    """With detach_on_disconnect: the run outlives its socket; a resume's abort stops it."""
    registry = client.app[REGISTRY]
    chat = f"detached-{i}"
    async with client.ws_connect("/api/chat/ws") as writer:
        await writer.send_json(send_frame("w", chat, "/stream 200 10"))
        await read_until(writer, nth_chunk(2))
    await wait_until(lambda: registry.counts() == {"connections": 0, "runs": 1}, "writer released, run detached")
    async with client.ws_connect("/api/chat/ws") as reader:
        await reader.send_json({"type": "resume", "requestId": "r", "id": chat})
        await read_until(reader, nth_chunk(4))
        await reader.send_json({"type": "abort", "requestId": "r"})
        await read_until(reader, chunk_of_type("abort"))
        assert registry.active_run(("anonymous", chat)) is None


# --- the check -----------------------------------------------------------------------------


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not condition():
                await asyncio.sleep(0.002)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT_S} s: {what}") from None


@pytest.fixture
async def make_client(aiohttp_client: Any) -> AsyncIterator[Callable[..., Awaitable[TestClient[Any, Any]]]]:
    async def go(**overrides: Any) -> TestClient[Any, Any]:
        app = make_app(Settings(model="scripted", **overrides))
        client: TestClient[Any, Any] = await aiohttp_client(TestServer(app, handler_cancellation=True))
        return client

    yield go


@pytest.mark.parametrize(
    ("scenario", "detach", "rounds"),
    [
        (close_mid_stream, False, ROUNDS),
        (close_with_approval_pending, False, ROUNDS),
        (close_during_resume, False, ROUNDS),
        # Resume mode (runs outlive their socket): fewer rounds, the same checks.
        (close_mid_stream, True, ROUNDS // 4),
        (close_sender_then_abort_the_resume, True, ROUNDS // 4),
    ],
    ids=["mid-stream", "approval-pending", "during-resume", "mid-stream-detached", "detached-resume-abort"],
)
async def test_closing_mid_turn_leaves_nothing_behind(
    make_client: Callable[..., Awaitable[TestClient[Any, Any]]], scenario: Scenario, detach: bool, rounds: int
) -> None:
    client = await make_client(detach_on_disconnect=detach)
    app = client.app
    registry, streams = app[REGISTRY], app[SERVICE].streams
    # Warm up (first agent run, connection pool), then take the baseline.
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("warm", f"warm-{uuid.uuid4().hex}", "/echo warm"))
        await read_until(ws, nth_chunk(3))
    await wait_until(lambda: registry.counts() == {"connections": 0, "runs": 0}, "warm-up released")
    baseline = asyncio.all_tasks()

    def leftovers() -> list[str]:
        return sorted(f"{task.get_name()} {task.get_coro()!r}" for task in asyncio.all_tasks() - baseline)

    for i in range(rounds):
        await scenario(client, i)
        if detach and scenario is close_mid_stream:
            # A detached run goes on after its socket; the stop endpoint ends it.
            await wait_until(lambda: registry.counts()["connections"] == 0, "socket released")
            assert registry.counts()["runs"] == 1, registry.counts()
            response = await client.post(f"/api/chat/stream-{i}/stop", json={}, headers={"Connection": "close"})
            assert (await response.json()) == {"stopped": True}
        await wait_until(lambda: registry.counts() == {"connections": 0, "runs": 0}, f"round {i}: registry empty")
        await wait_until(lambda: not leftovers(), f"round {i}: tasks left: {leftovers()}")
        logs = list(streams._logs.values())
        assert all(log.closed for log in logs), f"round {i}: an open stream log"
        assert not any(log._changed._waiters for log in logs), f"round {i}: a reader still waits"
