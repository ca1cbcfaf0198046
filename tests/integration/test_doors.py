"""Issue 36: the attacks an attacker's read of the gateway found, each reproduced and refused.

1. DNS rebinding: a `Host` the gateway does not answer to is refused (421) on every request, the
   WebSocket upgrade included, by a real `python -m adk_gateway`; Origins are compared whole.
2. The page's headers: a Content-Security-Policy, `nosniff`, no Referer, no framing, on the page
   and its static files (tests/integration/test_page_csp.py checks the policy in Chromium).
3. JWKS: a failing key server is asked once for many random `kid`s, a hanging one never delays a
   known `kid`, a huge one is cut at 64 KiB (a real gateway process keeps its memory), redirects
   are not followed.
4. Tokens in logs: no spelling of `access_token` in a query reaches a log line of a real process,
   and a socket keeps nothing of its handshake's request.
5. Identity: `anonymous` and user ids with control, format or separator characters or lone
   surrogates are refused in every mode; a socket closes at the `exp` PyJWT validated.
6. A tool's exception reaches neither the client nor the model: a general message and an id
   the log line has.

The settings that stop the start (a short HS256 secret, `*` with `--auth none`, an http:// JWKS
URL) are checked here against the real process (one line, exit status 2) and in
tests/unit/test_doors.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
import structlog
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from google.adk.agents import LlmAgent
from google.adk.sessions import InMemorySessionService
from google.adk.tools.function_tool import FunctionTool
from yarl import URL

from adk_gateway.agents.adk import AgentHost
from adk_gateway.keys import AUTH
from adk_gateway.services.auth import ApiKeyFileError, JwtAuth, read_api_keys
from adk_gateway.transports.websocket import SocketSession
from tests.gateway_process import ROOT, free_port, gateway_python, running_gateway, start_gateway_process, stop_process
from tests.local_http import LocalHTTPServer

from .conftest import StartGateway
from .support import Conversation, chat_body, new_id, post_chat, settings, user_message, wait_for

SECRET = "doors-test-secret-0123456789abcdef0123"
WS = "/api/chat/ws"


def hs256(sub: Any = "alice", **claims: Any) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 600, **claims}, SECRET, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def send_frame(request_id: str, text: str) -> dict[str, Any]:
    return {"type": "send", "requestId": request_id, "id": new_id("c"), "trigger": "submit-message",
            "messages": [user_message(text)], "headers": {}, "body": {}}


async def handshake_status(session: aiohttp.ClientSession, url: str | URL, **headers: str) -> int:
    try:
        ws = await session.ws_connect(url, headers=headers)
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status
    await ws.close()
    return 101


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


# --- 1. DNS rebinding ---------------------------------------------------------------------------------


async def test_a_rebinding_host_is_refused_on_every_request_of_a_real_gateway(tmp_path: Path) -> None:
    """`Host: evil.test:PORT` with `Origin: http://evil.test:PORT` (a page on a domain rebound to
    127.0.0.1: for the browser, same-origin) ran a chat as any user, read /api/me, stopped runs
    and opened the socket. Now every request is 421 before anything else; the gateway's own names
    still work."""
    log = tmp_path / "gateway.log"
    with running_gateway(log=log) as url:
        port = URL(url).port
        evil = {"Host": f"evil.test:{port}", "Origin": f"http://evil.test:{port}", "x-user-id": "alice"}
        body = chat_body(new_id("c"), [user_message("/echo rebound")])
        async with aiohttp.ClientSession() as http:
            answers = [
                await http.post(f"{url}/api/chat", json=body, headers=evil),
                await http.get(f"{url}/api/me", headers=evil),
                await http.post(f"{url}/api/chat/some-chat/stop", json={}, headers=evil),
                await http.get(f"{url}/api/chat/some-chat/stream", headers=evil),
                await http.options(f"{url}/api/chat", headers={**evil, "Access-Control-Request-Method": "POST"}),
                await http.get(f"{url}/", headers=evil),
                await http.get(f"{url}/healthz", headers=evil),
                await http.get(f"{url}/no-such-page", headers=evil),
            ]
            for response in answers:
                assert response.status == 421, (response.method, response.url, response.status)
                assert (await response.json())["error"]["code"] == "host_refused"
            assert await handshake_status(http, f"{url}{WS}", **evil) == 421
            # Without a port, or spelled differently, it is still not this gateway's name.
            assert await handshake_status(http, f"{url}{WS}", Host="evil.test", Origin="http://evil.test") == 421
            assert (await http.get(f"{url}/api/me", headers={"Host": "127.0.0.1.evil.test"})).status == 421

            # The gateway's own names (any port: a dev server forwards with its own) and addresses.
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:5173", f"[::1]:{port}"):
                me = await http.get(f"{url}/api/me", headers={"Host": host, "x-user-id": "alice"})
                assert me.status == 200 and (await me.json())["user"] == "alice", host
            own = {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"}
            assert await handshake_status(http, f"{url}{WS}", **own) == 101
            reply = await http.post(f"{url}/api/chat", json=body, headers=own)
            assert reply.status == 200 and "rebound" in await reply.text()

            # The Origin is compared whole: https on the gateway's http port is another origin.
            foreign = {"Host": f"127.0.0.1:{port}", "Origin": f"https://127.0.0.1:{port}"}
            assert await handshake_status(http, f"{url}{WS}", **foreign) == 403
            refused = await http.post(f"{url}/api/chat", json=body, headers=foreign)
            assert refused.status == 403 and (await refused.json())["error"]["code"] == "origin_refused"
    lines = log_lines(log)
    refusals = [line for line in lines if line["event"] == "request_refused_at_door" and line["reason"] == "host"]
    assert len(refusals) >= len(answers) + 2
    assert not [line for line in lines if line["event"] == "socket_open" and "evil" in str(line.get("origin"))]


async def test_allowed_hosts_admit_a_proxys_public_name(gateway: StartGateway) -> None:
    client = await gateway(settings(allowed_hosts="chat.example.com"))
    for host, status in (("chat.example.com", 200), ("chat.example.com:8443", 200), ("CHAT.example.com.", 200),
                         ("10.1.2.3:8080", 200), ("evil.test", 421), ("chat.example.com.evil.test", 421)):
        assert (await client.get("/api/me", headers={"Host": host})).status == status, host


async def test_behind_a_tls_proxy_the_forwarded_scheme_makes_the_own_origin(gateway: StartGateway) -> None:
    client = await gateway(settings(allowed_hosts="chat.example.com"))
    body = chat_body(new_id("c"), [user_message("/echo hi")])
    public = {"Host": "chat.example.com", "Origin": "https://chat.example.com"}
    assert (await post_chat(client, body, headers=public)).status == 403  # an http connection: another origin
    assert (await post_chat(client, body, headers={**public, "X-Forwarded-Proto": "https"})).status == 200
    ws = await client.ws_connect(WS, headers={**public, "X-Forwarded-Proto": "https"})
    await ws.close()


async def test_the_public_url_is_the_gateways_own_origin(gateway: StartGateway) -> None:
    client = await gateway(settings(public_url="https://chat.example.com/"))
    body = chat_body(new_id("c"), [user_message("/echo hi")])
    assert (await post_chat(client, body, headers={"Origin": "https://chat.example.com"})).status == 200
    assert (await post_chat(client, body, headers={"Origin": "http://chat.example.com"})).status == 403


async def test_listed_origins_are_compared_whole(gateway: StartGateway) -> None:
    client = await gateway(settings(cors_origins="HTTP://LocalHost:3000/"))
    body = chat_body(new_id("c"), [user_message("/echo hi")])
    assert (await post_chat(client, body, headers={"Origin": "http://localhost:3000"})).status == 200
    for other in ("https://localhost:3000", "http://localhost:3001", "http://localhost"):
        assert (await post_chat(client, body, headers={"Origin": other})).status == 403, other
    # The socket takes --cors-origins too, and always the gateway's own origin.
    host = f"{client.server.host}:{client.server.port}"
    for origin, status in (("http://localhost:3000", 101), (f"http://{host}", 101), ("https://localhost:3000", 403)):
        try:
            ws = await client.ws_connect(WS, headers={"Origin": origin})
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status == status == 403, origin
        else:
            assert status == 101, origin
            await ws.close()


# --- 2. the page's headers ----------------------------------------------------------------------------


def page_dir(tmp_path: Path) -> Path:
    web_dir = tmp_path / "dist"
    (web_dir / "assets").mkdir(parents=True)
    (web_dir / "index.html").write_text("<!doctype html><title>page</title>")
    (web_dir / "assets" / "app.js").write_text("console.log('page');")
    return web_dir


def policy(header: str) -> dict[str, list[str]]:
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


async def test_the_page_and_its_assets_carry_a_csp_nosniff_and_no_referrer(
    gateway: StartGateway, tmp_path: Path
) -> None:
    client = await gateway(settings(web_dir=str(page_dir(tmp_path))))
    host = f"{client.server.host}:{client.server.port}"
    for path in ("/", "/static/assets/app.js"):
        response = await client.get(path)
        assert response.status == 200, path
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert response.headers["X-Frame-Options"] == "DENY"
        csp = policy(response.headers["Content-Security-Policy"])
        assert csp["default-src"] == ["'self'"] and csp["script-src"] == ["'self'"]
        # Images: the page's own (artifact links are under its origin), data: and blob:, nothing else.
        assert csp["img-src"] == ["'self'", "data:", "blob:"]
        assert csp["connect-src"] == ["'self'", f"ws://{host}"]
        assert csp["frame-ancestors"] == ["'none'"] and csp["object-src"] == ["'none'"]
        assert csp["base-uri"] == ["'none'"]
    # The API is not a page: its answers are not given a page's policy.
    assert "Content-Security-Policy" not in (await client.get("/api/me")).headers


async def test_the_page_policy_names_the_public_url(gateway: StartGateway, tmp_path: Path) -> None:
    client = await gateway(settings(web_dir=str(page_dir(tmp_path)), public_url="https://chat.example.com"))
    csp = policy((await client.get("/", headers={"X-Forwarded-Proto": "https"})).headers["Content-Security-Policy"])
    host = f"{client.server.host}:{client.server.port}"
    assert csp["img-src"] == ["'self'", "data:", "blob:", "https://chat.example.com"]
    assert csp["connect-src"] == ["'self'", f"wss://{host}", "https://chat.example.com", "wss://chat.example.com"]


# --- 3. JWKS --------------------------------------------------------------------------------------------


class KeyServer(LocalHTTPServer):
    """A JWKS server on a thread of its own that answers as `mode` says: `ok`, `500`, `hang` (until
    `release`), `huge` (a body that never ends), `huge-length` (a Content-Length of 1 GB) or
    `redirect` (to a valid key set at /target)."""

    def __init__(self) -> None:
        super().__init__(_KeyHandler)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()
        self.mode = "ok"
        self.hits = 0
        self.target_hits = 0
        self.hanging = 0
        self.release = threading.Event()
        self.written = 0
        self.huge_ended = threading.Event()
        self.url = f"{self.origin}/jwks.json"

    def token(self, kid: str = "k1", sub: str = "alice") -> str:
        return jwt.encode({"sub": sub, "exp": int(time.time()) + 600}, self.key, algorithm="RS256",
                          headers={"kid": kid})

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # a hanging answer ends first, or the shutdown waits for it
        super().__exit__(*exc)


class _KeyHandler(BaseHTTPRequestHandler):
    server: KeyServer

    def do_GET(self) -> None:
        server = self.server
        if self.path == "/target":
            server.target_hits += 1
            self._answer(200, server.jwks)
            return
        server.hits += 1
        if server.mode == "ok":
            self._answer(200, server.jwks)
        elif server.mode == "500":
            self._answer(500, b"{}")
        elif server.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "/target")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif server.mode == "hang":
            server.hanging += 1
            server.release.wait(30)
        elif server.mode == "huge-length":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
            self.wfile.write(b'{"keys": [')
        elif server.mode == "huge":
            self._stream_forever()

    def _stream_forever(self) -> None:
        """200 and a key set that never ends (up to 512 MiB), until the client hangs up."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.connection.settimeout(20)
        piece = b'{"keys": [' + b" " * (64 * 1024 - 10)
        try:
            for _ in range(8192):
                self.wfile.write(piece)
                self.server.written += len(piece)
                piece = b" " * len(piece)
        except OSError:
            pass
        finally:
            self.server.huge_ended.set()

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    with KeyServer() as server:
        yield server


