"""The benchmark's lock step (tests/bench/compare.py, `lockstep`): turn k of every server before
turn k + 1 of any, the order moving on every turn, chats renewed as `drive` renews them, and the
turn-by-turn differences taken between turns of the same number. Fake clients, no servers."""

from __future__ import annotations

import pytest

from adk_gateway.loadtest import Sample
from tests.bench.compare import Comparison, Load, Sizes, lockstep, paired


class FakeClient:
    """Records each turn in a shared journal; fails the turns listed in `failing`."""

    def __init__(self, name: str, journal: list[tuple[str, int, bool]], seconds: float,
                 failing: frozenset[int] = frozenset()) -> None:
        self.name = name
        self.journal = journal
        self.seconds = seconds
        self.failing = failing
        self.closed = 0

    async def turn(self, sample: Sample, new_chat: bool) -> None:
        self.journal.append((self.name, sample.index, new_chat))
        if sample.index in self.failing:
            raise ConnectionResetError("dropped")
        sample.ok, sample.total, sample.ttft = True, self.seconds, self.seconds / 2

    async def close(self) -> None:
        self.closed += 1


async def test_every_server_runs_turn_k_before_any_runs_turn_k_plus_one() -> None:
    journal: list[tuple[str, int, bool]] = []
    names = ("runner", "sse", "ws")
    clients = {name: FakeClient(name, journal, 0.001) for name in names}
    loads = {name: Load(name, "reused", 1) for name in names}
    await lockstep(clients, loads, turns=6, chat_turns=3, cpu={})

    assert [k for _, k, _ in journal] == [k for k in range(6) for _ in names]
    # The first of each turn moves on by one place every turn.
    assert [journal[3 * k][0] for k in range(6)] == ["runner", "sse", "ws", "runner", "sse", "ws"]
    for name in names:
        assert [new for n, _, new in journal if n == name] == [True, False, False, True, False, False]
        assert [s.index for s in loads[name].samples] == list(range(6))
        assert loads[name].chats == 2
        assert loads[name].elapsed_s > 0
        assert clients[name].closed == 1  # every client is closed at the end


async def test_a_failed_turn_starts_a_new_chat_for_that_server_only() -> None:
    journal: list[tuple[str, int, bool]] = []
    clients = {"runner": FakeClient("runner", journal, 0.001),
               "sse": FakeClient("sse", journal, 0.002, failing=frozenset({2}))}
    loads = {name: Load(name, "reused", 1) for name in clients}
    await lockstep(clients, loads, turns=5, chat_turns=100, cpu={}, shift=1)

    assert journal[0][0] == "sse"  # `shift` moves the first server of turn 0
    assert [new for n, _, new in journal if n == "sse"] == [True, False, False, True, False]
    assert [new for n, _, new in journal if n == "runner"] == [True, False, False, False, False]
    assert loads["sse"].failed == 1 and loads["sse"].samples[2].error == "ConnectionResetError"
    assert clients["sse"].closed == 2  # after the failure, and at the end


async def test_in_blocks_each_server_runs_its_block_before_the_next_goes_further() -> None:
    journal: list[tuple[str, int, bool]] = []
    names = ("runner", "sse", "ws")
    clients = {name: FakeClient(name, journal, 0.001) for name in names}
    loads = {name: Load(name, "fresh", 1) for name in names}
    await lockstep(clients, loads, turns=5, chat_turns=1, cpu={}, block=2)

    assert [(n, k) for n, k, _ in journal] == [
        ("runner", 0), ("runner", 1), ("sse", 0), ("sse", 1), ("ws", 0), ("ws", 1),
        ("sse", 2), ("sse", 3), ("ws", 2), ("ws", 3), ("runner", 2), ("runner", 3),
        ("ws", 4), ("runner", 4), ("sse", 4),  # the last block is what is left
    ]
    assert all(new for _, _, new in journal)  # fresh chats: a new one every turn
    assert all(loads[name].chats == 5 for name in names)


def test_differences_pair_turns_of_the_same_number() -> None:
    assert paired([0.005, None, 0.009, 0.004], [0.003, 0.002, None, 0.001]) == pytest.approx([0.002, 0.003])


def test_the_added_time_by_tenth_is_taken_turn_by_turn() -> None:
    comparison = Comparison.__new__(Comparison)
    comparison.sizes = Sizes(turns={1: 1}, chat_turns=2, rounds=1, long_turns=20, long_rounds=2)
    # The base grows by 1 ms a turn; the gateway adds 2 ms, then 3 ms from turn 11 on, except one
    # turn that met a pause. Per round, turn by turn.
    base = [[(1 + k) / 1000 for k in range(20)] for _ in range(2)]
    gateway = [[(1 + k + (2 if k < 10 else 3)) / 1000 for k in range(20)] for _ in range(2)]
    gateway[1][19] = 0.5
    comparison.long = {"runner-memory": base, "sse": gateway}

    tenths = comparison.added_by_tenth("sse", "runner-memory")
    assert [t["first_turn"] for t in tenths] == list(range(1, 21, 2))
    assert tenths[0]["median_ms"] == pytest.approx(2.0)
    assert tenths[-1]["median_ms"] == pytest.approx(3.0)  # the pause moves the mean, not the median
    assert tenths[-1]["mean_ms"] == pytest.approx((3.0 + 3.0 + 3.0 + 480.0) / 4)
    assert comparison.added_growth("sse", "runner-memory") == pytest.approx(1.0)
    assert "gateway SSE over Runner (our store) **+1.0**" in comparison.markdown_long()


def test_the_trend_follows_a_steady_growth_and_ignores_single_slow_turns() -> None:
    comparison = Comparison.__new__(Comparison)
    comparison.sizes = Sizes(turns={1: 1}, chat_turns=2, rounds=1, long_turns=200, long_rounds=2)
    base = [[0.004 + k / 20_000 for k in range(200)] for _ in range(2)]
    # The gateway adds 1 ms at the first turn and 2.99 ms at the last: 0.01 ms more every turn.
    gateway = [[b + 0.001 + k / 100_000 for k, b in enumerate(turns)] for turns in base]
    for k in range(180, 200, 3):
        gateway[0][k] += 0.2  # collections in one round, late in the chat
    gateway[1][195] = None
    comparison.long = {"runner-memory": base, "sse": gateway}
    assert comparison.added_trend("sse", "runner-memory") == pytest.approx(1.99, abs=0.01)
