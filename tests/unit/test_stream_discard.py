"""`StreamLog.discard_unread`: a live barge-in drops the audio a client has not received yet.

What a follower has taken stays as it was; what it has not taken is skipped, no longer counts as
pending, and a later reader (a resume) never sees it. The byte accounting stays exact: backlogs,
kept bytes and the cap behave as if the dropped chunks had been read.
"""

from __future__ import annotations

from typing import Any

from adk_gateway.core import encoding
from adk_gateway.services.streams import Follower, StreamLog


def pcm(n: int) -> dict[str, Any]:
    return {"type": "data-pcm", "data": {"content": "A" * 40, "n": n}, "transient": True}


def text(n: int) -> dict[str, Any]:
    return {"type": "text-delta", "id": "t", "delta": f"w{n} "}


def size(wire: dict[str, Any]) -> int:
    return len(encoding.chunk_json(wire))


def read_all(follower: Follower) -> list[dict[str, Any]]:
    out = []
    while (entry := follower.take()) is not None:
        out.append(entry.wire())
    return out


def test_what_a_follower_has_not_taken_is_skipped() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    ahead, behind = log.attach(0), log.attach(0)
    chunks = [text(0), pcm(1), text(2), pcm(3), pcm(4), text(5)]
    for wire in chunks:
        log.append(wire)
    assert read_all(ahead) == chunks
    assert [behind.take().wire() for _ in range(2)] == chunks[:2]  # type: ignore[union-attr]
    pending = behind.backlog

    assert log.discard_unread("data-pcm") == 2  # pcm 3 and 4: not taken by `behind`
    assert behind.backlog == pending - size(pcm(3)) - size(pcm(4))
    assert ahead.backlog == 0
    assert read_all(behind) == [text(2), text(5)]
    assert behind.backlog == 0
    assert log.chunks == [text(0), pcm(1), text(2), text(5)]
    assert log.kept_bytes == sum(size(w) for w in log.chunks)
    assert log.discard_unread("data-pcm") == 0  # both have read everything now


def test_a_later_reader_never_sees_them() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=1 << 20)
    for n in range(4):
        log.append(pcm(n) if n % 2 else text(n))
    assert log.discard_unread("data-pcm") == 2  # no followers: nothing was taken
    resumed = log.attach(0)
    assert resumed.backlog == size(text(0)) + size(text(2))
    assert read_all(resumed) == [text(0), text(2)]
    late = log.attach(2)
    assert late.backlog == size(text(2)) and read_all(late) == [text(2)]


def test_dropped_chunks_leave_the_cap_exact() -> None:
    # Past the cap the log sheds what every follower has read; dropped chunks at its head go too.
    log = StreamLog(key=("u", "c"), max_bytes=300)
    reader = log.attach(0)
    for n in range(3):
        log.append(pcm(n))
    log.discard_unread("data-pcm")
    assert log.kept_bytes == 0
    for n in range(3, 12):
        log.append(text(n))
        assert read_all(reader) == [text(n)]
    assert log.overflowed
    assert log.kept_bytes == sum(size(w) for w in log.chunks) <= 300
    assert reader.backlog == 0 and not reader.overrun


def test_an_overrun_follower_does_not_hold_anything_back() -> None:
    log = StreamLog(key=("u", "c"), max_bytes=100)
    slow = log.attach(0)
    quick = log.attach(0)
    for n in range(6):
        log.append(pcm(n))
        read_all(quick)
    assert slow.overrun
    log.append(pcm(6))
    assert log.discard_unread("data-pcm") == 1  # only what `quick` has not taken
    assert read_all(quick) == []
