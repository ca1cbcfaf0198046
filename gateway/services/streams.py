"""Resumable streams: every response's chunks, kept in a bounded log while it runs and shortly after.

How it works
------------
A run appends wire chunks (JSON dicts, in the v7 chunk set) to its chat's `StreamLog`. Each chunk
is serialised once, when it is appended (`encoding.chunk_json`): the log keeps those bytes and the
chunk's type, counts its size from them, and transports send them as they are.

Readers — the request that started the run, an SSE resume GET, a WebSocket `resume` frame, the
Redis mirror — `attach()` a `Follower` at a sequence number and `take()` chunks one at a time,
waiting on `changed()` when they have read everything, until the log is closed. A reader attaches
before its first await after finding the log (the request that starts a run: before the run's
task first runs), so the log knows every position it must keep. `follow()` wraps this as an
async iterator of (sequence, chunk dict).

Memory: `max_bytes` (`--stream-buffer-bytes`) bounds it for real.

- Under the cap the log keeps every chunk, so a resume replays from the first one.
- The first append past the cap makes the log *overflowed*: it is no longer resumable (a resume
  answers 204 / `no-active`, with a logged reason) and from then on it keeps only the chunks some
  follower has not read yet; the others are dropped as soon as every follower has read them.
- A follower may leave at most its `budget` unread (the larger of the cap and its connection's
  `--max-pending-bytes`) plus the newest chunk. One that falls further behind is *overrun*: the
  log drops what it had not read, and its next `take()` raises `FollowerOverrun` (its connection
  is cut as a slow reader, see `adk_gateway.transports.base`). So the log never keeps more than the largest
  budget among its followers plus one chunk (with the default budget: the cap plus one chunk).

A finished log stays resumable for `retention_s` only while no client has received its end (a
client that dropped just before the end can still fetch it); once one has, resume answers
"nothing active", and the in-memory store lets the log go at its next sweep (the next run or
resume a second or more after the last sweep), not `retention_s` after its end (see
`MemoryStreamStore`).

A live session's log also lets go of audio a barge-in made obsolete: `discard_unread` drops the
chunks of a type that some follower has not taken yet; followers skip them (so a WebSocket, which
numbers what it sends, shows no gap) and they count as taken.

Memory per log, besides its chunks, is a few hundred bytes: the wake-up of waiting readers
(`Wakeup`) holds futures only while someone waits, and a follower's queue exists only during a
replay's prefix. See docs/perf/memory-per-connection.md.

`StreamStore` is the seam for several processes: the in-memory store serves one process; the
Redis store (`adk_gateway.services.redis_streams`) lets any process resume a run another process is writing.
`lookup()` is the resume entry point (async, so a shared store can ask its server);
`resumable()` only knows this process's logs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import structlog

from adk_gateway.core import encoding
from adk_gateway.core.chunks import Chunk

__all__ = ["Follower", "FollowerOverrun", "LogEntry", "MemoryStreamStore", "StreamLog", "StreamStore", "Wakeup"]

logger = structlog.get_logger("adk_gateway.services.streams")

ChatKey = tuple[str, str]  # (user id, chat id)

# Dropped chunks leave a hole at the head of the entry list; it is compacted once the hole is this
# long and at least half the list (amortised O(1) per chunk, O(1) indexing by sequence).
_COMPACT_AFTER = 1024


class Wakeup:
    """Wakes every task waiting in `wait()` at once (`wake()`): an `asyncio.Event` that is set and
    replaced, without the event's own dict and deque. Waiters are plain futures, kept in a list
    created by the first wait; an idle log holds none."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] | None = None

    async def wait(self, at_most_s: float | None = None) -> None:
        """Until the next `wake()`, or `at_most_s` seconds."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        timer = None if at_most_s is None else loop.call_later(at_most_s, _resolve, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            waiters = self._waiters
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            _resolve(waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FollowerOverrun(Exception):
    """The follower fell so far behind that the log dropped chunks it had not read."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One chunk as a follower takes it: sequence (-1 for a replayed prefix chunk), type, JSON."""

    sequence: int
    kind: str
    data: bytes

    def wire(self) -> dict[str, Any]:
        """The chunk as a dict (decoded: the log keeps only the bytes)."""
        value: dict[str, Any] = json.loads(self.data)
        return value

    @classmethod
    def of(cls, sequence: int, wire: dict[str, Any]) -> LogEntry:
        return cls(sequence, str(wire.get("type", "")), encoding.chunk_json(wire))


