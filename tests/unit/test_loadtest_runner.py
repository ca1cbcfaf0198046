"""Unit tests for adk_gateway.loadtest.runner's arrival schedule (a fixed rate), on a fake clock: no
request is sent and nothing waits."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from adk_gateway.loadtest.clients import Client, Sample
from adk_gateway.loadtest.config import LoadConfig
from adk_gateway.loadtest.report import summarize
from adk_gateway.loadtest.runner import LATE_AFTER_S, _Load, run_arrivals
from adk_gateway.loadtest.scenarios import Prepared


class FakeClock:
    """Time moves only when the scheduler sleeps; `overshoot` makes every wake-up that late."""

    def __init__(self, overshoot: float = 0.0) -> None:
        self.time = 100.0
        self.overshoot = overshoot
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep_until(self, when: float) -> None:
        self.sleeps.append(when)
        if when > self.time:
            self.time = when + self.overshoot
        await asyncio.sleep(0)  # other tasks run, as they would while the scheduler waits


async def test_arrivals_come_on_schedule_until_the_request_limit() -> None:
    clock, seen = FakeClock(), []
    stopped = await run_arrivals(rate=4, limit=6, start=clock.now(), deadline=clock.now() + 60, clock=clock,
                                 arrive=lambda index, lag: seen.append((index, clock.now() - 100, lag)))
    assert stopped == "requests"
    assert [index for index, _, _ in seen] == [0, 1, 2, 3, 4, 5]
    assert [at for _, at, _ in seen] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.25])
    assert all(lag == 0 for _, _, lag in seen)


async def test_arrivals_stop_at_the_deadline() -> None:
    clock, seen = FakeClock(), []
    stopped = await run_arrivals(rate=10, limit=1000, start=clock.now(), deadline=clock.now() + 1.0, clock=clock,
                                 arrive=lambda index, lag: seen.append(index))
    assert stopped == "duration"
    assert seen == list(range(10))  # 0.0 … 0.9 s; the one due at 1.0 s is not sent


async def test_a_late_scheduler_catches_up_without_skipping_arrivals() -> None:
    # Every wake-up 0.35 s late at 10/s: the arrivals that fell due meanwhile go at once, each with
    # its lag, so the offered load is kept.
    clock, seen = FakeClock(overshoot=0.35), []
    stopped = await run_arrivals(rate=10, limit=8, start=clock.now(), deadline=clock.now() + 60, clock=clock,
                                 arrive=lambda index, lag: seen.append((index, round(lag, 6))))
    assert stopped == "requests"
    assert [index for index, _ in seen] == list(range(8))
    lags = dict(seen)
    assert lags[0] == 0
    assert lags[1] == pytest.approx(0.35)  # woke at 0.45 for the one due at 0.1
    assert lags[2] == pytest.approx(0.25) and lags[3] == pytest.approx(0.15) and lags[4] == pytest.approx(0.05)
    assert lags[5] == pytest.approx(0.35)  # due at 0.5, after the catch-up the clock slept again


async def test_arrivals_past_max_in_flight_are_dropped_and_counted() -> None:
    cfg = LoadConfig(rate=10, max_in_flight=3, requests=10, duration_s=60)
    release = asyncio.Event()
    started: list[int] = []

    async def slow(client: Client, sample: Sample, stop: asyncio.Event) -> None:
        started.append(sample.index)
        await release.wait()
        sample.ok = True

    async with aiohttp.ClientSession() as http:  # never used: the fake request sends nothing
        progress = _Recorder()
        load = _Load(cfg, http, progress=progress)
        load.prepared = Prepared(slow)
        clock = FakeClock()
        load.clock = clock
        stopped = await run_arrivals(rate=10, limit=10, start=clock.now(), deadline=clock.now() + 60, clock=clock,
                                     arrive=load.arrive)
        assert stopped == "requests"
        assert len(load.in_flight) == 3
        release.set()
        await asyncio.gather(*load.in_flight)

    assert started == [0, 1, 2]
    assert [s.dropped for s in load.samples] == [False] * 3 + [True] * 7
    assert len(progress.done) == 10  # the progress bar counts the dropped ones too
    assert len(load.clients) == 3  # a client per request in flight, no more
    summary = summarize(load.samples, 1.0, cfg, stopped)
    assert summary["mode"] == "rate"
    assert summary["requests"] == {"sent": 3, "ok": 3, "aborted": 0, "failed": 0, "unfinished": 0,
                                   "arrivals": 10, "dropped": 7, "late": 0}
    assert summary["schedule_lag_ms"]["count"] == 3


async def test_clients_are_reused_between_requests() -> None:
    cfg = LoadConfig(rate=10, max_in_flight=5, requests=6, duration_s=60)

    async def quick(client: Client, sample: Sample, stop: asyncio.Event) -> None:
        sample.ok = True

    async with aiohttp.ClientSession() as http:
        load = _Load(cfg, http, progress=_Recorder())
        load.prepared = Prepared(quick)
        clock = FakeClock()
        load.clock = clock
        await run_arrivals(rate=10, limit=6, start=clock.now(), deadline=clock.now() + 60, clock=clock,
                           arrive=load.arrive)
        await asyncio.gather(*load.in_flight)
    assert len(load.clients) == 1  # each request ended before the next arrived
    assert [s.ok for s in load.samples] == [True] * 6


def test_late_arrivals_are_counted_in_the_summary() -> None:
    cfg = LoadConfig(rate=100, requests=3)
    samples = [Sample(index=i, chat_id="c", ok=True, lag=lag, total=0.01) for i, lag in
               enumerate([0.0, LATE_AFTER_S / 2, LATE_AFTER_S * 3])]
    summary = summarize(samples, 1.0, cfg, "requests")
    assert summary["requests"]["late"] == 1
    assert summary["schedule_lag_ms"]["max"] == pytest.approx(LATE_AFTER_S * 3000)


class _Recorder:
    """A progress that keeps the samples it is told about."""

    def __init__(self) -> None:
        self.done: list[Sample] = []

    def begin(self, total: int, duration_s: float) -> None:
        pass

    def finished(self, sample: Sample) -> None:
        self.done.append(sample)

    def tick(self, elapsed: float, in_flight: int) -> None:
        pass

    def end(self) -> None:
        pass
