"""`adk-gateway loadtest` against an in-process gateway (the scripted demo agent), in each mode and
scenario. The command's own `main` runs in a thread with its own event loop, as it would in its own
process; the assertions are on the counts of its JSON summary, never on timings.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import struct
import threading
import time
import wave
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from adk_gateway.agents.scripted_live import ScriptedLiveConnection
from adk_gateway.keys import REGISTRY
from adk_gateway.loadtest import cli

from .conftest import StartGateway
from .support import settings as gateway_settings
from .support import wait_for

SECRET = "loadtest-test-secret-that-is-long-enough-for-hs256"
ECHO_CHUNKS = 10  # start, start-step, data-agent, text-start, 3 text-delta, text-end, finish-step, finish


async def loadtest(client: TestClient[Any, Any], *argv: str, expect: int = 0) -> dict[str, Any]:
    """Runs the command with --json against `client`'s gateway; returns its summary."""
    out, err = io.StringIO(), io.StringIO()
    url = str(client.make_url("")).rstrip("/")
    args = ["--url", url, "--json", "--timeout", "10", "--duration", "20", *argv]
    code = await asyncio.to_thread(cli.main, args, stdout=out, stderr=err)
    assert code == expect, err.getvalue() or out.getvalue()
    summary: dict[str, Any] = json.loads(out.getvalue())
    return summary


async def no_runs_left(client: TestClient[Any, Any]) -> None:
    registry = client.server.app[REGISTRY]
    await wait_for(lambda: registry.counts()["runs"] == 0, what="every run to end")


def counts(summary: dict[str, Any]) -> dict[str, int]:
    return dict(summary["requests"])


# --- fixed concurrency -----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_echo_at_fixed_concurrency(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "-c", "3", "-n", "7", "--prompt", "/echo a b c",
                             "--samples")
    assert summary["mode"] == "concurrency" and summary["scenario"] == "echo"
    assert summary["stopped_by"] == "requests"
    assert counts(summary) == {"sent": 7, "ok": 7, "aborted": 0, "failed": 0, "unfinished": 0}
    assert summary["errors"] == {}
    assert summary["chunks"]["total"] == 7 * ECHO_CHUNKS
    assert summary["chunks"]["text_deltas_per_ok_request"] == 3
    assert summary["round_trips"]["posts"] == 7
    samples = summary["samples"]
    assert {s["finish_reason"] for s in samples} == {"stop"}
    assert len({s["chat_id"] for s in samples}) == 7  # a fresh chat per request
    assert summary["bytes"]["total"] == sum(s["bytes"] for s in samples) > 0
    for key in ("ttfc_ms", "ttft_ms", "finish_ms", "total_ms"):
        assert summary[key]["count"] == 7
        assert set(summary[key]) == {"count", "p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max"}
        assert summary[key]["min"] <= summary[key]["p50"] <= summary[key]["p99.9"] <= summary[key]["max"]
    await no_runs_left(client)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_reused_chats_post_the_growing_history(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "-c", "2", "-n", "6", "--prompt", "/echo again",
                             "--chat", "reused", "--samples")
    assert counts(summary)["ok"] == 6, summary.get("error_examples")
    assert len({s["chat_id"] for s in summary["samples"]}) == 2  # one chat per client, three turns each


async def test_abort_after_disconnects_and_the_gateway_frees_the_runs(gateway: StartGateway) -> None:
    client = await gateway()
    summary = await loadtest(client, "-c", "2", "-n", "4", "--prompt", "/stream 50 200", "--abort-after", "3")
    assert counts(summary) == {"sent": 4, "ok": 0, "aborted": 4, "failed": 0, "unfinished": 0}
    assert summary["chunks"]["total"] == 12
    await no_runs_left(client)  # each 10 s run is stopped by its disconnect


async def test_the_duration_bound_cuts_long_requests(gateway: StartGateway) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", "ws", "-c", "2", "-n", "100", "--prompt", "/stream 100 100",
                             "--duration", "0.3")
    assert summary["stopped_by"] == "duration"
    assert counts(summary) == {"sent": 2, "ok": 0, "aborted": 0, "failed": 0, "unfinished": 2}
    await no_runs_left(client)


async def test_an_error_status_is_counted_by_kind(gateway: StartGateway) -> None:
    client = await gateway()
    summary = await loadtest(client, "-n", "2", "--sse-path", "/api/nowhere", expect=1)
    assert counts(summary)["failed"] == 2
    assert summary["errors"] == {"http_404": 2}