class Follower:
    """One reader's place in a log; see the module docstring. Detach it when done (it is a
    context manager), or the log keeps chunks for it until it is overrun."""

    __slots__ = ("_dropped", "_prefix", "_queued", "_taken", "budget", "log", "on_change", "overrun", "position")

    def __init__(self, log: StreamLog, position: int, budget: int, prefix: list[dict[str, Any]] | None) -> None:
        self.log = log
        self.position = position  # the sequence number of the next chunk to take
        self.budget = budget
        self.overrun = False
        # Called (synchronously) when the log grows or overruns this follower: a connection's guard.
        self.on_change: Callable[[], None] | None = None
        self._taken = 0  # the log's byte offset of `position`
        self._dropped = 0  # what it had not read when it was overrun
        self._prefix = prefix  # a replay's prefix chunks, sent after the first chunk
        self._queued: deque[LogEntry] | None = None  # a replay's prefix chunks, while they are sent

    @property
    def backlog(self) -> int:
        """Bytes in the log this follower has not taken yet (overrun: what it had not read then)."""
        return self._dropped if self.overrun else self.log.appended_bytes - self._taken

    @property
    def caught_up(self) -> bool:
        """Whether this follower has taken every chunk the log holds now."""
        return not self.overrun and not self._queued and self.position >= self.log.end and (
            self._prefix is None or not self.log.closed)

    def _overrun(self) -> None:
        self._dropped = self.backlog
        self.overrun = True

    def take(self) -> LogEntry | None:
        """The next chunk, or None when there is none yet (or none ever: the log is closed).

        Raises:
            FollowerOverrun: the log dropped chunks this follower had not read.
        """
        if self.overrun:
            raise FollowerOverrun(f"fell behind past {self.budget} bytes")
        if self._queued:
            entry = self._queued.popleft()
            if not self._queued:
                self._queued = None
            return entry
        log = self.log
        while self.position < log.end:
            item = log._entry(self.position)
            if item is None:  # discarded before this follower took it (and counted as taken then)
                self.position += 1
                continue
            kind, data = item
            entry = LogEntry(self.position, kind, data)
            self.position += 1
            self._taken += len(data)
            if log.overflowed:  # past the cap, a chunk every follower has taken is let go at once
                log._shed(newest=None)
            drained = log._drained
            if drained is not None and self.backlog <= log.max_bytes // 4:
                drained.wake()  # the run waiting for its readers may go on
            if entry.sequence == 0 and self._prefix is not None:
                self._queue_prefix()
            return entry
        if log.closed and self._prefix is not None:  # a replay of a log that ended before its first chunk
            self._queue_prefix()
            return self.take()
        return None

    def _queue_prefix(self) -> None:
        self._queued = deque(LogEntry.of(-1, wire) for wire in self._prefix or ())
        self._prefix = None

    def detach(self) -> None:
        """Leaves the log (idempotent): it no longer keeps chunks for this follower."""
        self.log._detach(self)

    def __enter__(self) -> Follower:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.detach()


