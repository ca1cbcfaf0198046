"""The bundled load generator (tests/bench/loadgen.py) against an in-process gateway.

Tiny bounded loads; the assertions are on counts and shape only, never on timings.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient

from gateway.keys import REGISTRY

from .conftest import StartGateway
from .support import settings as gateway_settings

try:
    from tests.bench import loadgen
except ImportError:  # plain `pytest` (not `python -m pytest`) without the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.bench import loadgen

ECHO_CHUNKS = ["start", "start-step", "text-start", "text-delta x3", "text-end", "finish-step", "finish"]
SECRET = "loadgen-test-secret-that-is-long-enough-for-hs256"


async def _run(client: TestClient[Any, Any], **overrides: Any) -> tuple[list[loadgen.Sample], dict[str, Any]]:
    settings: dict[str, Any] = {"duration_s": 10, "timeout_s": 5, **overrides}
    cfg = loadgen.LoadConfig(url=str(client.make_url("")).rstrip("/"), **settings)
    samples, elapsed, stopped_by = await loadgen.run_load(cfg)
    return samples, loadgen.summarize(samples, elapsed, cfg, stopped_by, include_samples=True)


async def _load(gateway: StartGateway, **overrides: Any) -> tuple[list[loadgen.Sample], dict[str, Any], Any]:
    client = await gateway()
    samples, summary = await _run(client, **overrides)
    return samples, summary, client


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_fresh_chats_are_counted(gateway: StartGateway, transport: str) -> None:
    samples, summary, client = await _load(
        gateway, transport=transport, concurrency=3, requests=7, prompt="/echo a b c"
    )
    assert len(samples) == 7
    assert all(s.ok and not s.aborted and s.error is None for s in samples), [s.error for s in samples]
    assert {s.chunks for s in samples} == {9}  # the 7 chunk kinds, 3 of them text deltas
    assert {s.text_deltas for s in samples} == {3}
    assert {s.text for s in samples} == {"a b c"}
    assert {s.finish_reason for s in samples} == {"stop"}
    assert len({s.chat_id for s in samples}) == 7  # a fresh chat per request
    assert all(s.ttfc is not None and s.finish is not None and s.total is not None for s in samples)
    assert summary["stopped_by"] == "requests"
    assert summary["requests"] == {"sent": 7, "ok": 7, "aborted": 0, "failed": 0, "unfinished": 0}
    assert summary["errors"] == {}
    assert summary["chunks"]["total"] == 63
    assert summary["bytes"]["total"] == sum(s.bytes for s in samples) > 0
    assert set(summary["ttfc_ms"]) == {"p50", "p95", "p99", "mean", "min", "max"}
    assert client.server.app[REGISTRY].counts()["runs"] == 0


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_reused_chats_post_the_growing_history(gateway: StartGateway, transport: str) -> None:
    samples, summary, _ = await _load(
        gateway, transport=transport, concurrency=2, requests=6, prompt="/echo again", chat="reused"
    )
    assert summary["requests"]["ok"] == 6, summary.get("error_examples")
    assert len({s.chat_id for s in samples}) == 2  # one chat per client, three turns each
    assert all(s.text == "again" for s in samples)


async def test_abort_after_disconnects_and_the_gateway_frees_the_runs(gateway: StartGateway) -> None:
    samples, summary, client = await _load(
        gateway, transport="sse", concurrency=2, requests=4, prompt="/stream 50 200", abort_after=3
    )
    assert summary["requests"] == {"sent": 4, "ok": 0, "aborted": 4, "failed": 0, "unfinished": 0}
    assert {s.chunks for s in samples} == {3}
    registry = client.server.app[REGISTRY]
    async with asyncio.timeout(5):  # each 10 s run is stopped by its disconnect
        while registry.counts()["runs"]:
            await asyncio.sleep(0.01)


async def test_the_duration_bound_stops_long_requests(gateway: StartGateway) -> None:
    _, summary, _ = await _load(
        gateway, transport="ws", concurrency=2, requests=100, prompt="/stream 100 100", duration_s=0.3
    )
    assert summary["stopped_by"] == "duration"
    assert summary["requests"]["sent"] == 2
    assert summary["requests"]["unfinished"] == 2
    assert summary["requests"]["failed"] == 0


@pytest.mark.parametrize(("transport", "refusal"), [("sse", "http_401"), ("ws", "ws_handshake_401")])
async def test_a_token_authenticates_every_request_on_a_jwt_gateway(
    gateway: StartGateway, transport: str, refusal: str
) -> None:
    client = await gateway(gateway_settings(auth="jwt", auth_jwt_secret=SECRET))
    token = jwt.encode({"sub": "bench-alice", "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")

    samples, summary = await _run(client, transport=transport, concurrency=2, requests=6, prompt="/echo a b c",
                                  chat="reused", token=token)
    assert summary["requests"] == {"sent": 6, "ok": 6, "aborted": 0, "failed": 0, "unfinished": 0}, (
        summary.get("error_examples"))
    assert {s.text for s in samples} == {"a b c"}
    assert {s.status for s in samples} == ({200} if transport == "sse" else {None})
    # The token is a credential: the summary says one was used, never which.
    assert summary["config"]["token"] == "[redacted]"
    assert token not in json.dumps(summary)

    # Without a token (and --user does not help: the gateway ignores x-user-id with auth on), and
    # with a token the gateway did not sign: every request is refused with 401 and counted.
    forged = jwt.encode({"sub": "bench-alice"}, "another-secret-that-is-long-enough-too", algorithm="HS256")
    for credentials in ({"user": "bench-alice"}, {"token": forged}):
        samples, summary = await _run(client, transport=transport, concurrency=2, requests=4,
                                      prompt="/echo a b c", **credentials)
        assert summary["requests"] == {"sent": 4, "ok": 0, "aborted": 0, "failed": 4, "unfinished": 0}
        assert summary["errors"] == {refusal: 4}
        assert all(s.chunks == 0 for s in samples)
        assert forged not in json.dumps(summary)  # the ws handshake error quotes its URL: redacted
    assert client.server.app[REGISTRY].counts()["runs"] == 0


def test_a_token_is_only_for_the_gateway_transports() -> None:
    with pytest.raises(ValueError, match="--token"):
        loadgen.LoadConfig(transport="adk", adk_app="demo", token="t").validate()
    with pytest.raises(ValueError, match="--token"):
        loadgen.LoadConfig(token="two words").validate()


def test_redact_hides_query_and_bearer_credentials() -> None:
    text = "401, url='ws://127.0.0.1:1/api/chat/ws?access_token=abc.def&x=1' Authorization: Bearer k3y"
    assert loadgen.redact(text) == (
        "401, url='ws://127.0.0.1:1/api/chat/ws?access_token=[redacted]&x=1' Authorization: Bearer [redacted]"
    )


async def test_an_error_status_is_counted_by_kind(gateway: StartGateway) -> None:
    _, summary, _ = await _load(gateway, transport="sse", concurrency=1, requests=2, prompt="hi",
                                sse_path="/api/nowhere")
    assert summary["requests"]["failed"] == 2
    assert summary["errors"] == {"http_404": 2}


@pytest.mark.parametrize("url", ["http://localhost:8080", "http://127.0.0.1:1", "http://127.9.9.9", "http://[::1]:80"])
def test_loopback_targets_are_allowed(url: str) -> None:
    loadgen.check_target(url)


@pytest.mark.parametrize("url", ["http://example.com", "http://10.0.0.1:8080", "http://[2001:db8::1]/", "ftp://localhost"])
def test_other_targets_are_refused(url: str) -> None:
    with pytest.raises(loadgen.TargetRefused):
        loadgen.check_target(url)


def test_allow_remote_lifts_the_host_check_and_the_cli_refuses_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    loadgen.check_target("http://example.com", allow_remote=True)
    assert loadgen.main(["--url", "http://example.com", "--requests", "1"]) == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_sse_parser_handles_split_lines_crlf_comments_and_multiline_data() -> None:
    parser = loadgen.SSEParser()
    events = list(parser.feed(b": stream-open\r\n\r\ndata: {\"a\""))
    events += list(parser.feed(b":1}\r\n\r\ndata:x\ndata: y\n\ndata: [DONE]\n\n"))
    assert events == ['{"a":1}', "x\ny", "[DONE]"]


def test_percentiles() -> None:
    stats = loadgen.percentiles([float(v) for v in range(1, 101)])
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["min"] == 1 and stats["max"] == 100
    assert loadgen.percentiles([])["p99"] is None
