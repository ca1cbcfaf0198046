"""Unit tests for a request's history kept as the bytes the client sent
(`adk_gateway.core.jsonparse.loads_request`: `msgspec.Raw`, and a `PostedMessage` for the last one) and
the fingerprints taken over them (`adk_gateway.core.requests.history_digest`)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_gateway.core.jsonparse import (
    SMALL_BYTES,
    JsonRejected,
    PostedMessage,
    loads,
    loads_request,
    loads_request_async,
    parse_posted,
)
from adk_gateway.core.requests import (
    ChatRequest,
    ValidationError,
    checked_heads,
    history_digest,
    history_digests,
    validate_chat_request,
    validate_frame,
    validated_history,
)


def message(index: int, text: str = "hi") -> dict[str, Any]:
    return {"id": f"m{index}", "role": "user" if index % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": f"{text} {index}"}]}


def resolved(value: Any) -> Any:
    """`value` with every message kept as posted replaced by its parsed value."""
    if isinstance(value, dict):
        return {k: resolved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v) for v in value]
    if isinstance(value, msgspec.Raw):
        return parse_posted(value)
    return value.value if isinstance(value, PostedMessage) else value


def as_posted(messages: list[Any]) -> bool:
    """The earlier messages are bytes, the last one a `PostedMessage`."""
    return all(type(m) is msgspec.Raw for m in messages[:-1]) and type(messages[-1]) is PostedMessage


def posted_bytes(message: Any) -> bytes:
    return bytes(message.raw if isinstance(message, PostedMessage) else message)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
bodies = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=8), "messages": st.lists(json_values, min_size=1, max_size=6)},
    optional={"trigger": st.sampled_from(["submit-message", "regenerate-message"]), "extra": json_values},
)


@given(bodies, st.booleans())
def test_a_request_reads_as_the_same_value_as_a_whole_parse(body: dict[str, Any], pretty: bool) -> None:
    raw = json.dumps(body, indent=1 if pretty else None).encode()
    parsed = loads_request(raw, max_depth=64)
    assert as_posted(parsed["messages"])
    assert resolved(parsed) == loads(raw, max_depth=64)


def test_each_message_keeps_the_bytes_the_client_sent() -> None:
    raw = b'{"id": "c", "messages": [ {"id":"m0", "role":"user",\n "parts":[]} ,{"id":"m1","role":"user","parts":[]}]}'
    messages = loads_request(raw, max_depth=64)["messages"]
    assert [posted_bytes(m) for m in messages] == [b'{"id":"m0", "role":"user",\n "parts":[]}',
                                                b'{"id":"m1","role":"user","parts":[]}']
    assert loads_request(raw.decode(), max_depth=64)["messages"] == messages  # a WebSocket text frame


@pytest.mark.parametrize("raw", [b'[{"messages": [1]}]', b'"text"', b'{"id": "c"}', b'{"messages": []}',
                                 b'{"messages": "hi"}', b'{"messages": {"a": 1}}'])
def test_other_documents_are_parsed_whole(raw: bytes) -> None:
    assert loads_request(raw, max_depth=64) == loads(raw, max_depth=64)


@pytest.mark.parametrize(
    "raw",
    [b'{"id": "c", "messages": [{"a": 1}, {"b": 2}', b'{"id": "\xff", "messages": [{}]}',
     b'{"id": "c", "messages": [{}, {"t": "\xff"}]}', b'{"id": 1e999, "messages": [{}]}',
     b'{"id": "c", "messages": [{}, {"n": 1e999}]}'],
    ids=["truncated", "bad-utf8-field", "bad-utf8-last", "infinite-field", "infinite-last"],
)
def test_what_is_parsed_is_refused_as_orjson_refuses_it(raw: bytes) -> None:
    with pytest.raises(JsonRejected) as refused:
        loads_request(raw, max_depth=64)
    assert refused.value.reason == "syntax"


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"d": value}
    return value


def test_depth_is_checked_on_the_fields_and_the_last_message_only() -> None:
    earlier_deep = {"id": "c", "messages": [{**message(0), "metadata": deep(30)}, message(1)]}
    assert parse_posted(loads_request(json.dumps(earlier_deep), max_depth=16)["messages"][0])["metadata"] == deep(30)
    for body in ({"id": "c", "messages": [message(0), {**message(1), "metadata": deep(30)}]},
                 {"id": "c", "messages": [message(0)], "extra": deep(30)}):
        with pytest.raises(JsonRejected) as refused:
            loads_request(json.dumps(body), max_depth=16)
        assert refused.value.reason == "depth"
    with pytest.raises(JsonRejected) as refused:  # past msgspec's recursion and orjson's own limit
        loads_request(b'{"messages": [' + b"[" * 5_000 + b"]" * 5_000 + b"]}", max_depth=64)
    assert refused.value.reason == "depth"


async def test_a_large_request_reads_the_same_in_slices() -> None:
    body = {"id": "c", "messages": [message(i, "x" * 50) for i in range(1_000)]}
    raw = json.dumps(body).encode()
    assert len(raw) > SMALL_BYTES
    assert resolved(await loads_request_async(raw, max_depth=8)) == body
    with pytest.raises(JsonRejected) as refused:
        await loads_request_async(json.dumps({**body, "extra": deep(10)}).encode(), max_depth=8)
    assert refused.value.reason == "depth"


def test_an_earlier_message_is_parsed_only_when_used() -> None:
    """msgspec's scan lets through what only orjson would refuse; the bytes are refused once parsed."""
    raw = b'{"id": "c", "messages": [{"id": "m0", "role": "user", "parts": [], "t": "\xff"}, ' \
          + orjson.dumps(message(1)) + b"]}"
    parsed = loads_request(raw, max_depth=64)
    with pytest.raises(JsonRejected):
        parse_posted(parsed["messages"][0])


