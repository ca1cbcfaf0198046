"""Unit tests for adk_gateway.core.jsonparse: depth-bounded JSON that never recurses, in or off the loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.core.jsonparse import SMALL_BYTES, JsonRejected, depth_exceeds, depth_exceeds_async, loads, loads_async


def nested(depth: int, kind: str = "list") -> Any:
    """A value `depth` containers deep, built without recursion."""
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def depth_of(value: Any) -> int:
    """A reference depth (recursive: only for the small values hypothesis draws)."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@pytest.mark.parametrize("raw", [b"[" * 5_000 + b"]" * 5_000, b'{"a":' * 5_000 + b"1" + b"}" * 5_000])
def test_five_thousand_levels_are_refused_as_too_deep(raw: bytes) -> None:
    with pytest.raises(JsonRejected) as refused:
        loads(raw, max_depth=64)
    assert refused.value.reason == "depth"
    assert "64" in refused.value.message


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_the_bound_is_inclusive(kind: str) -> None:
    assert loads(json.dumps(nested(64, kind)), max_depth=64) == nested(64, kind)
    with pytest.raises(JsonRejected) as refused:
        loads(json.dumps(nested(65, kind)), max_depth=64)
    assert refused.value.reason == "depth"


def test_scalars_and_empty_containers() -> None:
    assert loads(b"7", max_depth=1) == 7
    assert loads(b"[]", max_depth=1) == []
    with pytest.raises(JsonRejected):
        loads(b"[[]]", max_depth=1)


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"", b'{"id": "\xff\xfe"}', '"\ud800"', b'{"a": NaN}', b'{"a": 1} trailing', b"\xef\xbb\xbf{}"],
    ids=["syntax", "empty", "not-utf8", "lone-surrogate", "nan", "trailing", "bom"],
)
def test_invalid_json_is_a_syntax_refusal(raw: bytes | str) -> None:
    with pytest.raises(JsonRejected) as refused:
        loads(raw, max_depth=64)
    assert refused.value.reason == "syntax"


def test_depth_check_of_a_very_deep_value_does_not_recurse() -> None:
    deep = nested(200_000)
    assert depth_exceeds(deep, 64)
    assert not depth_exceeds(deep, 200_000)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
        max_leaves=30,
    ),
    st.integers(min_value=1, max_value=8),
)
def test_depth_exceeds_agrees_with_the_definition(value: Any, bound: int) -> None:
    assert depth_exceeds(value, bound) == (depth_of(value) > bound)


async def test_a_large_input_is_checked_in_slices_with_the_same_result() -> None:
    big = {"id": "c", "messages": [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "x" * 50}]}
                                   for i in range(2_000)]}
    raw = json.dumps(big).encode()
    assert len(raw) > SMALL_BYTES
    assert await loads_async(raw, max_depth=8) == big
    with pytest.raises(JsonRejected) as refused:
        await loads_async(raw, max_depth=3)
    assert refused.value.reason == "depth"
    with pytest.raises(JsonRejected) as refused:
        await loads_async(raw[:-1], max_depth=8)
    assert refused.value.reason == "syntax"


async def test_the_sliced_depth_check_gives_the_loop_back() -> None:
    wide = [[[i] for i in range(300)] for _ in range(2_000)]  # 600,000 containers, 3 deep
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            await asyncio.sleep(0)
            ran += 1

    task = asyncio.create_task(other())
    assert not await depth_exceeds_async(wide, 3)
    assert await depth_exceeds_async(wide, 2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert ran > 0
