"""The load loop: fixed concurrency (a closed model) or a fixed arrival rate (an open model).

Fixed concurrency: `concurrency` clients, each sending its next request as soon as its last one
ended, so the load adapts to the server (a slow server gets fewer requests).

Fixed arrival rate: request N is due `N / rate` seconds after the start whatever the earlier ones
are doing, so a slow server faces a growing number of requests in flight, as it would from real
users. At most `max_in_flight` run at once; an arrival past that is dropped (counted, never
sent). An arrival the scheduler could only send late (the client itself was busy) is sent at once
and its lag is recorded, so a backlog is not silently skipped.

Either way the test stops after `requests` requests or `duration_s` seconds, whichever comes
first; requests still running then are cut (counted as unfinished), except held connections (the
idle scenario), which end at that moment and are then counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp

from adk_gateway.loadtest.clients import Client, Sample, classify
from adk_gateway.loadtest.config import LoadConfig
from adk_gateway.loadtest.scenarios import iteration_for

__all__ = [
    "LATE_AFTER_S",
    "Clock",
    "MonotonicClock",
    "NullProgress",
    "Progress",
    "run_arrivals",
    "run_load",
]

LATE_AFTER_S = 0.010  # an arrival sent later than this after its time counts as late
HOLD_DRAIN_S = 5.0  # held connections get this long to be checked and closed after the deadline
TICK_S = 0.25


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep_until(self, when: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.perf_counter()

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - time.perf_counter()))


class Progress(Protocol):
    """What the runner reports while it runs (a progress bar, or nothing)."""

    def begin(self, total: int, duration_s: float) -> None: ...

    def finished(self, sample: Sample) -> None: ...

    def tick(self, elapsed: float, in_flight: int) -> None: ...

    def end(self) -> None: ...


class NullProgress:
    def begin(self, total: int, duration_s: float) -> None:
        pass

    def finished(self, sample: Sample) -> None:
        pass

    def tick(self, elapsed: float, in_flight: int) -> None:
        pass

    def end(self) -> None:
        pass


async def run_arrivals(*, rate: float, limit: int, start: float, deadline: float, clock: Clock,
                       arrive: Callable[[int, float], None]) -> str:
    """Calls `arrive(index, lag)` for arrival 0, 1, … at `start + index / rate` (lag: how late that
    call is), never skipping one, until `limit` arrivals or the `deadline`. Returns what stopped
    it: "requests" or "duration"."""
    index = 0
    while index < limit:
        due = start + index / rate
        if due >= deadline:
            return "duration"
        await clock.sleep_until(due)
        now = clock.now()
        if now >= deadline:
            return "duration"
        arrive(index, now - due)
        index += 1
    return "requests"


class _Load:
    """One run of `run_load`."""

    def __init__(self, cfg: LoadConfig, http: aiohttp.ClientSession, progress: Progress) -> None:
        self.cfg = cfg
        self.http = http
        self.progress = progress
        self.prepared = iteration_for(cfg)
        self.samples: list[Sample] = []
        self.clients: list[Client] = []
        self.idle: list[Client] = []  # --rate: clients between requests
        self.in_flight: set[asyncio.Task[None]] = set()
        self.stop = asyncio.Event()
        self.clock = MonotonicClock()
        self.started = self.clock.now()
        self.deadline = self.started + cfg.duration_s

    def client(self) -> Client:
        if self.idle:
            return self.idle.pop()
        client = Client(len(self.clients), self.cfg, self.http)
        self.clients.append(client)
        return client

    def new_sample(self, client: Client | None) -> Sample:
        sample = Sample(index=len(self.samples), chat_id=client.chat_id if client else "")
        self.samples.append(sample)
        return sample

    async def one(self, client: Client, sample: Sample) -> None:
        try:
            if self.prepared.holds:
                await self.prepared.run(client, sample, self.stop)
            else:
                async with asyncio.timeout(self.cfg.timeout_s):
                    await self.prepared.run(client, sample, self.stop)
        except asyncio.CancelledError:
            sample.unfinished, sample.ok, sample.error = True, False, None
            raise
        except Exception as exc:
            sample.ok = False
            sample.error, sample.detail = classify(exc)
            await client.close()
        finally:
            self.progress.finished(sample)

    # --- fixed concurrency ---------------------------------------------------------------

    async def closed_loop(self, client: Client) -> None:
        while len(self.samples) < self.cfg.requests and self.clock.now() < self.deadline:
            await self.one(client, self.new_sample(client))

    # --- fixed arrival rate --------------------------------------------------------------

    def arrive(self, _index: int, lag: float) -> None:
        if len(self.in_flight) >= self.cfg.max_in_flight:
            sample = self.new_sample(None)
            sample.dropped, sample.lag = True, lag
            self.progress.finished(sample)
            return
        client = self.client()
        sample = self.new_sample(client)
        sample.lag = lag
        task = asyncio.create_task(self.lend(client, sample))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def lend(self, client: Client, sample: Sample) -> None:
        """One request on `client`, which is free for the next arrival as soon as it ends."""
        try:
            await self.one(client, sample)
        finally:
            self.idle.append(client)

    async def open_loop(self) -> str:
        assert self.cfg.rate is not None
        stopped_by = await run_arrivals(rate=self.cfg.rate, limit=self.cfg.requests, start=self.started,
                                        deadline=self.deadline, clock=self.clock, arrive=self.arrive)
        while self.in_flight:
            await asyncio.wait(set(self.in_flight))
        return stopped_by

    # --- the run -------------------------------------------------------------------------

    async def ticker(self) -> None:
        while True:
            self.progress.tick(self.clock.now() - self.started, len(self.in_flight))
            await asyncio.sleep(TICK_S)

    async def run(self) -> str:
        cfg = self.cfg
        self.progress.begin(cfg.requests, cfg.duration_s)
        ticking = asyncio.create_task(self.ticker())
        main: list[asyncio.Task[Any]]
        if cfg.rate is None:
            main = [asyncio.create_task(self.closed_loop(self.client())) for _ in range(cfg.concurrency)]
        else:
            main = [asyncio.create_task(self.open_loop())]
        try:
            _, pending = await asyncio.wait(main, timeout=max(0.0, self.deadline - self.clock.now()))
            await self.cut(pending)
            for task in main:
                if not task.cancelled() and (error := task.exception()) is not None:
                    raise error
            if pending:
                stopped_by = "duration"
            elif cfg.rate is not None:
                stopped_by = main[0].result()
            else:
                stopped_by = "requests" if len(self.samples) >= cfg.requests else "duration"
        finally:
            ticking.cancel()
            await asyncio.gather(ticking, return_exceptions=True)
            self.progress.tick(self.clock.now() - self.started, 0)
            self.progress.end()
        return stopped_by

    async def cut(self, pending: set[asyncio.Task[Any]]) -> None:
        """At the deadline: held connections are checked and closed, anything else is cut."""
        self.stop.set()
        running = pending
        if pending and self.prepared.holds:
            _, running = await asyncio.wait(pending | self.in_flight, timeout=HOLD_DRAIN_S)
        for task in (*running, *self.in_flight):
            task.cancel()
        await asyncio.gather(*running, *self.in_flight, return_exceptions=True)


async def run_load(cfg: LoadConfig, http: aiohttp.ClientSession | None = None,
                   progress: Progress | None = None) -> tuple[list[Sample], float, str]:
    """Runs the load. Returns the samples (dropped arrivals included), the elapsed seconds and what
    stopped it ("requests" or "duration"). Never runs longer than `cfg.duration_s` (plus closing
    connections).

    Raises:
        ValueError: `cfg` is not valid (`TargetRefused` for a target that is not loopback).
    """
    cfg.validate()
    own_session = http is None
    if http is None:
        clients = cfg.concurrency if cfg.rate is None else cfg.max_in_flight
        connector = aiohttp.TCPConnector(limit=clients + 8, limit_per_host=0, force_close=False)
        http = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    try:
        load = _Load(cfg, http, progress or NullProgress())
        try:
            stopped_by = await load.run()
        finally:
            elapsed = load.clock.now() - load.started
            await asyncio.gather(*(c.close() for c in load.clients), return_exceptions=True)
    finally:
        if own_session:
            await http.close()
    return load.samples, elapsed, stopped_by
