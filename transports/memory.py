"""An in-memory transport: a first-class test double (like httpx's MockTransport)."""

from __future__ import annotations

from typing import Any

from transports.base import Transport

__all__ = ["MemoryTransport"]


class MemoryTransport(Transport):
    def __init__(self, major: int = 6) -> None:
        self.major = major
        self.opened = False
        self.closed = False
        self.keepalives = 0
        self.chunks: list[dict[str, Any]] = []
        self.sequences: list[int] = []

    async def open(self) -> None:
        self.opened = True

    async def send(self, sequence: int, chunk: dict[str, Any]) -> None:
        self.sequences.append(sequence)
        self.chunks.append(chunk)

    async def keepalive(self) -> None:
        self.keepalives += 1

    async def close(self) -> None:
        self.closed = True

    def types(self) -> list[str]:
        return [str(chunk["type"]) for chunk in self.chunks]
