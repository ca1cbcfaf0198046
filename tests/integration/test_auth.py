"""Authentication: who may call, and that a caller only ever reaches its own chats.

JWT (HS256 secret, RS256/ES256 keys from a JWKS served by the test, with key rotation), API keys,
the WebSocket handshake (`?access_token=`), frame headers that try to change the user, CSRF
guards on POSTs, and ownership of chats, streams, stops and approvals across users.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.adk.sessions import InMemorySessionService

from adk_gateway.agents.adk import AgentHost
from adk_gateway.core.errors import Unauthorized
from adk_gateway.keys import AUTH, REGISTRY
from adk_gateway.services.auth import ApiKeyAuth, ApiKeyFileError, JwksCache, read_api_keys

from .conftest import StartGateway
from .support import (
    Conversation,
    LiveStream,
    ToolLog,
    chat_body,
    counting_agent,
    new_id,
    post_chat,
    settings,
    user_message,
    wait_for,
)

SECRET = "test-secret-for-hs256-which-is-long-enough"


def hs256(sub: str | None = "alice", *, secret: str = SECRET, **claims: Any) -> str:
    payload: dict[str, Any] = {"exp": int(time.time()) + 600, **claims}
    if sub is not None:
        payload["sub"] = sub
    return jwt.encode(payload, secret, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def jwt_settings(**overrides: Any) -> Any:
    return settings(auth="jwt", auth_jwt_secret=SECRET, **overrides)


BAD_CREDENTIALS: dict[str, dict[str, str]] = {
    "missing": {},
    "wrong_signature": bearer(hs256(secret="another-secret-of-the-same-sort-000")),
    "expired": bearer(hs256(exp=int(time.time()) - 3600)),
    "not_yet_valid": bearer(hs256(nbf=int(time.time()) + 3600)),
    "malformed": bearer("not.a.jwt"),
    "garbage": bearer("x"),
    "no_sub": bearer(hs256(None)),
    "alg_none": bearer(jwt.encode({"sub": "alice"}, key=None, algorithm="none")),
    "basic_scheme": {"Authorization": "Basic YWxpY2U6cGFzcw=="},
    "user_header_only": {"x-user-id": "alice"},
}


async def assert_unauthorized(response: aiohttp.ClientResponse) -> None:
    assert response.status == 401, await response.text()
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    body = await response.json()
    assert body["error"]["code"] == "unauthorized" and body["error"]["message"]


# --- who may call -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(BAD_CREDENTIALS))
async def test_every_chat_endpoint_refuses_a_bad_credential(gateway: StartGateway, case: str) -> None:
    client = await gateway(jwt_settings())
    headers = BAD_CREDENTIALS[case]
    chat_id = new_id("c")
    body = chat_body(chat_id, [user_message("/echo hi")], userId="alice")
    async with client.post("/api/chat", json=body, headers=headers) as response:
        await assert_unauthorized(response)
    async with client.get(f"/api/chat/{chat_id}/stream", headers=headers) as response:
        await assert_unauthorized(response)
    async with client.post(f"/api/chat/{chat_id}/stop", json={}, headers=headers) as response:
        await assert_unauthorized(response)
    async with client.get("/api/me", headers=headers) as response:
        await assert_unauthorized(response)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/api/chat/ws", headers=headers)
    assert refused.value.status == 401
    token = headers.get("Authorization", "").removeprefix("Bearer ").removeprefix("Basic ")
    if token:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/api/chat/ws", params={"access_token": token})
        assert refused.value.status == 401
    # Public endpoints need nothing; nothing was started.
    for path in ("/healthz", "/readyz", "/metrics"):
        async with client.get(path) as response:
            assert response.status == 200, path
    assert client.app[REGISTRY].counts()["runs"] == 0


async def test_a_valid_token_chats_and_names_its_user(gateway: StartGateway) -> None:
    client = await gateway(jwt_settings())
    async with client.get("/api/me", headers=bearer(hs256("alice"))) as response:
        assert await response.json() == {"user": "alice", "auth": "jwt"}
    reply = await post_chat(client, chat_body(new_id("c"), [user_message("/echo hello there")]),
                            headers=bearer(hs256("alice")))
    assert reply.status == 200 and reply.text == "hello there" and reply.done
    # An expiry inside the leeway still counts as valid (clock skew between machines).
    async with client.get("/api/me", headers=bearer(hs256("alice", exp=int(time.time()) - 5))) as response:
        assert response.status == 200


async def test_audience_and_issuer_are_checked_when_set(gateway: StartGateway) -> None:
    client = await gateway(jwt_settings(auth_jwt_audience="chat-app", auth_jwt_issuer="https://issuer.test/"))
    good = hs256("alice", aud="chat-app", iss="https://issuer.test/")
    async with client.get("/api/me", headers=bearer(good)) as response:
        assert response.status == 200
    for token in (hs256("alice", aud="other", iss="https://issuer.test/"),
                  hs256("alice", aud="chat-app", iss="https://evil.test/"),
                  hs256("alice")):
        async with client.get("/api/me", headers=bearer(token)) as response:
            await assert_unauthorized(response)


async def test_none_mode_keeps_the_claimed_user(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.get("/api/me", headers={"x-user-id": "carol"}) as response:
        assert await response.json() == {"user": "carol", "auth": "none"}
    async with client.get("/api/me") as response:
        assert await response.json() == {"user": "anonymous", "auth": "none"}


# --- JWKS -------------------------------------------------------------------------------------------


class KeyServer:
    """A JWKS endpoint the test controls, and the private keys behind it."""

    def __init__(self) -> None:
        self.private: dict[str, Any] = {}
        self.published: list[str] = []
        self.requests = 0

    def add_rsa(self, kid: str) -> None:
        self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def add_ec(self, kid: str) -> None:
        self.private[kid] = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.published:
            key = self.private[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "RS256"
            else:
                jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "ES256"
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}

    def token(self, kid: str, sub: str = "alice", **claims: Any) -> str:
        key = self.private[kid]
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        payload = {"sub": sub, "exp": int(time.time()) + 600, **claims}
        return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.json_response(self.jwks())


@pytest.fixture
async def key_server(aiohttp_server: Any) -> tuple[KeyServer, str]:
    keys = KeyServer()
    app = web.Application()
    app.router.add_get("/.well-known/jwks.json", keys.handle)
    server = await aiohttp_server(app)
    return keys, str(server.make_url("/.well-known/jwks.json"))


async def me(client: TestClient[Any, Any], token: str) -> int:
    async with client.get("/api/me", headers=bearer(token)) as response:
        return response.status


async def test_jwks_keys_verify_rs256_and_es256_and_rotate_by_kid(
    gateway: StartGateway, key_server: tuple[KeyServer, str]
) -> None:
    keys, url = key_server
    keys.add_rsa("rsa-1")
    keys.add_ec("ec-1")
    keys.published = ["rsa-1", "ec-1"]
    client = await gateway(settings(auth="jwt", auth_jwks_url=url))
    assert await me(client, keys.token("rsa-1")) == 200
    assert await me(client, keys.token("ec-1", sub="bob")) == 200
    assert keys.requests == 1  # cached

    # Rotation: a new key appears under a new kid; the first token that names it makes the
    # gateway fetch the set again, and the retired key stops working.
    keys.add_rsa("rsa-2")
    keys.published = ["rsa-2", "ec-1"]
    assert await me(client, keys.token("rsa-2")) == 200
    assert keys.requests == 2
    assert await me(client, keys.token("rsa-1")) == 401

    # Unknown kids do not make the gateway hammer the key server (one miss fetch per cool-down).
    keys.add_rsa("never-published")
    for _ in range(5):
        assert await me(client, keys.token("never-published")) == 401
    assert keys.requests <= 3

    # A key of the wrong type for the algorithm, an HS256 token (no secret configured), and a token
    # signed by an unpublished key under a published kid are all refused.
    forged = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, keys.private["never-published"],
                        algorithm="RS256", headers={"kid": "rsa-2"})
    assert await me(client, forged) == 401
    assert await me(client, hs256("alice")) == 401
    assert await me(client, jwt.encode({"sub": "a"}, keys.private["ec-1"], algorithm="ES256",
                                       headers={"kid": "rsa-2"})) == 401


async def test_jwks_cache_single_flight_and_cooldown(key_server: tuple[KeyServer, str]) -> None:
    import asyncio

    keys, url = key_server
    keys.add_rsa("k1")
    keys.published = ["k1"]
    cache = JwksCache(url, ttl_s=300, miss_cooldown_s=0)
    try:
        found = await asyncio.gather(*(cache.key("k1") for _ in range(10)))
        assert {k.key_id for k in found} == {"k1"} and keys.requests == 1
        keys.add_rsa("k2")
        keys.published = ["k1", "k2"]
        assert (await cache.key("k2")).key_id == "k2" and keys.requests == 2
        # A token without kid: only usable while the set holds a single key.
        with pytest.raises(Unauthorized):
            await cache.key(None)
    finally:
        await cache.aclose()


# --- API keys ---------------------------------------------------------------------------------------


def write_keys(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def test_api_keys_file_maps_keys_to_users_and_rotates(gateway: StartGateway, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys", "# key user\nkey-alice-0001 alice\n\nkey-bob-0002 bob\n")
    client = await gateway(settings(auth="api-keys", auth_api_keys_file=str(keys)))
    assert await me(client, "key-alice-0001") == 200
    async with client.get("/api/me", headers=bearer("key-bob-0002")) as response:
        assert await response.json() == {"user": "bob", "auth": "api-keys"}
    assert await me(client, "key-alice-000") == 401
    assert await me(client, "key-alice-00011") == 401
    reply = await post_chat(client, chat_body(new_id("c"), [user_message("/echo by key")]),
                            headers=bearer("key-bob-0002"))
    assert reply.text == "by key"

    # Rotation without a restart: the file changes, the next request sees it.
    auth = client.app[AUTH]
    assert isinstance(auth, ApiKeyAuth)
    auth.RECHECK_S = 0
    write_keys(keys, "key-alice-0003 alice\nkey-bob-0002 bob\n")
    assert await me(client, "key-alice-0003") == 200
    assert await me(client, "key-alice-0001") == 401
    # A broken file keeps the keys read last in force.
    write_keys(keys, "only-one-field\n")
    assert await me(client, "key-alice-0003") == 200


def test_api_keys_file_errors_never_show_a_key(tmp_path: Path) -> None:
    with pytest.raises(ApiKeyFileError) as bad:
        read_api_keys(write_keys(tmp_path / "k1", "secret-key-123 alice extra\n"))
    assert "line 1" in str(bad.value) and "secret-key-123" not in str(bad.value)
    with pytest.raises(ApiKeyFileError, match="already listed"):
        read_api_keys(write_keys(tmp_path / "k2", "same alice\nsame bob\n"))
    with pytest.raises(ApiKeyFileError, match="cannot read"):
        read_api_keys(tmp_path / "missing")


# --- the WebSocket ----------------------------------------------------------------------------------


async def ws_frames(ws: aiohttp.ClientWebSocketResponse, request_id: str) -> list[dict[str, Any]]:
    """Frames for one request until its end, error or no-active."""
    frames = []
    async for message in ws:
        frame = json.loads(message.data)
        if frame.get("requestId") != request_id:
            continue
        frames.append(frame)
        if frame["type"] in ("end", "error", "no-active"):
            return frames
    raise AssertionError(f"socket closed before {request_id} ended: {frames}")


def send_frame(request_id: str, chat_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "send", "requestId": request_id, "id": chat_id, "trigger": "submit-message",
            "messages": [user_message(text)], "headers": {}, "body": {}, **extra}


async def test_socket_identity_is_fixed_at_the_handshake(gateway: StartGateway) -> None:
    client = await gateway(jwt_settings(detach_on_disconnect=True))
    chat_id = new_id("c")
    alice = await client.ws_connect("/api/chat/ws", params={"access_token": hs256("alice")})
    bob = await client.ws_connect("/api/chat/ws", headers=bearer(hs256("bob")))
    try:
        await alice.send_json(send_frame("a1", chat_id, "/stream 30 20"))
        # Bob names alice in every way a frame can: headers, body. He only ever reaches his own chats.
        claims = {"headers": {"x-user-id": "alice"}, "body": {"userId": "alice"}}
        await bob.send_json({"type": "resume", "requestId": "b1", "id": chat_id, **claims})
        assert [f["type"] for f in await ws_frames(bob, "b1")] == ["no-active"]
        # His abort names a request of his own socket only: nothing of alice's stops.
        await bob.send_json({"type": "abort", "requestId": "a1"})
        # A frame carrying alice's credential on bob's socket is refused; the socket carries on.
        alices_credential = {"authorization": f"Bearer {hs256('alice')}"}
        await bob.send_json(send_frame("b2", chat_id, "/echo mine", headers=alices_credential))
        refused = await ws_frames(bob, "b2")
        assert refused[-1]["type"] == "error" and refused[-1].get("code") == "unauthorized", refused
        await bob.send_json(send_frame("b3", chat_id, "/echo mine", **claims))
        own = await ws_frames(bob, "b3")
        assert own[-1]["type"] == "end"
        assert "".join(f["chunk"].get("delta", "") for f in own if f["type"] == "chunk") == "mine"
        # Alice's stream was never touched.
        frames = await ws_frames(alice, "a1")
        chunks = [f["chunk"] for f in frames if f["type"] == "chunk"]
        assert frames[-1]["type"] == "end"
        assert sum(c["type"] == "text-delta" for c in chunks) == 30
        assert chunks[-1]["type"] == "finish" and chunks[-1].get("finishReason") == "stop"
    finally:
        await alice.close()
        await bob.close()


# --- CSRF -------------------------------------------------------------------------------------------


async def test_cross_site_posts_start_nothing(gateway: StartGateway) -> None:
    client = await gateway(settings(cors_origins="https://app.example"))
    body = json.dumps(chat_body(new_id("c"), [user_message("/echo hi")]))
    # A cross-site form or text/plain fetch (no preflight) is refused before it reaches a run.
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        async with client.post("/api/chat", data=body, headers={"Content-Type": content_type}) as response:
            assert response.status == 415 and (await response.json())["error"]["code"] == "unsupported_media_type"
    async with client.post("/api/chat", data=body) as response:  # no content type at all
        assert response.status == 415
    async with client.post("/api/chat/some-chat/stop", data="") as response:
        assert response.status == 415
    # A JSON POST from an origin that is neither ours nor allowed.
    async with client.post("/api/chat", data=body, headers={"Content-Type": "application/json",
                                                           "Origin": "https://evil.example"}) as response:
        assert response.status == 403 and (await response.json())["error"]["code"] == "origin_refused"
    async with client.post("/api/chat/some-chat/stop", json={}, headers={"Origin": "null"}) as response:
        assert response.status == 403
    assert client.app[REGISTRY].counts()["runs"] == 0
    # Our own page and an allowed chat app on another origin get through.
    host = f"{client.host}:{client.port}"
    for origin in (f"http://{host}", "https://app.example"):
        reply = await post_chat(client, json.loads(body) | {"id": new_id("c")}, headers={"Origin": origin})
        assert reply.status == 200 and reply.text == "hi", origin


async def test_metrics_token(gateway: StartGateway) -> None:
    client = await gateway(settings(metrics_token="scrape-me"))
    async with client.get("/metrics") as response:
        assert response.status == 401
    async with client.get("/metrics", headers=bearer("wrong")) as response:
        assert response.status == 401
    async with client.get("/metrics", headers=bearer("scrape-me")) as response:
        assert response.status == 200 and "adk_gateway_auth_refused" in await response.text()


# --- ownership across users -------------------------------------------------------------------------


async def test_another_users_chat_id_is_an_unknown_chat(gateway: StartGateway) -> None:
    log = ToolLog()
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(auth="jwt", auth_jwt_secret=SECRET, detach_on_disconnect=True), host=host)
    alice_h, bob_h = bearer(hs256("alice")), bearer(hs256("bob"))
    bob_claims = {**bob_h, "x-user-id": "alice"}
    chat_id = new_id("shared")

    # Alice's run streams; bob, naming alice everywhere, cannot resume or stop it.
    stream = await LiveStream.open(client, chat_body(chat_id, [user_message("/stream 30 20")]), headers=alice_h)
    await stream.take(3)
    async with client.get(f"/api/chat/{chat_id}/stream", headers=bob_claims) as response:
        assert response.status == 204
    async with client.post(f"/api/chat/{chat_id}/stop", json={"userId": "alice"}, headers=bob_claims) as response:
        assert await response.json() == {"stopped": False}
    # Bob's POST with alice's chat id is a new chat of his own (not 409 chat_busy).
    bobs = await post_chat(client, chat_body(chat_id, [user_message("/echo bob here")], userId="alice"),
                           headers=bob_claims)
    assert bobs.status == 200 and bobs.text == "bob here"
    alice_reply = await stream.rest()
    assert alice_reply.types.count("text-delta") == 30 and alice_reply.finish_reason == "stop"

    # Alice's approval: bob's copy of her history cannot answer it, alice still can, exactly once.
    alice = Conversation(client, new_id("pay"))
    alice.headers = dict(alice_h)
    asked = await alice.send('/tool guarded {"item": "x"}')
    assert asked.finish_reason == "tool-calls" and alice.pending_approvals()
    bob = alice.fork()
    bob.headers = {**bob_h, "x-user-id": "alice"}
    refused = await bob.approve(True)
    assert refused.status == 403 and refused.error_code == "approval_invalid"
    answer_body = bob.continuation_body()
    assert log.count("guarded") == 0
    answered = await alice.approve(True)
    assert answered.status == 200 and answered.of_type("tool-output-available")
    assert log.count("guarded") == 1
    replayed = await post_chat(client, answer_body, headers=alice_h)  # the same answer again
    assert replayed.status == 403 and replayed.error_code == "approval_invalid"
    assert log.count("guarded") == 1


async def test_the_stop_reaches_only_the_owners_run(gateway: StartGateway) -> None:
    client = await gateway(jwt_settings(detach_on_disconnect=True))
    chat_id = new_id("c")
    stream = await LiveStream.open(client, chat_body(chat_id, [user_message("/stream 200 20")]),
                                   headers=bearer(hs256("alice")))
    await stream.take(3)
    async with client.post(f"/api/chat/{chat_id}/stop", json={}, headers=bearer(hs256("alice"))) as response:
        assert await response.json() == {"stopped": True}
    reply = await stream.rest()
    assert reply.done and reply.types.count("text-delta") < 200
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, what="the run to end")


async def test_a_socket_closes_when_its_token_expires(gateway: StartGateway) -> None:
    client = await gateway(jwt_settings(auth_jwt_leeway_s=0))
    ws = await client.ws_connect("/api/chat/ws", params={"access_token": hs256("alice", exp=int(time.time()) + 2)})
    await ws.send_json(send_frame("r1", new_id("c"), "/echo still valid"))
    assert (await ws_frames(ws, "r1"))[-1]["type"] == "end"
    message = await ws.receive(timeout=10)
    assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1008 and message.extra == "token expired"