async def me(client: Any, token: str) -> int:
    async with client.get("/api/me", headers=bearer(token)) as response:
        return int(response.status)


async def test_a_failing_key_server_is_asked_once_for_many_random_kids(
    gateway: StartGateway, key_server: KeyServer
) -> None:
    """With the key server answering 500, 84 random `kid`s made 84 fetches (the cool-down only
    followed successes)."""
    key_server.mode = "500"
    client = await gateway(settings(auth="jwt", auth_jwks_url=key_server.url))
    statuses = [await me(client, key_server.token(kid=uuid.uuid4().hex)) for _ in range(40)]
    statuses += await asyncio.gather(*(me(client, key_server.token(kid=uuid.uuid4().hex)) for _ in range(40)))
    assert set(statuses) == {401}
    assert key_server.hits == 1


async def test_a_hanging_key_server_never_delays_a_known_kid(gateway: StartGateway, key_server: KeyServer) -> None:
    """With the cache expired and the key server hanging, every RS256 request waited 5.5 s. Now
    the known key answers from the cache while one fetch (and only one) hangs in the background."""
    client = await gateway(settings(auth="jwt", auth_jwks_url=key_server.url, auth_jwks_cache_s=0))
    assert await me(client, key_server.token()) == 200
    key_server.mode = "hang"
    assert await me(client, key_server.token()) == 200  # the cache is stale: this starts a refresh
    await wait_for(lambda: key_server.hanging == 1, what="the refresh to reach the hanging key server")
    statuses = await asyncio.gather(*(me(client, key_server.token()) for _ in range(30)))
    assert set(statuses) == {200}
    # All of them answered while the refresh still hangs, and none started another one.
    assert key_server.hanging == 1 and key_server.hits == 2 and not key_server.release.is_set()


