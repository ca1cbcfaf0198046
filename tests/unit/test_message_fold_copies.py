"""The message a `MessageFold` keeps shares no object with the chunks it was folded from: a chunk's
data and metadata are copied as JSON values (`json_copy`), so whatever later changes a chunk (a
writer's usage it goes on adding to, a part's data replaced) never changes the chat's record."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from adk_gateway.core.transcript import MessageFold, json_copy

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def containers(value: Any) -> list[int]:
    """The ids of every dict and list inside `value`, itself included."""
    found: list[int] = []
    if isinstance(value, dict):
        found.append(id(value))
        for item in value.values():
            found += containers(item)
    elif isinstance(value, list):
        found.append(id(value))
        for item in value:
            found += containers(item)
    return found


@given(json_values)
def test_a_json_copy_equals_a_deep_copy_and_shares_no_container(value: Any) -> None:
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)
    assert not set(containers(copied)) & set(containers(value))


@given(json_values, json_values)
def test_the_folded_message_keeps_what_the_chunks_held_when_they_were_folded(data: Any, usage: Any) -> None:
    data_chunk = {"type": "data-weather", "data": {"value": data}}
    finish = {"type": "finish", "messageMetadata": {"usage": {"figures": usage}}}
    fold = MessageFold(message_id="m1")
    for chunk in ({"type": "start"}, {"type": "start-step"}, data_chunk, {"type": "finish-step"}, finish):
        fold.apply(chunk)
    before = copy.deepcopy(fold.message())
    data_chunk["data"]["value"] = "changed"
    finish["messageMetadata"]["usage"]["figures"] = "changed"
    assert fold.message() == before
    assert before["parts"][1] == {"type": "data-weather", "data": {"value": data}}
    assert before["metadata"] == {"usage": {"figures": usage}}