async def test_a_posted_history_validates_what_is_used() -> None:
    history = [message(0), {"id": "m1", "role": "tool", "parts": []}, message(2), message(3), message(4)]
    raw = json.dumps({"id": "c", "messages": history}).encode()
    request = await validate_chat_request(loads_request(raw, max_depth=64))  # bytes: not checked yet
    assert request.last.id == "m4"
    assert checked_heads(request.earlier, 2) == [message(2), message(3)]
    with pytest.raises(ValidationError) as failed:
        checked_heads(request.earlier, 0)
    assert failed.value.errors()[0]["loc"][:3] == ("messages", 1, "role")
    with pytest.raises(ValidationError) as failed:
        await validated_history(request.earlier, max_depth=64)
    assert failed.value.errors()[0]["loc"][:3] == ("messages", 1, "role")
    assert request == ChatRequest.model_validate(loads_request(raw, max_depth=64))


async def test_a_send_frame_keeps_its_posted_messages() -> None:
    frame = {"type": "send", "requestId": "r", "id": "c", "messages": [message(0), message(1), message(2)]}
    parsed = await validate_frame(loads_request(json.dumps(frame), max_depth=64))
    request = parsed.chat_request()  # type: ignore[union-attr]
    assert as_posted(request.messages) and request.last.id == "m2"


@given(st.lists(json_values, max_size=8), st.integers(min_value=-1, max_value=10))
def test_a_fingerprint_over_posted_bytes_is_that_of_the_same_values(values: list[Any], count: int) -> None:
    """For the compact JSON browsers send, the bytes are what orjson writes: the fingerprints a
    session recorded from values stay valid."""
    posted = loads_request(b'{"messages": [' + b",".join(orjson.dumps(v) for v in values) + b", 0]}",
                           max_depth=64)["messages"][:-1] if values else []
    assert history_digest(posted) == history_digest(values)
    assert history_digests(posted, count) == history_digests(values, count)
    assert history_digests(posted, count) == (history_digest(posted[:max(count, 0)]), history_digest(posted))


def test_a_fingerprint_is_over_the_bytes_as_sent() -> None:
    compact = loads_request(b'{"messages": [{"a":1},{"b":2}]}', max_depth=64)["messages"]
    spaced = loads_request(b'{"messages": [{"a": 1}, {"b":2}]}', max_depth=64)["messages"]
    assert history_digest(compact[1:]) == history_digest(spaced[1:])
    assert history_digest(compact) != history_digest(spaced)  # re-serialised: the session is rebuilt
