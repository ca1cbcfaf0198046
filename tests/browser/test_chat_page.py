"""The bundled chat page in headless Chromium, over SSE and over the WebSocket.

tests/browser/chat_page.mjs drives the page with playwright-core and Debian's Chromium (no
browser download): echo, a server tool with approval, a browser tool with approval, Stop and the
next message, for each transport chosen with the page's transport switch. It counts the chat
requests of each turn and fails on any console or page error. Screenshots of the page after each
transport go to a temporary folder whose path is printed.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.browser.page_driver import run_page_script, setup_problem

pytestmark = pytest.mark.browser


def test_chat_page_both_transports(browser_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    problem = setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)

    with urllib.request.urlopen(f"{browser_gateway_url}/", timeout=5) as response:
        page = response.read().decode()
    assert "/static/app.js" in page, "the gateway does not serve the built chat page: run `make test` (builds web/dist)"

    result, proc = run_page_script("chat_page.mjs", {"url": browser_gateway_url}, tmp_path_factory.mktemp("chat-page"))
    for path in result.get("screenshots", []):
        print(f"screenshot: {path}")

    report = json.dumps({k: result.get(k) for k in ("failures", "runs", "console", "screenshots", "seconds")}, indent=1)
    assert result.get("ok") and proc.returncode == 0, f"{report}\nstderr:\n{proc.stderr[-6000:]}"

    for kind in ("sse", "ws"):
        run = result["runs"][kind]
        counts = run["counts"]
        assert counts["echo"] == 1, report
        assert counts["process_payment"] == 2, report
        assert 1 <= counts["change_bgm"] <= 3, report
        assert counts["after_stop"] == 1, report
        assert "process_payment -> " in run["paymentText"], report
        assert '"completed"' in run["paymentOutput"], report
        assert run["bgmText"] == 'change_bgm -> {"playing":2}', report
        assert run["stoppedAfterTokens"] < 200, report
    assert not [line for line in result["console"] if line.startswith("error:")], report
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"