async def test_key_set_redirects_are_not_followed(gateway: StartGateway, key_server: KeyServer) -> None:
    key_server.mode = "redirect"
    client = await gateway(settings(auth="jwt", auth_jwks_url=key_server.url))
    assert await me(client, key_server.token()) == 401
    assert key_server.hits == 1 and key_server.target_hits == 0


async def test_a_key_set_announcing_a_gigabyte_is_refused_unread(gateway: StartGateway, key_server: KeyServer) -> None:
    key_server.mode = "huge-length"
    client = await gateway(settings(auth="jwt", auth_jwks_url=key_server.url))
    with structlog.testing.capture_logs() as logs:
        assert await me(client, key_server.token()) == 401
    [failed] = [line for line in logs if line["event"] == "jwks_fetch_failed"]
    assert "1000000000 bytes" in failed["error"]


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    assert match, status
    return int(match.group(1))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a process's peak memory from /proc")
def test_a_huge_key_set_is_cut_at_64_kib_by_a_real_gateway(tmp_path: Path, key_server: KeyServer) -> None:
    """A key server streaming a large body took the gateway from 125 MB to a 1.48 GB peak. Now it
    reads at most 64 KiB of it, hangs up, and its peak memory does not move."""
    key_server.mode = "huge"
    log = tmp_path / "gateway.log"
    gateway = start_gateway_process("--auth", "jwt", "--auth-jwks-url", key_server.url, log=log)
    try:
        before = peak_rss_kib(gateway.proc.pid)
        request = urllib_request(f"{gateway.url}/api/me", key_server.token())
        assert request == 401
        assert key_server.huge_ended.wait(30), "the gateway never hung up on the endless key set"
        after = peak_rss_kib(gateway.proc.pid)
    finally:
        stop_process(gateway.proc)
    # What the server managed to write is what the sockets' buffers took, not the 512 MiB offered.
    assert key_server.written < 64 * 1024 * 1024
    assert after - before < 32 * 1024, f"peak RSS grew from {before} to {after} KiB"
    failed = [line for line in log_lines(log) if line["event"] == "jwks_fetch_failed"]
    assert failed and "larger than 65536 bytes" in failed[0]["error"]


