"""Resumable streams: every response's chunks are kept (bounded) while it runs and shortly after.

How it works: a run appends wire chunks (plain JSON dicts, in the v7 chunk set) to its chat's
`StreamLog`. A finished log stays resumable for
`retention_s` only while no client has received its end (a client that dropped just before the
end can still fetch it); once one has, resume answers "nothing active".

Readers — the request that started the run, an SSE resume GET, a WebSocket `resume`
frame — `follow()` the log from any sequence number: they get what is already there, then wait
for more until the log is closed. A log over its byte budget stops being replayable (readers
that are already following keep going; new resumes get "nothing active").

`StreamStore` is the seam for several processes: the in-memory store serves one process; the
Redis store (`gateway.redis_streams`) lets any process resume a run another process is writing.
`lookup()` is the resume entry point (async, so a shared store can ask its server);
`resumable()` only knows this process's logs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["MemoryStreamStore", "StreamLog", "StreamStore"]

ChatKey = tuple[str, str]  # (user id, chat id)


@dataclass(eq=False)
class StreamLog:
    key: ChatKey
    max_bytes: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    closed_at: float | None = None
    overflowed: bool = False
    # Chunks that rebuild the message a continuation continues; sent after `start` on a replay.
    replay_prefix: list[dict[str, Any]] = field(default_factory=list)
    _size: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _delivered: bool = False
    _on_delivered: list[Callable[[StreamLog], None]] = field(default_factory=list, repr=False)

    @property
    def delivered(self) -> bool:
        """Set once some client received the whole response: then it is no longer offered for resume."""
        return self._delivered

    @delivered.setter
    def delivered(self, value: bool) -> None:
        first = value and not self._delivered
        self._delivered = value
        if first:
            for callback in list(self._on_delivered):
                callback(self)

    def when_delivered(self, callback: Callable[[StreamLog], None]) -> None:
        """Calls `callback(log)` once, when `delivered` first becomes true (a shared store's hook)."""
        self._on_delivered.append(callback)

    def append(self, wire: dict[str, Any]) -> int:
        """Adds one chunk; returns its sequence number."""
        if self.closed:
            raise RuntimeError("append to a closed stream log")
        self._size += len(json.dumps(wire, separators=(",", ":"), default=str))
        if self._size > self.max_bytes:
            self.overflowed = True
        self.chunks.append(wire)
        self._wake()
        return len(self.chunks) - 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, start: int = 0, *, replay: bool = False) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """Yields (sequence, chunk) from `start` on, live, until the log is closed.

        With `replay` from the beginning, the replay prefix follows the first (`start`) chunk.
        """
        index = max(0, start)
        if replay and index == 0 and self.replay_prefix:
            while not self.chunks and not self.closed:
                await self._changed.wait()
            if self.chunks:
                yield 0, self.chunks[0]
                index = 1
            for wire in self.replay_prefix:
                yield -1, wire
        while True:
            while index < len(self.chunks):
                yield index, self.chunks[index]
                index += 1
            if self.closed:
                return
            await self._changed.wait()


class StreamStore(Protocol):
    def add(self, log: StreamLog) -> None: ...
    def resumable(self, key: ChatKey) -> StreamLog | None: ...
    async def lookup(self, key: ChatKey) -> StreamLog | None: ...
    def discard(self, log: StreamLog) -> None: ...
    async def ping(self) -> bool: ...
    def listen_for_stops(self, on_stop: Callable[[ChatKey], None]) -> None: ...
    async def broadcast_stop(self, key: ChatKey) -> int: ...
    async def aclose(self) -> None: ...


class MemoryStreamStore:
    """One process's resumable streams, each kept `retention_s` after it ends."""

    def __init__(self, *, retention_s: float, max_bytes: int) -> None:
        self.retention_s = retention_s
        self.max_bytes = max_bytes
        self._logs: dict[ChatKey, StreamLog] = {}

    def add(self, log: StreamLog) -> None:
        """Makes a new run's log the chat's resumable stream (replacing the previous one)."""
        self._sweep()
        self._logs[log.key] = log

    def resumable(self, key: ChatKey) -> StreamLog | None:
        self._sweep()
        log = self._logs.get(key)
        if log is None or log.overflowed or (log.closed and log.delivered):
            return None
        return log

    async def lookup(self, key: ChatKey) -> StreamLog | None:
        """The chat's resumable stream, or None (the resume endpoints' entry point)."""
        return self.resumable(key)

    async def ping(self) -> bool:
        """Always reachable (readiness checks)."""
        return True

    def listen_for_stops(self, on_stop: Callable[[ChatKey], None]) -> None:
        """One process: every run is local, so there are no stops from elsewhere to hear."""

    async def broadcast_stop(self, key: ChatKey) -> int:
        """One process: nobody else to tell. Returns how many other processes heard it."""
        return 0

    def discard(self, log: StreamLog) -> None:
        if self._logs.get(log.key) is log:
            del self._logs[log.key]

    def _sweep(self) -> None:
        now = time.monotonic()
        stale = [
            key
            for key, log in self._logs.items()
            if log.closed_at is not None and now - log.closed_at >= self.retention_s
        ]
        for key in stale:
            del self._logs[key]

    def __len__(self) -> int:
        return len(self._logs)

    async def aclose(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
