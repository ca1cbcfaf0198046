"""Runs a page script of tests/browser (chat_page.mjs, voice_page.mjs, ...) in Debian's headless Chromium.

The scripts drive the chat page with playwright-core (no browser download) and print one JSON
result line; `run_page_script` runs one with its config and returns that result. Screenshots go
to tests/browser/artifacts/<name>/ (git-ignored), emptied at the start of each run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import urllib.request
import wave
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.node_script import run_node_script

BROWSER_DIR = Path(__file__).resolve().parent
ARTIFACTS = BROWSER_DIR / "artifacts"
CHROMIUM = os.environ.get("ADK_GATEWAY_CHROMIUM", "/usr/bin/chromium")
RUN_TIMEOUT_S = 240

RunT = TypeVar("RunT", bound="PageRun")


class PageRun:
    """The report of one page script's run: its JSON result, its stderr and its exit status."""

    def __init__(self, result: dict[str, Any], stderr: str, returncode: int) -> None:
        self.result = result
        self.stderr = stderr
        self.returncode = returncode

    def report(self, *keys: str) -> str:
        shown = {k: self.result.get(k) for k in (*keys, "failures")}
        return f"{json.dumps(shown, indent=1, ensure_ascii=False)}\nstderr:\n{self.stderr[-6000:]}"

    def section(self, *path: str) -> Any:
        value: Any = self.result
        for key in path:
            if not isinstance(value, dict) or key not in value:
                pytest.fail(f"the page run did not get to {'/'.join(path)}:\n{self.report()}", pytrace=False)
            value = value[key]
        return value


def setup_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if shutil.which("node") is None:
        return "`node` is not on PATH; the browser test drives Chromium from Node (>= 20)."
    for package in ("playwright-core", "axe-core"):
        if not (BROWSER_DIR / "node_modules" / package / "package.json").is_file():
            return (
                f"tests/browser/node_modules/{package} is missing: run `make test` "
                "(it runs `npm ci` in tests/browser), or `npm ci --prefix tests/browser`."
            )
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: run `make system-deps` (or `make test`), which installs Debian's chromium."
    return None


def write_voice_wav(path: Path, *, rate: int = 48_000, tone_hz: float = 300.0) -> Path:
    """The fake microphone: 0.8 s of a tone then 1.2 s of silence (Chromium loops the file), so
    hands-free mode hears one utterance every 2 s."""
    samples = [int(0.5 * 32767 * math.sin(2 * math.pi * tone_hz * i / rate)) for i in range(int(rate * 0.8))]
    samples += [0] * int(rate * 1.2)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return path


def run_page_script(
    script: str, name: str, config: dict[str, Any], workdir: Path
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Runs tests/browser/`script` with `config` (plus its screenshot folder, artifacts/`name`, and
    the Chromium path); Chromium's fresh profile goes under `workdir`."""
    screenshots = ARTIFACTS / name
    shutil.rmtree(screenshots, ignore_errors=True)
    tmp = workdir / "tmp"  # Chromium's fresh profile (user-data-dir) goes here
    tmp.mkdir()
    config = {**config, "screenshotDir": str(screenshots), "executablePath": CHROMIUM}
    return run_node_script(
        BROWSER_DIR / script,
        json.dumps(config),
        env={**os.environ, "TMPDIR": str(tmp)},
        timeout=RUN_TIMEOUT_S,
        stderr_chars=6000,
    )


def run_page(script: str, name: str, config: dict[str, Any], workdir: Path, *, served_from: str | None = None,
             report_as: type[RunT] = PageRun) -> RunT:  # type: ignore[assignment]  # (mypy#3737)
    """Runs a page script (`run_page_script`) once the set-up is there (else the test fails saying
    what is missing) and, with `served_from`, once that gateway is seen to serve the built page;
    prints the screenshots' paths and returns the run's report (as `report_as`)."""
    problem = setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    if served_from is not None:
        with urllib.request.urlopen(f"{served_from}/", timeout=5) as response:
            page = response.read().decode()
        assert "/static/assets/" in page, \
            "the gateway does not serve the built chat page: run `make web` (builds web/dist)"
    result, proc = run_page_script(script, name, config, workdir)
    for path in result.get("screenshots", []):
        print(f"screenshot: {path}")
    return report_as(result, proc.stderr, proc.returncode)
