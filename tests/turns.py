"""Counting, not timing, that work gives the event loop a turn (see `adk_gateway.core.pacing`).

    with Turns(lambda: work_done) as turns:
        await the_work()
    assert turns.widest <= 2 * EVERY  # items done while another task waited for the loop

`Turns` runs a task beside the work that wakes each time the loop gives it a turn; `widest` is the
most progress the work made between two of those turns (and before the first, and after the
last). `CountedMessages` is a list that counts how far it was read, for work that walks one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

__all__ = ["CountedMessages", "Turns"]


class Turns:
    """Records, each time the event loop gives this task a turn, how far `progress()` moved since
    its previous turn: `widest` is the most work done while the task waited for the loop."""

    def __init__(self, progress: Callable[[], int]) -> None:
        self.progress = progress
        self.widest = 0
        self.turns = 0
        self._last = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self._record()
            self.turns += 1

    def _record(self) -> None:
        now = self.progress()
        self.widest = max(self.widest, now - self._last)
        self._last = now

    def __enter__(self) -> Turns:
        # Where the work stands now, not at this task's first turn (which a work that never
        # yields would delay to its end).
        self._last = self.progress()
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self._record()  # the work done since the last turn counts too


class CountedMessages(Sequence[Any]):
    """A list of messages that counts how far it was read (by index or by iteration)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.taken = 0

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int):
            self.taken = max(self.taken, index + 1)
        return self.items[index]

    def __iter__(self) -> Iterator[Any]:
        for item in self.items:
            self.taken += 1
            yield item

    def __len__(self) -> int:
        return len(self.items)