def urllib_request(url: str, token: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=bearer(token)), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


# --- 4. tokens in logs ----------------------------------------------------------------------------------


async def test_no_spelling_of_the_socket_token_reaches_the_log_of_a_real_gateway(tmp_path: Path) -> None:
    """`?access%5Ftoken=<JWT>` was accepted and `socket_open` logged the token;
    `?access_token%3D<JWT>` was refused and `request_refused_at_door` logged it."""
    token = hs256("alice")
    log = tmp_path / "gateway.log"
    with running_gateway("--auth", "jwt", "--auth-jwt-secret", SECRET, log=log) as url:
        ws_url = url.replace("http", "ws") + WS
        async with aiohttp.ClientSession() as http:
            accepted = await http.ws_connect(URL(f"{ws_url}?access%5Ftoken={token}", encoded=True))
            await accepted.send_json(send_frame("r1", "/echo hi"))
            async for message in accepted:
                if json.loads(message.data)["type"] == "end":
                    break
            await accepted.close()
            for query in (f"access_token%3D{token}", f"ACCESS_TOKEN={token}", f"x=1&%61ccess_token%3d{token}"):
                assert await handshake_status(http, URL(f"{ws_url}?{query}", encoded=True)) == 401, query
            # A query hidden in the path (`%3F` decodes to `?`): no route, and no token in the log.
            hidden = await http.get(URL(f"{url}{WS}%3Faccess_token={token}", encoded=True))
            assert hidden.status in (401, 404)
    text = log.read_text()
    for secret in (token, token.rsplit(".", 1)[-1], token.split(".")[1]):
        assert secret not in text
    lines = log_lines(log)
    [opened] = [line for line in lines if line["event"] == "socket_open"]
    assert opened["path"] == f"{WS}?access_token=[redacted]" and opened["user_id"] == "alice"
    refused = [line for line in lines if line["event"] == "request_refused_at_door"]
    assert len(refused) >= 3 and all("[redacted]" in line["path"] for line in refused[:3])


