"""The flood part of the benchmark (tests/bench/floods.py): its pure helpers — probes capped and
summarised by window, the spread over rounds, asyncio's slow-callback lines counted, a log line's
time, what a client read of a stream — and the launcher that lowers asyncio's slow-callback
threshold in the gateway's process. No gateway, no timings asserted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.bench.floods import (
    Probe,
    Prober,
    Tally,
    capped_seconds,
    histories_as_expected,
    latency_summary,
    log_time,
    long_history,
    markdown,
    shorten_handle,
    slow_callback_command,
    slow_callbacks,
    spread,
)


def test_a_wait_past_the_cap_counts_as_the_cap_and_says_so() -> None:
    assert capped_seconds(10.0, 10.25, 30.0) == (0.25, False)
    assert capped_seconds(10.0, 55.0, 30.0) == (30.0, True)
    assert capped_seconds(10.0, 40.0, 30.0) == (30.0, True)
    assert capped_seconds(10.0, 9.0, 30.0) == (0.0, False)  # a clock never runs backwards here


def test_a_latency_summary_gives_milliseconds_and_counts_capped_and_failed_probes() -> None:
    probes = [Probe(at=float(i), seconds=0.001 * (i + 1), ok=True) for i in range(99)]
    probes.append(Probe(at=99.0, seconds=30.0, ok=False, capped=True))
    probes.append(Probe(at=100.0, seconds=0.002, ok=False))
    summary = latency_summary(probes)
    assert summary["n"] == 101 and summary["capped"] == 1 and summary["failed"] == 2
    assert summary["p50"] == 50.0
    assert summary["max"] == 30_000.0
    assert summary["p99"] == pytest.approx(99.0)


def test_a_latency_summary_keeps_only_the_probes_sent_within_its_windows() -> None:
    probes = [Probe(at=t, seconds=s, ok=True) for t, s in ((1.0, 0.010), (2.0, 0.500), (3.0, 0.020), (5.0, 0.900))]
    summary = latency_summary(probes, [(0.5, 1.5), (2.5, 3.5)])
    assert summary["n"] == 2 and summary["max"] == 20.0 and summary["p50"] == 15.0
    assert latency_summary(probes, [(10.0, 11.0)]) == {"n": 0, "failed": 0, "capped": 0, "p50": None, "p99": None,
                                                        "max": None}


def test_the_spread_over_rounds_is_the_median_and_the_range() -> None:
    assert spread([3.0, 1.0, 2.0]) == "2.0 (1.0 to 3.0)"
    assert spread([1_500.0, None, 2_500.0], digits=0) == "2,000 (1,500 to 2,500)"
    assert spread([4.0]) == "4.0"
    assert spread([None]) == "—" and spread([]) == "—"


def test_slow_callbacks_are_counted_over_the_threshold_from_json_and_plain_lines() -> None:
    lines = [
        json.dumps({"event": "Executing <Task pending name='Task-7' coro=<Flood.run() running at "
                             "/srv/app/gateway/services/turn.py:120>> took 10.465 seconds", "level": "warning"}),
        json.dumps({"event": "Executing <Handle _SelectorSocketTransport._read_ready()> took 0.051 seconds"}),
        "WARNING:asyncio:Executing <TimerHandle when=12.3 sleep()> took 0.120 seconds",
        json.dumps({"event": "Executing <Handle cb()> took 0.050 seconds"}),  # not over 50 ms
        json.dumps({"event": "access", "path": "/healthz", "duration_ms": 900.0}),
    ]
    found = slow_callbacks(lines, threshold_s=0.05)
    assert found["count"] == 3
    assert found["longest_s"] == 10.465
    assert found["longest_what"] == "<Task pending name='Task-7' coro=<Flood.run() running at turn.py:120>>"
    assert found["total_s"] == pytest.approx(10.636)
    assert slow_callbacks([], 0.05) == {"threshold_s": 0.05, "count": 0, "longest_s": None, "longest_what": None,
                                        "total_s": 0}


def test_a_handle_is_shortened_without_addresses_or_creation_sites() -> None:
    text = "<Handle cb() at 0x7f00aa created at /usr/lib/python3.11/asyncio/events.py:80>"
    assert shorten_handle(text) == "<Handle cb()>"
    assert len(shorten_handle("x" * 500, width=40)) == 40


def test_a_json_log_line_gives_its_time() -> None:
    line = json.dumps({"event": "slow_reader_cut", "timestamp": "2026-11-28T08:26:04.250000Z"})
    assert log_time(line) == datetime(2026, 11, 28, 8, 26, 4, 250_000, tzinfo=UTC).timestamp()
    assert log_time("not json") is None
    assert log_time(json.dumps({"event": "x"})) is None


def test_a_tally_reads_an_sse_body_and_websocket_frames() -> None:
    sse = Tally(keep_text=True)
    for line in (b'data: {"type":"start"}\n', b'data: {"type":"text-delta","id":"t","delta":"tok0 "}\n', b"\n",
                 b": keep-alive\n", b'data: {"type":"text-delta","id":"t","delta":"tok1 "}\n', b"data: [DONE]\n"):
        sse.sse_line(line)
    assert (sse.deltas, "".join(sse.text), sse.done, sse.whole) == (2, "tok0 tok1 ", True, True)

    ws = Tally()
    assert not ws.frame({"type": "chunk", "requestId": "r1", "sequence": 0,
                         "chunk": {"type": "text-delta", "id": "t", "delta": "a"}})
    assert not ws.frame({"type": "chunk", "requestId": "r1", "sequence": 1,
                         "chunk": {"type": "error", "errorText": "too slow"}})
    assert ws.frame({"type": "end", "requestId": "r1"})
    assert ws.figures()["deltas"] == 1 and ws.done and not ws.whole

    refused = Tally()
    assert refused.frame({"type": "error", "requestId": "r1", "code": "history_too_long"})
    assert not refused.done and refused.figures()["errors"] == 1


def test_a_long_history_alternates_and_ends_with_the_user() -> None:
    messages = long_history(500)
    assert len(messages) == 500
    assert messages[-1]["role"] == "user" and messages[-1]["parts"][0]["text"] == "/echo the end"
    assert [m["role"] for m in messages[-3:]] == ["user", "assistant", "user"]
    assert len({m["id"] for m in messages}) == 500


def test_long_histories_are_as_expected_only_when_every_answer_is() -> None:
    good = {"refused_413": {"statuses": [413, 413], "error_codes": ["history_too_long"] * 2},
            "imported": {"statuses": [200, 200], "texts": ["the end", "the end"]}}
    assert histories_as_expected(good)
    assert not histories_as_expected({**good, "imported": {"statuses": [200, 500], "texts": ["the end", None]}})
    assert not histories_as_expected({**good, "refused_413": {"statuses": [], "error_codes": []}})
    assert not histories_as_expected({})


def test_the_report_notes_capped_probes_and_readers_never_cut() -> None:
    capped = {"n": 10, "failed": 10, "capped": 10, "p50": 30_000.0, "p99": 30_000.0, "max": 30_000.0}
    flood = {"round": 1, "seconds": 31.0, "deltas": 50_000, "done": True, "errors": 0, "whole": True,
             "timed_out": False, "healthz_ms": capped, "echo_ms": capped, "rss_growth_mib": 140.0,
             "driver_lag_max_ms": 3.0, "slow_callbacks": slow_callbacks([])}
    stopped = {"round": 1, "cut": None, "deltas": 1, "done": False, "errors": 0, "rss_growth_at_cut_mib": 280.0,
               "rss_growth_mib": 290.0}
    text = markdown({"flood-sse": [flood], "stopped": [stopped], "debug": [flood]})
    assert "| PYTHONASYNCIODEBUG=1, SSE flood: longest callback ms |  | none over 50 ms |" in text
    assert "10 probes capped at 30 s" in text
    assert "1 not cut within 120 s" in text
    assert "| SSE flood: whole (50,000 deltas, end, no error) | every run | 1 of 1 |" in text


async def test_a_probe_that_never_answers_is_capped_and_counted_as_failed() -> None:
    never = asyncio.Event()

    async def hangs() -> bool:
        await never.wait()
        return True

    prober = Prober(hangs, every_s=10.0, cap_s=0.05).start()
    await asyncio.sleep(0)
    probes = await prober.stop()
    assert len(probes) == 1
    assert probes[0].capped and not probes[0].ok and probes[0].seconds == 0.05


def test_the_launcher_sets_the_slow_callback_threshold_of_every_loop_and_runs_the_gateway_module(
    tmp_path: Path,
) -> None:
    package = tmp_path / "stub_gateway"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import asyncio, sys\n"
        "loop = asyncio.new_event_loop()\n"
        "print(loop.slow_callback_duration, sys.argv[1:])\n"
        "loop.close()\n"
    )
    command = slow_callback_command(sys.executable, 0.05, module="stub_gateway")
    done = subprocess.run([*command, "--port", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "0.05 ['--port', '1']"
