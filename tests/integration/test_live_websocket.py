"""The live extension end to end over `GET /api/chat/ws` (gateway app, scripted model, real socket)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.agents.scripted_live import ScriptedLiveConnection
from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.core.pcm import chunk_bytes, duration_ms, tone
from adk_gateway.keys import SERVICE
from tests.audio import dominant_frequency

Frame = dict[str, Any]
WAIT_S = 10.0
MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def make_client(aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MakeClient]:
    monkeypatch.setattr(ScriptedLiveConnection, "default_chunk_delay_s", 0.01)

    async def go(**overrides: Any) -> TestClient[Any, Any]:
        app = make_app(Settings(model="scripted", **overrides))
        client: TestClient[Any, Any] = await aiohttp_client(TestServer(app, handler_cancellation=True))
        return client

    yield go


class Socket:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[Frame] = []

    async def next_frame(self) -> Frame:
        async with asyncio.timeout(WAIT_S):
            message = await self.ws.receive()
        assert message.type == WSMsgType.TEXT, message
        frame: Frame = json.loads(message.data)
        self.frames.append(frame)
        return frame

    async def until(self, predicate: Callable[[Frame], bool]) -> Frame:
        while True:
            frame = await self.next_frame()
            if predicate(frame):
                return frame

    def chunks(self, request_id: str = "live") -> list[Frame]:
        return [f["chunk"] for f in self.frames if f["type"] == "chunk" and f["requestId"] == request_id]


def chunk_type(kind: str) -> Callable[[Frame], bool]:
    return lambda frame: frame["type"] == "chunk" and frame["chunk"]["type"] == kind


async def open_live(client: TestClient[Any, Any], **start: Any) -> Socket:
    ws = await client.ws_connect("/api/chat/ws")
    socket = Socket(ws)
    await ws.send_json({"type": "live-start", "requestId": "live", "id": "chat-live", **start})
    assert await socket.next_frame() == {"type": "start", "requestId": "live"}
    return socket


async def speak(socket: Socket, seconds: float) -> None:
    """One utterance of a 300 Hz tone, pushed to talk."""
    await socket.ws.send_json({"type": "live-activity-start", "requestId": "live"})
    for frame in chunk_bytes(tone(300, seconds, rate=16000), 20, 16000):
        await socket.ws.send_bytes(frame)
    await socket.ws.send_json({"type": "live-activity-end", "requestId": "live"})


async def test_a_spoken_turn_over_the_socket(make_client: MakeClient) -> None:
    client = await make_client()
    socket = await open_live(client, headers={"x-ai-sdk-major": "7"})
    await speak(socket, 3.0)
    await socket.until(chunk_type("finish"))

    chunk_frames = [f for f in socket.frames if f["type"] == "chunk"]
    assert [f["sequence"] for f in chunk_frames] == list(range(len(chunk_frames)))
    chunks = socket.chunks()
    assert chunks[0]["type"] == "start" and chunks[-1] == {"type": "finish", "finishReason": "stop",
                                                           "messageMetadata": chunks[-1]["messageMetadata"]}
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "heard 3000 ms of audio"
    pcm = b"".join(base64.b64decode(c["data"]["content"]) for c in chunks if c["type"] == "data-pcm")
    assert duration_ms(pcm, 24000) == 500
    assert dominant_frequency(pcm, 24000) == pytest.approx(440, abs=3)

    await socket.ws.send_json({"type": "live-stop", "requestId": "live"})
    assert await socket.until(lambda f: f["type"] in ("end", "error")) == {"type": "end", "requestId": "live"}
    await socket.ws.close()


async def test_live_sessions_are_counted_apart_from_chat_runs(make_client: MakeClient) -> None:
    client = await make_client()
    metrics = client.app[SERVICE].metrics

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(f"adk_gateway_{name}", labels) or 0.0

    socket = await open_live(client)
    await socket.ws.send_json({"type": "live-text", "requestId": "live", "text": "/echo counted"})
    await socket.until(chunk_type("finish"))
    assert value("live_sessions_started_total") == 1
    assert value("live_sessions_finished_total", outcome="ok") == 0
    await socket.ws.send_json({"type": "live-stop", "requestId": "live"})
    await socket.until(lambda f: f["type"] == "end")
    async with asyncio.timeout(WAIT_S):
        while value("live_sessions_finished_total", outcome="ok") < 1:
            await asyncio.sleep(0.01)
    assert value("live_session_seconds_count") == 1

    # A session whose socket goes away is ended as stopped.
    await socket.ws.send_json({"type": "live-start", "requestId": "again", "id": "chat-live"})
    assert await socket.until(lambda f: f["type"] in ("start", "error")) == {"type": "start", "requestId": "again"}
    await socket.ws.close()
    async with asyncio.timeout(WAIT_S):
        while value("live_sessions_finished_total", outcome="stopped") < 1:
            await asyncio.sleep(0.01)
    assert value("live_sessions_started_total") == 2
    assert value("live_session_seconds_count") == 2
    # Chat runs' counters are the chat runs' alone.
    assert value("runs_started_total") == 0
    assert value("runs_finished_total", outcome="ok") == 0


async def test_live_approval_and_barge_in_over_the_socket(make_client: MakeClient) -> None:
    client = await make_client()
    socket = await open_live(client, headers={"x-ai-sdk-major": "7"})
    await socket.ws.send_json({"type": "live-text", "requestId": "live",
                               "text": '/tool process_payment {"amount":5,"recipient":"bob"}'})
    request = (await socket.until(chunk_type("tool-approval-request")))["chunk"]
    assert (await socket.next_frame())["chunk"] == {"type": "finish-step"}
    await socket.ws.send_json({"type": "live-approval", "requestId": "live", "approvalId": request["approvalId"],
                               "approved": True})
    await socket.until(chunk_type("finish"))
    outputs = [c for c in socket.chunks() if c["type"] == "tool-output-available"]
    assert outputs[0]["output"]["status"] == "completed"

    # Answering the same approval again is refused; the session stays usable.
    await socket.ws.send_json({"type": "live-approval", "requestId": "live", "approvalId": request["approvalId"],
                               "approved": True})
    refused = await socket.until(lambda f: f["type"] == "error")
    assert refused.get("code") == "approval_invalid"

    await speak(socket, 1.0)
    await socket.until(chunk_type("data-pcm"))
    await socket.ws.send_json({"type": "live-interrupt", "requestId": "live"})
    finish = (await socket.until(chunk_type("finish")))["chunk"]
    assert finish["finishReason"] == "interrupted"
    await socket.ws.close()


async def test_bad_audio_is_refused_and_closing_mid_turn_cleans_up(make_client: MakeClient) -> None:
    client = await make_client()
    before = set(asyncio.all_tasks())
    socket = await open_live(client)
    await socket.ws.send_bytes(b"\x00\x01\x02")
    error = await socket.until(lambda f: f["type"] == "error")
    assert error.get("code") == "invalid_audio"
    await speak(socket, 1.0)
    await socket.until(chunk_type("data-pcm"))
    await socket.ws.close()
    current = asyncio.current_task()
    async with asyncio.timeout(WAIT_S):
        while [t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done()]:
            await asyncio.sleep(0.01)


async def test_a_live_session_holds_its_chat(make_client: MakeClient) -> None:
    # The default grace (300 ms) also covers the moment between the `end` frame and the release.
    client = await make_client()
    socket = await open_live(client)
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "/echo x"}]}
    body = {"id": "chat-live", "messages": [message]}
    busy = await client.post("/api/chat", json=body)
    assert busy.status == 409
    assert (await busy.json())["error"]["code"] == "chat_busy"
    second = await client.ws_connect("/api/chat/ws")
    await second.send_json({"type": "live-start", "requestId": "other", "id": "chat-live"})
    async with asyncio.timeout(WAIT_S):
        refused = await second.receive_json()
    assert refused["type"] == "error" and refused["code"] == "chat_busy"
    await second.close()
    await socket.ws.send_json({"type": "live-stop", "requestId": "live"})
    await socket.until(lambda frame: frame["type"] == "end")
    freed = await client.post("/api/chat", json=body)
    assert freed.status == 200
    assert "data: [DONE]" in await freed.text()


# --- the live log: the same send path as chat runs -------------------------------------------------


async def test_a_live_session_is_resumed_from_its_log(make_client: MakeClient) -> None:
    client = await make_client()
    socket = await open_live(client, headers={"x-ai-sdk-major": "7"})
    await socket.ws.send_json({"type": "live-text", "requestId": "live", "text": "/echo first"})
    await socket.until(chunk_type("finish"))

    # A second socket resumes the chat: the whole session so far, then what comes next.
    other = Socket(await client.ws_connect("/api/chat/ws"))
    await other.ws.send_json({"type": "resume", "requestId": "again", "id": "chat-live",
                              "headers": {"x-ai-sdk-major": "7"}})
    assert await other.next_frame() == {"type": "start", "requestId": "again"}
    await other.until(chunk_type("finish"))
    assert other.chunks("again") == socket.chunks()
    await socket.ws.send_json({"type": "live-text", "requestId": "live", "text": "/echo second"})
    await other.until(chunk_type("finish"))
    await socket.until(chunk_type("finish"))
    assert other.chunks("again") == socket.chunks()
    assert "".join(c["delta"] for c in socket.chunks() if c["type"] == "text-delta") == "firstsecond"

    await socket.ws.send_json({"type": "live-stop", "requestId": "live"})
    assert await socket.until(lambda f: f["type"] in ("end", "error")) == {"type": "end", "requestId": "live"}
    assert await other.until(lambda f: f["type"] in ("end", "error")) == {"type": "end", "requestId": "again"}
    await other.ws.close()
    await socket.ws.close()


async def test_an_ai_6_socket_gets_the_ai_6_chunk_set(make_client: MakeClient) -> None:
    client = await make_client()
    socket = await open_live(client)  # no `x-ai-sdk-major: 7`
    await speak(socket, 1.0)
    await socket.until(chunk_type("data-pcm"))
    await socket.ws.send_json({"type": "live-interrupt", "requestId": "live"})
    finish = (await socket.until(chunk_type("finish")))["chunk"]
    assert finish["finishReason"] == "stop"  # `interrupted` is ai 7's
    chunk_frames = [f for f in socket.frames if f["type"] == "chunk"]
    assert [f["sequence"] for f in chunk_frames] == list(range(len(chunk_frames)))  # no gap for dropped audio
    await socket.ws.close()


async def test_a_failing_session_tells_the_client_and_ends(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any) -> AsyncIterator[Any]:
        raise RuntimeError("the model connection dropped at /srv/secret/path.py")
        yield  # an async generator, like ADK's

    monkeypatch.setattr("adk_gateway.agents.adk.AgentHost.run_live", broken)
    client = await make_client()
    socket = await open_live(client, headers={"x-ai-sdk-major": "7"})
    ended = await socket.until(lambda f: f["type"] in ("end", "error"))
    assert ended == {"type": "end", "requestId": "live"}
    assert [c["type"] for c in socket.chunks()] == ["start", "error", "finish"]
    assert socket.chunks()[1] == {"type": "error", "errorText": "The live session failed."}
    assert socket.chunks()[2]["finishReason"] == "error"
    # The socket and its chat are free for a new session.
    await socket.ws.send_json({"type": "live-start", "requestId": "live", "id": "chat-live"})
    assert await socket.next_frame() == {"type": "start", "requestId": "live"}
    await socket.ws.close()
