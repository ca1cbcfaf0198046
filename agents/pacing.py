"""The pace of an ADK run: a turn for the event loop inside ADK's task, and backpressure.

ADK runs the agent in a task of its own that hands each event to the run's reader through a
queue; a model that does not wait between tokens (the scripted model at `/stream N 0`, a cache, a
fast local model) holds the loop in that task from the first token to the last, and the reader
sees nothing until the model is done. `PacingPlugin` steps a `Pacer` (`adk_gateway.core.pacing`) for
every response of every model call, inside that task (its `after_model_callback`), and the chat
service steps one for every event it reads.

The same callback applies backpressure: a chat run registers its readers' gate (`ReaderGate`, the
run's stream log) for its (user, chat), and while a reader is behind the model waits, inside
ADK's task, so nothing piles up in ADK's queue either.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin

from adk_gateway.core.pacing import Pacer

__all__ = ["PACING_PLUGIN_NAME", "PacingPlugin", "ReaderGate"]

PACING_PLUGIN_NAME: Final = "gateway_pacing"


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
