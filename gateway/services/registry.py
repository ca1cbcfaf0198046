"""The per-connection registry: who is connected, which runs they own, and one run per chat.

How it works
------------
- A connection (one SSE request, one WebSocket) enters with `async with registry.connection(...)`.
  It owns the runs it starts and the tasks it spawns (a socket's deliveries, its close at token
  expiry). When the block exits — normally, by error, or because aiohttp cancelled the handler on
  a disconnect — every run it owns is stopped (unless runs detach on disconnect), every task is
  cancelled *and awaited*, and the entry is gone.
- A run is one agent invocation for one chat (`ChatRun`): a task that writes chunks to the chat's
  stream log, plus the tasks it spawns (`ChatRun.spawn`). At most one run per chat is active. A
  new request for a busy chat waits while the old run is stopping, and waits a short grace for a
  run whose client may just have left, before it is refused with `ChatBusy`.
- Stopping a run cancels its task and waits for it: nothing of it (no tool) runs afterwards.
- Structured concurrency: a connection's tasks, and a run's, are one `asyncio.TaskGroup` each
  (`TaskScope`), entered by the task that owns them (the handler; the run's task). The first task
  that fails cancels the others and its owner; when the owner leaves, every task has ended. A
  failure is logged (`task_failed`) and ends the owner as a cancellation would: a socket closes,
  a run ends with `abort`. The owner's own exception goes on unchanged.
- The registry is the one list of open connections: a WebSocket's connection holds its socket
  (`Connection.socket`), and shutdown closes the sockets it finds here (`Registry.sockets`).
- Across instances, a claim also takes the chat's lease (`adk_gateway.services.leases`: Redis or PostgreSQL)
  and the run gives it back when it ends; a chat leased elsewhere is busy like a local one, and a
  lease store that does not answer within the same grace is a 503 `store_unavailable`. A lease
  lost while the run goes on (another instance claimed the chat) ends the run with an `error`
  chunk saying so, then stops it.

Caps (`Limits`, from the settings) are answered here, before anything streams:

- Runs: a run is *held* from its claim until its task has ended — detached runs included, since
  they still cost a model and a task. `claim()` checks the caps and registers the run with no
  await in between (the wait for a busy chat comes first), so N simultaneous claims against room
  for N-1 give exactly one refusal. Over the user's cap: `TooManyRuns` (429); over the process's:
  `Overloaded` (503). The user's cap is checked first: it is the answer that stays true however
  much room the process has.
- Live sessions hold their chat like a run but are counted on their own (`live_sessions`): a
  live session is one long model connection, not a bounded answer, so it neither uses nor is
  refused by the run caps. Over the cap: `Overloaded` with reason `live_sessions`.
- Sockets per user: `socket_slot(user)` is entered before the upgrade and left when the socket's
  handler ends; over the cap it raises `TooManySockets` (429 at the handshake).
- `send` frames per socket: each connection has a `SendWindow` (below), consulted by
  `admit_send()`.

Memory: a connection, a run and a send window are slotted objects whose collections are created
when first needed, and entering a connection leaves no context-manager frame behind. A
connection's `TaskScope` and its group exist once `Connection.open_tasks()` has run: an
`asyncio.TaskGroup` must be entered by its owner's task, so a connection that spawns opens them in
its own task first (a socket does at its first frame, before anything can call back: its
slow-reader cut spawns its close from a timer); an SSE connection never spawns and never opens
them. A socket's send window is created by its first `send`, and a connection's log binding keeps
the value it replaced rather than a `Token`. A run's group is entered at once (a live session's
tasks are spawned from other tasks). What each costs, measured: docs/perf/memory-per-connection.md.

`anonymous` (`--auth none` without a user header) is nobody in particular — every client that
names no one shares it — so only the process caps bound it, not the per-user ones.

Every refusal goes through `_refuse()`: one count in `adk_gateway_rejections_total{reason}` and
one log line `rejected` with the user and the cap (never a token or a prompt).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import itertools
import math
import time
from collections import deque
from collections.abc import Coroutine, Mapping, Set
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeVar

import structlog

from adk_gateway import logs
from adk_gateway.config import Settings
from adk_gateway.core.errors import ChatBusy, LimitReached, Overloaded, StoreUnavailable, TooManyRuns, TooManySockets
from adk_gateway.metrics import Metrics
from adk_gateway.services.auth import ANONYMOUS
from adk_gateway.services.leases import Lease, Leases, LocalLeases
from adk_gateway.services.streams import ChatKey, StreamLog, Wakeup

__all__ = [
    "ChatRun", "Connection", "Done", "Limits", "Registry", "SendVerdict", "SendWindow", "SocketSlot", "TaskScope",
]

log = structlog.get_logger("adk_gateway.services.registry")

SEND_WINDOW_S: Final = 60.0
LEASE_RETRY_S: Final = 0.05
LEASE_LOST_TEXT: Final = ("This answer was stopped: another server took the chat over while this one could not "
                          "reach the shared store. Send the message again.")
# A client that keeps sending into a full window, ignoring the `rate_limited` error frames, is
# closed (1008) once its refused sends in the window reach this many times its limit: by then it
# has sent three times its budget within one minute.
ABUSE_FACTOR: Final = 2

SocketT = TypeVar("SocketT")


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The caps the registry enforces (`--max-runs`, `--max-runs-per-user`, `--max-live-sessions`,
    `--max-sockets-per-user`, `--max-sends-per-minute`)."""

    runs: int
    runs_per_user: int
    live_sessions: int
    sockets_per_user: int
    sends_per_minute: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            runs=settings.max_runs,
            runs_per_user=settings.max_runs_per_user,
            live_sessions=settings.max_live_sessions,
            sockets_per_user=settings.max_sockets_per_user,
            sends_per_minute=settings.max_sends_per_minute,
        )


