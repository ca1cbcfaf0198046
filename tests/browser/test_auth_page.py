"""The chat page in headless Chromium against a gateway with `--auth jwt`.

tests/browser/auth_page.mjs drives the page: it asks for a token (GET /api/me answers 401), a wrong
token gets an error and the form again, the right token (an HS256 JWT of alice minted here with
PyJWT) signs in, and `/echo hello world` answers over SSE (`Authorization: Bearer`) and over the
WebSocket (`?access_token=`); Stop sends JSON with the token; a reload signs in from
sessionStorage; a chat request answered 401 shows the form again. This test always starts its own
gateway (ADK_GATEWAY_E2E_URL is not used: that gateway's auth is unknown).

The same run is made a second time with the built page served from another origin, as a chat app
on its own host would be: a small static server hands out web/dist with
`<meta name="adk-gateway-url">` naming the gateway, which has that origin in `--cors-origins`.
Every step must pass the same way across CORS (preflights, the 401s the page must read, the
WebSocket's origin check), and every request under /api/ must reach the gateway's origin.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler
from typing import Any

import jwt
import pytest

from tests.browser.page_driver import run_page
from tests.gateway_process import ROOT, running_gateway
from tests.local_http import LocalHTTPServer

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SECRET = "browser-test-hs256-secret-of-at-least-32-bytes"
USER = "alice"


@pytest.fixture(scope="module")
def jwt_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("browser-jwt-gateway") / "gateway.log"
    with running_gateway("--auth", "jwt", "--auth-jwt-secret", SECRET, log=log, name="jwt gateway") as url:
        yield url


def mint_token(sub: str = USER, ttl_s: int = 600) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + ttl_s}, SECRET, algorithm="HS256")


def test_chat_page_signs_in_with_a_token(jwt_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    result = run_auth_page({"url": jwt_gateway_url}, "auth-page", tmp_path_factory)
    assert result["apiOrigins"] == [jwt_gateway_url]


def test_the_page_on_another_origin_signs_in_and_chats(tmp_path_factory: pytest.TempPathFactory) -> None:
    log = tmp_path_factory.mktemp("browser-cors-gateway") / "gateway.log"
    with PageServer() as pages:
        args = ("--auth", "jwt", "--auth-jwt-secret", SECRET, "--cors-origins", pages.url)
        with running_gateway(*args, log=log, name="gateway for a page on another origin") as gateway_url:
            pages.gateway_url = gateway_url
            result = run_auth_page({"url": gateway_url, "pageUrl": pages.url}, "auth-page-cross-origin",
                                   tmp_path_factory)
    assert result["pageOrigin"] == pages.url != gateway_url
    assert result["apiOrigins"] == [gateway_url]


class PageServer(LocalHTTPServer):
    """The built page (web/dist) on a static server of its own, on another port than the
    gateway's and so another origin. Its index.html names `gateway_url` in
    <meta name="adk-gateway-url">, as a chat app's host would."""

    def __init__(self) -> None:
        dist = ROOT / "web" / "dist"
        if not (dist / "index.html").is_file():
            pytest.fail("web/dist is not built: run `make web` (make test builds it)", pytrace=False)
        super().__init__(functools.partial(_PageHandler, directory=str(dist)))
        self.index = (dist / "index.html").read_text()
        self.gateway_url = ""
        self.url = self.origin


class _PageHandler(SimpleHTTPRequestHandler):
    server: PageServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.startswith("/static/"):
            self.path = self.path.removeprefix("/static")  # the build's base: /static/assets/...
            super().do_GET()
            return
        meta = f'<meta name="adk-gateway-url" content="{self.server.gateway_url}" />'
        body = self.server.index.replace("<head>", f"<head>\n    {meta}", 1).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def run_auth_page(config: dict[str, str], name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs auth_page.mjs with `config` (the gateway's `url`, maybe a `pageUrl`) and a token of
    alice, and checks every step it reports; returns its result."""
    token = mint_token()
    config = {**config, "token": token, "user": USER}
    run = run_page("auth_page.mjs", name, config, tmp_path_factory.mktemp(name))
    result = run.result

    report = json.dumps(
        {k: result.get(k) for k in ("failures", "checks", "unauthorized", "apiOrigins", "console", "screenshots",
                                     "seconds")},
        indent=1,
    ).replace(token, "<token>")
    stderr = run.stderr[-6000:].replace(token, "<token>")
    assert result.get("ok") and run.returncode == 0, f"{report}\nstderr:\n{stderr}"

    checks = result["checks"]
    # The page asks before it starts the chat; the first ask shows no error.
    assert checks["formShown"] and not checks["readyBeforeSignIn"], report
    assert not checks["firstErrorShown"], report
    # A wrong token: an error, the form again, nothing stored.
    assert checks["wrongTokenError"].strip(), report
    assert checks["formAfterWrongToken"], report
    assert checks["storedAfterWrongToken"] is None, report
    assert not [v for v in checks["axe"] if v["impact"] in ("serious", "critical")], report
    # Signed in: the header names the user; both transports answer with the token.
    assert checks["user"] == USER, report
    assert checks["sseText"].strip() == "hello world", report
    assert checks["ssePostAuthorization"] == [True], report
    stop = {"authorization": True, "contentType": "application/json", "body": "{}", "status": 200}
    assert checks["stop"] == stop, report
    assert checks["wsText"].strip() == "hello world", report
    assert checks["wsUrlsWithToken"] and all(checks["wsUrlsWithToken"]), report
    assert not checks["tokenInFrames"], report
    # A reload does not ask again.
    assert not checks["reloadAsked"], report
    # A chat request answered 401: the token is forgotten, the form says why; signing in again recovers.
    assert checks["expiredError"].strip(), report
    assert checks["storedAfterExpiry"] is None, report
    assert not checks["errorAfterSignInAgain"], report
    assert checks["afterExpiryText"].strip() == "hello again", report
    # The only 401s were the expected ones: /api/me (first load, wrong token) and the routed chat POST.
    assert result["unauthorized"].count("GET /api/me") == 2, report
    assert result["unauthorized"].count("POST /api/chat") == 1, report
    return result