class StreamLog:
    """One response's chunks; see the module docstring."""

    __slots__ = ("__dict__", "_changed", "_delivered", "_drained", "_entries", "_followers", "_head", "_last_size",
                 "_on_delivered", "appended_bytes", "closed", "closed_at", "end", "first", "kept_bytes", "key",
                 "max_bytes", "overflowed", "peak_bytes", "replay_prefix")

    def __init__(self, *, key: ChatKey, max_bytes: int) -> None:
        self.key = key
        self.max_bytes = max_bytes
        self.closed = False
        self.closed_at: float | None = None
        self.overflowed = False
        # Chunks that rebuild the message a continuation continues; sent after `start` on a replay.
        self.replay_prefix: list[dict[str, Any]] = []
        self.first = 0  # the sequence number of the oldest chunk kept
        self.end = 0  # the sequence number the next chunk gets (how many chunks were ever appended)
        self.kept_bytes = 0
        self.peak_bytes = 0  # the most `kept_bytes` has been (observability, tests)
        self.appended_bytes = 0  # every chunk ever appended
        self._last_size = 0  # the newest chunk's
        self._entries: list[tuple[str, bytes] | None] = []  # None: dropped, not compacted yet
        self._head = 0  # index of `first` in `_entries`
        self._followers: dict[Follower, None] = {}
        self._changed = Wakeup()
        self._drained: Wakeup | None = None  # made by the first wait for readers (`readers_caught_up`)
        self._delivered = False
        self._on_delivered: list[Callable[[StreamLog], None]] | None = None

    def __repr__(self) -> str:
        return (f"StreamLog(key={self.key!r}, chunks={self.first}..{self.end}, kept_bytes={self.kept_bytes}, "
                f"closed={self.closed}, overflowed={self.overflowed}, followers={len(self._followers)})")

    # --- reading ------------------------------------------------------------------------------

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The chunks kept, decoded (all of them while the log has not overflowed)."""
        return [json.loads(item[1]) for item in self._entries[self._head:] if item is not None]

    @property
    def followers(self) -> int:
        return len(self._followers)

    def attach(self, start: int = 0, *, replay: bool = False, budget: int = 0) -> Follower:
        """A new follower from sequence `start` on (sync: attach before the next await).

        With `replay` from the beginning, the replay prefix follows the first chunk. `budget`: the
        bytes it may leave unread (at least the log's cap) before it is overrun. A follower whose
        start was already dropped is overrun from the outset.
        """
        position = max(0, start)
        prefix = list(self.replay_prefix) if replay and position == 0 and self.replay_prefix else None
        follower = Follower(self, position, max(self.max_bytes, budget), prefix)
        if position < self.first:
            follower._overrun()
        else:
            follower._taken = self._offset(position)
            if follower.backlog - self._last_size > follower.budget:  # already too far behind
                follower._overrun()
        self._followers[follower] = None
        return follower

    async def follow(self, start: int = 0, *, replay: bool = False) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """Yields (sequence, chunk) from `start` on, live, until the log is closed.

        Raises:
            FollowerOverrun: the reader fell behind past the cap.
        """
        with self.attach(start, replay=replay) as follower:
            while True:
                entry = follower.take()
                if entry is not None:
                    yield entry.sequence, entry.wire()
                elif self.closed:
                    return
                else:
                    await self.changed()

    def behind(self) -> bool:
        """Whether a reader has more than half the log's cap unread: the run waits for it
        (`readers_caught_up`) rather than outrun it. A run without readers never waits."""
        followers = self._followers
        if not followers:
            return False
        limit = self.max_bytes // 2
        # A loop rather than `any()` over a generator: this runs for every event of every run.
        for follower in followers:  # noqa: SIM110
            if follower.backlog > limit and not follower.overrun:
                return True
        return False

    async def readers_caught_up(self) -> None:
        """Waits while a reader is `behind`, until it has taken back to a quarter of the cap (or
        left, or the log ended): backpressure on the run, so that a reader the process keeps busy
        is waited for instead of outrun. A reader whose socket does not drain is cut by its
        connection's guard, which ends the wait."""
        while not self.closed and self.behind():
            if self._drained is None:
                self._drained = Wakeup()
            await self._drained.wait(1.0)

    async def changed(self, at_most_s: float | None = None) -> None:
        """Waits until the log changes (a chunk, the end, a wake-up), or `at_most_s` seconds."""
        await self._changed.wait(at_most_s)

    def wake(self) -> None:
        """Wakes every follower waiting in `changed()` (e.g. their connection was cut)."""
        self._changed.wake()

    # --- writing ------------------------------------------------------------------------------

    def append(self, wire: dict[str, Any]) -> int:
        """Adds one chunk (serialising it, once); returns its sequence number."""
        return self.append_encoded(str(wire.get("type", "")), encoding.chunk_json(wire))

    def append_chunks(self, chunks: Iterable[Chunk]) -> None:
        """Adds a converter's chunks, in order."""
        for chunk in chunks:
            self.append(chunk.to_wire())

    def append_encoded(self, kind: str, data: bytes) -> int:
        """Adds one chunk already serialised with `encoding.chunk_json`; returns its sequence number."""
        if self.closed:
            raise RuntimeError("append to a closed stream log")
        sequence = self.end
        size = len(data)
        self._entries.append((kind, data))
        self.end += 1
        self.kept_bytes += size
        self.appended_bytes += size
        self._last_size = size
        for follower in self._followers:
            if follower.position > sequence:  # a follower that starts later: not its backlog
                follower._taken += size
        if self.overflowed or self.kept_bytes > self.max_bytes:
            self._shed(newest=size)
        self.peak_bytes = max(self.peak_bytes, self.kept_bytes)
        self.wake()
        for follower in tuple(self._followers):
            if follower.on_change is not None:
                follower.on_change()
        return sequence

    def discard_unread(self, kind: str) -> int:
        """Drops the chunks of type `kind` that some follower has not taken yet (a live barge-in:
        audio the client has not received is never sent); followers skip them, and their bytes
        no longer count as pending. Returns how many were dropped."""
        start = min((f.position for f in self._followers if not f.overrun), default=self.first)
        dropped = 0
        for sequence in range(max(start, self.first), self.end):
            index = self._head + sequence - self.first
            item = self._entries[index]
            if item is None or item[0] != kind:
                continue
            size = len(item[1])
            self._entries[index] = None
            self.kept_bytes -= size
            dropped += 1
            for follower in self._followers:
                if follower.position <= sequence:
                    follower._taken += size
        if dropped:
            for follower in tuple(self._followers):
                if follower.on_change is not None:
                    follower.on_change()
        return dropped

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()
            self.wake()
            if self._drained is not None:
                self._drained.wake()

    @property
    def delivered(self) -> bool:
        """Set once some client received the whole response: then it is no longer offered for resume."""
        return self._delivered

    @delivered.setter
    def delivered(self, value: bool) -> None:
        first = value and not self._delivered
        self._delivered = value
        if first:
            for callback in list(self._on_delivered or ()):
                callback(self)

    def when_delivered(self, callback: Callable[[StreamLog], None]) -> None:
        """Calls `callback(log)` once, when `delivered` first becomes true (a shared store's hook)."""
        if self._on_delivered is None:
            self._on_delivered = []
        self._on_delivered.append(callback)

    # --- the bound ----------------------------------------------------------------------------

    def _shed(self, newest: int | None) -> None:
        """Past the cap: drop what every follower has read; overrun followers too far behind."""
        if not self.overflowed:
            self.overflowed = True
            logger.info("stream_not_resumable", chat_id=self.key[1], reason="over_budget", max_bytes=self.max_bytes)
        end = self.end
        if newest is not None:
            for follower in self._followers:
                if not follower.overrun and follower.backlog - newest > follower.budget:
                    follower._overrun()
                    logger.debug("stream_follower_overrun", chat_id=self.key[1], backlog_bytes=follower.backlog,
                                budget_bytes=follower.budget)
        floor = min((f.position for f in self._followers if not f.overrun), default=end)
        while self.first < min(floor, end):
            self._drop_first()

    def _drop_first(self) -> None:
        item = self._entries[self._head]
        self._entries[self._head] = None
        self._head += 1
        self.first += 1
        if item is not None:  # a discarded chunk's bytes were let go already
            self.kept_bytes -= len(item[1])
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._entries):
            del self._entries[: self._head]
            self._head = 0

    def _entry(self, sequence: int) -> tuple[str, bytes] | None:
        """The chunk kept at `sequence` (None: discarded)."""
        return self._entries[self._head + sequence - self.first]

    def _offset(self, sequence: int) -> int:
        """The byte offset of chunk `sequence` among every chunk ever appended."""
        if sequence >= self.end:
            return self.appended_bytes
        start = self._head
        stop = start + sequence - self.first
        return self.appended_bytes - self.kept_bytes + sum(len(item[1]) for item in self._entries[start:stop] if item)

    def _detach(self, follower: Follower) -> None:
        if follower in self._followers:
            del self._followers[follower]
            follower.on_change = None
            if self.overflowed:
                self._shed(newest=None)
            if self._drained is not None:
                self._drained.wake()