class SendVerdict(enum.Enum):
    ADMIT = "admit"
    REFUSE = "refuse"  # an `error` frame `rate_limited`; the socket stays open
    CLOSE = "close"  # abuse: refuse, then close the socket with 1008


class SendWindow:
    """A sliding one-minute window over one socket's `send` frames (pure: the caller gives `now`).

    A `send` is admitted while fewer than `limit` were admitted in the last `SEND_WINDOW_S`
    seconds. Refused sends are remembered too: when the refusals in the window reach
    `ABUSE_FACTOR * limit` (three times the budget sent within a minute), the verdict is CLOSE.
    Memory is bounded: the queues hold at most `limit` and `ABUSE_FACTOR * limit` timestamps, and
    are created by the first `send` and the first refusal (a socket that never sends holds none).
    """

    __slots__ = ("_admitted", "_refused", "limit", "window_s")

    def __init__(self, limit: int, window_s: float = SEND_WINDOW_S) -> None:
        self.limit = limit
        self.window_s = window_s
        self._admitted: deque[float] | None = None
        self._refused: deque[float] | None = None

    def offer(self, now: float) -> SendVerdict:
        """Counts one `send` at `now` and says what to do with it."""
        horizon = now - self.window_s
        for stamps in (self._admitted, self._refused):
            while stamps and stamps[0] <= horizon:
                stamps.popleft()
        if self._admitted is None:
            self._admitted = deque(maxlen=self.limit)
        if len(self._admitted) < self.limit:
            self._admitted.append(now)
            return SendVerdict.ADMIT
        if self._refused is None:
            self._refused = deque(maxlen=ABUSE_FACTOR * self.limit)
        self._refused.append(now)
        if len(self._refused) >= ABUSE_FACTOR * self.limit:
            return SendVerdict.CLOSE
        return SendVerdict.REFUSE

    def retry_after_s(self, now: float) -> int:
        """Whole seconds until the window admits a `send` again (at least 1)."""
        if self._admitted is None or len(self._admitted) < self.limit:
            return 1
        return max(1, math.ceil(self._admitted[0] + self.window_s - now))


