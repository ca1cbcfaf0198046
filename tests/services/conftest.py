"""Real services for the service tests: PostgreSQL, Redis, nginx and gateway processes.

Every server is started by the test run itself, on 127.0.0.1 and a free port, with a temporary
data directory, and is stopped (and its directory removed) afterwards. Nothing on the machine is
reused or changed. The binaries come from Debian packages (`make system-deps`, run by `make
test`); a missing binary fails the test with that hint instead of skipping it.

- PostgreSQL: `initdb` + `pg_ctl` from /usr/lib/postgresql/<newest>/bin. PostgreSQL refuses to
  run as root, so when the tests run as root the server commands run as the `postgres` user
  (`runuser -u postgres --`) in a directory owned by it. Durability is switched off (fsync,
  synchronous_commit, full_page_writes): these are throwaway clusters.
- Redis: `redis-server --port N --save '' --appendonly no` (no persistence).
- nginx: `nginx -p <tmp> -c <tmp>/nginx.conf -e <tmp>/error.log` in the foreground
  (`daemon off`), with a generated main config that includes a rendered copy of
  deploy/nginx/adk-gateway.conf (`render_site_conf` of deploy/cluster.py, which `make cluster-up`
  uses too).
- Gateway: `.venv/bin/python -m adk_gateway --port N ...` with the offline scripted model, started by
  tests/gateway_process.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from deploy.cluster import render_site_conf
from tests.gateway_process import GatewayProcess, free_port, start_gateway_process, stop_process

ROOT = Path(__file__).resolve().parents[2]
SITE_CONF = ROOT / "deploy" / "nginx" / "adk-gateway.conf"
HINT = "run make test (installs Debian packages)"
STARTUP_DEADLINE_S = 60.0


# --- small helpers ------------------------------------------------------------------------------


def need_binary(name: str, *candidates: str) -> str:
    """The path of a service binary, or a failed test naming the fix."""
    for candidate in (*candidates, shutil.which(name)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"`{name}` is not installed: {HINT}", pytrace=False)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            pytest.fail(f"{what} exited with {proc.returncode} at start:\n{tail}", pytrace=False)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {STARTUP_DEADLINE_S:.0f} s", pytrace=False)


# --- PostgreSQL ---------------------------------------------------------------------------------


def _pg_bin(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                      if p.parent.name.isdigit() else 0)
    candidates = [str(v / name) for v in reversed(versions)]
    return need_binary(name, *candidates)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster; yields the gateway's session store URL for database `adk`."""
    initdb, pg_ctl, createdb = _pg_bin("initdb"), _pg_bin("pg_ctl"), _pg_bin("createdb")
    as_postgres: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="adkgw-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(f"running as root needs the `postgres` user: {HINT}", pytrace=False)
        as_postgres = [need_binary("runuser", "/usr/sbin/runuser", "/sbin/runuser"), "-u", "postgres", "--"]
        os.chown(data, owner.pw_uid, owner.pw_gid)
    port = free_port()
    cluster, log = data / "cluster", data / "server.log"
    options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={data} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    try:
        subprocess.run([*as_postgres, initdb, "-D", str(cluster), "-A", "trust", "-U", "postgres",
                        "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*as_postgres, pg_ctl, "-D", str(cluster), "-l", str(log), "-o", options,
                        "-w", "-t", "60", "start"], check=True, capture_output=True, timeout=90)
        subprocess.run([createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "adk"],
                       check=True, capture_output=True, timeout=30)
    except subprocess.CalledProcessError as exc:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        pytest.fail(f"PostgreSQL did not start: {exc.cmd[0]} said {exc.stderr!r}\n{tail}", pytrace=False)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/adk"
    finally:
        subprocess.run([*as_postgres, pg_ctl, "-D", str(cluster), "-m", "immediate", "-w", "stop"],
                       check=False, capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


# --- Redis --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway Redis without persistence; yields redis://127.0.0.1:PORT/0."""
    server = need_binary("redis-server", "/usr/bin/redis-server")
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="adkgw-redis-"))
    log = data / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(data), "--daemonize", "no", "--protected-mode", "yes"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        _wait_port(port, proc, "redis-server", log)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc)
        shutil.rmtree(data, ignore_errors=True)


