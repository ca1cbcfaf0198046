"""MemoryStreamStore: what it keeps of finished streams, and for how long.

A finished log that some client received to its end is not resumable, so the store lets it go at
its next sweep; one nobody received stays resumable for the retention. The store's clock is the
log's (`time.monotonic`) moved forward by the test, so no test waits.
"""

from __future__ import annotations

import time

from adk_gateway.services.streams import MemoryStreamStore, StreamLog

RETENTION_S = 30.0


class Clock:
    """`time.monotonic` plus however far the test moved it."""

    def __init__(self) -> None:
        self.ahead_s = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.ahead_s


def finished_log(store: MemoryStreamStore, chat_id: str) -> StreamLog:
    log = StreamLog(key=("user", chat_id), max_bytes=1024)
    store.add(log)
    log.append({"type": "start"})
    log.append({"type": "finish"})
    log.close()
    return log


def test_a_delivered_log_goes_at_the_next_sweep_and_an_undelivered_one_stays_for_the_retention() -> None:
    clock = Clock()
    store = MemoryStreamStore(retention_s=RETENTION_S, max_bytes=1024, clock=clock)
    delivered = finished_log(store, "delivered")
    undelivered = finished_log(store, "undelivered")
    delivered.delivered = True
    assert store.latest(("user", "delivered")) is delivered  # no sweep since

    clock.ahead_s = 1.0  # the next sweep is due
    assert store.resumable(("user", "undelivered")) is undelivered
    assert store.latest(("user", "delivered")) is None
    assert len(store) == 1

    clock.ahead_s = RETENTION_S + 1.0
    assert store.resumable(("user", "undelivered")) is None
    assert len(store) == 0


def test_a_running_log_stays_whatever_its_age() -> None:
    clock = Clock()
    store = MemoryStreamStore(retention_s=RETENTION_S, max_bytes=1024, clock=clock)
    running = StreamLog(key=("user", "running"), max_bytes=1024)
    store.add(running)
    running.append({"type": "start"})
    clock.ahead_s = 10 * RETENTION_S
    assert store.resumable(("user", "running")) is running
    assert len(store) == 1
