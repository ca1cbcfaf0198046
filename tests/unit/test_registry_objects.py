"""The registry's and the stream log's small objects: their lazily created parts behave like the
eager ones they replace (see docs/perf/memory-per-connection.md), a run whose task is cancelled
before it ever ran is still forgotten, and a connection's tasks and a run's are one task group
each (the first failure cancels the rest; nothing outlives its owner).

Nothing waits on time except the one test of `Wakeup`'s bound, which uses a tiny one. A step
that must come after waiters have started waiting is a `call_soon` callback: it runs after the
waiters' first steps, which were scheduled before it.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from adk_gateway.services.registry import ChatRun, Done, Registry, SendVerdict, SendWindow
from adk_gateway.services.streams import StreamLog, Wakeup


def later(step: Callable[[], object]) -> None:
    asyncio.get_running_loop().call_soon(step)


async def test_wakeup_wakes_every_waiter_and_keeps_nothing_when_idle() -> None:
    wakeup = Wakeup()
    assert not wakeup._waiters
    waiters = [asyncio.ensure_future(wakeup.wait()) for _ in range(3)]
    waiting: list[int] = []
    later(lambda: (waiting.append(len(wakeup._waiters or ())), wakeup.wake()))
    await asyncio.gather(*waiters)
    assert waiting == [3] and not wakeup._waiters


async def test_wakeup_wait_is_bounded_and_a_cancelled_waiter_leaves() -> None:
    wakeup = Wakeup()
    await wakeup.wait(0.001)  # nothing wakes it: the bound does
    assert not wakeup._waiters
    waiter = asyncio.ensure_future(wakeup.wait())
    later(waiter.cancel)
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled() and not wakeup._waiters


async def test_a_wake_before_the_wait_is_not_remembered() -> None:
    """Like the `asyncio.Event` that was set and replaced: a wake-up is for those waiting now."""
    wakeup = Wakeup()
    wakeup.wake()
    waiter = asyncio.ensure_future(wakeup.wait())
    seen: list[bool] = []
    later(lambda: (seen.append(waiter.done()), wakeup.wake()))
    await waiter
    assert seen == [False]


async def test_done_is_latched() -> None:
    done = Done()
    waiter = asyncio.ensure_future(done.wait())
    seen: list[bool] = []
    later(lambda: (seen.append(waiter.done() or done.is_set()), done.set()))
    await waiter
    assert seen == [False] and done.is_set()
    await done.wait()  # set: returns at once
    done.set()  # idempotent


async def test_log_wakes_followers_waiting_for_a_change() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    follower = log.attach(0)
    waiter = asyncio.ensure_future(log.changed())
    later(lambda: log.append({"type": "start"}))
    await waiter
    entry = follower.take()
    assert entry is not None and entry.kind == "start"
    assert not log._changed._waiters


async def test_a_replay_prefix_follows_the_first_chunk_and_leaves_no_queue() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    log.replay_prefix = [{"type": "text-start", "id": "p"}, {"type": "text-end", "id": "p"}]
    log.append({"type": "start"})
    log.append({"type": "finish"})
    follower = log.attach(0, replay=True)
    kinds = []
    while (entry := follower.take()) is not None:
        kinds.append((entry.sequence, entry.kind))
    assert kinds == [(0, "start"), (-1, "text-start"), (-1, "text-end"), (1, "finish")]
    assert follower._queued is None


def test_a_replay_of_a_log_that_ended_before_its_first_chunk_sends_the_prefix() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    log.replay_prefix = [{"type": "text-start", "id": "p"}]
    log.close()
    follower = log.attach(0, replay=True)
    entry = follower.take()
    assert entry is not None and (entry.sequence, entry.kind) == (-1, "text-start")
    assert follower.take() is None


def test_send_window_creates_its_queues_when_needed() -> None:
    window = SendWindow(2, window_s=60.0)
    assert window._admitted is None and window._refused is None
    assert window.retry_after_s(0.0) == 1
    assert [window.offer(t) for t in (0.0, 1.0)] == [SendVerdict.ADMIT, SendVerdict.ADMIT]
    assert window._refused is None
    assert window.offer(2.0) is SendVerdict.REFUSE
    assert window.retry_after_s(2.0) == 58
    assert window.offer(3.0) is SendVerdict.REFUSE
    assert window.offer(4.0) is SendVerdict.REFUSE
    assert window.offer(5.0) is SendVerdict.CLOSE  # refusals reached twice the limit
    assert window.offer(61.0) is SendVerdict.ADMIT  # the first admitted send left the window


async def test_a_connection_reads_as_empty_until_it_owns_something() -> None:
    registry = Registry()
    async with registry.connection("ws") as conn:
        assert registry.connections == {conn.id: conn}
        assert not conn.runs and not conn.tasks and not conn.deliveries and conn.scope is None
        await conn.open_tasks()
        blocker = asyncio.Event()
        task = conn.spawn(blocker.wait(), "wait", delivery=True)
        assert conn.tasks == {task} and conn.deliveries == {task}
        blocker.set()
        await task  # its done callbacks, added when it was spawned, have run
        assert not conn.tasks and not conn.deliveries
    assert registry.connections == {}


async def test_a_connection_spawns_nothing_before_its_own_task_opens_its_tasks() -> None:
    registry = Registry()
    ran: list[str] = []

    async def body() -> None:
        ran.append("body")

    async with registry.connection("ws") as conn:
        refused = conn.spawn(body(), "early")  # before `open_tasks`: no group to run it in
        with pytest.raises(asyncio.CancelledError):
            await refused
        with pytest.raises(RuntimeError, match="opened by the task that entered it"):
            await asyncio.ensure_future(conn.open_tasks())  # another task may not be its group's parent
        assert conn.scope is None
        scope = await conn.open_tasks()
        assert await conn.open_tasks() is scope  # once
        await conn.spawn(body(), "later")
    assert ran == ["body"] and conn.scope is scope and not conn.tasks


async def test_a_run_cancelled_before_its_task_ran_is_still_forgotten() -> None:
    registry = Registry()
    ran: list[str] = []

    async def body() -> None:
        ran.append("body")

    async with registry.connection("sse") as conn:
        key = ("u", "c")
        run = await registry.claim(key, conn, StreamLog(key=key, max_bytes=1024))
        registry.start(run, body())
        run.cancel()  # before the task's first step: `body` never runs
        async with asyncio.timeout(5):
            await run.stop()
        assert ran == []
        assert run.done.is_set()
        assert run.log.closed  # its body never closed it: a client following the log is not left waiting
        assert registry.counts() == {"connections": 1, "runs": 0}
        assert not conn.runs and registry.held()["runs"] == 0


async def test_a_stop_between_the_claim_and_the_start_stops_the_run_once_it_begins() -> None:
    """A stop that comes while the run is claimed but not started (its turn being prepared; or a
    stop forwarded from another instance) finds no task to cancel: the run is stopped as soon as
    its body begins, never run to its end."""
    registry = Registry()
    steps: list[str] = []

    async def body() -> None:
        steps.append("began")
        try:
            await asyncio.Event().wait()  # a long answer
        except asyncio.CancelledError:
            steps.append("stopped")
            raise

    async with registry.connection("sse") as conn:
        key = ("u", "c")
        run = await registry.claim(key, conn, StreamLog(key=key, max_bytes=1024))
        run.cancel()  # the stop: no task yet
        registry.start(run, body())
        async with asyncio.timeout(5):
            await run.done.wait()
        assert steps == ["began", "stopped"]
        assert registry.active_run(key) is None


async def test_a_run_that_ends_frees_its_chat_and_its_owner() -> None:
    registry = Registry()

    async def body() -> None:
        pass

    async with registry.connection("sse") as conn:
        key = ("u", "c")
        run = await registry.claim(key, conn, StreamLog(key=key, max_bytes=1024))
        assert conn.runs == {run}
        registry.start(run, body())
        assert run.task is not None
        await run.task
        await run.done.wait()
        assert registry.active_run(key) is None and not conn.runs
        assert registry.held()["runs"] == 0


# --- structured concurrency: a connection's tasks and a run's are one TaskGroup each --------------


class Watched:
    """Coroutines whose fate is recorded: waits until cancelled, or fails at once."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.started = asyncio.Event()

    async def wait(self, name: str) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise

    async def fail(self) -> None:
        await self.started.wait()
        raise RuntimeError("boom")


