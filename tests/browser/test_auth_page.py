"""The chat page in headless Chromium against a gateway with `--auth jwt`.

tests/browser/auth_page.mjs drives the page: it asks for a token (GET /api/me answers 401), a wrong
token gets an error and the form again, the right token (an HS256 JWT of alice minted here with
PyJWT) signs in, and `/echo hello world` answers over SSE (`Authorization: Bearer`) and over the
WebSocket (`?access_token=`); Stop sends JSON with the token; a reload signs in from
sessionStorage; a chat request answered 401 shows the form again. This test always starts its own
gateway (ADK_GATEWAY_E2E_URL is not used: that gateway's auth is unknown).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import jwt
import pytest

from tests.browser.page_driver import run_page_script, setup_problem
from tests.gateway_process import running_gateway

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
    problem = setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)

    token = mint_token()
    config = {"url": jwt_gateway_url, "token": token, "user": USER}
    result, proc = run_page_script("auth_page.mjs", "auth-page", config, tmp_path_factory.mktemp("auth-page"))
    for path in result.get("screenshots", []):
        print(f"screenshot: {path}")

    report = json.dumps(
        {k: result.get(k) for k in ("failures", "checks", "unauthorized", "console", "screenshots", "seconds")},
        indent=1,
    ).replace(token, "<token>")
    stderr = proc.stderr[-6000:].replace(token, "<token>")
    assert result.get("ok") and proc.returncode == 0, f"{report}\nstderr:\n{stderr}"

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