class Done(Wakeup):
    """Set once, never cleared: what `asyncio.Event` offers a run's end, without the event's own
    dict and deque (a future exists only while someone waits)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        super().__init__()
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            self.wake()

    async def wait(self, at_most_s: float | None = None) -> None:
        """Until it is set (at once if it is), or `at_most_s` seconds."""
        if not self._set:
            await super().wait(at_most_s)


def _refused(owner: str, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    """A spawn refused: the task comes back cancelled before its first step."""
    log.debug("spawn_refused", owner=owner, task=name)
    task = asyncio.get_running_loop().create_task(coro, name=f"{owner}:{name}")
    task.cancel()  # the coroutine never runs, and is not left unawaited either
    return task


class TaskScope:
    """The tasks of one owner (a connection, a run) in one `asyncio.TaskGroup`; see the module
    docstring. `enter()` and `leave()` run in the owner's task, `spawn()` anywhere.

    `tasks` exists once a task was spawned: a scope that never spawns holds no set.
    """

    __slots__ = ("_group", "_tasks", "owner")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[Any]] | None = None

    @property
    def tasks(self) -> Set[asyncio.Task[Any]]:
        """Its tasks that have not ended."""
        return self._tasks if self._tasks is not None else frozenset()

    async def enter(self) -> None:
        group = asyncio.TaskGroup()
        await group.__aenter__()
        self._group = group

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Starts a task in the group. A scope that is not open, or is being left (a task failed,
        its owner ends), starts nothing: the task comes back cancelled before its first step.
        Not an exception: a spawn can come from a callback of someone else's task (a slow-reader
        cut inside a log append), which must not fail for it."""
        task: asyncio.Task[Any] | None = None
        if self._group is not None:
            with contextlib.suppress(RuntimeError):  # the group is shutting down
                task = self._group.create_task(coro, name=f"{self.owner}:{name}")
        if task is None:
            return _refused(self.owner, coro, name)
        if self._tasks is None:
            self._tasks = set()
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def leave(self, exc: BaseException | None, *, cancel: bool) -> bool:
        """Leaves the group once every task has ended (waiting on through repeated cancellation of
        the owner). `exc`: what ends the owner, if anything; `cancel`: cancel the tasks first
        (they are also cancelled when the owner ends by an exception). Failed tasks are logged.

        Returns True when `exc` is the cancellation the group itself caused (a task failed) and
        nobody else asked to cancel the owner: the owner then ends normally rather than cancelled.
        """
        group, self._group = self._group, None
        if group is None:
            return False
        if cancel or exc is not None:
            for task in list(self.tasks):
                task.cancel()
        cancelled = isinstance(exc, asyncio.CancelledError)
        try:
            # The owner's own exception stays out of the group (it goes on unchanged); its
            # cancellation goes in, so the group can take back a cancellation it caused.
            if cancelled:
                assert exc is not None
                await group.__aexit__(type(exc), exc, exc.__traceback__)
            else:
                await group.__aexit__(None, None, None)
        except BaseExceptionGroup as failures:
            for failure in failures.exceptions:
                log.warning("task_failed", owner=self.owner, error=repr(failure), exc_info=failure)
            current = asyncio.current_task()
            return cancelled and current is not None and current.cancelling() == 0
        return False


@dataclass(eq=False, slots=True)
class ChatRun:
    key: ChatKey
    log: StreamLog
    owner: Connection | None
    detached: bool = False
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    # Why it was stopped when nobody asked (what the client is told instead of an `abort`).
    stopped_because: str | None = None
    done: Done = field(default_factory=Done)
    lease: Lease | None = None  # the chat's lease across instances, while the run lives
    scope: TaskScope | None = field(default=None, repr=False)  # its tasks, while its body runs
    # The messages the run will record once it ends (a new turn's user message): a chat loaded
    # meanwhile shows them already.
    recorded_ahead: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)

    @property
    def active(self) -> bool:
        return not self.done.is_set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Starts a task that is part of the run (e.g. one side of a live session): the run's
        stop cancels it, its failure stops the run, and the run ends only once it has ended.
        Only while the run's body runs (`Registry.start`); raises `RuntimeError` otherwise."""
        if self.scope is None:
            coro.close()
            raise RuntimeError(f"the run of {self.key[1]!r} is not running")
        return self.scope.spawn(coro, name)

    def cancel(self) -> None:
        """Asks the run to stop, at once (no await); `stop()` also waits until it has ended."""
        self.stopping = True
        task = self.task
        if task is not None and not task.done():
            task.cancel()

    async def stop(self) -> None:
        """Cancels the run and waits until it has fully ended."""
        self.cancel()
        task = self.task
        if task is not None and not task.done():
            # The caller may itself be cancelled (a disconnect): still wait for the run to end,
            # then let the caller's cancellation go on.
            await asyncio.shield(self.done.wait()) if not self.done.is_set() else None
        self.done.set()


_NOT_BOUND: Final = object()  # `Connection._log_previous` while the connection is not entered