# --- gateway processes --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def start_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., GatewayProcess]]:
    """Starts `python -m adk_gateway --port N <args>`; every process is stopped after the test."""
    started: list[GatewayProcess] = []

    def start(*args: str) -> GatewayProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADK_GATEWAY_")}
        gateway = start_gateway_process(*args, log=tmp_path_factory.mktemp("gateway") / "gateway.log", env=env)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        stop_process(gateway.proc)


# --- nginx --------------------------------------------------------------------------------------


@dataclass
class Nginx:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    prefix: Path
    site_conf: str = field(repr=False, default="")

    def access_log(self) -> str:
        path = self.prefix / "access.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@pytest.fixture(scope="module")
def start_nginx() -> Iterator[Callable[..., Nginx]]:
    """Starts nginx in the foreground with the deploy config in front of the given gateway ports."""
    binary = need_binary("nginx", "/usr/sbin/nginx")
    started: list[Nginx] = []

    def start(upstreams: list[int], *, read_timeout: str | None = None) -> Nginx:
        prefix = Path(tempfile.mkdtemp(prefix="adkgw-nginx-"))
        prefix.chmod(0o755)  # workers (nobody, when the master is root) read and write temp dirs here
        port = free_port()
        site = render_site_conf(SITE_CONF.read_text(), listen_port=port, upstreams=upstreams,
                                read_timeout=read_timeout, access_log=prefix / "access.log")
        (prefix / "adk-gateway.conf").write_text(site)
        temp_paths = "\n".join(f"    {kind}_temp_path {prefix}/{kind};"
                               for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (prefix / "nginx.conf").write_text(f"""daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
{temp_paths}
    include {prefix}/adk-gateway.conf;
}}
""")
        check = subprocess.run([binary, "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                                "-e", str(prefix / "error.log")], check=False, capture_output=True, text=True)
        if check.returncode != 0:
            pytest.fail(f"nginx rejected the config:\n{check.stderr}\n--- site conf ---\n{site}", pytrace=False)
        proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                                 "-e", str(prefix / "error.log")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nginx = Nginx(f"http://127.0.0.1:{port}", port, proc, prefix, site)
        started.append(nginx)
        _wait_port(port, proc, "nginx", prefix / "error.log")
        return nginx

    yield start
    for nginx in started:
        stop_process(nginx.proc, signal.SIGQUIT)  # graceful: lets workers finish
        shutil.rmtree(nginx.prefix, ignore_errors=True)


# --- the wire -----------------------------------------------------------------------------------


def user_message(text: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_body(chat_id: str, text: str) -> dict[str, Any]:
    return {"id": chat_id, "trigger": "submit-message", "messages": [user_message(text)]}


@dataclass
class SSERead:
    """One SSE response as read: its chunks, comments, and when each line arrived."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    done: bool = False

    def types(self) -> list[str]:
        return [str(c.get("type")) for c in self.chunks]

    def text(self) -> str:
        return "".join(str(c.get("delta", "")) for c in self.chunks if c.get("type") == "text-delta")


async def sse_lines(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line:
            yield line


async def read_sse(response: aiohttp.ClientResponse, *, on_chunk: Callable[[dict[str, Any]], Any] | None = None,
                   until: Callable[[SSERead], bool] | None = None) -> SSERead:
    """Reads `data:` events and comments until `[DONE]`, the end, or `until(read)` is true."""
    read = SSERead()
    async for line in sse_lines(response):
        if line.startswith(":"):
            read.comments.append(line[1:].strip())
        elif line.startswith("data: "):
            payload = line[len("data: "):]
            if payload == "[DONE]":
                read.done = True
                break
            chunk = json.loads(payload)
            read.chunks.append(chunk)
            if on_chunk is not None:
                result = on_chunk(chunk)
                if hasattr(result, "__await__"):
                    await result
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")
        if until is not None and until(read):
            break
    return read