# --- fixed arrival rate ----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_echo_at_a_fixed_rate(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "--rate", "40", "-n", "8")
    assert summary["mode"] == "rate" and summary["offered_per_s"] == 40
    assert summary["stopped_by"] == "requests"
    requests = counts(summary)
    assert requests["arrivals"] == 8 and requests["dropped"] == 0
    assert {k: requests[k] for k in ("sent", "ok", "failed", "unfinished")} == {
        "sent": 8, "ok": 8, "failed": 0, "unfinished": 0}
    assert 0 <= requests["late"] <= 8
    assert summary["schedule_lag_ms"]["count"] == 8
    assert summary["chunks"]["total"] == 8 * 12  # the default prompt: five words, seven other chunks


async def test_arrivals_past_max_in_flight_are_dropped(gateway: StartGateway) -> None:
    # Two requests whose model stays silent hold both places; the other eight arrivals find none.
    client = await gateway()
    summary = await loadtest(client, "--rate", "100", "-n", "10", "--max-in-flight", "2", "--duration", "1.5",
                             "--prompt", "/latency ttft=60000 /echo late")
    assert summary["stopped_by"] == "duration"
    requests = counts(summary)
    assert {k: requests[k] for k in ("arrivals", "sent", "dropped", "ok", "unfinished")} == {
        "arrivals": 10, "sent": 2, "dropped": 8, "ok": 0, "unfinished": 2}
    await no_runs_left(client)  # the cut requests disconnected: their runs stopped


# --- scenarios -------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_stream_with_a_token_rate(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "--scenario", "stream", "-c", "2", "-n", "4",
                             "--tokens", "5", "--tokens-per-s", "2000", "--ttft-ms", "1")
    assert summary["config"]["tokens"] == 5
    assert counts(summary)["ok"] == 4, summary.get("error_examples")
    assert summary["chunks"]["text_deltas_per_ok_request"] == 5


@pytest.mark.parametrize("transport", ["sse", "ws"])
@pytest.mark.parametrize("mode", [["-c", "2"], ["--rate", "50"]], ids=["concurrency", "rate"])
async def test_approval_round_trips(gateway: StartGateway, transport: str, mode: list[str]) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "--scenario", "approval", "-n", "4", *mode)
    assert counts(summary)["ok"] == 4, summary.get("error_examples")
    # ask -> approve -> the tool runs and the continuation completes: two requests a round trip
    assert summary["round_trips"] == {"posts": 8, "approvals_answered": 4, "tool_outputs_sent": 0,
                                      "posts_per_ok_request": 2.0}
    await no_runs_left(client)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_browser_tool_round_trips(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "--scenario", "browser-tool", "-c", "2", "-n", "4",
                             "--tool-output", '{"latitude": 1, "longitude": 2}')
    assert counts(summary)["ok"] == 4, summary.get("error_examples")
    # ask -> approve -> re-announced, the client runs it -> its output -> the turn ends
    assert summary["round_trips"] == {"posts": 12, "approvals_answered": 4, "tool_outputs_sent": 4,
                                      "posts_per_ok_request": 3.0}


async def test_a_scenario_whose_answer_does_not_fit_fails(gateway: StartGateway) -> None:
    client = await gateway()
    summary = await loadtest(client, "--scenario", "approval", "-n", "2", "--prompt", "/echo no tools", expect=1)
    assert summary["errors"] == {"no_approval_request": 2}


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_idle_connections_are_held_and_counted(gateway: StartGateway, transport: str) -> None:
    client = await gateway()
    summary = await loadtest(client, "--transport", transport, "--scenario", "idle", "-c", "3", "--duration", "0.5")
    assert summary["stopped_by"] == "duration"
    assert summary["idle"] == {"held": 3, "stayed_open": 3, "closed_early": 0, "not_opened": 0}
    assert counts(summary) == {"sent": 3, "ok": 3, "aborted": 0, "failed": 0, "unfinished": 0}
    await no_runs_left(client)  # SSE: the silent runs stopped when the streams were closed


async def test_idle_connections_the_server_closes_are_counted(gateway: StartGateway) -> None:
    # With a model timeout shorter than the hold, the gateway ends each silent stream early.
    client = await gateway(gateway_settings(model_timeout_s=0.2))
    summary = await loadtest(client, "--scenario", "idle", "-c", "2", "--duration", "1.5", expect=1)
    assert summary["idle"] == {"held": 2, "stayed_open": 0, "closed_early": 2, "not_opened": 0}


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    """0.1 s of a tone at 8 kHz (the command resamples it to 16 kHz)."""
    path = tmp_path / "speech.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"".join(struct.pack("<h", int(6000 * math.sin(2 * math.pi * 300 * i / 8000)))
                                 for i in range(800)))
    return path


