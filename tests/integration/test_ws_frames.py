"""The WebSocket frame protocol on a raw socket (`GET /api/chat/ws`).

What ai 7's `WebSocketChatTransport` relies on (start / chunk{sequence} / end per requestId, many
requests on one socket), how bad input is answered (an `error` frame, the socket stays usable,
1008 after too many, 1009 for an oversized frame, other sockets never affected), `resume` and
`abort`, the Origin check before the upgrade, and the heartbeat that drops a silent client.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.keys import REGISTRY

Frame = dict[str, Any]
MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]

WAIT_S = 5.0
END_TYPES = {"end", "error", "no-active"}


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture
async def make_client(aiohttp_client: Any) -> AsyncIterator[MakeClient]:
    """Starts a gateway with the given settings (scripted model) and returns a client for it."""

    async def go(**overrides: Any) -> TestClient[Any, Any]:
        app = make_app(Settings(model="scripted", **overrides))
        client: TestClient[Any, Any] = await aiohttp_client(TestServer(app, handler_cancellation=True))
        return client

    yield go


def user_message(text: str, message_id: str | None = None) -> Frame:
    return {"id": message_id or f"u-{uuid.uuid4().hex[:8]}", "role": "user", "parts": [{"type": "text", "text": text}]}


def send_frame(request_id: str, chat_id: str, text: str, **extra: Any) -> Frame:
    return {
        "type": "send",
        "requestId": request_id,
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [user_message(text)],
        "headers": {},
        "body": {},
        **extra,
    }


async def receive_frame(ws: aiohttp.ClientWebSocketResponse) -> Frame:
    message = await ws.receive()
    assert message.type is WSMsgType.TEXT, f"expected a text frame, got {message}"
    frame: Frame = json.loads(message.data)
    return frame


async def read_until(
    ws: aiohttp.ClientWebSocketResponse, done: Callable[[list[Frame]], bool], timeout: float = WAIT_S
) -> list[Frame]:
    """Reads frames until `done(frames)` holds (bounded)."""
    frames: list[Frame] = []
    async with asyncio.timeout(timeout):
        while not done(frames):
            frames.append(await receive_frame(ws))
    return frames


def ended(*request_ids: str) -> Callable[[list[Frame]], bool]:
    """True once every request has its final frame (`end`, `error` or `no-active`)."""
    return lambda frames: all(
        any(f.get("requestId") == rid and f["type"] in END_TYPES for f in frames) for rid in request_ids
    )


def chunks_seen(request_id: str, count: int) -> Callable[[list[Frame]], bool]:
    return lambda frames: sum(1 for f in frames if f["type"] == "chunk" and f["requestId"] == request_id) >= count


def of(frames: list[Frame], request_id: str) -> list[Frame]:
    return [f for f in frames if f.get("requestId") == request_id]


def check_response(frames: list[Frame], request_id: str) -> list[Frame]:
    """Asserts one well-formed response (optional start, chunks numbered 0,1,2…, end); returns its chunks."""
    mine = of(frames, request_id)
    assert mine, f"no frames for {request_id}"
    if mine[0]["type"] == "start":
        mine = mine[1:]
    assert mine[-1] == {"type": "end", "requestId": request_id}, mine[-1]
    chunk_frames = mine[:-1]
    assert all(f["type"] == "chunk" for f in chunk_frames), [f["type"] for f in chunk_frames]
    assert [f["sequence"] for f in chunk_frames] == list(range(len(chunk_frames)))
    chunks = [f["chunk"] for f in chunk_frames]
    assert chunks[0]["type"] == "start"
    return chunks


def text_of(chunks: list[Frame]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


async def echo_works(ws: aiohttp.ClientWebSocketResponse, text: str = "still here") -> None:
    """A good `send` on the socket is answered in full."""
    rid = f"ok-{uuid.uuid4().hex[:8]}"
    await ws.send_json(send_frame(rid, f"chat-{rid}", f"/echo {text}"))
    frames = await read_until(ws, ended(rid))
    chunks = check_response(frames, rid)
    assert text_of(chunks) == text
    assert chunks[-1] == {**chunks[-1], "type": "finish", "finishReason": "stop"}


async def wait_for(condition: Callable[[], bool], timeout: float = WAIT_S) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def expect_close(ws: aiohttp.ClientWebSocketResponse, timeout: float = WAIT_S) -> aiohttp.WSMessage:
    """Reads (skipping pings and text) until the socket closes; returns the close message."""
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.receive()
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return message


# --- the happy path ------------------------------------------------------------------------


async def test_echo_over_a_raw_socket(make_client: MakeClient) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("r1", "chat-echo", "/echo hello world"))
        frames = await read_until(ws, ended("r1"))
        assert frames[0] == {"type": "start", "requestId": "r1"}
        chunks = check_response(frames, "r1")
        types = [c["type"] for c in chunks]
        assert types[:2] == ["start", "start-step"]
        assert types[-2:] == ["finish-step", "finish"]
        assert text_of(chunks) == "hello world"
        assert chunks[-1]["finishReason"] == "stop"


def awaited_chain(task: asyncio.Task[Any]) -> list[str]:
    """The names of the coroutines a task is suspended in, outermost first."""
    names: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and hasattr(awaited, "cr_code"):
        names.append(awaited.cr_code.co_name)
        awaited = awaited.cr_await
    return names


@pytest.mark.parametrize("auth", ["none", "jwt"])
async def test_an_idle_socket_keeps_no_middleware_frame(make_client: MakeClient, auth: str) -> None:
    """The socket's handler passes the door itself: while it idles, the only coroutine of ours
    on its task's stack is `chat_socket`; the door still refused a socket without a credential."""
    secret = "s" * 32
    client = await make_client(auth=auth, auth_jwt_secret=secret if auth == "jwt" else "")
    headers = {}
    if auth == "jwt":
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/api/chat/ws")
        assert refused.value.status == 401
        headers = {"Authorization": "Bearer " + jwt.encode({"sub": "alice"}, secret, algorithm="HS256")}
    async with client.ws_connect("/api/chat/ws", headers=headers) as ws:
        await ws.send_json(send_frame("r1", "chat-idle", "/echo hi"))
        await read_until(ws, ended("r1"))
        chains = [awaited_chain(t) for t in asyncio.all_tasks() if "chat_socket" in awaited_chain(t)]
        assert len(chains) == 1, chains
        ours = [name for name in chains[0] if name in {"_door", "_through_door", "chat_socket", "handle", "serve"}]
        assert ours == ["chat_socket"], chains[0]