async def test_a_failing_connection_task_cancels_the_others_and_its_handler() -> None:
    registry = Registry()
    watched = Watched()
    spawned: list[asyncio.Task[None]] = []

    async def handler() -> str:
        async with registry.connection("ws") as conn:
            await conn.open_tasks()
            spawned.append(conn.spawn(watched.wait("sibling"), "sibling"))
            spawned.append(conn.spawn(watched.fail(), "fails"))
            await watched.wait("handler")  # the socket's read loop
        return "ended normally"  # the failure ended the connection; the handler closes its socket

    with capture_logs() as logs:
        assert await asyncio.wait_for(handler(), 5) == "ended normally"
    assert sorted(watched.cancelled) == ["handler", "sibling"]
    assert all(task.done() for task in spawned)
    assert registry.connections == {}
    [failure] = [entry for entry in logs if entry["event"] == "task_failed"]
    assert failure["owner"].startswith("ws-") and "boom" in failure["error"]


async def test_a_disconnect_cancels_and_awaits_the_connections_tasks() -> None:
    registry = Registry()
    watched = Watched()
    spawned: list[asyncio.Task[None]] = []

    async def handler() -> None:
        async with registry.connection("sse") as conn:
            await conn.open_tasks()
            spawned.append(conn.spawn(watched.wait("task"), "task"))
            await asyncio.Event().wait()

    handling = asyncio.ensure_future(handler())
    await watched.started.wait()
    handling.cancel()  # aiohttp cancels the handler of a client that went away
    with pytest.raises(asyncio.CancelledError):
        await handling
    assert watched.cancelled == ["task"] and spawned[0].done()
    assert registry.connections == {}


