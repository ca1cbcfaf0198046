"""SlowReaderGuard on its own: which conditions cut a connection, and which do not.

A fake connection stands for the socket's transport (its unsent bytes); a real `StreamLog`
supplies the backlog (which is the run's to wait for, never a cut: only what the socket does not
send is). The grace is short, and the tests wait on the guard's own cut (an event), or let the
grace pass to show that nothing happened.
"""

from __future__ import annotations

import asyncio
from typing import Any

from adk_gateway.core.errors import SlowReader
from adk_gateway.metrics import Metrics
from adk_gateway.services.streams import StreamLog
from adk_gateway.transports.base import SlowReaderGuard

GRACE_S = 0.05


class FakeConnection(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.unsent = 0
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def guarded(max_pending: int = 1000) -> tuple[SlowReaderGuard, FakeConnection, list[SlowReader], Metrics]:
    connection, metrics = FakeConnection(), Metrics()
    cuts: list[SlowReader] = []
    guard = SlowReaderGuard(connection, max_pending_bytes=max_pending, grace_s=GRACE_S, transport="sse",
                            user_id="u", metrics=metrics, on_cut=cuts.append)
    return guard, connection, cuts, metrics


def counted(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value(
        "adk_gateway_slow_readers_cut_total", {"transport": "sse", "reason": reason}
    ) or 0.0


def chunk(size: int) -> dict[str, Any]:
    return {"type": "text-delta", "id": "t", "delta": "x" * size}


async def cut_of(cuts: list[SlowReader]) -> SlowReader:
    async with asyncio.timeout(5):
        while not cuts:
            await asyncio.sleep(GRACE_S / 5)
    return cuts[0]


async def test_unsent_bytes_over_the_bound_for_the_grace_are_cut_once() -> None:
    guard, connection, cuts, metrics = guarded()
    log = StreamLog(key=("u", "chat-1"), max_bytes=1 << 20)
    follower = log.attach(0)
    guard.watch(follower)
    connection.unsent = 1300  # the socket does not send it: over 1000
    log.append(chunk(1))  # any change re-evaluates
    error = await cut_of(cuts)
    assert error.reason == "pending" and error.pending_bytes > 1000 and error.close_code == 4008
    assert guard.error is error and counted(metrics, "pending") == 1
    guard.update()
    guard.cut("stalled")
    assert len(cuts) == 1 and counted(metrics, "stalled") == 0


async def test_a_backlog_in_the_log_is_no_slow_reader() -> None:
    # The process was too busy to write: the reader's backlog grows in the log, its socket has
    # nothing unsent. The run waits for it (`StreamLog.readers_caught_up`); the guard does not cut.
    guard, _connection, cuts, _metrics = guarded()
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    follower = log.attach(0)
    guard.watch(follower)
    log.append(chunk(5000))
    await asyncio.sleep(GRACE_S * 4)
    assert not cuts and follower.backlog > 5000


async def test_back_under_the_bound_within_the_grace_is_not_cut() -> None:
    guard, _connection, cuts, _metrics = guarded()
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    follower = log.attach(0)
    guard.watch(follower)
    log.append(chunk(2000))
    while follower.take() is not None:  # the reader catches up
        pass
    guard.update()
    await asyncio.sleep(GRACE_S * 4)  # the grace passes
    assert not cuts and guard.error is None


async def test_a_write_blocked_for_the_grace_is_a_stalled_reader() -> None:
    guard, _connection, cuts, metrics = guarded(max_pending=1 << 30)
    blocked = asyncio.Event()

    async def write() -> None:
        with guard.writing():
            await blocked.wait()  # the peer reads nothing: the drain never comes

    writer = asyncio.ensure_future(write())
    error = await cut_of(cuts)
    assert error.reason == "stalled" and counted(metrics, "stalled") == 1
    blocked.set()
    await writer


async def test_writes_that_complete_within_the_grace_are_fine() -> None:
    guard, _connection, cuts, _metrics = guarded(max_pending=1 << 30)
    for _ in range(4):
        with guard.writing():
            await asyncio.sleep(GRACE_S / 4)
    await asyncio.sleep(GRACE_S * 2)
    assert not cuts


async def test_an_overrun_follower_is_cut_at_once_and_a_closed_guard_never_cuts() -> None:
    guard, _connection, cuts, metrics = guarded(max_pending=1 << 30)
    log = StreamLog(key=("u", "c"), max_bytes=500)
    follower = log.attach(0)
    guard.watch(follower)
    for _ in range(10):
        log.append(chunk(100))
    assert follower.overrun
    assert cuts and cuts[0].reason == "overrun" and counted(metrics, "overrun") == 1

    quiet, _connection, quiet_cuts, _ = guarded()
    quiet.close()
    quiet.cut("pending")
    assert not quiet_cuts and quiet.error is None