async def test_two_chats_interleave_on_one_socket(make_client: MakeClient) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("ra", "chat-a", "/stream 10 20"))
        await ws.send_json(send_frame("rb", "chat-b", "/stream 10 20"))
        frames = await read_until(ws, ended("ra", "rb"))
        expected = "".join(f"tok{i} " for i in range(10))
        a, b = check_response(frames, "ra"), check_response(frames, "rb")
        assert text_of(a) == expected
        assert text_of(b) == expected
        assert a[0]["messageId"] != b[0]["messageId"]
        # Both ran at once: the second request's chunks arrive before the first one ends.
        first_b_chunk = next(i for i, f in enumerate(frames) if f["type"] == "chunk" and f["requestId"] == "rb")
        end_a = next(i for i, f in enumerate(frames) if f["type"] == "end" and f["requestId"] == "ra")
        assert first_b_chunk < end_a


# --- bad frames ----------------------------------------------------------------------------

BAD_FRAMES: list[tuple[str, str | bytes, str, str | None, str]] = [
    # (case, frame, code, requestId in the error frame, a word the errorText contains)
    ("not-json", "{nope", "invalid_json", None, "JSON"),
    ("json-array", "[1, 2]", "invalid_frame", None, "object"),
    ("json-string", '"send"', "invalid_frame", None, "object"),
    ("unknown-type", json.dumps({"type": "hello", "requestId": "x1"}), "unknown_type", "x1", "hello"),
    ("no-type", json.dumps({"requestId": "x2"}), "unknown_type", "x2", "type"),
    (
        "messages-not-a-list",
        json.dumps({**send_frame("x3", "c", "/echo a"), "messages": "x"}),
        "invalid_frame",
        "x3",
        "messages",
    ),
    (
        "headers-not-strings",
        json.dumps({**send_frame("x4", "c", "/echo a"), "headers": {"a": 1}}),
        "invalid_frame",
        "x4",
        "headers",
    ),
    ("body-not-object", json.dumps({**send_frame("x5", "c", "/echo a"), "body": [1]}), "invalid_frame", "x5", "body"),
    ("chat-id-with-slash", json.dumps(send_frame("x6", "a/b", "/echo a")), "invalid_frame", "x6", "id"),
    (
        "resume-bad-sequence",
        json.dumps({"type": "resume", "requestId": "x7", "id": "c", "lastSequence": "a"}),
        "invalid_frame",
        "x7",
        "lastSequence",
    ),
    ("abort-without-request-id", json.dumps({"type": "abort"}), "invalid_frame", None, "requestId"),
    ("binary-without-live-session", b"\x00\x01" * 64, "no_live_session", None, "live"),
]


