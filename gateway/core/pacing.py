"""Giving the event loop a turn while walking a long run of work that never waits.

A model that does not wait between tokens (the scripted model at `/stream N 0`, a cache, a fast
local model) never suspends, nor does a long list walked on the loop (a history validated or
imported, a stream replayed, a large body's depth checked). Without a turn given back, one chat
holds the whole process — no other chat, health check or socket is served — for as long as it
runs.

A `Pacer` is stepped once per item of such work and yields to the loop after every `every` items
or `slice_s` seconds, whichever comes first: the count makes the yield certain (and testable:
another task gets the loop at least once every `every` items), the clock bounds the stall when
items are slow. A step costs a counter and a clock read; a yield, a few microseconds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

__all__ = ["EVERY", "SLICE_S", "Pacer"]

EVERY: Final = 32  # items between two turns given back, at most
SLICE_S: Final = 0.002  # seconds of work between two turns given back, at most (checked each item)


class Pacer:
    """Steps through work that may not wait on its own; see the module docstring."""

    __slots__ = ("_count", "_since", "every", "slice_s", "turns")

    def __init__(self, *, every: int = EVERY, slice_s: float = SLICE_S) -> None:
        self.every = every
        self.slice_s = slice_s
        self.turns = 0  # turns given back so far
        self._count = 0
        self._since = time.perf_counter()

    async def step(self) -> None:
        """One item done: gives the loop a turn when the work has held it long enough."""
        self._count += 1
        if self._count >= self.every or time.perf_counter() - self._since >= self.slice_s:
            await self.turn()

    async def turn(self) -> None:
        """Gives the loop a turn now (and starts counting afresh)."""
        self.turns += 1
        self._count = 0
        await asyncio.sleep(0)
        self._since = time.perf_counter()
