"""Fixtures for the browser tests: a real gateway process on a free port, serving web/dist.

Set ADK_GATEWAY_E2E_URL to run against a gateway that is already running instead of starting one
(as tests/e2e does). The small helpers are copied from tests/e2e/conftest.py so that the browser
tests do not need tests/e2e's Node packages.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_S = 60.0


def _python() -> str:
    venv_python = ROOT / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@pytest.fixture(scope="session")
def browser_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("ADK_GATEWAY_E2E_URL")
    if external:
        yield external.rstrip("/")
        return

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("browser-gateway") / "gateway.log"
    env = {**os.environ, "ADK_GATEWAY_LOG_FORMAT": "json"}
    env.pop("GOOGLE_API_KEY", None)  # the offline scripted model
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [_python(), "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(
                    f"gateway exited with {proc.returncode} before /healthz answered:\n"
                    f"{log_path.read_text(errors='replace')[-4000:]}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"gateway /healthz not 200 within {STARTUP_DEADLINE_S:.0f} s:\n"
                    f"{log_path.read_text(errors='replace')[-4000:]}",
                    pytrace=False,
                )
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
