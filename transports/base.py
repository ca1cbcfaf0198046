"""The `Transport` interface and `deliver()`: how one response's chunks reach a client, at the pace
the client reads.

How it works
------------
The chat service appends chunks to a stream log; `deliver()` follows that log (a
`streams.Follower`) and hands its chunks to a transport — the bytes serialised when the chunk was
logged, adapted only where an `ai` 6 client needs it (`adapt_entry`, called from `deliver` only) —
with keep-alives while the log is idle. It is one loop in one task: take a chunk, write it, take
the next. A chunk leaves the log only when the previous write returned, so nothing queues
between the log and aiohttp's own flow control.

Writes are coalesced: an SSE response's headers and its `: stream-open` comment go out with the
chunks already waiting when it opens (`Transport.open` may hold its first bytes back until the
first write, and `deliver` flushes them before it waits). When several chunks are already waiting
(a fast model, or a reader catching up after the socket was busy), they go out together
(`Transport.send`), up to `MAX_BATCH_BYTES` of chunk JSON. SSE writes their events in one
`write`; a WebSocket sends one frame per chunk, back to back under one hold of the socket
(aiohttp's `send_frame` only waits for a drain once its writer has buffered 64 KiB, so consecutive
frames are not drained one by one). The chunks after the first are taken from the log lazily, as
the transport writes them: until the write that carries them they stay in the log, counted in the
follower's backlog. When the log has ended and a batch takes the rest of it, the transport ends
the response with it (`Transport.close` with its last chunks).

Slow readers
------------
A reader is slow when its socket does not drain, never because the process was too busy to write
to it: a run whose reader has half its log's cap unread waits for it
(`StreamLog.readers_caught_up`, backpressure) instead of outrunning it. Each connection (an SSE
response; a WebSocket with all its requests) has a `SlowReaderGuard`. Its *pending bytes* are what
sits unsent in the socket's transport buffer; `--max-pending-bytes` bounds them. The guard is
driven by events, not by polling: log appends (`Follower.on_change`), and writes starting and
ending (`writing()`), with one timer per condition. It cuts the connection when

- `pending`: the pending bytes stay over the bound for `--slow-reader-grace-s`;
- `stalled`: one write stays blocked for the grace, however little is pending. aiohttp's `write`
  awaits the drain, and a peer that never reads holds it until TCP gives up (a zero window can
  be kept open forever), so without this the handler outlives its run;
- `overrun`: a follower fell so far behind that its log dropped chunks it had not read (a run that
  does not wait for it: a live session's audio, a resume of a detached run). At once: the stream
  cannot go on in order.

A cut (`errors.SlowReader`) is counted (`adk_gateway_slow_readers_cut_total{transport,reason}`)
and logged once, with the user, the chat and the bytes pending. Then:

1. The deliveries stop taking chunks (waiting ones are woken).
2. Nothing is cancelled in the middle of a write: aiohttp's writers share one drain future, and
   cancelling a task blocked on it cancels that future, so every later write on the connection
   would fail. Instead a timer aborts the socket `CUT_TIMEOUT_S` after the cut unless it has
   closed and flushed by then; the abort releases any blocked write (and with
   `handler_cancellation` cancels the handler).
3. Meanwhile the transport ends as well as it can (`Transport.close` with the cut): SSE writes an
   `error` chunk and `[DONE]` and closes the connection; a WebSocket closes with 4008 "slow".
4. The connection's runs are stopped at the cut (`stop_runs`) unless they detach, and leaving
   the connection waits for them; detached followers let the log drop what they held.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

import structlog

from adk_gateway.core import encoding
from adk_gateway.core.chunks import ADAPTED_FOR_V6, adapt_wire
from adk_gateway.core.errors import GatewayError, SlowReader
from adk_gateway.core.pacing import Pacer
from adk_gateway.services.streams import Follower, FollowerOverrun, LogEntry

if TYPE_CHECKING:
    from adk_gateway.metrics import Metrics
    from adk_gateway.services.registry import Connection

__all__ = [
    "CUT_TIMEOUT_S",
    "MAX_BATCH_BYTES",
    "SlowReaderGuard",
    "Transport",
    "adapt_entry",
    "adapt_wire",
    "deliver",
    "stop_runs",
]

log = structlog.get_logger("adk_gateway.transports.base")

# How long a cut connection may take to flush its last words (an `error` chunk, a close frame)
# before its socket is aborted.
CUT_TIMEOUT_S: Final = 2.0

# The most chunk JSON (bytes) one coalesced write takes from the log when several chunks are
# waiting (a first chunk larger than this still goes out whole). aiohttp waits for a drain past
# 64 KiB of buffered output anyway, so a larger write would only copy more at once.
MAX_BATCH_BYTES: Final = 64 * 1024
# Batches written between two turns given to the event loop, at most (see `deliver`).
REPLAY_BATCHES_PER_TURN: Final = 4

def adapt_entry(entry: LogEntry, major: int) -> bytes | None:
    """A logged chunk's JSON for this client (`chunks.adapt_wire`, the one adapter): the logged
    bytes unless they need adapting; None: skip."""
    if major >= 7 or entry.kind not in ADAPTED_FOR_V6:
        return entry.data
    wire = entry.wire()
    adapted = adapt_wire(wire, major)
    if adapted is None:
        return None
    return entry.data if adapted is wire else encoding.chunk_json(adapted)


class Transport(abc.ABC):
    """Carries one response to one client. `deliver()` hands it every chunk, already adapted to
    the client's `ai` version (`major`): a transport only writes.

    Chunks come as `LogEntry`s: `data` is the chunk's JSON as the client gets it. A transport
    whose frames carry a number (the WebSocket's `sequence`) keeps its own count: what it numbers
    is what it sent, not the log's positions (a chunk an `ai` 6 client does not get leaves no gap).
    """

    __slots__ = ()

    major: int = 6  # the client's `ai` major version, which `deliver()` adapts the chunks to

    @abc.abstractmethod
    async def open(self) -> None:
        """Starts the response (headers, or a `start` frame). A transport may hold its first
        bytes back until its next write, so they go out with the first chunks; `flush` sends them
        on their own."""

    async def flush(self) -> None:
        """Sends whatever `open` held back; `deliver` calls it before it waits for chunks, so an
        opened response never sits unsent. Nothing, for a transport that holds nothing back."""
        return None

    @abc.abstractmethod
    async def send(self, chunks: Iterable[LogEntry]) -> None:
        """Sends the chunks that were waiting together, in order (SSE: one write; a WebSocket:
        one frame each, back to back). `chunks` is lazy: each after the first is taken from the
        log as it is iterated, so a transport iterates it when it is about to write (not before
        waiting for its turn on a shared socket)."""

    @abc.abstractmethod
    async def keepalive(self) -> None:
        """Tells proxies the idle response is alive."""

    @abc.abstractmethod
    async def close(self, last: Sequence[LogEntry] = (), *, cut: GatewayError | None = None) -> None:
        """Ends the response: normally, after the chunks `last` (the rest of an ended log: a
        transport that can ends the response in the same write). With `cut` (no `last` then),
        one that was cut (a slow reader): as well as the connection still allows, e.g. with an
        `error` chunk."""


class SlowReaderGuard:
    """Bounds one connection's outgoing bytes and cuts a slow reader; see the module docstring.

    Args:
        connection: the socket's asyncio transport (its unsent bytes count; a cut aborts it).
        max_pending_bytes: `--max-pending-bytes`.
        grace_s: `--slow-reader-grace-s`.
        transport: `sse` or `ws` (the metric's label).
        user_id: for the log line of a cut.
        metrics: where cuts are counted.
        on_cut: called once, at the cut (a socket starts its 4008 close there).
    """

    __slots__ = ("_closed", "_followers", "_over_timer", "_stall_timer", "_write_began", "_writes", "connection",
                 "error", "grace_s", "max_pending_bytes", "metrics", "on_cut", "transport", "user_id")

    def __init__(
        self,
        connection: asyncio.Transport | None,
        *,
        max_pending_bytes: int,
        grace_s: float,
        transport: str,
        user_id: str,
        metrics: Metrics | None = None,
        on_cut: Callable[[SlowReader], None] | None = None,
    ) -> None:
        self.connection = connection
        self.max_pending_bytes = max_pending_bytes
        self.grace_s = grace_s
        self.transport = transport
        self.user_id = user_id
        self.metrics = metrics
        self.on_cut = on_cut
        self.error: SlowReader | None = None
        self._followers: dict[Follower, None] = {}
        self._writes = 0
        self._write_began = 0.0  # when the writes now under way began (loop time)
        self._over_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def pending_bytes(self) -> int:
        """What the socket has not sent. (What the followers have not taken from their logs is the
        runs' to wait for, `StreamLog.readers_caught_up`: a reader the process kept busy is not a
        slow reader; one whose socket does not drain is.)"""
        return self.connection.get_write_buffer_size() if self.connection is not None else 0

    def watch(self, follower: Follower) -> None:
        """Counts this follower's backlog from now on (until `unwatch`)."""
        self._followers[follower] = None
        follower.on_change = self.update
        self.update()

    def unwatch(self, follower: Follower) -> None:
        if follower in self._followers:
            del self._followers[follower]
            follower.on_change = None
            self.update()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Wraps one write to the socket: a write blocked for the grace is a stalled reader.

        One timer watches all of a connection's writes: armed by a write when none is, it looks
        at the write under way when it fires (and waits again for what is left of that one's
        grace), rather than a timer made and cancelled for every write."""
        self._writes += 1
        if self._writes == 1:
            loop = asyncio.get_running_loop()
            self._write_began = loop.time()
            if self._stall_timer is None and self.error is None and not self._closed:
                self._stall_timer = loop.call_later(self.grace_s, self._stalled)
        try:
            yield
        finally:
            self._writes -= 1
            self.update()

    def update(self) -> None:
        """Re-evaluates the bound (after a log append, a write, a follower coming or going)."""
        if self.error is not None or self._closed:
            return
        # (A loop, not `any()` over a generator: this runs at every chunk a run logs and every write.)
        for follower in self._followers:
            if follower.overrun:
                self.cut("overrun")
                return
        if self.pending_bytes > self.max_pending_bytes:
            if self._over_timer is None:
                self._over_timer = asyncio.get_running_loop().call_later(self.grace_s, self._still_over)
        elif self._over_timer is not None:
            self._over_timer.cancel()
            self._over_timer = None

    def _still_over(self) -> None:
        self._over_timer = None
        if self.pending_bytes > self.max_pending_bytes:
            self.cut("pending")

    def _stalled(self) -> None:
        self._stall_timer = None
        if not self._writes:
            return  # the next write arms it again
        loop = asyncio.get_running_loop()
        left = self._write_began + self.grace_s - loop.time()
        if left > 0:
            self._stall_timer = loop.call_later(left, self._stalled)
        else:
            self.cut("stalled")

    def cut(self, reason: str) -> None:
        """Cuts the connection (once): counts, logs, stops the deliveries, arms the abort."""
        if self.error is not None or self._closed:
            return
        pending = self.pending_bytes
        self.error = SlowReader(reason, pending_bytes=pending)
        self._cancel_timers()
        culprit = max(self._followers, key=lambda follower: follower.backlog, default=None)
        if self.metrics is not None:
            self.metrics.slow_readers_cut.labels(transport=self.transport, reason=reason).inc()
        log.warning("slow_reader_cut", transport=self.transport, reason=reason, user_id=self.user_id,
                    chat_id=culprit.log.key[1] if culprit is not None else None, pending_bytes=pending,
                    max_pending_bytes=self.max_pending_bytes)
        if self.connection is not None:
            asyncio.get_running_loop().call_later(CUT_TIMEOUT_S, _abort_unless_closed, self.connection)
        for follower in self._followers:
            follower.log.wake()
        if self.on_cut is not None:
            self.on_cut(self.error)

    def close(self) -> None:
        """The connection has ended: no more timers, no more cuts."""
        self._closed = True
        self._cancel_timers()
        for follower in self._followers:
            follower.on_change = None
        self._followers.clear()

    def _cancel_timers(self) -> None:
        for timer in (self._over_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._over_timer = self._stall_timer = None


def stop_runs(conn: Connection) -> None:
    """A cut connection's runs stop now, not once its handler has ended (unless they detach);
    leaving the connection then waits for them."""
    for run in list(conn.runs):
        if run.active and not run.detached:
            run.cancel()


def _abort_unless_closed(connection: asyncio.Transport) -> None:
    """A cut connection that has not closed and flushed in time is dropped, unsent bytes and all."""
    if not connection.is_closing() or connection.get_write_buffer_size():
        log.debug("slow_reader_aborted", unsent_bytes=connection.get_write_buffer_size())
        connection.abort()


def _adapted(entry: LogEntry, major: int) -> LogEntry | None:
    """The entry as this client gets it (`adapt_entry`: the one place chunks are adapted);
    None: not for this client."""
    data = adapt_entry(entry, major)
    if data is None:
        return None
    return entry if data is entry.data else LogEntry(entry.sequence, entry.kind, data)


def _waiting(follower: Follower, first: LogEntry, major: int, guard: SlowReaderGuard | None) -> Iterator[LogEntry]:
    """`first`, then the chunks already waiting after it, each taken from the log only when it is
    asked for, up to `MAX_BATCH_BYTES` (see the module docstring), adapted to the client. Stops
    at the first chunk not there yet, at a cut, and at an overrun (left for `deliver`'s next take
    to raise)."""
    entry: LogEntry | None = first
    size = 0
    while entry is not None:
        size += len(entry.data)
        adapted = _adapted(entry, major)
        if adapted is not None:
            yield adapted
        if size >= MAX_BATCH_BYTES or (guard is not None and guard.error is not None):
            return
        try:
            entry = follower.take()
        except FollowerOverrun:
            return


async def deliver(
    follower: Follower, transport: Transport, *, keepalive_s: float | None = 15.0,
    guard: SlowReaderGuard | None = None,
) -> None:
    """Sends the follower's chunks, adapted to the client's `ai` version, until its log is closed
    and read, with keep-alives when idle; chunks already waiting go out together
    (`Transport.send`). The one send path: every transport gets its chunks from here.

    Args:
        follower: where to read (attached by the caller, which also detaches it).
        transport: where to write (opened by the caller).
        keepalive_s: idle time before a keep-alive; None: none.
        guard: the connection's slow-reader guard.

    Raises:
        SlowReader: the guard cut the connection (after the transport closed with it).
        FollowerOverrun: without a guard, the follower fell behind past its budget.
    """
    stream_log = follower.log
    loop = asyncio.get_running_loop()
    major = transport.major
    # A replay of a long log, or a reader catching up, writes batch after batch to a socket that
    # may never make it wait: the loop gets a turn every few batches (`adk_gateway.core.pacing`).
    pacer = Pacer(every=REPLAY_BATCHES_PER_TURN)
    if guard is not None:
        guard.watch(follower)
    try:
        last_sent = loop.time()
        while guard is None or guard.error is None:
            try:
                entry = follower.take()
            except FollowerOverrun:
                if guard is not None:
                    guard.cut("overrun")
                if guard is None or guard.error is None:  # no guard, or its connection has ended
                    raise
                break
            if entry is not None:
                batch = _waiting(follower, entry, major, guard)
                if stream_log.closed:
                    # The run is over, so what is left is all in the log: when this batch takes
                    # the rest, the response ends with the same write.
                    entries = list(batch)
                    if follower.caught_up and (guard is None or guard.error is None):
                        await transport.close(entries)
                        stream_log.delivered = True
                        return
                    batch = iter(entries)
                await transport.send(batch)
                last_sent = loop.time()
                await pacer.step()
            elif stream_log.closed:
                await transport.close()
                stream_log.delivered = True
                return
            elif keepalive_s is None:
                await transport.flush()
                await stream_log.changed()
            elif (idle_s := last_sent + keepalive_s - loop.time()) > 0:
                await transport.flush()
                await stream_log.changed(idle_s)
            else:
                await transport.keepalive()
                last_sent = loop.time()
    finally:
        if guard is not None:
            guard.unwatch(follower)
    assert guard is not None and guard.error is not None
    await transport.close(cut=guard.error)
    raise guard.error
