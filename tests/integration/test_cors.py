"""CORS for chat apps served from another origin (`--allowed-origins`, or its older name `--cors-origins`)."""

from __future__ import annotations

from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.app import make_app
from adk_gateway.config import Settings

APP = "http://localhost:3000"
BODY = {"id": "cors", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "/echo hi"}]}]}
PREFLIGHT = {
    "Origin": APP,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type",
}


async def client_for(aiohttp_client: Any, **settings: Any) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(TestServer(make_app(Settings(**settings))))
    return client


async def test_allowed_origin_gets_preflight_and_stream_headers(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, cors_origins=f"{APP}, https://other.example")
    preflight = await client.options("/api/chat", headers=PREFLIGHT)
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert "content-type" in preflight.headers["Access-Control-Allow-Headers"]
    response = await client.post("/api/chat", json=BODY, headers={"Origin": APP})
    assert response.status == 200
    assert response.headers["Access-Control-Allow-Origin"] == APP
    assert response.headers["Vary"] == "Origin"
    # A listed origin may send credentials (`credentials: 'include'`).
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert "data: [DONE]" in await response.text()
    resume = await client.get("/api/chat/cors/stream", headers={"Origin": APP})
    assert resume.status == 204
    assert resume.headers["Access-Control-Allow-Origin"] == APP


async def test_an_allowed_apps_own_headers_pass_the_preflight(aiohttp_client: Any) -> None:
    # useChat's transports take extra `headers`: an app on an allowed origin may send its own.
    client = await client_for(aiohttp_client, cors_origins=APP)
    asked = "Content-Type, Authorization, X-Tenant, x-tenant, bad header"
    preflight = await client.options("/api/chat", headers={**PREFLIGHT, "Access-Control-Request-Headers": asked})
    assert preflight.status == 204
    allowed = [name.strip() for name in preflight.headers["Access-Control-Allow-Headers"].split(",")]
    assert {"content-type", "authorization", "x-ai-sdk-major", "x-tenant"} <= set(allowed)
    assert allowed.count("x-tenant") == 1 and "bad header" not in allowed
    assert "Access-Control-Request-Headers" in preflight.headers["Vary"]
    other = await client.options("/api/chat", headers={**PREFLIGHT, "Origin": "https://evil.example",
                                                       "Access-Control-Request-Headers": "x-tenant"})
    assert other.status == 403 and "Access-Control-Allow-Headers" not in other.headers


async def test_other_origins_get_no_cors(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, cors_origins=APP)
    preflight = await client.options("/api/chat", headers={**PREFLIGHT, "Origin": "https://evil.example"})
    assert preflight.status == 403
    assert "Access-Control-Allow-Origin" not in preflight.headers
    response = await client.post("/api/chat", json=BODY, headers={"Origin": "https://evil.example"})
    assert response.status == 403
    assert "Access-Control-Allow-Origin" not in response.headers


async def test_off_by_default(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    preflight = await client.options("/api/chat", headers=PREFLIGHT)
    assert preflight.status == 403
    # Without CORS a POST from another origin is refused outright (CSRF), not only unreadable.
    response = await client.post("/api/chat", json=BODY, headers={"Origin": APP})
    assert response.status == 403 and (await response.json())["error"]["code"] == "origin_refused"
    assert "Access-Control-Allow-Origin" not in response.headers


async def test_wildcard(aiohttp_client: Any) -> None:
    # Only with authentication: '*' with --auth none stops the start (tests/integration/test_doors.py).
    secret = "cors-wildcard-secret-0123456789abcdef"
    client = await client_for(aiohttp_client, cors_origins="*", auth="jwt", auth_jwt_secret=secret)
    preflight = await client.options("/api/chat", headers=PREFLIGHT)
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    # The wildcard never admits credentials (browsers refuse `*` with them).
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    token = jwt.encode({"sub": "alice"}, secret, algorithm="HS256")
    response = await client.post("/api/chat", json=BODY, headers={"Origin": APP, "Authorization": f"Bearer {token}"})
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers


@pytest.mark.parametrize("setting", ["allowed_origins", "cors_origins"])
async def test_one_setting_lets_a_page_use_http_and_the_websocket(aiohttp_client: Any, setting: str) -> None:
    # One list for both: either name alone gives the page CORS and the socket.
    client = await client_for(aiohttp_client, **{setting: APP})
    preflight = await client.options("/api/chat", headers=PREFLIGHT)
    assert preflight.status == 204 and preflight.headers["Access-Control-Allow-Origin"] == APP
    response = await client.post("/api/chat", json=BODY, headers={"Origin": APP})
    assert response.status == 200 and response.headers["Access-Control-Allow-Origin"] == APP
    assert "data: [DONE]" in await response.text()
    async with client.ws_connect("/api/chat/ws", headers={"Origin": APP}) as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": "cors-ws", "trigger": "submit-message",
                            "messages": BODY["messages"], "headers": {}, "body": {}})
        frames = [await ws.receive_json(timeout=5)]
        while frames[-1]["type"] not in ("end", "error"):
            frames.append(await ws.receive_json(timeout=5))
    assert frames[-1] == {"type": "end", "requestId": "r1"}
    assert "".join(f["chunk"].get("delta", "") for f in frames if f["type"] == "chunk") == "hi"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/api/chat/ws", headers={"Origin": "https://evil.example"})
    assert refused.value.status == 403
