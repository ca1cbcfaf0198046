"""The README's quick starts run as written: every shell command of its "Quick start" section and
of the "Try it" of "Authentication", taken from the file itself, so the README cannot drift.

A block's `make run ARGS="..."` line (re)starts the gateway as `make run` does (`python -m
adk_gateway ARGS`, from the folder the commands run in); its other lines run in one bash script
(`set -eo pipefail`, so a variable set on one line is there on the next). A block whose first line
is `# file: PATH` is written to PATH first (the agents the README asks you to create). The one
liberty taken: the port, a free one instead of 8080, in the commands and the gateway alike.

Each script must exit 0, and every chat request in it must end its stream with `[DONE]` and no
error; an approval answered with curl must run its tool.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_process import ROOT, GatewayProcess, gateway_python, start_gateway_process, stop_process

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def quick_start_blocks() -> list[tuple[str, str]]:
    """(language, body) of each block of the quick starts, in order."""
    text = README.read_text()
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(section(text, "Quick start"))]
    [try_it, *_] = [(m.group(1), m.group(2)) for m in FENCE.finditer(section(text, "Authentication"))
                    if m.group(1) == "sh"]
    return [*blocks, try_it]


class Shell:
    """Runs the README's blocks in `folder`, with the gateway they start."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.gateway: GatewayProcess | None = None
        self.port = 0

    def restart(self, line: str) -> None:
        self.stop()
        words = shlex.split(line)
        args = [word.removeprefix("ARGS=") for word in words[2:] if word.startswith("ARGS=")]
        # The README's commands are written for a fresh shell: no ADK_GATEWAY_* from elsewhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ADK_GATEWAY_", "PYTHONASYNCIODEBUG"))}
        self.gateway = start_gateway_process(*shlex.split(" ".join(args)), log=self.folder / "gateway.log",
                                             env=env, cwd=self.folder)
        self.port = self.gateway.port

    def run(self, script: str) -> str:
        script = script.replace("127.0.0.1:8080", f"127.0.0.1:{self.port}")
        script = script.replace(".venv/bin/python", gateway_python())
        done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=self.folder, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{script}\n--- exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def stop(self) -> None:
        if self.gateway is not None:
            stop_process(self.gateway.proc)
            self.gateway = None


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    running = Shell(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_the_quick_starts_run_as_written(shell: Shell) -> None:
    blocks = quick_start_blocks()
    assert sum(language == "sh" for language, _ in blocks) >= 4  # the parts this test exists for
    for language, body in blocks:
        first = body.splitlines()[0]
        if first.startswith("# file: "):
            path = shell.folder / first.removeprefix("# file: ").strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            continue
        if language != "sh":
            continue
        lines = body.splitlines()
        starts = [line for line in lines if line.startswith("make run")]
        for line in starts:
            shell.restart(line)
        assert shell.gateway is not None, f"a block runs before any `make run`:\n{body}"
        script = "\n".join(line for line in lines if not line.startswith("make run"))
        out = shell.run(script)
        chats = len(re.findall(r"/api/chat\b(?!/)", script))
        assert out.count("data: [DONE]") == chats, out
        assert '"type":"error"' not in out and '{"error"' not in out, out
        if "approval-responded" in script:
            assert '"type":"tool-output-available"' in out, out
