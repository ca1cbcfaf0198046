"""StreamLog: its byte cap bounds memory, and followers see every chunk in order (or are told
they fell behind).

The property test drives a log with random appends, followers that attach anywhere, read at
their own pace and leave, and checks after every step: the log keeps at most its cap plus one
chunk (the largest follower budget plus one chunk when a follower has a larger budget), what
it keeps is exactly the newest chunks, and every follower that was not overrun has seen each
chunk from its start on, in order, byte for byte.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from adk_gateway.core import encoding
from adk_gateway.services.streams import Follower, FollowerOverrun, LogEntry, StreamLog


def delta(size: int) -> dict[str, Any]:
    return {"type": "text-delta", "id": "t", "delta": "x" * size}


@dataclass
class Reader:
    follower: Follower
    start: int
    seen: list[int] = field(default_factory=list)
    overrun: bool = False


class StreamLogMachine(RuleBasedStateMachine):
    readers = Bundle("readers")

    @initialize(cap=st.integers(min_value=200, max_value=4000))
    def start(self, cap: int) -> None:
        self.cap = cap
        self.log = StreamLog(key=("u", "c"), max_bytes=cap)
        self.appended: list[bytes] = []
        self.last_size = 0
        self.largest_budget = cap  # of any follower so far
        self.live: list[Reader] = []
        # A reader that keeps up (reads after every append): it must never be overrun.
        self.prompt = Reader(self.log.attach(0), 0)

    def _read(self, reader: Reader, count: int) -> None:
        for _ in range(count):
            try:
                entry = reader.follower.take()
            except FollowerOverrun:
                reader.overrun = True
                return
            if entry is None:
                return
            expected = reader.start + len(reader.seen)
            assert entry.sequence == expected, (entry.sequence, expected)
            assert entry.data == self.appended[entry.sequence]
            reader.seen.append(entry.sequence)

    @rule(size=st.integers(min_value=1, max_value=1500))
    def append(self, size: int) -> None:
        wire = delta(size)
        sequence = self.log.append(wire)
        assert sequence == len(self.appended)
        self.appended.append(encoding.chunk_json(wire))
        self.last_size = len(self.appended[-1])
        self._read(self.prompt, 1_000_000)
        assert not self.prompt.overrun, "a reader that keeps up was overrun"

    @rule(target=readers, offset=st.integers(min_value=-3, max_value=3),
          budget=st.one_of(st.just(0), st.integers(min_value=0, max_value=8000)))
    def attach(self, offset: int, budget: int) -> Reader:
        start = max(0, self.log.end + offset)
        reader = Reader(self.log.attach(start, budget=budget), start)
        reader.overrun = reader.follower.overrun
        self.largest_budget = max(self.largest_budget, reader.follower.budget)
        if not self.log.overflowed:
            assert not reader.overrun
        self.live.append(reader)
        return reader

    @rule(reader=readers, count=st.integers(min_value=1, max_value=20))
    def read(self, reader: Reader, count: int) -> None:
        if reader in self.live:
            self._read(reader, count)

    @rule(reader=readers)
    def detach(self, reader: Reader) -> None:
        reader.follower.detach()
        if reader in self.live:
            self.live.remove(reader)

    @precondition(lambda self: self.live)
    @rule()
    def everyone_reads_up(self) -> None:
        for reader in self.live:
            self._read(reader, 1_000_000)

    @invariant()
    def memory_is_bounded(self) -> None:
        log = self.log
        budgets = [r.follower.budget for r in [self.prompt, *self.live] if not r.follower.overrun]
        bound = max(self.cap, max(budgets, default=self.cap) + self.last_size)
        assert log.kept_bytes <= bound, (log.kept_bytes, bound)
        assert log.peak_bytes <= self.largest_budget + max((len(d) for d in self.appended), default=0)
        # What it keeps is exactly the newest chunks, and it knows their size.
        assert log.end == len(self.appended)
        assert log.kept_bytes == sum(len(d) for d in self.appended[log.first:])
        assert [entry["delta"] for entry in log.chunks] == [
            delta_of(d) for d in self.appended[log.first:]
        ]

    @invariant()
    def resumable_until_overflowed(self) -> None:
        if not self.log.overflowed:
            assert self.log.first == 0
            assert self.log.kept_bytes <= self.cap

    @invariant()
    def followers_are_in_order(self) -> None:
        for reader in [self.prompt, *self.live]:
            assert reader.seen == list(range(reader.start, reader.start + len(reader.seen)))
            if not reader.follower.overrun:
                assert reader.follower.position >= self.log.first


def delta_of(data: bytes) -> str:
    return str(json.loads(data)["delta"])


StreamLogMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestStreamLog = StreamLogMachine.TestCase


# --- plain examples -----------------------------------------------------------------------------


def test_a_log_under_its_cap_keeps_everything_for_resume() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=10_000)
    for size in (10, 20, 30):
        log.append(delta(size))
    assert not log.overflowed and log.first == 0
    assert [c["delta"] for c in log.chunks] == ["x" * 10, "x" * 20, "x" * 30]


def test_past_the_cap_only_unread_chunks_are_kept_and_a_late_reader_is_overrun() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=300)
    reader = log.attach(0)
    for _ in range(10):
        log.append(delta(50))
        while reader.take() is not None:
            pass
    assert log.overflowed and not reader.overrun
    log.append(delta(50))
    assert log.kept_bytes == len(encoding.chunk_json(delta(50)))  # only the one it has not read
    late = log.attach(0)
    assert late.overrun
    with pytest.raises(FollowerOverrun):
        late.take()
    reader.detach()
    assert log.kept_bytes == 0  # nobody left to read it


def test_a_follower_too_far_behind_is_overrun_and_no_longer_holds_memory() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=500)
    slow = log.attach(0)
    fast = log.attach(0)
    for _ in range(40):
        log.append(delta(40))
        while fast.take() is not None:
            pass
    assert slow.overrun and not fast.overrun
    assert log.kept_bytes == 0  # all read by the one follower left
    assert slow.backlog > slow.budget  # what it had not read when it was dropped
    with pytest.raises(FollowerOverrun):
        slow.take()


def test_a_larger_budget_keeps_more_for_that_follower() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=200)
    patient = log.attach(0, budget=5_000)
    for _ in range(40):
        log.append(delta(40))
    assert not patient.overrun
    assert 200 < log.kept_bytes <= 5_000 + len(encoding.chunk_json(delta(40)))


def test_on_change_hears_appends_and_overruns() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=200)
    follower = log.attach(0)
    heard: list[bool] = []
    follower.on_change = lambda: heard.append(follower.overrun)
    for _ in range(5):
        log.append(delta(60))
    assert heard[0] is False and heard[-1] is True


async def test_follow_replays_the_prefix_after_the_first_chunk() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=10_000)
    log.replay_prefix = [{"type": "tool-input-available", "toolCallId": "c1", "toolName": "t", "input": {}}]
    log.append({"type": "start"})
    log.append(delta(3))

    async def collect(**options: Any) -> list[tuple[int, str]]:
        return [(sequence, chunk["type"]) async for sequence, chunk in log.follow(**options)]

    replay = asyncio.ensure_future(collect(replay=True))
    plain = asyncio.ensure_future(collect(start=1))
    await asyncio.sleep(0)
    log.append({"type": "finish"})
    log.close()
    assert await replay == [(0, "start"), (-1, "tool-input-available"), (1, "text-delta"), (2, "finish")]
    assert await plain == [(1, "text-delta"), (2, "finish")]
    assert log.followers == 0


# --- the one serialisation ----------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=10,
)


@given(kind=_text, fields=st.dictionaries(_text, _json, max_size=4), request_id=_text,
       sequence=st.integers(min_value=0, max_value=10**6))
def test_logged_bytes_are_what_the_encoders_would_write(
    kind: str, fields: dict[str, Any], request_id: str, sequence: int
) -> None:
    wire = {"type": kind, **fields}
    data = encoding.chunk_json(wire)
    assert json.loads(data) == wire
    assert encoding.sse_data(data) == encoding.sse_event(wire) == b"data: " + data + b"\n\n"
    frame = encoding.ws_chunk_encoded(encoding.ws_chunk_head(request_id), sequence, data)
    assert frame == encoding.ws_chunk(request_id, sequence, wire).encode("utf-8")
    assert json.loads(frame) == {"type": "chunk", "requestId": request_id, "sequence": sequence, "chunk": wire}
    assert LogEntry(0, kind, data).wire() == wire


def test_text_that_utf8_cannot_hold_is_escaped_not_fatal() -> None:
    data = encoding.chunk_json(delta(0) | {"delta": "a\ud800b"})
    assert json.loads(data)["delta"] == "a\ud800b"