async def test_the_handlers_own_error_goes_on_unchanged() -> None:
    registry = Registry()
    watched = Watched()
    with pytest.raises(ValueError, match="the handler's"):
        async with registry.connection("ws") as conn:
            await conn.open_tasks()
            conn.spawn(watched.wait("task"), "task")
            await watched.started.wait()
            raise ValueError("the handler's")
    assert watched.cancelled == ["task"]


async def test_a_closing_connection_starts_nothing_and_leaves_no_coroutine() -> None:
    registry = Registry()
    ran: list[str] = []

    async def late(when: str) -> None:
        ran.append(when)

    late_tasks: list[asyncio.Task[None]] = []

    async def fails() -> None:
        raise RuntimeError("boom")

    async with registry.connection("ws") as conn:
        await conn.open_tasks()
        failing = conn.spawn(fails(), "fails")
        # Spawned while the group shuts down after the failure (as a slow-reader cut may).
        failing.add_done_callback(lambda _task: late_tasks.append(conn.spawn(late("aborting"), "late")))
        await asyncio.Event().wait()
    coro = late("closed")
    late_tasks.append(conn.spawn(coro, "late"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would fail here
        await asyncio.gather(*late_tasks, return_exceptions=True)
    assert [task.cancelled() for task in late_tasks] == [True, True]
    assert ran == [] and inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


async def test_a_runs_tasks_are_stopped_with_it() -> None:
    registry = Registry()
    watched = Watched()

    async def body(run: ChatRun) -> None:
        run.spawn(watched.wait("task"), "task")
        await watched.wait("body")

    async with registry.connection("ws") as conn:
        key = ("u", "c")
        run = await registry.claim(key, conn, StreamLog(key=key, max_bytes=1024))
        registry.start(run, body(run))
        await watched.started.wait()
        assert run.scope is not None and len(run.scope.tasks) == 1
        await asyncio.wait_for(run.stop(), 5)
        assert sorted(watched.cancelled) == ["body", "task"]
        assert run.scope is None and registry.active_run(key) is None
        with pytest.raises(RuntimeError):
            run.spawn(asyncio.sleep(0), "late")


async def test_a_failing_run_task_stops_the_run() -> None:
    registry = Registry()
    watched = Watched()

    async def body(run: ChatRun) -> None:
        run.spawn(watched.fail(), "fails")
        await watched.wait("body")  # e.g. a live session's other side

    async with registry.connection("ws") as conn:
        key = ("u", "c")
        run = await registry.claim(key, conn, StreamLog(key=key, max_bytes=1024))
        with capture_logs() as logs:
            registry.start(run, body(run))
            await asyncio.wait_for(run.done.wait(), 5)
        assert watched.cancelled == ["body"]
        assert run.task is not None and run.task.done() and not run.task.cancelled()
        assert run.task.exception() is None  # ended as stopped, the failure logged
        assert [entry["owner"] for entry in logs if entry["event"] == "task_failed"] == ["run:c"]
        assert registry.counts() == {"connections": 1, "runs": 0}


async def test_the_registry_is_the_one_list_of_open_sockets() -> None:
    class Socket:
        pass

    registry = Registry()
    socket = Socket()
    async with registry.connection("ws") as conn, registry.connection("sse"):
        assert registry.sockets(Socket) == []
        conn.socket = socket
        assert registry.sockets(Socket) == [socket]
        assert registry.sockets(str) == []
    assert registry.sockets(Socket) == []  # a released connection's socket is no longer listed
