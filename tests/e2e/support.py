"""Runs the Node driver (the real AI SDK client) and reads what it reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.node_script import run_node_script

E2E_DIR = Path(__file__).resolve().parent
DRIVER = E2E_DIR / "driver.mjs"
NODE_MODULES = E2E_DIR / "node_modules"


def node_setup_problem() -> str | None:
    """Why the driver cannot run here, or None."""
    if shutil.which("node") is None:
        return "`node` is not on PATH; the e2e tests drive the AI SDK client in Node (>= 20)."
    for package in ("ai6", "ai7", "ws"):
        if not (NODE_MODULES / package / "package.json").is_file():
            return (
                f"tests/e2e/node_modules/{package} is missing: run `make test` "
                "(it runs `npm ci` in tests/e2e), or `npm ci --prefix tests/e2e`."
            )
    return None


def run_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """Runs one scenario through driver.mjs and returns its JSON result.

    The result carries the driver's stderr under "stderr" when it is not ok, so
    that a failing assertion shows what Node said.
    """
    timeout_s = scenario.get("timeoutMs", 20000) / 1000 + 15
    result, proc = run_node_script(DRIVER, stdin=json.dumps(scenario), timeout=timeout_s)
    if not result.get("ok") or proc.returncode != 0:
        result["stderr"] = proc.stderr[-4000:]
    return result


# --- reading results -------------------------------------------------------------


def problems(result: dict[str, Any]) -> str:
    """A compact account of what went wrong in a run, for assertion messages."""
    keys = ("status", "error", "counts", "validationErrors", "loop", "timedOut", "driverErrors", "stderr")
    shown = {k: result.get(k) for k in keys if result.get(k)}
    shown["requests"] = [
        {
            k: r.get(k)
            for k in ("kind", "trigger", "httpStatus", "end", "sawDone", "chunkTypes", "error", "errorBody")
        }
        for r in result.get("requests", [])
    ]
    return json.dumps(shown, indent=1)[:6000]


def assert_clean(result: dict[str, Any]) -> None:
    """Every chunk valid, no loop, no timeout, no driver error."""
    assert result.get("ok"), problems(result)


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def tool_parts(message: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    return [
        p
        for p in message["parts"]
        if p["type"].startswith("tool-") and (name is None or p["type"] == f"tool-{name}")
    ]


def single_turn(result: dict[str, Any]) -> dict[str, Any]:
    """Asserts the chat holds exactly one user and one assistant message; returns the latter."""
    assert_clean(result)
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant"], f"messages: {roles}\n{problems(result)}"
    assistant: dict[str, Any] = result["messages"][1]
    return assistant


def assert_continuations_keep_id(result: dict[str, Any]) -> None:
    """Continuation responses open with `start` carrying the continued message id, or none."""
    for request in result["requests"]:
        if request.get("lastMessageRole") != "assistant" or not request.get("chunks"):
            continue
        start = request["chunks"][0]
        assert start["type"] == "start", request["chunkTypes"]
        assert start.get("messageId") in (None, request["messageId"]), (start, request["messageId"])