async def test_a_socket_keeps_nothing_of_its_handshake_request(gateway: StartGateway) -> None:
    client = await gateway(settings(auth="jwt", auth_jwt_secret=SECRET))
    token = hs256("alice")
    ws = await client.ws_connect(WS, params={"access_token": token})
    await ws.send_json(send_frame("r1", "/echo hi"))
    while json.loads((await ws.receive()).data)["type"] != "end":
        pass
    [session] = [obj for obj in gc.get_objects() if isinstance(obj, SocketSession)]
    kept = gc.get_referents(session)
    assert not [obj for obj in kept if isinstance(obj, web.BaseRequest)]
    assert not [obj for obj in kept if isinstance(obj, str) and token in obj]
    assert session.origin == f"http://{client.server.host}:{client.server.port}" and session.user_id == "alice"
    # Nor does aiohttp's request (alive while its handler runs) cache the parsed query, token and all.
    requests = [obj for obj in gc.get_objects() if isinstance(obj, web.BaseRequest) and obj.path == WS]
    assert requests and all("query" not in getattr(request, "_cache", {}) for request in requests)
    await ws.close()


# --- 5. identity hygiene ---------------------------------------------------------------------------------

BAD_SUBS = {"del": "ali\x7fce", "line_separator": "ali\u2028ce", "right_to_left": "ali\u202ece",
            "lone_surrogate": "ali\ud800ce", "anonymous": "anonymous"}


