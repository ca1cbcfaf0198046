"""Authentication settings as an operator meets them: `python -m adk_gateway` started for real.

- `--auth none` on a host other than loopback stops at start with one line naming the setting,
  unless `--allow-anonymous` says it is meant (then it starts and warns);
- `jwt` without a key, and `api-keys` with a bad file, stop at start;
- the WebSocket's `?access_token=` never reaches the log, accepted or refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import aiohttp
import jwt
import pytest

from tests.gateway_process import ROOT, free_port, gateway_python, running_gateway

SECRET = "process-test-secret-0123456789abcdef"


def start_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gateway_python(), "-m", "adk_gateway", "--port", str(free_port()), *args],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith(("ADK_GATEWAY_", "GOOGLE_API_KEY"))},
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::"])
def test_auth_none_refuses_a_reachable_host(host: str) -> None:
    done = start_refused("--host", host)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--auth" in lines[0] and "--allow-anonymous" in lines[0] and host in lines[0]


def test_auth_settings_that_cannot_work_stop_at_start(tmp_path: Path) -> None:
    done = start_refused("--auth", "jwt")
    assert done.returncode == 2 and "--auth-jwt-secret" in done.stderr
    keys = tmp_path / "keys"
    keys.write_text("a-secret-key alice bob\n")
    done = start_refused("--auth", "api-keys", "--auth-api-keys-file", str(keys))
    assert done.returncode == 2 and "line 1" in done.stderr and "a-secret-key" not in done.stderr


def test_allow_anonymous_starts_and_warns(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with running_gateway("--host", "0.0.0.0", "--allow-anonymous", log=log) as url:
        assert url.startswith("http://127.0.0.1:")
    warnings = [json.loads(line) for line in log.read_text().splitlines() if "anonymous_access" in line]
    assert warnings and warnings[0]["level"] == "warning"


def test_the_access_token_never_reaches_the_log(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")
    wrong = jwt.encode({"sub": "alice", "exp": int(time.time()) + 600}, SECRET + "x", algorithm="HS256")

    async def use(url: str) -> None:
        async with aiohttp.ClientSession() as http:
            ws_url = url.replace("http", "ws") + "/api/chat/ws"
            async with http.ws_connect(ws_url, params={"access_token": token}) as ws:
                await ws.send_json({"type": "send", "requestId": "r1", "id": "c1", "headers": {}, "body": {},
                                    "messages": [{"id": "u1", "role": "user",
                                                  "parts": [{"type": "text", "text": "/echo hi"}]}]})
                async for message in ws:
                    if json.loads(message.data)["type"] == "end":
                        break
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await http.ws_connect(ws_url, params={"access_token": wrong})
            async with http.get(url + "/api/me", headers={"Authorization": f"Bearer {wrong}"}) as response:
                assert response.status == 401

    with running_gateway("--auth", "jwt", "--auth-jwt-secret", SECRET, log=log) as url:
        asyncio.run(use(url))
    text = log.read_text()
    assert "socket_open" in text and "access_token=[redacted]" in text
    for secret in (token, wrong, token.split(".")[2], wrong.split(".")[2], SECRET):
        assert secret not in text

