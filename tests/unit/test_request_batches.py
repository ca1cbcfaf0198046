"""Unit tests for how adk_gateway.core.requests validates posted histories: the last message in full, the
others only when used, long ones a batch at a time."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_gateway.core.jsonparse import JsonRejected, depth_exceeds
from adk_gateway.core.requests import (
    MESSAGE_BATCH,
    ChatRequest,
    SendFrame,
    ValidationError,
    history_digest,
    history_digests,
    validate_chat_request,
    validate_frame,
    validated_history,
)


def messages(count: int) -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
             "parts": [{"type": "text", "text": f"text {i}"}]} for i in range(count)]


async def test_a_long_history_validates_to_the_same_request() -> None:
    body = {"id": "c", "messages": messages(MESSAGE_BATCH * 3 + 7), "trigger": "regenerate-message", "extra": 1}
    assert await validate_chat_request(body) == ChatRequest.model_validate(body)


async def test_an_error_deep_in_a_long_history_keeps_its_location() -> None:
    history = messages(MESSAGE_BATCH * 3)
    history[MESSAGE_BATCH * 2 + 5]["role"] = "tool"
    with pytest.raises(ValidationError) as failed:
        await validate_chat_request({"id": "c", "messages": history})
    assert failed.value.errors()[0]["loc"] == ("messages", MESSAGE_BATCH * 2 + 5, "role")


async def test_a_send_frame_with_a_long_history() -> None:
    frame = {"type": "send", "requestId": "r", "id": "c", "messages": messages(MESSAGE_BATCH + 1)}
    parsed = await validate_frame(frame)
    assert isinstance(parsed, SendFrame) and len(parsed.messages) == MESSAGE_BATCH + 1
    request = parsed.chat_request()
    assert request.messages == parsed.messages and request.id == "c"
    assert request.last is parsed.last  # validated once, for the frame


# --- only what is used is validated ------------------------------------------------------------

BAD_TOOL_PART = {"type": "tool-x", "toolCallId": "t1", "state": "exploded"}


async def test_earlier_messages_are_checked_only_for_id_role_and_parts() -> None:
    history = messages(4)
    history[1]["parts"] = [BAD_TOOL_PART]
    request = await validate_chat_request({"id": "c", "messages": history})
    assert request.earlier == history[:3] and request.last.id == "m3"
    with pytest.raises(ValidationError) as failed:
        await validated_history(request.earlier, max_depth=64)
    assert failed.value.errors()[0]["loc"][:3] == ("messages", 1, "parts")


async def test_the_last_message_is_validated_in_full_with_its_location() -> None:
    history = messages(4)
    history[3]["parts"] = [BAD_TOOL_PART]
    with pytest.raises(ValidationError) as failed:
        await validate_chat_request({"id": "c", "messages": history})
    assert failed.value.errors()[0]["loc"][:3] == ("messages", 3, "parts")
    frame = {"type": "send", "requestId": "r", "id": "c", "messages": history}
    with pytest.raises(ValidationError):
        await validate_frame(frame)


@pytest.mark.parametrize("head", [{"role": "user", "parts": []}, {"id": "x", "role": "tool", "parts": []},
                                  {"id": "x", "role": "user", "parts": "hi"}, "not an object",
                                  {"id": "x" * 300, "role": "user", "parts": []}])
async def test_a_bad_head_is_refused_wherever_it_is(head: Any) -> None:
    history: list[Any] = messages(MESSAGE_BATCH + 3)
    history[MESSAGE_BATCH + 1] = head
    with pytest.raises(ValidationError) as failed:
        await validate_chat_request({"id": "c", "messages": history})
    assert failed.value.errors()[0]["loc"][:2] == ("messages", MESSAGE_BATCH + 1)


async def test_an_earlier_message_nested_too_deep_is_refused_when_used() -> None:
    deep: Any = "bottom"
    for _ in range(40):
        deep = {"d": deep}
    history = messages(3)
    history[0]["metadata"] = deep
    body = {"id": "c", "messages": history}
    assert not depth_exceeds(body, 16)  # not walked when the body is parsed...
    request = await validate_chat_request(body)
    with pytest.raises(JsonRejected):  # ...but before it is used
        await validated_history(request.earlier, max_depth=16)
    assert depth_exceeds({"id": "c", "messages": history[:1]}, 16)  # the last message is walked


def test_history_digest_tells_posted_histories_apart() -> None:
    history = messages(6)
    assert history_digest(history) == history_digest(copy.deepcopy(history))
    edited = copy.deepcopy(history)
    edited[2]["parts"][0]["text"] = "edited"
    assert history_digest(edited) != history_digest(history)
    assert history_digest(history[:5]) != history_digest(history)
    too_deep: Any = "bottom"
    for _ in range(300):
        too_deep = [too_deep]
    assert history_digest([{"id": "m", "role": "user", "parts": too_deep}]) == ""


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(json_values, max_size=8), st.integers(min_value=0, max_value=10))
def test_history_digests_are_the_digests_of_the_prefix_and_of_the_whole(posted: list[Any], count: int) -> None:
    assert history_digests(posted, count) == (history_digest(posted[:count]), history_digest(posted))


def test_history_digests_of_an_unserialisable_history() -> None:
    too_deep: Any = "bottom"
    for _ in range(300):
        too_deep = [too_deep]
    posted = [*messages(2), {"id": "m", "role": "user", "parts": too_deep}]
    assert history_digests(posted, 2) == (history_digest(posted[:2]), "")
    assert history_digests(posted, 2)[0] != ""
    assert history_digests(posted, 3) == ("", "")


async def test_an_earlier_message_is_walked_whole_even_with_a_messages_field() -> None:
    deep: Any = "bottom"
    for _ in range(40):
        deep = {"d": deep}
    history = messages(3)
    history[0]["messages"] = [deep, {"shallow": 1}]  # an extra field the body-level rule must not apply to
    request = await validate_chat_request({"id": "c", "messages": history})
    with pytest.raises(JsonRejected):
        await validated_history(request.earlier, max_depth=16)
