"""The per-connection registry: who is connected, which runs they own, and one run per chat.

How it works
------------
- A connection (one SSE request, one WebSocket) enters with `async with registry.connection(...)`.
  It owns the runs it starts and any extra tasks (live sessions). When the block exits — normally,
  by error, or because aiohttp cancelled the handler on a disconnect — every run it owns is stopped
  (unless runs detach on disconnect), every task is cancelled *and awaited*, and the entry is gone.
- A run is one agent invocation for one chat (`ChatRun`): a task that writes chunks to the chat's
  stream log. At most one run per chat is active. A new request for a busy chat waits while the
  old run is stopping, and waits a short grace for a run whose client may just have left, before
  it is refused with `ChatBusy`.
- Stopping a run cancels its task and waits for it: nothing of it (no tool) runs afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from gateway.errors import ChatBusy
from gateway.streams import ChatKey, StreamLog

__all__ = ["ChatRun", "Connection", "Registry"]

log = structlog.get_logger("gateway.registry")


@dataclass(eq=False)
class ChatRun:
    key: ChatKey
    log: StreamLog
    owner: Connection | None
    detached: bool = False
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def active(self) -> bool:
        return not self.done.is_set()

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


@dataclass(eq=False)
class Connection:
    id: str
    kind: str
    registry: Registry
    runs: set[ChatRun] = field(default_factory=set)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Starts a task owned by this connection; it is cancelled and awaited on release."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.id}:{name}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task


class Registry:
    def __init__(self, *, detach_on_disconnect: bool = False, busy_grace_s: float = 0.3) -> None:
        self.detach_on_disconnect = detach_on_disconnect
        self.busy_grace_s = busy_grace_s
        self.connections: dict[str, Connection] = {}
        self.runs: dict[ChatKey, ChatRun] = {}
        self._ids = itertools.count(1)

    # --- connections -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connection(self, kind: str) -> AsyncIterator[Connection]:
        conn = Connection(id=f"{kind}-{next(self._ids)}", kind=kind, registry=self)
        self.connections[conn.id] = conn
        try:
            with structlog.contextvars.bound_contextvars(connection_id=conn.id):
                yield conn
        finally:
            await self._release(conn)

    async def _release(self, conn: Connection) -> None:
        try:
            runs = [run for run in conn.runs if run.active and not run.detached]
            # Cancel everything before the first await: the release itself may be cancelled (a
            # socket's handler is cancelled when the peer drops the TCP connection right after
            # the close handshake), and a stop still queued in the gather would then never run.
            for run in runs:
                run.cancel()
            for task in list(conn.tasks):
                task.cancel()
            pending = asyncio.gather(*(run.stop() for run in runs), *list(conn.tasks), return_exceptions=True)
            try:
                results = await asyncio.shield(pending)
            except asyncio.CancelledError:
                # Still wait for the runs and tasks to end, then let the cancellation go on.
                await asyncio.wait({pending})
                raise
            for result in results:
                if isinstance(result, Exception):
                    log.warning("connection_task_failed", error=repr(result))
        finally:
            for run in conn.runs:
                run.owner = None
            conn.runs.clear()
            self.connections.pop(conn.id, None)

    # --- runs ------------------------------------------------------------------------------

    async def claim(self, key: ChatKey, owner: Connection, stream_log: StreamLog) -> ChatRun:
        """Reserves the chat for a new run, or raises `ChatBusy`."""
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
        run = ChatRun(key=key, log=stream_log, owner=owner, detached=self.detach_on_disconnect)
        self.runs[key] = run
        owner.runs.add(run)
        return run

    def start(self, run: ChatRun, body: Coroutine[Any, Any, None]) -> None:
        async def runner() -> None:
            try:
                await body
            finally:
                run.done.set()
                if self.runs.get(run.key) is run:
                    del self.runs[run.key]
                if run.owner is not None:
                    run.owner.runs.discard(run)

        run.task = asyncio.get_running_loop().create_task(runner(), name=f"run:{run.key[1]}")

    def release_unstarted(self, run: ChatRun) -> None:
        """Gives back a claim whose run never started (its preparation failed)."""
        run.done.set()
        if self.runs.get(run.key) is run:
            del self.runs[run.key]
        if run.owner is not None:
            run.owner.runs.discard(run)

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
        """Stops every run (used at shutdown)."""
        await asyncio.gather(*(run.stop() for run in list(self.runs.values())), return_exceptions=True)

    def counts(self) -> dict[str, int]:
        return {
            "connections": len(self.connections),
            "runs": sum(1 for run in self.runs.values() if run.active),
        }
