"""The gateway behind nginx with deploy/nginx/adk-gateway.conf.

One gateway process (`--keepalive-s 0.5`) and one nginx in front of it, whose
`proxy_read_timeout` is cut to 2 s so that only the gateway's keep-alive comments can keep an
idle stream open. Checks are structural, not timing thresholds: an event "arrives unbuffered"
when it reaches the client while the gateway still reports the run as active.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from .conftest import GatewayProcess, Nginx, chat_body, read_sse, user_message

pytestmark = pytest.mark.services

READ_TIMEOUT = "2s"


@pytest.fixture(scope="module")
def proxied(
    start_gateway: Callable[..., GatewayProcess], start_nginx: Callable[..., Nginx]
) -> tuple[GatewayProcess, Nginx]:
    gateway = start_gateway("--keepalive-s", "0.5")
    nginx = start_nginx([gateway.port], read_timeout=READ_TIMEOUT)
    return gateway, nginx


async def _active_runs(session: aiohttp.ClientSession, gateway: GatewayProcess) -> float:
    async with session.get(f"{gateway.url}/metrics") as response:
        text = await response.text()
    match = re.search(r"^adk_gateway_active_runs (\S+)$", text, re.M)
    assert match, "no adk_gateway_active_runs in /metrics"
    return float(match.group(1))


async def test_health_through_nginx(proxied: tuple[GatewayProcess, Nginx]) -> None:
    _, nginx = proxied
    async with aiohttp.ClientSession() as session, session.get(f"{nginx.url}/healthz") as response:
        assert response.status == 200
        assert await response.json() == {"status": "ok"}


async def test_sse_arrives_unbuffered(proxied: tuple[GatewayProcess, Nginx]) -> None:
    gateway, nginx = proxied
    active_at_first_delta: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def on_chunk(chunk: dict[str, Any]) -> None:
            if chunk["type"] == "text-delta" and not active_at_first_delta:
                active_at_first_delta.append(await _active_runs(session, gateway))

        body = chat_body(f"nginx-{uuid.uuid4().hex[:8]}", "/stream 20 100")
        # Large bodies go as a stream (aiohttp warns that raw bytes this big would hold its loop).
        async with session.post(f"{nginx.url}/api/chat", data=io.BytesIO(json.dumps(body).encode()),
                                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
            read = await read_sse(response, on_chunk=on_chunk)
    assert read.done
    assert read.text() == "".join(f"tok{i} " for i in range(20))
    assert read.chunks[-1]["type"] == "finish"
    # The first delta reached the client through nginx while the run was still going (a
    # buffering proxy would have held it until the end, when the run is over).
    assert active_at_first_delta == [1.0]


async def test_idle_stream_survives_a_short_read_timeout(proxied: tuple[GatewayProcess, Nginx]) -> None:
    """2.5 s between tokens, nginx gives up after 2 s of silence: the keep-alives carry it."""
    _, nginx = proxied
    assert f"proxy_read_timeout {READ_TIMEOUT};" in nginx.site_conf
    stamps: list[float] = []
    async with aiohttp.ClientSession() as session:
        body = chat_body(f"nginx-{uuid.uuid4().hex[:8]}", "/stream 3 2500")
        # Large bodies go as a stream (aiohttp warns that raw bytes this big would hold its loop).
        async with session.post(f"{nginx.url}/api/chat", data=io.BytesIO(json.dumps(body).encode()),
                                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200
            read = await read_sse(response, on_chunk=lambda chunk: stamps.append(time.monotonic()))
    assert read.done, f"the stream was cut; nginx said:\n{nginx.error_log()}"
    assert read.text() == "tok0 tok1 tok2 "
    assert read.chunks[-1]["type"] == "finish"
    # The keep-alive comments passed through the proxy, and the gaps they covered were longer
    # than nginx's read timeout (else this test would prove nothing).
    assert read.comments.count("keep-alive") >= 3
    deltas = [t for t, c in zip(stamps, read.chunks, strict=True) if c["type"] == "text-delta"]
    assert max(b - a for a, b in itertools.pairwise(deltas)) > 2.0


async def test_websocket_through_nginx(proxied: tuple[GatewayProcess, Nginx]) -> None:
    _, nginx = proxied
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{nginx.url}/api/chat/ws") as ws:
        # Reaching here means nginx answered the handshake with 101 Switching Protocols.
        await ws.send_str(json.dumps({
            "type": "send",
            "requestId": "r1",
            "id": f"nginx-ws-{uuid.uuid4().hex[:8]}",
            "trigger": "submit-message",
            "messages": [user_message("/echo hello through the proxy")],
        }))
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] not in ("end", "error"):
            message = await ws.receive(timeout=10)
            assert message.type == aiohttp.WSMsgType.TEXT, message
            frames.append(json.loads(message.data))
    assert frames[0] == {"type": "start", "requestId": "r1"}
    assert frames[-1] == {"type": "end", "requestId": "r1"}
    chunks = [f["chunk"] for f in frames if f["type"] == "chunk"]
    assert [f["sequence"] for f in frames if f["type"] == "chunk"] == list(range(len(chunks)))
    text = "".join(c.get("delta", "") for c in chunks if c["type"] == "text-delta")
    assert text == "hello through the proxy"


async def test_body_limit_matches_the_gateway(proxied: tuple[GatewayProcess, Nginx]) -> None:
    """nginx's own default (1 MiB) would refuse this 2 MiB body; the config raises it to 10 MiB."""
    _, nginx = proxied
    body = chat_body(f"nginx-{uuid.uuid4().hex[:8]}", "/echo big")
    body["padding"] = "x" * (2 * 1024 * 1024)
    async with aiohttp.ClientSession() as session:
        # Large bodies go as a stream (aiohttp warns that raw bytes this big would hold its loop).
        async with session.post(f"{nginx.url}/api/chat", data=io.BytesIO(json.dumps(body).encode()),
                                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200
            read = await read_sse(response)
        assert read.text() == "big"
        too_big = b"{" + b" " * (10 * 1024 * 1024 + 16) + b"}"
        async with session.post(f"{nginx.url}/api/chat", data=io.BytesIO(too_big),
                                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 413


async def test_the_proxy_strips_user_headers_and_logs_no_token(proxied: tuple[GatewayProcess, Nginx]) -> None:
    """Behind nginx a client cannot name a user with x-user-id, and the access log never holds the
    WebSocket's ?access_token= (nginx logs the path without its query)."""
    _, nginx = proxied
    token = f"tok-{uuid.uuid4().hex}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{nginx.url}/api/me", headers={"x-user-id": "mallory"}) as response:
            assert (await response.json())["user"] == "anonymous"
        async with session.ws_connect(f"{nginx.url}/api/chat/ws", params={"access_token": token}) as ws:
            await ws.close()
    deadline = time.monotonic() + 5
    while "/api/chat/ws" not in nginx.access_log() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # nginx writes the line when the proxied socket closes
    logged = nginx.access_log()
    assert "/api/chat/ws" in logged and "/api/me" in logged
    assert token not in logged and "access_token" not in logged
