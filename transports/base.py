"""The `Transport` interface: how one response's chunks reach a client.

A transport knows bytes and sockets; it knows nothing about agents or approvals. The chat service
writes chunks to a stream log; `deliver()` follows that log and hands each chunk to a transport,
with keep-alives while the log is idle. The first of the two tasks to finish ends the delivery
and cancels the other (one task group per delivery).
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from gateway.chunks import V6_FINISH_REASONS
from gateway.streams import StreamLog

__all__ = ["Transport", "adapt_wire", "deliver"]


def adapt_wire(wire: dict[str, Any], major: int) -> dict[str, Any] | None:
    """Adapts a stored (v7-set) chunk to the client's `ai` major version; None: do not send."""
    if major >= 7:
        return wire
    if wire.get("type") == "tool-approval-response":
        return None
    if wire.get("type") == "finish" and wire.get("finishReason") not in (None, *V6_FINISH_REASONS):
        return {**wire, "finishReason": "stop"}
    return wire


class Transport(abc.ABC):
    """Carries one response to one client."""

    major: int = 6

    @abc.abstractmethod
    async def open(self) -> None:
        """Starts the response (headers, or a `start` frame)."""

    @abc.abstractmethod
    async def send(self, sequence: int, chunk: dict[str, Any]) -> None:
        """Sends one chunk (already adapted to the client's version)."""

    @abc.abstractmethod
    async def keepalive(self) -> None:
        """Tells proxies the idle response is alive."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Ends the response normally."""


async def deliver(
    log: StreamLog, transport: Transport, *, start: int = 0, keepalive_s: float = 15.0, replay: bool = False
) -> None:
    """Sends the log's chunks from `start` on until it is closed, with keep-alives when idle.

    `replay`: a resume, which rebuilds a continued message before its new chunks.
    """
    loop = asyncio.get_running_loop()
    last_sent = loop.time()

    async def pump() -> None:
        nonlocal last_sent
        async for sequence, wire in log.follow(start, replay=replay):
            adapted = adapt_wire(wire, transport.major)
            if adapted is not None:
                await transport.send(sequence, adapted)
            last_sent = loop.time()

    async def beat() -> None:
        nonlocal last_sent
        while True:
            await asyncio.sleep(max(0.0, last_sent + keepalive_s - loop.time()))
            if loop.time() - last_sent >= keepalive_s:
                await transport.keepalive()
                last_sent = loop.time()

    beat_task = loop.create_task(beat())
    try:
        await pump()
    finally:
        beat_task.cancel()
        try:
            await beat_task
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
    await transport.close()
    log.delivered = True
