"""The gateway as a subprocess, for the tests that talk to a real server (e2e, browser, services).

    with running_gateway("--detach-on-disconnect", log=tmp / "gateway.log") as url:
        ...  # url is "http://127.0.0.1:PORT", /healthz answers 200

The gateway runs as `.venv/bin/python -m adk_gateway --host 127.0.0.1 --port N [args]` (or the
current interpreter when there is no .venv) from the repository root, with the offline scripted
model (GOOGLE_API_KEY removed) and JSON logs (ADK_GATEWAY_LOG_FORMAT=json) written to `log`. If
it exits or /healthz does not answer 200 within STARTUP_DEADLINE_S, it is stopped and the test
fails with the tail of that log.

- `running_gateway(*args, log=..., env=None)`: a context manager yielding the base URL.
- `start_gateway_process(...)`: the same start, returning a `GatewayProcess` (url, port, proc,
  log) for the caller to stop with `stop_process(gateway.proc)`.
- `external_or_running_gateway(tmp_path_factory, log_dir)`: ADK_GATEWAY_E2E_URL when set, else
  `running_gateway()`.
- `free_port()`, `stop_process(proc)`, `gateway_python()`: also used for the other servers of
  tests/services and by the benchmarks (tests/bench).

Import it as `tests.gateway_process`: `python -m pytest` (as `make test` runs it) puts the
repository root on sys.path.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STARTUP_DEADLINE_S = 60.0
EXTERNAL_URL_ENV = "ADK_GATEWAY_E2E_URL"
"""Names a gateway that is already running, for the e2e and browser tests to use instead of starting one."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_env(port: int) -> dict[str, str]:
    """The environment for deploy/cluster.py with its front on `port` and everything else (two
    gateways, PostgreSQL, Redis) on free ports: none of the caller's gateway or cluster settings,
    and the offline scripted model."""
    ports = {"CLUSTER_PORT": port, "CLUSTER_POSTGRES_PORT": free_port(), "CLUSTER_REDIS_PORT": free_port()}
    gateway_ports = [free_port(), free_port()]
    assert len({*ports.values(), *gateway_ports}) == 5, "free_port() handed out a port twice"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADK_GATEWAY_", "CLUSTER_"))}
    env.pop("GOOGLE_API_KEY", None)  # the offline scripted model
    env.update({k: str(v) for k, v in ports.items()})
    env["CLUSTER_GATEWAY_PORTS"] = ",".join(map(str, gateway_ports))
    return env


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Sends `sig` (unless the process has already exited), waits `timeout` seconds, then kills it."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class GatewayProcess:
    """A started gateway: its base URL, port, process and log file."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def gateway_python() -> str:
    """The interpreter that runs the gateway: the checkout's .venv, else the current one."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_gateway_process(
    *args: str, log: Path, env: Mapping[str, str] | None = None, name: str = "gateway",
    command: Sequence[str] | None = None, cwd: Path = ROOT,
) -> GatewayProcess:
    """Starts a gateway on a free port and waits until /healthz answers 200.

    args: extra command-line arguments after `--host 127.0.0.1 --port N`.
    log: the file that receives the process's stdout and stderr.
    env: the environment to start from (default: os.environ); GOOGLE_API_KEY is always removed
        and ADK_GATEWAY_LOG_FORMAT set to json.
    name: how failure messages call the process.
    command: what starts it (default: this checkout's `python -m adk_gateway`), run in `cwd`.

    The caller stops the process (`stop_process(gateway.proc)`); if it does not come up, it is
    stopped here and the test fails with the tail of its log.
    """
    port = free_port()
    process_env = {**(os.environ if env is None else env), "ADK_GATEWAY_LOG_FORMAT": "json"}
    process_env.pop("GOOGLE_API_KEY", None)  # the offline scripted model
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*(command or (gateway_python(), "-m", "adk_gateway")), "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=cwd,
            env=process_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = GatewayProcess(f"http://127.0.0.1:{port}", port, proc, log)
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not _healthy(gateway.url):
        if proc.poll() is not None:
            pytest.fail(
                f"{name} exited with {proc.returncode} before /healthz answered:\n{gateway.log_tail()}", pytrace=False
            )
        if time.monotonic() > deadline:
            stop_process(proc)
            pytest.fail(
                f"{name} /healthz not 200 within {STARTUP_DEADLINE_S:.0f} s:\n{gateway.log_tail()}", pytrace=False
            )
        time.sleep(0.05)
    return gateway


@contextmanager
def running_gateway(
    *args: str, log: Path, env: Mapping[str, str] | None = None, name: str = "gateway"
) -> Iterator[str]:
    """A gateway for the duration of the block (see `start_gateway_process`); yields its base URL."""
    gateway = start_gateway_process(*args, log=log, env=env, name=name)
    try:
        yield gateway.url
    finally:
        stop_process(gateway.proc)


@contextmanager
def external_or_running_gateway(tmp_path_factory: pytest.TempPathFactory, log_dir: str) -> Iterator[str]:
    """The gateway named by ADK_GATEWAY_E2E_URL (without a trailing slash) when that is set;
    otherwise a `running_gateway()` logging to gateway.log in a new temporary folder `log_dir`."""
    external = os.environ.get(EXTERNAL_URL_ENV)
    if external:
        yield external.rstrip("/")
        return
    with running_gateway(log=tmp_path_factory.mktemp(log_dir) / "gateway.log") as url:
        yield url