@pytest.mark.parametrize("mode", [["-c", "2"], ["--rate", "20"]], ids=["concurrency", "rate"])
async def test_live_turns_from_a_wav_file(gateway: StartGateway, monkeypatch: pytest.MonkeyPatch, wav: Path,
                                          mode: list[str]) -> None:
    monkeypatch.setattr(ScriptedLiveConnection, "default_chunk_delay_s", 0.005)
    client = await gateway()
    summary = await loadtest(client, "--transport", "ws", "--scenario", "live", "--wav", str(wav), "-n", "3", *mode)
    assert counts(summary)["ok"] == 3, summary.get("error_examples")
    # 100 ms spoken a turn; the scripted model answers each with 500 ms of tone
    assert summary["live"]["audio_ms_sent"] == 300
    assert summary["live"]["audio_ms_received"] == 1500
    assert summary["live"]["first_audio_ms"]["count"] == 3
    assert summary["chunks"]["text_deltas_per_ok_request"] > 0
    await no_runs_left(client)


async def test_a_live_session_the_server_closes_is_counted_as_closed(aiohttp_client: Any, wav: Path) -> None:
    # A server that takes the live session's first frame and closes the socket with a code.
    async def closing_socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()
        await ws.close(code=4000, message=b"gone")
        return ws

    app = web.Application()
    app.router.add_get("/api/chat/ws", closing_socket)
    client = await aiohttp_client(app)
    summary = await loadtest(client, "--transport", "ws", "--scenario", "live", "--wav", str(wav), "-n", "1",
                             expect=1)
    assert summary["errors"] == {"ws_closed": 1}
    assert "close code 4000" in json.dumps(summary.get("error_examples"))


# --- credentials -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("transport", "refusal"), [("sse", "http_401"), ("ws", "ws_handshake_401")])
async def test_a_token_authenticates_every_request_on_a_jwt_gateway(
    gateway: StartGateway, transport: str, refusal: str
) -> None:
    client = await gateway(gateway_settings(auth="jwt", auth_jwt_secret=SECRET))
    token = jwt.encode({"sub": "bench-alice", "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")

    summary = await loadtest(client, "--transport", transport, "-c", "2", "-n", "6", "--chat", "reused",
                             "--token", token, "--samples")
    assert counts(summary) == {"sent": 6, "ok": 6, "aborted": 0, "failed": 0, "unfinished": 0}
    assert {s["status"] for s in summary["samples"]} == ({200} if transport == "sse" else {None})
    # The token is a credential: the summary says one was used, never which.
    assert summary["config"]["token"] == "[redacted]"
    assert token not in json.dumps(summary)

    # Without a token (--user does not help: the gateway ignores x-user-id with auth on), and with a
    # token the gateway did not sign: every request is refused with 401 and counted.
    forged = jwt.encode({"sub": "bench-alice"}, "another-secret-that-is-long-enough-too", algorithm="HS256")
    for credentials in (["--user", "bench-alice"], ["--token", forged]):
        summary = await loadtest(client, "--transport", transport, "-c", "2", "-n", "4", "--samples",
                                 *credentials, expect=1)
        assert counts(summary) == {"sent": 4, "ok": 0, "aborted": 0, "failed": 4, "unfinished": 0}
        assert summary["errors"] == {refusal: 4}
        assert all(s["chunks"] == 0 for s in summary["samples"])
        assert forged not in json.dumps(summary)  # the ws handshake error quotes its URL: redacted
    await no_runs_left(client)


# --- what the terminal shows -----------------------------------------------------------------------


async def test_a_terminal_gets_a_progress_bar_and_a_pipe_does_not(
    gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await gateway()
    url = str(client.make_url("")).rstrip("/")
    argv = ["--url", url, "-c", "2", "-n", "6", "--prompt", "/stream 3 30"]
    monkeypatch.setenv("TERM", "xterm-256color")

    leader, follower = os.openpty()
    shown = bytearray()

    def drain() -> None:  # a terminal's reader: keeps the pty from filling up
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                return
            if not data:
                return
            shown.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with open(follower, "w", encoding="utf-8", closefd=False) as terminal:
            assert await asyncio.to_thread(cli.main, argv, stdout=terminal) == 0
    finally:
        os.close(follower)
        await asyncio.to_thread(reader.join, 10)
        os.close(leader)
    on_terminal = shown.decode("utf-8", "replace")
    assert "requests" in on_terminal and "/6" in on_terminal  # the bar: requests done out of six
    assert "\x1b[" in on_terminal  # redrawn in place
    assert "latency (ms" in on_terminal  # then the table

    piped = io.StringIO()
    assert await asyncio.to_thread(cli.main, argv, stdout=piped) == 0
    assert "\x1b" not in piped.getvalue()  # no bar, no escape codes: only the table
    assert "adk-gateway loadtest" in piped.getvalue() and "latency (ms" in piped.getvalue()
    assert "/6" not in piped.getvalue()

    quiet = io.StringIO()
    assert await asyncio.to_thread(cli.main, [*argv, "--json"], stdout=quiet) == 0
    assert json.loads(quiet.getvalue())["requests"]["ok"] == 6  # --json: the summary only
