"""Runs a page script of tests/browser (chat_page.mjs, auth_page.mjs) in Debian's headless Chromium.

The scripts drive the bundled chat page with playwright-core (no browser download) and print one
JSON result line; `run_page_script` runs one with its config and returns that result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.node_script import run_node_script

BROWSER_DIR = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("ADK_GATEWAY_CHROMIUM", "/usr/bin/chromium")
RUN_TIMEOUT_S = 90


def setup_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if shutil.which("node") is None:
        return "`node` is not on PATH; the browser test drives Chromium from Node (>= 20)."
    if not (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").is_file():
        return (
            "tests/browser/node_modules/playwright-core is missing: run `make test` "
            "(it runs `npm ci` in tests/browser), or `npm ci --prefix tests/browser`."
        )
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: run `make system-deps` (or `make test`), which installs Debian's chromium."
    return None


def run_page_script(
    script: str, config: dict[str, Any], workdir: Path
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Runs tests/browser/`script` with `config` (plus its screenshot folder and the Chromium path);
    Chromium's fresh profile and the screenshots go under `workdir`."""
    screenshots = workdir / "screenshots"
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
