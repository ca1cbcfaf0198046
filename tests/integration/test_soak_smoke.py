"""`make soak`'s script (tests/bench/soak.py) at a tiny scale: 20 SSE streams, 50 sockets, a 5 s hold.

It shows that the script runs end to end against a real gateway process — ramp, hold, random
disconnects, a reconnect storm, slow readers, teardown — holds what it opened, and that its exit
status agrees with the bounds it prints. The bounds themselves are not asserted: at this scale the
memory and slope figures are allocator noise, and the timings depend on the machine.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

try:
    from tests.bench import soak
except ImportError:  # plain `pytest` (not `python -m pytest`) without the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.bench import soak

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--sse", "20", "--ws", "50", "--hold-s", "5", "--answer-tokens", "3", "--drop-rate", "0.05",
    "--storm", "10", "--slow", "1", "--slow-reader-grace-s", "0.5", "--slow-pause-s", "3", "--warmup-s", "1",
]


def test_rss_slope_is_a_least_squares_fit_in_kib_per_minute() -> None:
    assert soak.rss_slope_kib_per_min([(0, 1000), (30, 1050), (60, 1100), (90, 1150)]) == pytest.approx(100)
    # A fit, not the first-to-last difference (which is 0 here): cov -10 / var 5 = -2 KiB/s.
    assert soak.rss_slope_kib_per_min([(0, 1000), (1, 1010), (2, 990), (3, 1000)]) == pytest.approx(-120)
    assert soak.rss_slope_kib_per_min([(0, 1), (1, 2)]) is None


def test_the_driver_keeps_its_collector_out_of_the_ramp_and_reports_its_pauses_by_phase() -> None:
    driver: Any = SimpleNamespace(phase="ramp")
    watch = soak.CollectorWatch(driver, threshold_s=0.0)  # every collection counts as a pause
    frozen_before = gc.get_freeze_count()
    try:
        with watch.paused():
            assert not gc.isenabled()
            held = [[n] for n in range(100)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen_before + len(held)  # what the ramp built, out of the generations
    finally:
        gc.unfreeze()
        gc.enable()
    gc.disable()  # only the collections below, none started by allocations
    watch.start()
    try:
        gc.collect()
        driver.phase = "hold"
        gc.collect()
        gc.collect()
    finally:
        watch.stop()
        gc.enable()
    gc.collect()  # after stop: not recorded
    summary = watch.summary()
    assert set(summary) == {"ramp", "hold"}
    assert (summary["ramp"]["count"], summary["hold"]["count"]) == (1, 2)
    assert summary["hold"]["max_ms"] <= summary["hold"]["total_ms"]

    patient = soak.CollectorWatch(driver, threshold_s=60.0)
    patient.start()
    try:
        gc.collect()
    finally:
        patient.stop()
    assert patient.summary() == {}  # only pauses of at least the threshold are kept


def test_soak_runs_end_to_end_at_tiny_scale(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.soak", *TINY, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=100, check=False,
    )
    assert out.exists(), f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(out.read_text())

    # The exit status is the verdict over the printed bounds (a bound the run cannot judge is SKIP).
    assert report["passed"] == all(bound["kept"] is not False for bound in report["bounds"])
    assert proc.returncode == (0 if report["passed"] else 1), proc.stderr[-3000:]
    verdict = {True: "PASS", False: "FAIL", None: "SKIP"}
    for bound in report["bounds"]:
        assert f"{verdict[bound['kept']]}  {bound['bound']}" in proc.stdout
    assert f"result: {'PASS' if report['passed'] else 'FAIL'}" in proc.stdout

    # Everything it opened was held, and nothing dropped that the script did not drop itself.
    assert report["held"]["after_ramp"] == {"sse": 20, "ws": 50}
    assert report["held"]["end_of_hold"] == {"sse": 20, "ws": 50}
    assert report["unexpected_disconnects"] == {}, report["unexpected_examples"]
    assert report["failed_opens"] == {}, report["unexpected_examples"]
    assert report["ttfc_ms"]["ramp"]["n"] == 20
    assert report["ws_open_ms"]["ramp"]["n"] == 50

    # Every part ran: answers ended and were asked again, random drops, the storm, the slow readers.
    assert report["tokens"]["answers_finished"] > 0
    assert report["drops"].get("sse", 0) > 0 and report["drops"].get("ws", 0) > 0
    storm = report["storm"]
    assert (storm["sockets"], storm["reopened"], storm["failed"]) == (10, 10, 0)
    slow = report["slow_readers"]["results"]
    assert sorted(r["transport"] for r in slow) == ["sse", "ws"]
    assert all(r["outcome"] in ("cut", "not_cut", "closed_otherwise") for r in slow), slow
    assert report["slope"]["samples"] >= 3
    slope_bound = next(b for b in report["bounds"] if b["bound"].startswith("RSS slope"))
    assert slope_bound["kept"] is None  # a 4 s window is too short to judge
    assert report["memory"]["kib_per_connection"] is not None
    assert "ramp" not in report["driver_gc_pauses"]  # the driver's collector was off during the ramp

    # The teardown found the gateway's runs gone and the gateway stopped cleanly.
    assert report["teardown"]["runs_cleared_s"] is not None
    assert report["gateway_exit"]["code"] == 0