@pytest.mark.parametrize(
    ("frame", "code", "request_id", "word"),
    [case[1:] for case in BAD_FRAMES],
    ids=[case[0] for case in BAD_FRAMES],
)
async def test_bad_frame_gets_error_and_socket_keeps_working(
    make_client: MakeClient, frame: str | bytes, code: str, request_id: str | None, word: str
) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as ws:
        if isinstance(frame, bytes):
            await ws.send_bytes(frame)
        else:
            await ws.send_str(frame)
        error = await asyncio.wait_for(receive_frame(ws), WAIT_S)
        assert error["type"] == "error"
        assert error["code"] == code
        assert error.get("requestId") == request_id
        assert word.lower() in error["errorText"].lower(), error["errorText"]
        assert "Traceback" not in error["errorText"]
        await echo_works(ws)


async def test_duplicate_request_id_is_refused_and_the_first_request_goes_on(make_client: MakeClient) -> None:
    client = await make_client()
    app = client.app
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("dup", "chat-dup", "/stream 200 20"))
        frames = await read_until(ws, chunks_seen("dup", 3))
        await ws.send_json(send_frame("dup", "chat-other", "/echo second"))
        await ws.send_json({"type": "resume", "requestId": "dup", "id": "chat-dup"})
        errors: list[Frame] = []

        def two_errors(new: list[Frame]) -> bool:
            errors[:] = [f for f in new if f["type"] == "error"]
            return len(errors) == 2

        frames += await read_until(ws, two_errors)
        for error in errors:
            assert error["requestId"] == "dup"
            assert error["code"] == "duplicate_request"
            assert "requestId" in error["errorText"]
        # The second send started nothing; the first stream is still running and numbered on.
        assert app[REGISTRY].counts()["runs"] == 1
        frames += await read_until(ws, lambda new: any(f["type"] == "chunk" for f in new))
        await ws.send_json({"type": "abort", "requestId": "dup"})
        frames += await read_until(ws, ended("dup"))
        chunks = check_response([f for f in frames if f["type"] != "error"], "dup")
        assert chunks[-1]["type"] == "abort"
        await echo_works(ws)


async def test_ten_bad_frames_close_the_socket_with_1008(make_client: MakeClient) -> None:
    client = await make_client()
    app = client.app
    async with client.ws_connect("/api/chat/ws") as ws:
        for _ in range(9):
            await ws.send_str("not json")
        errors = await read_until(ws, lambda frames: len(frames) == 9)
        assert {e["code"] for e in errors} == {"invalid_json"}
        await echo_works(ws)  # nine bad frames: still open
        await ws.send_str("[]")
        last = await asyncio.wait_for(receive_frame(ws), WAIT_S)
        assert last["type"] == "error"
        closing = await expect_close(ws)
        assert closing.type is WSMsgType.CLOSE, closing
        assert closing.data == 1008  # WSCloseCode.POLICY_VIOLATION
    await wait_for(lambda: app[REGISTRY].counts() == {"connections": 0, "runs": 0})