class Connection:
    """One SSE request or one socket: the runs it started and the tasks it owns (see the module
    docstring). `async with` enters it into its registry and releases it, and its tasks'
    `TaskScope` once opened (`open_tasks`), on the way out.

    Its sets exist once something is in them: `runs`, `tasks` and `deliveries` read as empty
    until then. A socket's send window (`sends`) is created by its first `send` (`Registry.admit_send`).
    """

    __slots__ = ("_deliveries", "_log_previous", "_owner_task", "_runs", "_scope", "id", "kind", "registry", "sends",
                 "socket")

    def __init__(self, id: str, kind: str, registry: Registry, sends: SendWindow | None = None) -> None:
        self.id = id
        self.kind = kind
        self.registry = registry
        self.sends = sends
        self._scope: TaskScope | None = None  # opened by `open_tasks`
        self._owner_task: asyncio.Task[Any] | None = None  # the task that entered it
        self.socket: object | None = None  # the socket it serves, if any (`Registry.sockets`)
        self._runs: set[ChatRun] | None = None
        self._deliveries: set[asyncio.Task[Any]] | None = None  # the tasks among them that write a response
        # The `connection_id` log value this connection replaced while entered (restored on
        # release): the value, not the `Token`, so that no object is kept for the connection's life.
        self._log_previous: object = _NOT_BOUND

    def __repr__(self) -> str:
        return f"Connection(id={self.id!r}, runs={len(self.runs)}, tasks={len(self.tasks)})"

    @property
    def runs(self) -> Set[ChatRun]:
        """The runs it started that have not ended."""
        return self._runs if self._runs is not None else frozenset()

    @property
    def scope(self) -> TaskScope | None:
        """Its tasks' scope, once open (`open_tasks`)."""
        return self._scope

    @property
    def tasks(self) -> Set[asyncio.Task[Any]]:
        """Its tasks that have not ended (`spawn`)."""
        return self._scope.tasks if self._scope is not None else frozenset()

    @property
    def deliveries(self) -> Set[asyncio.Task[Any]]:
        """The tasks among `tasks` that write a response."""
        return self._deliveries if self._deliveries is not None else frozenset()

    def _own(self, run: ChatRun) -> None:
        if self._runs is None:
            self._runs = set()
        self._runs.add(run)

    def _disown(self, run: ChatRun) -> None:
        if self._runs is not None:
            self._runs.discard(run)

    async def open_tasks(self) -> TaskScope:
        """Opens the connection's `TaskScope` (enters its group), once; in the task that entered
        the connection, since a group's parent is the task that enters it. A connection spawns
        nothing before (`spawn` refuses): one that spawns opens its tasks first, in its own task,
        before anything can call back (a socket's slow-reader cut spawns its close from a timer)."""
        if self._scope is None:
            if self._owner_task is None or asyncio.current_task() is not self._owner_task:
                raise RuntimeError("a connection's tasks are opened by the task that entered it")
            scope = TaskScope(self.id)
            await scope.enter()
            self._scope = scope
        return self._scope

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, delivery: bool = False) -> asyncio.Task[Any]:
        """Starts a task owned by this connection, in its `TaskScope`: it is cancelled and awaited
        on release, and its failure cancels the connection's other tasks and its handler. A
        connection that is closing, not entered, or whose tasks are not open (`open_tasks`)
        starts nothing (`TaskScope.spawn`). `delivery`: it writes a response (a shutdown lets it
        finish writing)."""
        scope = self._scope
        task = scope.spawn(coro, name) if scope is not None else _refused(self.id, coro, name)
        if delivery:
            if self._deliveries is None:
                self._deliveries = set()
            self._deliveries.add(task)
            task.add_done_callback(self._deliveries.discard)
        return task

    async def __aenter__(self) -> Connection:
        """Registers the connection and binds its id to the task's log lines; its tasks open on
        demand (`open_tasks`)."""
        self._owner_task = asyncio.current_task()
        self.registry.connections[self.id] = self
        self._log_previous = logs.bind_replacing("connection_id", self.id)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        """Releases the connection. True (the handler goes on normally) when what ended it was the
        cancellation its own failed task caused, not a disconnect."""
        previous, self._log_previous = self._log_previous, _NOT_BOUND
        if previous is not _NOT_BOUND:
            logs.restore("connection_id", previous)
        return await self.registry._release(self, exc)


class SocketSlot:
    """`Registry.socket_slot()`: a class rather than a generator, so that a socket holding its slot
    keeps no generator frame alive."""

    __slots__ = ("registry", "user_id")

    def __init__(self, registry: Registry, user_id: str) -> None:
        self.registry = registry
        self.user_id = user_id

    def __enter__(self) -> None:
        self.registry._take_socket_slot(self.user_id)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.registry._give_socket_slot(self.user_id)