@pytest.mark.parametrize("case", list(BAD_SUBS))
async def test_a_verified_sub_that_is_no_usable_user_is_refused(gateway: StartGateway, case: str) -> None:
    """A `sub` of `anonymous` skipped the per-user caps (5 sockets where the cap was 2); subs with
    DEL, U+2028 or U+202E were accepted; a lone surrogate made the run's log line raise."""
    client = await gateway(settings(auth="jwt", auth_jwt_secret=SECRET, max_sockets_per_user=2))
    token = hs256(BAD_SUBS[case])
    assert (await client.get("/api/me", headers=bearer(token))).status == 401
    reply = await post_chat(client, chat_body(new_id("c"), [user_message("/echo hi")]), headers=bearer(token))
    assert reply.status == 401
    for _ in range(3):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(WS, params={"access_token": token})
        assert refused.value.status == 401


def test_an_api_key_file_cannot_name_anonymous_or_a_control_character(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    for user in ("anonymous", "ali\u202ece", "ali\x7fce"):
        keys.write_text(f"key-1 {user}\n", encoding="utf-8")
        with pytest.raises(ApiKeyFileError):
            read_api_keys(keys)


async def test_none_mode_refuses_a_user_id_that_is_no_user(gateway: StartGateway) -> None:
    client = await gateway(settings())
    body = chat_body(new_id("c"), [user_message("/echo hi")])
    assert (await post_chat(client, body, headers={"x-user-id": "ali\u202ece"})).status == 401
    assert (await post_chat(client, {**body, "userId": "ali\u2028ce"})).status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(WS, headers={"x-user-id": "ali\u2029ce"})
    assert refused.value.status == 401
    # Non-UTF-8 bytes in the header (aiohttp reads them as lone surrogates), on a raw connection.
    for request in (b"GET /api/me HTTP/1.1\r\n", b"POST /api/chat HTTP/1.1\r\nContent-Type: application/json\r\n"
                                                  b"Content-Length: 2\r\n"):
        reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
        raw_body = b"{}" if request.startswith(b"POST") else b""
        writer.write(request + f"Host: {client.server.host}:{client.server.port}\r\n".encode()
                     + b"x-user-id: al\xff\xfeice\r\nConnection: close\r\n\r\n" + raw_body)
        await writer.drain()
        status = await reader.readline()
        writer.close()
        await writer.wait_closed()
        assert status.split()[1] == b"401", status
    # Nothing was left behind, and ordinary users still chat.
    assert (await post_chat(client, body, headers={"x-user-id": "alice"})).status == 200


async def test_a_numeric_string_exp_is_honoured_over_http_and_closes_the_socket(gateway: StartGateway) -> None:
    """PyJWT validates `exp: "1700000000"`, so HTTP honoured it, but a socket opened with it was
    never closed at expiry. Now the socket closes at the `exp` PyJWT validated."""
    client = await gateway(settings(auth="jwt", auth_jwt_secret=SECRET, auth_jwt_leeway_s=0))
    expired = hs256("alice", exp=str(int(time.time()) - 60))
    assert (await client.get("/api/me", headers=bearer(expired))).status == 401
    token = hs256("alice", exp=str(int(time.time()) + 2))
    identity = await JwtAuth(secret=SECRET, leeway_s=0).verify(token)
    assert identity.expires_at is not None
    ws = await client.ws_connect(WS, params={"access_token": token})
    message = await ws.receive(timeout=15)
    assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1008 and message.extra == "token expired"
    assert client.app[AUTH].mode == "jwt"


# --- the start: one line, exit status 2 -------------------------------------------------------------------


def start_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gateway_python(), "-m", "adk_gateway", "--port", str(free_port()), *args],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items()
             if not k.startswith(("ADK_GATEWAY_", "GOOGLE_API_KEY", "PYTHONASYNCIODEBUG"))},
    )


