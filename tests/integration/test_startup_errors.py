"""A gateway that cannot start says why in one line naming the setting, and exits with status 2.

Real processes (`python -m adk_gateway`), each refused before it ever says `listening`: a port in use,
a session store URI that does not parse, a session or stream store that does not answer, and an
agent module that cannot be imported (with the hint about the working folder and PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_process import ROOT, free_port, gateway_python, running_gateway


def start_refused(*args: str, port: int | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # (Not PYTHONASYNCIODEBUG, which `make test` sets: its slow-callback lines on a busy machine
    # are not the gateway's to say.)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ADK_GATEWAY_", "GOOGLE_API_KEY", "PYTHONASYNCIODEBUG"))}
    return subprocess.run(
        [gateway_python(), "-m", "adk_gateway", "--port", str(port or free_port()), *args],
        check=False, cwd=cwd, capture_output=True, text=True, timeout=60, env=env,
    )


def the_one_line(done: subprocess.CompletedProcess[str], flag: str) -> str:
    """Exit status 2, nothing on stdout, one line on stderr naming the flag and its variable."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "listening" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    variable = "ADK_GATEWAY_" + flag.removeprefix("--").replace("-", "_").upper()
    assert lines[0].startswith(f"adk-gateway: {flag} / {variable}: "), lines[0]
    return lines[0]


@pytest.fixture
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def test_a_port_in_use_is_one_line(port_in_use: int) -> None:
    line = the_one_line(start_refused(port=port_in_use), "--port")
    assert f"127.0.0.1:{port_in_use} is already in use" in line


def test_a_session_store_uri_that_does_not_parse_is_one_line() -> None:
    line = the_one_line(start_refused("--session-store", "postgres://nope"), "--session-store")
    assert "unsupported session store 'postgres://nope'" in line
    assert "cannot load agent" not in line


def test_a_session_store_that_does_not_answer_is_one_line_without_its_password() -> None:
    uri = f"postgresql://someone:hunter2@127.0.0.1:{free_port()}/chats"
    line = the_one_line(start_refused("--session-store", uri), "--session-store")
    assert "does not answer" in line and "Connect" in line
    assert "hunter2" not in line and "someone" not in line


def test_a_stream_store_that_does_not_answer_is_one_line() -> None:
    line = the_one_line(start_refused("--stream-store", f"redis://127.0.0.1:{free_port()}/0"), "--stream-store")
    assert "does not answer" in line


def test_an_agent_module_that_does_not_import_is_one_line_with_the_hint(tmp_path: Path) -> None:
    """The user's own module, with the gateway started from another folder: the hint names the
    working folder and PYTHONPATH."""
    (tmp_path / "my_agents").mkdir()
    line = the_one_line(start_refused("--agent", "my_agents.weather:root_agent"), "--agent")
    assert "cannot import 'my_agents.weather'" in line
    assert str(ROOT) in line and "PYTHONPATH" in line and "--agent ./" in line


def test_listening_is_said_once_the_agent_and_the_socket_are_ready(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with running_gateway(log=log):
        pass
    events = [json.loads(line)["event"] for line in log.read_text().splitlines() if line.startswith("{")]
    assert events.count("listening") == 1
    assert events.index("agent_ready") < events.index("listening")


def test_version() -> None:
    done = subprocess.run([gateway_python(), "-m", "adk_gateway", "--version"], check=False, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0
    name, version = done.stdout.split()
    assert name == "adk-gateway" and version[0].isdigit()
