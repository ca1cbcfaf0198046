"""Giving the event loop a turn while walking a long run of work that never waits.

A model that does not wait between tokens (the scripted model at `/stream N 0`, a cache, a fast
local model) never suspends: ADK runs the agent in a task of its own that hands each event to the
run's reader through a queue, so that task holds the loop from the first token to the last, and
the reader sees nothing until the model is done. A long list walked on the loop (a history
imported, a stream replayed) does not suspend either. Without a turn given back, one chat holds
the whole process — no other chat, health check or socket is served — for as long as it runs.

A `Pacer` is stepped once per item of such work and yields to the loop after every `every` items
or `slice_s` seconds, whichever comes first: the count makes the yield certain (and testable), the
clock bounds the stall when items are slow. A step costs a counter and a clock read; a yield, a
few microseconds. `PacingPlugin` steps one for every response of every model call, inside ADK's
task (its `after_model_callback`), and the chat service steps one for every event it reads.

The same callback applies backpressure: a chat run registers its readers' gate (`ReaderGate`, the
run's stream log) for its (user, chat), and while a reader is behind the model waits, inside
ADK's task, so nothing piles up in ADK's queue either.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final, Protocol

from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin

__all__ = ["EVERY", "PACING_PLUGIN_NAME", "SLICE_S", "Pacer", "PacingPlugin", "ReaderGate"]

PACING_PLUGIN_NAME: Final = "gateway_pacing"
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


class ReaderGate(Protocol):
    """What a run's readers say about its pace (a chat's stream log)."""

    def behind(self) -> bool: ...

    async def readers_caught_up(self) -> None: ...


class PacingPlugin(BasePlugin):
    """Gives the loop a turn every few model responses, inside ADK's own task, and holds a model
    whose run has a reader behind (see the module docstring). One pacer for every run of the app:
    what matters is that the loop is given a turn, not whose turn it was."""

    def __init__(self) -> None:
        super().__init__(name=PACING_PLUGIN_NAME)
        self.pacer = Pacer()
        self.gates: dict[tuple[str, str], ReaderGate] = {}  # by (user id, chat id): one run per chat

    async def after_model_callback(self, *, callback_context: Any, llm_response: LlmResponse) -> LlmResponse | None:
        await self.pacer.step()
        if self.gates:
            try:
                gate = self.gates.get((callback_context.user_id, callback_context.session.id))
            except (AttributeError, ValueError):
                gate = None
            if gate is not None and gate.behind():
                await gate.readers_caught_up()
        return None