async def test_oversized_frame_closes_with_1009(make_client: MakeClient) -> None:
    client = await make_client(max_ws_frame_bytes=2048)
    app = client.app
    async with client.ws_connect("/api/chat/ws") as ws:
        # Just under the limit is fine.
        padded = send_frame("small", "chat-small", "/echo fits", body={"pad": "x" * 1500})
        assert len(json.dumps(padded)) < 2048
        await ws.send_json(padded)
        assert text_of(check_response(await read_until(ws, ended("small")), "small")) == "fits"
        big = send_frame("big", "chat-big", "/echo too big", body={"pad": "x" * 3000})
        await ws.send_json(big)
        closing = await expect_close(ws)
        assert closing.type is WSMsgType.CLOSE, closing
        assert closing.data == 1009  # WSCloseCode.MESSAGE_TOO_BIG
    await wait_for(lambda: app[REGISTRY].counts() == {"connections": 0, "runs": 0})


async def test_bad_frames_on_one_socket_never_disturb_another(make_client: MakeClient) -> None:
    client = await make_client(max_ws_frame_bytes=4096)
    async with client.ws_connect("/api/chat/ws") as good, client.ws_connect("/api/chat/ws") as bad:
        await good.send_json(send_frame("g", "chat-good", "/stream 30 10"))
        frames = await read_until(good, chunks_seen("g", 3))
        for _ in range(10):
            await bad.send_str("{")
        await bad.send_bytes(b"\x00")
        assert (await expect_close(bad)).data == 1008
        async with client.ws_connect("/api/chat/ws") as big:
            await big.send_str("x" * 5000)
            assert (await expect_close(big)).data == 1009
        frames += await read_until(good, ended("g"))
        chunks = check_response(frames, "g")
        assert text_of(chunks) == "".join(f"tok{i} " for i in range(30))
        assert chunks[-1]["finishReason"] == "stop"


# --- resume and abort ----------------------------------------------------------------------


async def test_resume_with_nothing_active_answers_no_active(make_client: MakeClient) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "resume", "requestId": "r0", "id": "never-used", "headers": {}, "body": {}})
        assert await asyncio.wait_for(receive_frame(ws), WAIT_S) == {"type": "no-active", "requestId": "r0"}
        # A finished response that its client received in full is not offered again.
        await ws.send_json(send_frame("r1", "chat-done", "/echo done"))
        check_response(await read_until(ws, ended("r1")), "r1")
        await ws.send_json({"type": "resume", "requestId": "r2", "id": "chat-done"})
        assert await asyncio.wait_for(receive_frame(ws), WAIT_S) == {"type": "no-active", "requestId": "r2"}
        await echo_works(ws)


async def test_resume_replays_an_active_stream_from_its_first_chunk(make_client: MakeClient) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as writer, client.ws_connect("/api/chat/ws") as reader:
        await writer.send_json(send_frame("w", "chat-live", "/stream 20 10"))
        written = await read_until(writer, chunks_seen("w", 5))
        await reader.send_json({"type": "resume", "requestId": "rs", "id": "chat-live"})
        replayed = await read_until(reader, ended("rs"))
        written += await read_until(writer, ended("w"))
        original, replay = check_response(written, "w"), check_response(replayed, "rs")
        assert replayed[0] == {"type": "start", "requestId": "rs"}
        assert replay == original
        # lastSequence: only what comes after it, numbered on from there.
        await reader.send_json({"type": "resume", "requestId": "rs2", "id": "chat-live", "lastSequence": 3})
        frames = await read_until(reader, ended("rs2"))
        assert of(frames, "rs2") == [{"type": "no-active", "requestId": "rs2"}]  # delivered in full already


