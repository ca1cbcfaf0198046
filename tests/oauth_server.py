"""A tiny OAuth2 authorization-code server on 127.0.0.1, for end-user sign-in tests (ADK `adk_request_credential`).

- `GET /authorize?response_type=code&client_id&redirect_uri&state&scope[&code_challenge&code_challenge_method]`
  signs the user in at once: 302 to `redirect_uri?code=...&state=...`. An unknown client, or a missing or
  unregistered redirect_uri, gets 400 (no redirect, as RFC 6749 says). `deny=True`: 302 with
  `error=access_denied`. Codes are bound to the client, the redirect_uri and the PKCE challenge.
- `POST /token` (grant_type=authorization_code; client_secret_basic or client_secret_post; PKCE checked
  when the code had a challenge): `{"access_token", "token_type": "bearer", "expires_in": 3600, "scope"}`.
  Codes are single-use. Every request is recorded in `token_requests`. `token_status=400|500` makes it
  fail (after recording), `token_delay_s` makes it slow.
- `GET /userinfo` and `GET /calendar?day=today|tomorrow` need `Authorization: Bearer <an issued token>`
  (else 401).

It runs in its OWN thread with its own event loop: ADK exchanges the code with a blocking HTTP call made on the
caller's event loop (the tool's `get_auth_response`), so a server on that same loop could not answer.

    with running_oauth_server() as server:        # port 0: a free port
        os.environ["ADK_TEST_OAUTH_URL"] = server.url
        ...
        assert server.token_requests[0]["form"]["grant_type"] == "authorization_code"

    python -m tests.oauth_server --port 8095       # prints "oauth server on http://127.0.0.1:8095"
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import secrets
import signal
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from aiohttp import web

DEFAULT_PORT = 8095
CLIENT_ID = "adk-test-client"
CLIENT_SECRET = "adk-test-secret"
USER = {"sub": "user-1", "name": "Ada Lovelace", "email": "ada@example.com"}
CALENDAR = {
    "today": [{"summary": "Standup", "start": "09:00"}, {"summary": "Design review", "start": "14:00"}],
    "tomorrow": [{"summary": "Dentist", "start": "08:30"}],
}


class OAuthServer:
    """The server; `start()` runs it on its own thread, `stop()` ends it (or use `running_oauth_server`).

    Attributes read on every request, so a test may change them while it runs: `token_status`,
    `token_delay_s`, `deny`.
    """

    def __init__(
        self,
        *,
        client_id: str = CLIENT_ID,
        client_secret: str = CLIENT_SECRET,
        redirect_uris: Sequence[str] | None = None,
        token_status: int = 200,
        token_delay_s: float = 0.0,
        deny: bool = False,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uris = list(redirect_uris) if redirect_uris is not None else None
        """The registered redirect URIs (exact match); None: any http(s) URL."""
        self.token_status = token_status
        self.token_delay_s = token_delay_s
        self.deny = deny
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, Any]] = []
        """Per POST /token: {"client_auth": "client_secret_basic"|"client_secret_post"|None, "client_id",
        "form" (without client_secret), "status" (what it answered), "access_token" (when issued)}."""
        self.codes: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifetime ----------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> OAuthServer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, name=f"oauth-server-{id(self):x}", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(port), loop).result(timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=10)
            self._runner = None
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = None

    def _serve(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start(self, port: int) -> None:
        app = web.Application()
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        app.router.add_get("/userinfo", self._userinfo)
        app.router.add_get("/calendar", self._calendar)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    # --- /authorize --------------------------------------------------------------------------------------

    def _redirect_allowed(self, redirect_uri: str) -> bool:
        if self.redirect_uris is not None:
            return redirect_uri in self.redirect_uris
        return urllib.parse.urlsplit(redirect_uri).scheme in ("http", "https")

    async def _authorize(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.authorize_requests.append(query)
        if query.get("client_id") != self.client_id:
            return web.json_response({"error": "invalid_client"}, status=400)
        redirect_uri = query.get("redirect_uri", "")
        if not redirect_uri or not self._redirect_allowed(redirect_uri):
            return web.json_response({"error": "invalid_request", "error_description": "bad redirect_uri"}, status=400)
        params: dict[str, str] = {}
        if query.get("response_type") != "code":
            params["error"] = "unsupported_response_type"
        elif self.deny:
            params["error"] = "access_denied"
        else:
            code = "code-" + secrets.token_urlsafe(12)
            self.codes[code] = {
                "client_id": self.client_id,
                "redirect_uri": redirect_uri,
                "scope": query.get("scope", ""),
                "code_challenge": query.get("code_challenge"),
                "code_challenge_method": query.get("code_challenge_method", "plain"),
            }
            params["code"] = code
        if "state" in query:
            params["state"] = query["state"]
        separator = "&" if urllib.parse.urlsplit(redirect_uri).query else "?"
        raise web.HTTPFound(redirect_uri + separator + urllib.parse.urlencode(params))

    # --- /token ------------------------------------------------------------------------------------------

    def _client(self, request: web.Request, form: dict[str, str]) -> tuple[str | None, str | None, str | None]:
        """(method, client id, secret) of the client's authentication."""
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(header[6:].strip()).decode()
            except ValueError:
                return "client_secret_basic", None, None
            client_id, _, secret = decoded.partition(":")
            return "client_secret_basic", urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
        if "client_secret" in form:
            return "client_secret_post", form.get("client_id"), form["client_secret"]
        return None, form.get("client_id"), None

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        method, client_id, secret = self._client(request, form)
        record: dict[str, Any] = {
            "client_auth": method,
            "client_id": client_id,
            "form": {k: v for k, v in form.items() if k != "client_secret"},
        }
        self.token_requests.append(record)

        def answer(status: int, body: dict[str, Any]) -> web.Response:
            record["status"] = status
            return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})

        if self.token_delay_s:
            await asyncio.sleep(self.token_delay_s)
        if self.token_status >= 500:
            return answer(self.token_status, {"error": "server_error"})
        if self.token_status != 200:
            return answer(self.token_status, {"error": "invalid_grant", "error_description": "forced failure"})
        if client_id != self.client_id or secret != self.client_secret:
            return answer(401, {"error": "invalid_client"})
        if form.get("grant_type") != "authorization_code":
            return answer(400, {"error": "unsupported_grant_type"})
        grant = self.codes.pop(form.get("code", ""), None)  # single use
        if grant is None:
            return answer(400, {"error": "invalid_grant", "error_description": "unknown or used code"})
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return answer(400, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"})
        if grant["code_challenge"] and not _pkce_ok(
            form.get("code_verifier", ""), grant["code_challenge"], grant["code_challenge_method"]
        ):
            return answer(400, {"error": "invalid_grant", "error_description": "bad code_verifier"})
        token = "at-" + secrets.token_urlsafe(16)
        self.tokens[token] = {"client_id": client_id, "scope": grant["scope"], **USER}
        record["access_token"] = token
        return answer(200, {"access_token": token, "token_type": "bearer", "expires_in": 3600, "scope": grant["scope"]})

    # --- protected resources -----------------------------------------------------------------------------

    def _bearer(self, request: web.Request) -> dict[str, Any] | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    @staticmethod
    def _unauthorized() -> web.Response:
        return web.json_response(
            {"error": "invalid_token"}, status=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        )

    async def _userinfo(self, request: web.Request) -> web.Response:
        if self._bearer(request) is None:
            return self._unauthorized()
        return web.json_response(USER)

    async def _calendar(self, request: web.Request) -> web.Response:
        if self._bearer(request) is None:
            return self._unauthorized()
        day = request.query.get("day", "today")
        return web.json_response({"day": day, "items": CALENDAR.get(day, [])})


def _pkce_ok(verifier: str, challenge: str, method: str) -> bool:
    if method == "S256":
        digest = hashlib.sha256(verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == challenge
    return verifier == challenge


@contextmanager
def running_oauth_server(port: int = 0, **options: Any) -> Iterator[OAuthServer]:
    """An `OAuthServer(**options)` running on 127.0.0.1:port (0: a free port) for the block."""
    server = OAuthServer(**options).start(port)
    try:
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.oauth_server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: a free port (default %(default)s)")
    parser.add_argument("--client-id", default=CLIENT_ID)
    parser.add_argument("--client-secret", default=CLIENT_SECRET)
    parser.add_argument("--redirect-uri", action="append", help="a registered redirect URI (default: any)")
    parser.add_argument("--token-status", type=int, default=200, help="make /token answer 400 or 500")
    parser.add_argument("--deny", action="store_true", help="/authorize answers error=access_denied")
    args = parser.parse_args(argv)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    options = {
        "client_id": args.client_id,
        "client_secret": args.client_secret,
        "redirect_uris": args.redirect_uri,
        "token_status": args.token_status,
        "deny": args.deny,
    }
    with running_oauth_server(args.port, **options) as server:
        print(f"oauth server on {server.url}", flush=True)
        try:
            while not stopped.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