@pytest.mark.parametrize(("args", "names"), [
    (("--auth", "jwt", "--auth-jwt-secret", "dev-secret"), ("--auth-jwt-secret", "--allow-weak-jwt-secret")),
    (("--cors-origins", "*"), ("--cors-origins", "--auth none")),
    (("--allowed-origins", "*"), ("--allowed-origins", "--auth none")),
    (("--auth", "jwt", "--auth-jwks-url", "http://keys.example.com/jwks.json"),
     ("--auth-jwks-url", "--allow-insecure-jwks")),
])
def test_a_door_left_open_stops_the_start_with_one_line(args: tuple[str, ...], names: tuple[str, ...]) -> None:
    done = start_refused(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert all(name in lines[0] for name in names), lines[0]
    assert "dev-secret" not in lines[0]  # the secret itself is never shown


def test_a_weak_secret_starts_when_it_is_allowed_and_is_warned_about(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with running_gateway("--auth", "jwt", "--auth-jwt-secret", "dev-secret", "--allow-weak-jwt-secret", log=log):
        pass
    assert [line for line in log_lines(log) if line["event"] == "weak_jwt_secret"]


# --- 6. tool errors ------------------------------------------------------------------------------------------


async def broken(text: str) -> dict[str, Any]:
    """Fails as a buggy tool does.

    Args:
        text: Anything.
    """
    number: Any = 42
    return {"stripped": number.strip()}  # AttributeError: 'int' object has no attribute 'strip'


def tool_agent(**kwargs: Any) -> AgentHost:
    agent = LlmAgent(name="tool_agent", model="scripted", instruction="", tools=[FunctionTool(broken)], **kwargs)
    return AgentHost(agent, InMemorySessionService(), max_llm_calls=5)


async def test_a_tools_exception_reaches_neither_the_client_nor_the_model(gateway: StartGateway) -> None:
    """`'int' object has no attribute 'strip'` reached the client verbatim."""
    client = await gateway(settings(), host=tool_agent())
    with structlog.testing.capture_logs() as logs:
        reply = await Conversation(client).send('/tool broken {"text": "x"}')
    assert reply.status == 200 and reply.finish_reason == "stop"
    [failed] = reply.of_type("tool-output-error")
    match = re.fullmatch(r"The tool failed\. \(error (err-[0-9a-f]{12})\)", failed["errorText"])
    assert match, failed
    # The model heard the same general text (the scripted model repeats what it received).
    assert f"broken -> {{\"error\":\"{failed['errorText']}\"}}" in reply.text
    assert "strip" not in json.dumps(reply.chunks) and "AttributeError" not in json.dumps(reply.chunks)
    [line] = [line for line in logs if line["event"] == "tool_failed"]
    assert line["error_id"] == match.group(1) and line["tool"] == "broken" and "strip" in line["error"]


async def test_an_agents_own_tool_error_callback_still_answers(gateway: StartGateway) -> None:
    def own_answer(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception) -> dict[str, Any]:
        return {"error": f"handled by the agent: {type(error).__name__}"}

    client = await gateway(settings(), host=tool_agent(on_tool_error_callback=own_answer))
    reply = await Conversation(client).send('/tool broken {"text": "x"}')
    [failed] = reply.of_type("tool-output-error")
    assert failed["errorText"] == "handled by the agent: AttributeError"


async def test_an_unknown_tool_gets_adks_own_answer(gateway: StartGateway) -> None:
    client = await gateway(settings(), host=tool_agent())
    reply = await Conversation(client).send("/tool no_such_tool {}")
    assert reply.status == 200 and reply.finish_reason == "stop"
    assert "no_such_tool" in reply.text and "broken" in reply.text  # ADK names the tools the agent has
    assert "The tool failed" not in reply.text