async def test_abort_stops_the_run_and_the_chat_takes_the_next_send(make_client: MakeClient) -> None:
    client = await make_client()
    registry = client.app[REGISTRY]
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("long", "chat-abort", "/stream 200 20"))
        frames = await read_until(ws, chunks_seen("long", 6))
        assert registry.active_run(("anonymous", "chat-abort")) is not None
        await ws.send_json({"type": "abort", "requestId": "long"})
        frames += await read_until(ws, ended("long"))
        chunks = check_response(frames, "long")
        assert chunks[-1]["type"] == "abort"
        assert 0 < len(text_of(chunks).split()) < 200
        assert registry.active_run(("anonymous", "chat-abort")) is None
        assert registry.counts()["runs"] == 0
        # The same chat answers the next message at once (no chat_busy).
        await ws.send_json(send_frame("next", "chat-abort", "/echo after abort"))
        after = await read_until(ws, ended("next"))
        assert text_of(check_response(after, "next")) == "after abort"


async def test_abort_of_an_unknown_request_is_ignored(make_client: MakeClient) -> None:
    client = await make_client()
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "abort", "requestId": "nobody"})
        await echo_works(ws)


# --- Origin --------------------------------------------------------------------------------


async def handshake_status(client: TestClient[Any, Any], origin: str | None) -> int:
    """The status of a WebSocket handshake with this Origin (101 when it upgrades)."""
    headers = {"Origin": origin} if origin is not None else {}
    try:
        ws = await client.ws_connect("/api/chat/ws", headers=headers)
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status
    await ws.close()
    return 101


async def test_disallowed_origin_is_refused_before_the_upgrade(make_client: MakeClient) -> None:
    client = await make_client(allowed_origins="https://good.example")
    assert await handshake_status(client, "https://evil.example") == 403
    assert await handshake_status(client, "https://good.example") == 101
    assert await handshake_status(client, "https://good.example/") == 101
    assert await handshake_status(client, None) == 101  # not a browser
    # The refusal is a plain HTTP answer with the gateway's error body.
    response = await client.get(
        "/api/chat/ws",
        headers={
            "Origin": "https://evil.example",
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "origin_refused"
    assert client.app[REGISTRY].counts()["connections"] == 0


async def test_default_origin_rule_is_same_host_only(make_client: MakeClient) -> None:
    client = await make_client()
    host = f"{client.server.host}:{client.server.port}"
    assert await handshake_status(client, f"http://{host}") == 101
    assert await handshake_status(client, "http://evil.example") == 403
    assert await handshake_status(client, f"http://localhost:{client.server.port}") == 403
    assert await handshake_status(client, f"http://{client.server.host}:1") == 403
    assert await handshake_status(client, None) == 101


async def test_allowed_origins_star_allows_any(make_client: MakeClient) -> None:
    # Only with authentication: '*' with --auth none stops the start (tests/integration/test_doors.py).
    secret = "s" * 32
    client = await make_client(allowed_origins="*", auth="jwt", auth_jwt_secret=secret)
    token = jwt.encode({"sub": "alice"}, secret, algorithm="HS256")
    ws = await client.ws_connect("/api/chat/ws", headers={"Origin": "https://anything.example",
                                                          "Authorization": f"Bearer {token}"})
    await ws.close()


# --- heartbeat -----------------------------------------------------------------------------


async def test_heartbeat_drops_a_client_that_never_answers_pings(make_client: MakeClient) -> None:
    client = await make_client(ws_heartbeat_s=0.2)
    registry = client.app[REGISTRY]
    ws = await client.ws_connect("/api/chat/ws", autoping=False)
    try:
        pings = 0
        async with asyncio.timeout(WAIT_S):
            while True:
                message = await ws.receive()
                if message.type is WSMsgType.PING:
                    pings += 1  # never answered
                    continue
                break
        assert pings >= 1
        assert message.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR), message
        await wait_for(lambda: registry.counts() == {"connections": 0, "runs": 0})
    finally:
        await ws.close()


async def test_heartbeat_keeps_a_client_that_answers(make_client: MakeClient) -> None:
    client = await make_client(ws_heartbeat_s=0.2)
    async with client.ws_connect("/api/chat/ws") as ws:  # autoping answers
        await ws.send_json(send_frame("slow", "chat-slow", "/stream 8 100"))  # ~4 heartbeats long
        chunks = check_response(await read_until(ws, ended("slow")), "slow")
        assert text_of(chunks) == "".join(f"tok{i} " for i in range(8))
        await echo_works(ws)
