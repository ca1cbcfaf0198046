"""Caps answered before a stream starts, through real sockets.

Runs per process (503 `overloaded` + Retry-After over SSE, an `error` frame over the WebSocket;
detached runs count), runs per user (429 `too_many_runs`, other users unaffected), sockets per user
(429 at the handshake, before the upgrade), `send` frames per socket per minute (`rate_limited`
error frames, then 1008), and live sessions per process (an `error` frame `overloaded`). Each test
also checks that the registry holds nothing once its clients are gone, that the refusal is counted
in `adk_gateway_rejections_total`, and (where it matters) that it is logged once, with the user.

Runs are kept busy with the scripted model's `/stream N MS`; the tests wait on the registry's
state, never on the clock.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from adk_gateway.keys import REGISTRY
from adk_gateway.services.registry import Registry, SendVerdict, SendWindow

from .conftest import StartGateway
from .support import WAIT_S, LiveStream, chat_body, new_id, settings, user_message, wait_for

Frame = dict[str, Any]
Client = TestClient[Any, Any]

BUSY_TOKENS = 40
BUSY = f"/stream {BUSY_TOKENS} 50"  # about 2 s: long enough to hold a run while the next one is refused
BUSY_TEXT = "".join(f"tok{i} " for i in range(BUSY_TOKENS))
END_TYPES = {"end", "error", "no-active"}


# --- helpers -------------------------------------------------------------------------------


def registry_of(client: Client) -> Registry:
    registry: Registry = client.app[REGISTRY]
    return registry


async def idle(client: Client) -> None:
    """Waits until the registry holds no run, live session, socket or connection."""
    registry = registry_of(client)

    def empty() -> bool:
        held = registry.held()
        return registry.counts() == {"connections": 0, "runs": 0} and not any(held.values())

    await wait_for(empty, what=f"an empty registry (held {registry.held()}, counts {registry.counts()})")


async def rejections(client: Client, reason: str) -> float:
    async with client.get("/metrics") as response:
        text = await response.text()
    match = re.search(rf'^adk_gateway_rejections_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def user(name: str) -> dict[str, str]:
    return {"x-user-id": name}


async def open_stream(
    client: Client, text: str = BUSY, *, who: str = "alice", chat_id: str | None = None
) -> LiveStream:
    body = chat_body(chat_id or new_id("chat"), [user_message(text)])
    return await LiveStream.open(client, body, headers=user(who))


async def refusal_of(stream: LiveStream) -> tuple[int, dict[str, Any], str | None]:
    """Status, JSON body and Retry-After of a response refused before it streamed."""
    response = stream.response
    assert not response.headers.get("Content-Type", "").startswith("text/event-stream"), "it streamed"
    body = await response.json()
    response.release()
    return response.status, body, response.headers.get("Retry-After")


def assert_retry_after(value: str | None) -> None:
    assert value is not None, "no Retry-After"
    assert value.isdigit() and 1 <= int(value) <= 60, value


async def finishes_in_full(stream: LiveStream) -> None:
    reply = await stream.rest()
    assert reply.status == 200 and reply.done, reply.types
    assert reply.finish_reason == "stop" and reply.text == BUSY_TEXT, (reply.finish_reason, reply.text)


def send_frame(request_id: str, text: str, chat_id: str | None = None) -> Frame:
    return {
        "type": "send",
        "requestId": request_id,
        "id": chat_id or f"chat-{request_id}-{uuid.uuid4().hex[:6]}",
        "trigger": "submit-message",
        "messages": [user_message(text)],
        "headers": {},
        "body": {},
    }


class Socket:
    """A client socket that keeps every frame it has read."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[Frame] = []

    @classmethod
    async def open(cls, client: Client, who: str = "alice") -> Socket:
        return cls(await client.ws_connect("/api/chat/ws", headers=user(who)))

    async def send(self, request_id: str, text: str = BUSY) -> None:
        await self.ws.send_json(send_frame(request_id, text))

    async def read_until(self, done: Callable[[list[Frame]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done(self.frames):
                message = await self.ws.receive()
                assert message.type is WSMsgType.TEXT, f"expected a text frame, got {message}"
                self.frames.append(json.loads(message.data))

    def of(self, request_id: str) -> list[Frame]:
        return [f for f in self.frames if f.get("requestId") == request_id]

    def final(self, request_id: str) -> Frame | None:
        return next((f for f in self.of(request_id) if f["type"] in END_TYPES), None)

    async def until_final(self, *request_ids: str) -> None:
        await self.read_until(lambda _frames: all(self.final(rid) is not None for rid in request_ids))

    async def until_streaming(self, *request_ids: str) -> None:
        """Until each request has sent a chunk (its run is going)."""
        await self.read_until(lambda _f: all(any(f["type"] == "chunk" for f in self.of(rid)) for rid in request_ids))

    def text(self, request_id: str) -> str:
        return "".join(f["chunk"]["delta"] for f in self.of(request_id)
                       if f["type"] == "chunk" and f["chunk"]["type"] == "text-delta")

    def assert_finished(self, request_id: str, text: str = BUSY_TEXT) -> None:
        assert self.final(request_id) == {"type": "end", "requestId": request_id}, self.of(request_id)[-2:]
        assert self.text(request_id) == text

    async def close_code(self) -> int | None:
        async with asyncio.timeout(WAIT_S):
            while True:
                message = await self.ws.receive()
                if message.type is WSMsgType.TEXT:
                    self.frames.append(json.loads(message.data))
                    continue
                assert message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED), message
                return self.ws.close_code


# --- runs per process --------------------------------------------------------------------------


async def test_the_fifth_of_five_simultaneous_posts_gets_503_and_the_four_finish(gateway: StartGateway) -> None:
    client = await gateway(settings(max_runs=4))
    registry = registry_of(client)
    streams = await asyncio.gather(*(open_stream(client, who=f"user{i}") for i in range(5)))

    refused = [s for s in streams if s.response.status != 200]
    assert len(refused) == 1, [s.response.status for s in streams]
    status, body, retry_after = await refusal_of(refused[0])
    assert status == 503 and body["error"]["code"] == "overloaded", (status, body)
    assert_retry_after(retry_after)
    assert registry.held()["runs"] == 4  # the four still run: the refusal came while they were busy

    running = [s for s in streams if s is not refused[0]]
    await asyncio.gather(*(finishes_in_full(s) for s in running))
    await idle(client)

    again = await open_stream(client, "/echo room again", who="user4")
    reply = await again.rest()
    assert reply.status == 200 and reply.text == "room again", (reply.status, reply.types)
    assert await rejections(client, "runs") == 1
    await idle(client)


async def test_over_the_websocket_the_fifth_run_is_an_error_frame_and_the_socket_carries_on(
    gateway: StartGateway,
) -> None:
    client = await gateway(settings(max_runs=4))
    registry = registry_of(client)
    socket = await Socket.open(client)
    busy = [f"r{i}" for i in range(4)]
    for request_id in busy:
        await socket.send(request_id)
    await socket.until_streaming(*busy)

    await socket.send("r4")
    await socket.until_final("r4")
    refusal = socket.final("r4")
    assert refusal is not None and refusal["type"] == "error" and refusal["code"] == "overloaded", refusal
    assert [f["type"] for f in socket.of("r4")] == ["error"]  # refused before anything streamed
    # The same cap over SSE while the socket's four runs hold it.
    status, body, retry_after = await refusal_of(await open_stream(client, who="bob"))
    assert status == 503 and body["error"]["code"] == "overloaded"
    assert_retry_after(retry_after)
    assert registry.held()["runs"] == 4

    await socket.until_final(*busy)
    for request_id in busy:
        socket.assert_finished(request_id)
    await wait_for(lambda: registry.held()["runs"] == 0, what="the four runs to end")
    await socket.send("r5", "/echo my turn")
    await socket.until_final("r5")
    socket.assert_finished("r5", "my turn")
    assert await rejections(client, "runs") == 2

    await socket.ws.close()
    await idle(client)


async def test_detached_runs_count_against_the_run_cap(gateway: StartGateway) -> None:
    client = await gateway(settings(max_runs=2, detach_on_disconnect=True))
    registry = registry_of(client)
    chats = [new_id("detached") for _ in range(2)]
    streams = [await open_stream(client, "/stream 100000 100", chat_id=chat) for chat in chats]
    for stream in streams:
        await stream.take(1)
        stream.close()
    await wait_for(lambda: registry.counts() == {"connections": 0, "runs": 2}, what="both clients gone, runs on")

    status, body, retry_after = await refusal_of(await open_stream(client, who="bob"))
    assert status == 503 and body["error"]["code"] == "overloaded", (status, body)
    assert_retry_after(retry_after)

    for chat in chats:
        async with client.post(f"/api/chat/{chat}/stop", json={}, headers=user("alice")) as response:
            assert (await response.json()) == {"stopped": True}
    await idle(client)
    reply = await (await open_stream(client, "/echo free again", who="bob")).rest()
    assert reply.status == 200 and reply.text == "free again"
    await idle(client)


# --- runs per user -------------------------------------------------------------------------


async def test_a_users_third_run_gets_429_while_another_user_gets_through(gateway: StartGateway) -> None:
    client = await gateway(settings(max_runs_per_user=2))
    registry = registry_of(client)
    alices = [await open_stream(client, who="alice") for _ in range(2)]
    for stream in alices:
        await stream.take(1)

    secret_prompt = "/echo the third wish of alice"
    with capture_logs() as logs:
        status, body, retry_after = await refusal_of(await open_stream(client, secret_prompt, who="alice"))
    assert status == 429 and body["error"]["code"] == "too_many_runs", (status, body)
    assert_retry_after(retry_after)
    rejected = [entry for entry in logs if entry["event"] == "rejected"]
    assert len(rejected) == 1, rejected
    assert rejected[0]["user_id"] == "alice" and rejected[0]["reason"] == "runs_per_user", rejected[0]
    assert not [entry for entry in logs if entry["event"] == "request_refused"]  # one line per rejection
    assert "third wish" not in repr(logs)  # never the prompt

    bob = await open_stream(client, "/echo hello from bob", who="bob")
    reply = await bob.rest()
    assert reply.status == 200 and reply.text == "hello from bob"

    # Over alice's socket, the same cap is an error frame; bob's socket runs.
    alice_socket, bob_socket = await Socket.open(client, "alice"), await Socket.open(client, "bob")
    await alice_socket.send("a1", "/echo one more")
    await bob_socket.send("b1", "/echo bob again")
    await alice_socket.until_final("a1")
    await bob_socket.until_final("b1")
    refusal = alice_socket.final("a1")
    assert refusal is not None and refusal["type"] == "error" and refusal["code"] == "too_many_runs", refusal
    bob_socket.assert_finished("b1", "bob again")
    assert registry.held()["runs"] == 2

    await asyncio.gather(*(finishes_in_full(s) for s in alices))
    await wait_for(lambda: registry.held()["runs"] == 0, what="alice's runs to end")
    await alice_socket.send("a2", "/echo alice again")
    await alice_socket.until_final("a2")
    alice_socket.assert_finished("a2", "alice again")
    assert await rejections(client, "runs_per_user") == 2
    await alice_socket.ws.close()
    await bob_socket.ws.close()
    await idle(client)


# --- sockets per user ----------------------------------------------------------------------

UPGRADE_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


async def test_a_socket_over_the_users_cap_gets_429_at_the_handshake(gateway: StartGateway) -> None:
    client = await gateway(settings(max_sockets_per_user=2))
    registry = registry_of(client)
    first, second = await Socket.open(client, "alice"), await Socket.open(client, "alice")

    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/api/chat/ws", headers=user("alice"))
    assert refused.value.status == 429
    assert refused.value.headers is not None
    assert_retry_after(refused.value.headers.get("Retry-After"))
    async with client.get("/api/chat/ws", headers={**UPGRADE_HEADERS, **user("alice")}) as response:
        assert response.status == 429  # answered before the upgrade: no 101
        assert (await response.json())["error"]["code"] == "too_many_sockets"
        assert_retry_after(response.headers.get("Retry-After"))

    bob = await Socket.open(client, "bob")
    await bob.send("b", "/echo bob is in")
    await bob.until_final("b")
    bob.assert_finished("b", "bob is in")
    # alice's open sockets still work.
    await second.send("s", "/echo still here")
    await second.until_final("s")
    second.assert_finished("s", "still here")

    await first.ws.close()
    await wait_for(lambda: registry.held()["sockets"] == 2, what="alice's first socket to be released")
    third = await Socket.open(client, "alice")
    await third.send("t", "/echo third")
    await third.until_final("t")
    third.assert_finished("t", "third")
    assert await rejections(client, "sockets_per_user") == 2

    for socket in (second, third, bob):
        await socket.ws.close()
    await idle(client)


# --- send frames per socket ----------------------------------------------------------------


async def test_sends_over_the_rate_get_rate_limited_frames_then_a_1008_close(gateway: StartGateway) -> None:
    limit = 3
    client = await gateway(settings(max_sends_per_minute=limit))
    socket = await Socket.open(client)
    admitted = [f"ok{i}" for i in range(limit)]
    for request_id in admitted:
        await socket.send(request_id, f"/echo {request_id}")
    await socket.until_final(*admitted)
    for request_id in admitted:
        socket.assert_finished(request_id, request_id)

    # Refusals while under the abuse threshold: an error frame each, the socket stays open.
    refused = [f"over{i}" for i in range(2 * limit - 1)]
    for request_id in refused:
        await socket.send(request_id, "/echo too much")
        await socket.until_final(request_id)
        frames = socket.of(request_id)
        assert [(f["type"], f.get("code")) for f in frames] == [("error", "rate_limited")], frames
    assert registry_of(client).counts()["connections"] == 1

    # A socket's window is its own: another socket of the same user still sends.
    other = await Socket.open(client)
    await other.send("fresh", "/echo fresh")
    await other.until_final("fresh")
    other.assert_finished("fresh", "fresh")

    # The last refusal the threshold allows: its error frame, then the socket is closed with 1008.
    await socket.send("flood", "/echo flood")
    assert await socket.close_code() == 1008
    last = socket.final("flood")
    assert last is not None and last["code"] == "rate_limited", socket.frames[-2:]
    assert await rejections(client, "sends_per_minute") == 2 * limit - 1
    assert await rejections(client, "send_flood") == 1

    await other.ws.close()
    await idle(client)


def test_the_send_window_slides_and_stays_bounded() -> None:
    window = SendWindow(2, window_s=60.0)
    assert [window.offer(t) for t in (0.0, 1.0)] == [SendVerdict.ADMIT, SendVerdict.ADMIT]
    assert window.offer(2.0) is SendVerdict.REFUSE
    assert window.retry_after_s(2.0) == 58  # until the send at 0.0 leaves the window
    assert window.offer(60.5) is SendVerdict.ADMIT  # the send at 0.0 has left the window
    assert window.offer(61.5) is SendVerdict.ADMIT  # and the one at 1.0
    assert window.offer(62.0) is SendVerdict.REFUSE
    assert window.offer(63.0) is SendVerdict.REFUSE
    assert window.offer(64.0) is SendVerdict.REFUSE
    assert window.offer(65.0) is SendVerdict.CLOSE  # 4 refusals in the window: 3x the limit sent
    assert window.offer(66.0) is SendVerdict.CLOSE  # a caller that does not close keeps hearing it


# --- live sessions per process -------------------------------------------------------------


async def test_a_live_start_over_the_cap_gets_an_error_frame_and_the_socket_carries_on(
    gateway: StartGateway,
) -> None:
    client = await gateway(settings(max_live_sessions=1))
    registry = registry_of(client)
    first, second = await Socket.open(client, "alice"), await Socket.open(client, "bob")
    await first.ws.send_json({"type": "live-start", "requestId": "live", "id": new_id("live")})
    await first.read_until(bool)  # its first frame
    assert first.frames == [{"type": "start", "requestId": "live"}]
    assert registry.held()["live_sessions"] == 1

    await second.ws.send_json({"type": "live-start", "requestId": "live2", "id": new_id("live")})
    await second.until_final("live2")
    refusal = second.final("live2")
    assert refusal is not None and refusal["type"] == "error" and refusal["code"] == "overloaded", refusal
    # The refused socket carries on, and a live session does not use up the run caps.
    await second.send("text", "/echo text still works")
    await second.until_final("text")
    second.assert_finished("text", "text still works")
    assert await rejections(client, "live_sessions") == 1

    await first.ws.send_json({"type": "live-stop", "requestId": "live"})
    await first.until_final("live")
    assert first.final("live") == {"type": "end", "requestId": "live"}
    await wait_for(lambda: registry.held()["live_sessions"] == 0, what="the live session to end")
    await second.ws.send_json({"type": "live-start", "requestId": "live3", "id": new_id("live")})
    await second.read_until(lambda _frames: bool(second.of("live3")))
    assert second.of("live3") == [{"type": "start", "requestId": "live3"}]

    await first.ws.close()
    await second.ws.close()
    await idle(client)
