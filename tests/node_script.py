"""Runs a Node script that reports one JSON object on the last line of its stdout.

Used by tests/e2e (driver.mjs, the AI SDK client) and tests/browser (chat_page.mjs). Import it as
`tests.node_script`: `python -m pytest` (as `make test` runs it) puts the repository root on
sys.path.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_node_script(
    script: Path,
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float,
    stderr_chars: int = 4000,
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Runs `node script *args` in the script's folder; returns its JSON result and the finished process.

    stdin: text fed to the script's standard input. env: its environment (default: inherited).
    Raises AssertionError with the tails of stdout and stderr (`stderr_chars` of it) when the last
    line of stdout is not JSON; whether the result is good is for the caller to judge.
    """
    proc = subprocess.run(
        ["node", str(script), *args],
        input=stdin,
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(
            f"{script.name} printed no JSON result (exit {proc.returncode})\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-stderr_chars:]}"
        ) from None
    return result, proc