class StreamStore(Protocol):
    def add(self, log: StreamLog) -> None: ...
    def resumable(self, key: ChatKey) -> StreamLog | None: ...
    async def lookup(self, key: ChatKey) -> StreamLog | None: ...
    def discard(self, log: StreamLog) -> None: ...
    async def ping(self) -> bool: ...
    def listen_for_stops(self, on_stop: Callable[[ChatKey], None]) -> None: ...
    async def broadcast_stop(self, key: ChatKey) -> int: ...
    def end_resumes(self) -> None: ...
    async def aclose(self) -> None: ...


class MemoryStreamStore:
    """One process's resumable streams: each chat's newest log, kept while it runs and after its
    end until some client has received that end, `retention_s` at most.

    Finished logs are let go by a sweep, at most once a second, on the next `add` or lookup; a log
    a client received to its end goes at the first one, not after the whole retention: at a few
    hundred fresh chats a second, logs kept for nothing would hold megabytes and spread over
    arenas that stay in use after they go (docs/perf/benchmark-history.md, `make bench`'s RSS).
    """

    def __init__(self, *, retention_s: float, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.retention_s = retention_s
        self.max_bytes = max_bytes
        self.clock = clock  # the clock of `StreamLog.closed_at`
        self._logs: dict[ChatKey, StreamLog] = {}
        self._next_sweep = 0.0

    def add(self, log: StreamLog) -> None:
        """Makes a new run's log the chat's resumable stream (replacing the previous one)."""
        self._sweep()
        self._logs[log.key] = log

    def resumable(self, key: ChatKey) -> StreamLog | None:
        self._sweep()
        log = self._logs.get(key)
        if log is None or (log.closed and log.delivered) or self._expired(log):
            return None
        if log.overflowed:
            logger.info("resume_refused", chat_id=key[1], reason="over_budget", max_bytes=log.max_bytes)
            return None
        return log

    async def lookup(self, key: ChatKey) -> StreamLog | None:
        """The chat's resumable stream, or None (the resume endpoints' entry point)."""
        return self.resumable(key)

    def latest(self, key: ChatKey) -> StreamLog | None:
        """The chat's newest log still kept, resumable or not (for inspection: what a run keeps in
        memory). It does not sweep: a log delivered since the last sweep is still here."""
        return self._logs.get(key)

    async def ping(self) -> bool:
        """Always reachable (readiness checks)."""
        return True

    def listen_for_stops(self, on_stop: Callable[[ChatKey], None]) -> None:
        """One process: every run is local, so there are no stops from elsewhere to hear."""

    async def broadcast_stop(self, key: ChatKey) -> int:
        """One process: nobody else to tell. Returns how many other processes heard it."""
        return 0

    def end_resumes(self) -> None:
        """One process: every resumable log is this process's own and ends with its run."""

    def discard(self, log: StreamLog) -> None:
        if self._logs.get(log.key) is log:
            del self._logs[log.key]

    def _expired(self, log: StreamLog, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        return log.closed_at is not None and now - log.closed_at >= self.retention_s

    def _sweep(self) -> None:
        # At most once a second: a scan of every kept log on every run's start would cost each
        # turn in proportion to the logs kept. A delivered log is not resumable (`resumable`), so
        # it goes at once; the others when their retention is over.
        now = self.clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(1.0, self.retention_s)
        stale = [key for key, log in self._logs.items() if (log.closed and log.delivered) or self._expired(log, now)]
        for key in stale:
            del self._logs[key]

    def __len__(self) -> int:
        return len(self._logs)

    async def aclose(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
