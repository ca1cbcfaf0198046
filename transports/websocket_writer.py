"""One WebSocket's writes: every request's frames through one writer, one write at a time, bounded.

How it works
------------
Many requests share one socket (`adk_gateway.transports.websocket`), so their frames go out through the
socket's one `SocketWriter`: a lock lets one writer at a time hold the socket, and a request's
chunks that were waiting together go out back to back under one hold (`send_frames`, see
`adk_gateway.transports.base`, "Writes are coalesced"). The frames of a batch are taken only once the socket
is free, so until then they stay in their log, counted in its follower's backlog.

Slow readers: the socket has one `SlowReaderGuard` (adk_gateway.transports.base) over all its requests and
frames; every write is watched by it (`writing()`). A cut stops the socket's runs and closes it
with 4008 "slow"; nothing is cancelled mid-write: if the close frame cannot be flushed within
`CUT_TIMEOUT_S` the guard aborts the socket, so a blocked write never keeps the close from
happening. Once the socket has closed or been cut, writes are dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from adk_gateway.core.errors import GatewayError
from adk_gateway.transports.base import SlowReaderGuard, stop_runs

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.metrics import Metrics
    from adk_gateway.services.registry import Connection

__all__ = ["SocketWriter"]


class SocketWriter:
    """Writes to one socket for all its requests; see the module docstring. Made by the socket's
    first frame, once its connection's task group is open (a cut spawns the close there).

    Args:
        ws: the socket.
        conn: its registry connection (its runs stop at a cut; the close is its task).
        connection: the socket's asyncio transport (its unsent bytes count; a cut aborts it).
        settings: `--max-pending-bytes`, `--slow-reader-grace-s`.
        user_id, metrics: for the guard's log line and count of a cut.
    """

    __slots__ = ("_lock", "_slow_close", "conn", "guard", "ws")

    def __init__(self, ws: web.WebSocketResponse, conn: Connection, connection: asyncio.Transport | None, *,
                 settings: Settings, user_id: str, metrics: Metrics) -> None:
        self.ws = ws
        self.conn = conn
        self.guard = SlowReaderGuard(
            connection,
            max_pending_bytes=settings.max_pending_bytes,
            grace_s=settings.slow_reader_grace_s,
            transport="ws",
            user_id=user_id,
            metrics=metrics,
            on_cut=self._on_slow,
        )
        self._lock = asyncio.Lock()
        self._slow_close: asyncio.Task[Any] | None = None

    @property
    def writable(self) -> bool:
        """Whether writes still go out (the socket has neither closed nor been cut)."""
        return not self.ws.closed and self.guard.error is None

    async def send(self, text: str) -> None:
        async with self._lock:
            if self.writable:
                with self.guard.writing():
                    await self.ws.send_str(text)

    async def send_frames(self, frames: Iterable[bytes]) -> None:
        """Sends text frames given as UTF-8 back to back, under one hold of the socket. `frames`
        is iterated only once the socket is free (see `Transport.send`). aiohttp's `send_frame`
        writes each frame to the transport at once and waits for a drain only past its writer's
        limit (64 KiB), so the frames are not drained one by one."""
        async with self._lock:
            if not self.writable:
                return
            with self.guard.writing():
                for frame in frames:
                    await self.ws.send_frame(frame, WSMsgType.TEXT)
                    if not self.writable:
                        return

    def close(self) -> None:
        """The socket has closed: its guard stops (no more timers, no more cuts)."""
        self.guard.close()

    def _on_slow(self, error: GatewayError) -> None:
        """The guard cut this socket: its runs stop and it closes with 4008. Not cancelled
        mid-write: the guard's timer aborts the socket if the close frame cannot be flushed in time."""
        stop_runs(self.conn)
        if self._slow_close is None:
            self._slow_close = self.conn.spawn(self.ws.close(code=error.close_code, message=b"slow"), "slow-close")