class Registry:
    def __init__(
        self,
        *,
        detach_on_disconnect: bool = False,
        busy_grace_s: float = 0.3,
        limits: Limits | None = None,
        metrics: Metrics | None = None,
        leases: Leases | None = None,
    ) -> None:
        self.detach_on_disconnect = detach_on_disconnect
        self.leases = leases or LocalLeases()
        self._lease_releases: set[asyncio.Task[None]] = set()
        self.busy_grace_s = busy_grace_s
        self.limits = limits or Limits.from_settings(Settings())
        self.metrics = metrics or Metrics()
        self.connections: dict[str, Connection] = {}
        self.runs: dict[ChatKey, ChatRun] = {}
        self._ids = itertools.count(1)
        # Held runs and live sessions (see "Caps" above); a run leaves them when its task ends.
        self._held_runs: set[ChatRun] = set()
        self._held_live: set[ChatRun] = set()
        self._runs_by_user: dict[str, int] = {}
        self._sockets_by_user: dict[str, int] = {}

    # --- connections -----------------------------------------------------------------------

    def connection(self, kind: str) -> Connection:
        """A new connection, to enter with `async with` (it is registered on entry, released on
        exit). A `ws` connection's `send` frames are counted (`admit_send`)."""
        return Connection(id=f"{kind}-{next(self._ids)}", kind=kind, registry=self)

    def sockets(self, kind: type[SocketT]) -> list[SocketT]:
        """The sockets of the open connections (`Connection.socket`) that are `kind`s."""
        return [conn.socket for conn in self.connections.values() if isinstance(conn.socket, kind)]

    async def _release(self, conn: Connection, exc: BaseException | None = None) -> bool:
        """Stops the connection's runs (unless they detach) and ends its tasks; see
        `Connection.__aexit__` for what it returns."""
        try:
            runs = [run for run in conn.runs if run.active and not run.detached]
            # Cancel everything before the first await: the release itself may be cancelled (a
            # socket's handler is cancelled when the peer drops the TCP connection right after
            # the close handshake), and a stop not yet begun would then never run.
            for run in runs:
                run.cancel()
            stops = asyncio.gather(*(run.stop() for run in runs), return_exceptions=True)
            try:
                # Cancels the tasks and waits for every one of them, however often it is cancelled.
                conn._owner_task = None  # nothing more to open
                scope = conn.scope
                return await scope.leave(exc, cancel=True) if scope is not None else False
            finally:
                try:
                    await asyncio.shield(stops)
                except asyncio.CancelledError:
                    # Still wait for the runs to end, then let the cancellation go on.
                    await asyncio.wait({stops})
                    raise
        finally:
            for run in conn.runs:
                run.owner = None
            conn._runs = None
            self.connections.pop(conn.id, None)

    # --- runs ------------------------------------------------------------------------------

    async def claim(self, key: ChatKey, owner: Connection, stream_log: StreamLog, *, live: bool = False) -> ChatRun:
        """Reserves the chat for a new run (`live`: a live session), or raises `ChatBusy` or a
        `LimitReached` (see "Caps" above)."""
        existing = self.runs.get(key)
        if existing is not None and existing.active:
            if existing.stopping:
                await existing.done.wait()
            else:
                waiter = asyncio.ensure_future(existing.done.wait())
                try:
                    await asyncio.wait({waiter}, timeout=self.busy_grace_s)
                finally:
                    waiter.cancel()
                if not existing.done.is_set():
                    raise ChatBusy()
        if self.runs.get(key) not in (None, existing) and self.runs[key].active:
            raise ChatBusy()
        # From here to the hold: no await, so the caps are checked and the run held atomically.
        self._check_caps(key[0], live=live)
        run = ChatRun(key=key, log=stream_log, owner=owner, detached=self.detach_on_disconnect)
        self.runs[key] = run
        owner._own(run)
        self._hold(run, live=live)
        try:
            run.lease = await self._take_lease(run)
        except BaseException:
            self.release_unstarted(run)
            raise
        return run

    async def _take_lease(self, run: ChatRun) -> Lease:
        """The chat's lease across instances (see adk_gateway.services.leases); like a busy chat here, a chat
        whose run lives on another instance gets the short grace before `ChatBusy`, and a lease store
        that does not answer gets it too before `StoreUnavailable` (503)."""
        deadline = asyncio.get_running_loop().time() + self.busy_grace_s
        while True:
            try:
                lease = await self.leases.acquire(run.key, on_lost=functools.partial(self._lease_lost, run))
            except StoreUnavailable:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                lease = None
            else:
                if lease is not None:
                    return lease
                if asyncio.get_running_loop().time() >= deadline:
                    log.info("chat_leased_elsewhere", chat_id=run.key[1])
                    raise ChatBusy(detail="the chat's run lives on another instance")
            await asyncio.sleep(LEASE_RETRY_S)

    def _lease_lost(self, run: ChatRun) -> None:
        """Another instance holds the chat's lease now (ours expired while this instance could not
        renew it, and the chat was claimed there): this run must not go on beside that one. It is
        cancelled with the reason, which a chat turn ends with as its `error` chunk instead of an
        `abort` (nobody pressed stop); a live session is told with an `error` chunk here, its turn
        then ends as any stopped live turn does."""
        if run.active and not run.stopping and not run.log.closed:
            run.stopped_because = LEASE_LOST_TEXT
            if run in self._held_live:
                run.log.append({"type": "error", "errorText": LEASE_LOST_TEXT})
        run.cancel()

    def _check_caps(self, user_id: str, *, live: bool) -> None:
        limits = self.limits
        if live:
            if len(self._held_live) >= limits.live_sessions:
                raise self._refuse(Overloaded(reason="live_sessions"), user_id, limits.live_sessions)
            return
        if user_id != ANONYMOUS and self._runs_by_user.get(user_id, 0) >= limits.runs_per_user:
            raise self._refuse(TooManyRuns(), user_id, limits.runs_per_user)
        if len(self._held_runs) >= limits.runs:
            raise self._refuse(Overloaded(), user_id, limits.runs)

    def _hold(self, run: ChatRun, *, live: bool) -> None:
        if live:
            self._held_live.add(run)
        else:
            self._held_runs.add(run)
            user_id = run.key[0]
            self._runs_by_user[user_id] = self._runs_by_user.get(user_id, 0) + 1

    def _let_go(self, run: ChatRun) -> None:
        """Ends the run's hold on the caps; idempotent."""
        self._held_live.discard(run)
        if run in self._held_runs:
            self._held_runs.discard(run)
            user_id = run.key[0]
            left = self._runs_by_user.get(user_id, 0) - 1
            if left > 0:
                self._runs_by_user[user_id] = left
            else:
                self._runs_by_user.pop(user_id, None)

    def start(self, run: ChatRun, body: Coroutine[Any, Any, None]) -> None:
        """Runs `body` as the run's task; when it has ended, the run is forgotten (`_forget`)
        inside the task, so that once the task is done the run is too."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._running(run, body), name=f"run:{run.key[1]}")
        run.task = task
        # A task cancelled before its first step never runs `_running`'s `finally`.
        task.add_done_callback(functools.partial(self._ended, run, body))
        if run.stopping:
            # A stop that came between the claim and now (a local stop, or one forwarded from
            # another instance) found no task to cancel: the run stops as soon as its body has
            # begun (after its first step, so the body ends it as it ends any stopped run).
            loop.call_soon(run.cancel)

    async def _running(self, run: ChatRun, body: Coroutine[Any, Any, None]) -> None:
        scope = TaskScope(f"run:{run.key[1]}")
        try:
            await scope.enter()
            run.scope = scope
            try:
                await body
            except BaseException as exc:
                if not await scope.leave(exc, cancel=True):
                    raise
            else:
                await scope.leave(None, cancel=False)
        finally:
            run.scope = None
            try:
                if run.lease is not None and run.lease.shared:
                    # Before `done`: a client that posts its next request to another instance
                    # the moment this answer ends should find the chat free. Shielded: a second
                    # cancellation (stop and disconnect at once) must not skip the release.
                    await asyncio.shield(run.lease.release())
            finally:
                self._forget(run)

    def _ended(self, run: ChatRun, body: Coroutine[Any, Any, None], _task: asyncio.Task[None]) -> None:
        """The run's task is done: normally `_running` has forgotten it already (this repeats
        nothing); a task cancelled before its first step ran neither `body` nor `_running`."""
        body.close()  # a no-op once it has run; a body that never started is not left unawaited
        run.log.close()  # a body that never started never closed it: its followers end
        lease = run.lease
        if lease is not None and lease.shared and not lease.released:
            self._release_lease(lease)
        self._forget(run)

    def release_unstarted(self, run: ChatRun) -> None:
        """Gives back a claim whose run never started (its preparation failed)."""
        if run.lease is not None and run.lease.shared:
            self._release_lease(run.lease)
        self._forget(run)

    def _release_lease(self, lease: Lease) -> None:
        release = asyncio.get_running_loop().create_task(lease.release(), name="lease-release")
        self._lease_releases.add(release)
        release.add_done_callback(self._lease_releases.discard)

    def _forget(self, run: ChatRun) -> None:
        """The run has ended (or never started): its chat, owner and caps are free again
        (idempotent)."""
        run.done.set()
        if self.runs.get(run.key) is run:
            del self.runs[run.key]
        if run.owner is not None:
            run.owner._disown(run)
        self._let_go(run)

    def active_run(self, key: ChatKey) -> ChatRun | None:
        run = self.runs.get(key)
        return run if run is not None and run.active else None

    async def stop(self, key: ChatKey) -> bool:
        run = self.active_run(key)
        if run is None:
            return False
        await run.stop()
        return True

    def stop_soon(self, key: ChatKey) -> None:
        """Stops the chat's run if this process runs it, without waiting (a stop heard from another
        process)."""
        run = self.active_run(key)
        if run is not None:
            log.info("stop_from_elsewhere", chat_id=key[1])
            run.cancel()

    async def aclose(self) -> None:
        """Stops every run (used at shutdown); their leases are given back."""
        await asyncio.gather(*(run.stop() for run in list(self.runs.values())), return_exceptions=True)
        await asyncio.gather(*list(self._lease_releases), return_exceptions=True)

    def counts(self) -> dict[str, int]:
        return {
            "connections": len(self.connections),
            "runs": sum(1 for run in self.runs.values() if run.active),
        }

    def held(self) -> dict[str, int]:
        """What the caps count now: held runs, live sessions, sockets, and users holding either."""
        return {
            "runs": len(self._held_runs),
            "live_sessions": len(self._held_live),
            "sockets": sum(self._sockets_by_user.values()),
            "users_with_runs": len(self._runs_by_user),
            "users_with_sockets": len(self._sockets_by_user),
        }

    # --- caps on sockets and frames --------------------------------------------------------

    def socket_slot(self, user_id: str) -> SocketSlot:
        """Holds one of the user's socket slots for a `with` block, or raises `TooManySockets` on
        entering it.

        Entered before the upgrade, so a refusal is still an HTTP answer (429 + Retry-After).
        """
        return SocketSlot(self, user_id)

    def _take_socket_slot(self, user_id: str) -> None:
        held = self._sockets_by_user.get(user_id, 0)
        if user_id != ANONYMOUS and held >= self.limits.sockets_per_user:
            raise self._refuse(TooManySockets(), user_id, self.limits.sockets_per_user)
        self._sockets_by_user[user_id] = held + 1

    def _give_socket_slot(self, user_id: str) -> None:
        left = self._sockets_by_user.get(user_id, 0) - 1
        if left > 0:
            self._sockets_by_user[user_id] = left
        else:
            self._sockets_by_user.pop(user_id, None)

    def admit_send(self, conn: Connection, user_id: str) -> SendVerdict:
        """Counts one `send` frame on the socket; a refusal is counted and logged here."""
        window = conn.sends
        if window is None:
            if conn.kind != "ws":
                return SendVerdict.ADMIT
            window = conn.sends = SendWindow(self.limits.sends_per_minute)
        now = time.monotonic()
        verdict = window.offer(now)
        if verdict is not SendVerdict.ADMIT:
            reason = "sends_per_minute" if verdict is SendVerdict.REFUSE else "send_flood"
            self._refuse(LimitReached(reason=reason, retry_after_s=window.retry_after_s(now)), user_id, window.limit)
        return verdict

    def _refuse(self, error: LimitReached, user_id: str, limit: int) -> LimitReached:
        """Counts and logs one refusal (the one log line it gets); returns the error to raise."""
        self.metrics.rejections.labels(reason=error.reason).inc()
        log.info("rejected", reason=error.reason, user_id=user_id, limit=limit, code=error.error_code,
                 retry_after_s=error.retry_after_s)
        return error
