"""Unit tests for adk_gateway.core.encoding (SSE events, WebSocket frames) and
adk_gateway.transports.base.adapt_wire."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.core import chunks as c
from adk_gateway.core import encoding
from adk_gateway.services.streams import LogEntry
from adk_gateway.transports.base import adapt_entry, adapt_wire


def parse_sse(raw: bytes) -> tuple[list[str], list[str]]:
    """A minimal SSE parser (the WHATWG algorithm, `data` and comments only): (data values, comments)."""
    data_values: list[str] = []
    comments: list[str] = []
    buffer: list[str] = []
    text = raw.decode("utf-8")
    for line in re.split(r"\r\n|\r|\n", text):  # SSE line ends; U+2028 is not one
        if line == "":
            if buffer:
                data_values.append("\n".join(buffer))
                buffer = []
            continue
        if line.startswith(":"):
            comments.append(line[1:].lstrip(" "))
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            buffer.append(value)
    assert not buffer, "an event without its terminating blank line"
    return data_values, comments


def test_sse_headers() -> None:
    assert encoding.SSE_HEADERS == {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
        "x-vercel-ai-ui-message-stream": "v1",
    }


def test_sse_event_is_one_data_line_and_a_blank_line() -> None:
    raw = encoding.sse_chunk(c.TextDelta(id="t1", delta="line one\nline two\r\n\u2028é🙂\"quoted\""))
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2 and b"\r" not in raw  # one line: newlines in text are escaped
    body = raw[len(b"data: ") : -2]
    assert json.loads(body) == {"type": "text-delta", "id": "t1", "delta": "line one\nline two\r\n\u2028é🙂\"quoted\""}
    assert "é🙂".encode() in body  # UTF-8 kept as is, not \\u-escaped
    assert b" " not in body.replace(b"line one", b"").replace(b"line two", b"")  # compact separators


def test_sse_event_of_a_wire_dict() -> None:
    assert encoding.sse_event({"type": "finish", "finishReason": "stop"}) == (
        b'data: {"type":"finish","finishReason":"stop"}\n\n'
    )


def test_done_open_and_keepalive() -> None:
    assert encoding.SSE_DONE == b"data: [DONE]\n\n"
    assert parse_sse(encoding.SSE_DONE) == (["[DONE]"], [])
    assert parse_sse(encoding.SSE_OPEN) == ([], ["stream-open"])
    assert parse_sse(encoding.SSE_KEEPALIVE) == ([], ["keep-alive"])


def test_sse_comment_stays_one_line() -> None:
    raw = encoding.sse_comment("first\nsecond\r\nthird")
    assert raw == b": first second third\n\n"
    assert parse_sse(raw) == ([], ["first second third"])


def test_chunk_values_json_cannot_hold_do_not_fail_the_run() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    output = {"when": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC), "point": Point(1),
              "other": Opaque(), "nan": math.nan, "inf": -math.inf, 7: "seven", "text": "a\nb"}
    data = encoding.chunk_json({"type": "tool-output-available", "toolCallId": "c1", "output": output})
    assert b"\n" not in data
    assert json.loads(data)["output"] == {"when": "2026-01-02T03:04:05+00:00", "point": {"x": 1}, "other": "opaque",
                                          "nan": None, "inf": None, "7": "seven", "text": "a\nb"}


@pytest.mark.parametrize("size", [5, 500, 64 * 1024])
def test_a_serialised_chunk_holds_about_its_own_size(size: int) -> None:
    """The bytes a stream log keeps per chunk are the chunk's, not the serialiser's whole buffer."""
    chunk = {"type": "text-delta", "id": "text-1", "delta": "x" * size}
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        kept = [encoding.chunk_json(chunk) for _ in range(200)]
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (after - before) / len(kept) < size + 256


def test_chunk_values_orjson_refuses_go_through_the_standard_library() -> None:
    output = {"big": [2**70], "nan": (math.nan, 1.5), "text": "a\ud800b"}
    data = encoding.chunk_json({"type": "tool-output-available", "toolCallId": "c1", "output": output})
    assert json.loads(data)["output"] == {"big": [2**70], "nan": [None, 1.5], "text": "a\ud800b"}


def test_dumps_refuses_nan() -> None:
    with pytest.raises(ValueError):
        encoding.dumps({"x": float("nan")})


@settings(max_examples=300, deadline=None)
@given(delta=st.text())
def test_any_text_delta_round_trips_through_sse(delta: str) -> None:
    raw = encoding.sse_chunk(c.TextDelta(id="t", delta=delta)) + encoding.SSE_DONE
    values, comments = parse_sse(raw)
    assert comments == []
    assert len(values) == 2 and values[1] == "[DONE]"
    assert json.loads(values[0]) == {"type": "text-delta", "id": "t", "delta": delta}


@settings(max_examples=100, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=10,
    )
)
def test_any_tool_output_round_trips_through_sse(value: Any) -> None:
    wire = c.ToolOutputAvailable(toolCallId="c", output=value).to_wire()
    [data], _ = parse_sse(encoding.sse_event(wire))
    assert json.loads(data) == wire


# --- WebSocket frames ----------------------------------------------------------------------------


def test_ws_frames() -> None:
    assert json.loads(encoding.ws_start("r1")) == {"type": "start", "requestId": "r1"}
    assert json.loads(encoding.ws_chunk("r1", 3, {"type": "text-delta", "id": "t", "delta": "a\nb"})) == {
        "type": "chunk", "requestId": "r1", "sequence": 3, "chunk": {"type": "text-delta", "id": "t", "delta": "a\nb"},
    }
    assert json.loads(encoding.ws_end("r1")) == {"type": "end", "requestId": "r1"}
    assert json.loads(encoding.ws_no_active("r1")) == {"type": "no-active", "requestId": "r1"}
    assert json.loads(encoding.ws_error("r1", "boom")) == {"type": "error", "errorText": "boom", "requestId": "r1"}
    assert json.loads(encoding.ws_error(None, "bad frame", code="bad_request")) == {
        "type": "error", "errorText": "bad frame", "code": "bad_request",
    }
    assert "\n" not in encoding.ws_chunk("r", 0, {"type": "text-delta", "id": "t", "delta": "x\ny"})


# --- adapt_wire (stored v7-set chunks -> the client's version) -----------------------------------


def test_adapt_wire_for_v7_is_identity() -> None:
    for wire in (
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},
        {"type": "finish", "finishReason": "interrupted"},
        {"type": "text-delta", "id": "t", "delta": "x"},
    ):
        assert adapt_wire(wire, 7) is wire


def test_adapt_wire_for_v6() -> None:
    assert adapt_wire({"type": "tool-approval-response", "approvalId": "a", "approved": True}, 6) is None
    assert adapt_wire({"type": "finish", "finishReason": "interrupted", "messageMetadata": {"m": 1}}, 6) == {
        "type": "finish", "finishReason": "stop", "messageMetadata": {"m": 1},
    }
    for reason in c.V6_FINISH_REASONS:
        wire = {"type": "finish", "finishReason": reason}
        assert adapt_wire(wire, 6) == wire
    assert adapt_wire({"type": "finish"}, 6) == {"type": "finish"}
    delta = {"type": "text-delta", "id": "t", "delta": "x"}
    assert adapt_wire(delta, 6) is delta


@pytest.mark.parametrize("major", [6, 7])
def test_a_logged_chunk_is_adapted_by_the_one_adapter(major: int) -> None:
    assert adapt_wire is c.adapt_wire  # transports send through the core's adapter, the only one
    chunks: list[c.Chunk] = [
        c.ToolApprovalResponse(approvalId="a", approved=False, reason="never"),
        c.Finish(finishReason="interrupted"),
        c.Finish(finishReason="tool-calls"),
        c.ToolOutputDenied(toolCallId="x"),
    ]
    for chunk in chunks:
        adapted = c.adapt_wire(chunk.to_wire(), major)
        data = adapt_entry(LogEntry.of(0, chunk.to_wire()), major)
        assert (json.loads(data) if data is not None else None) == adapted
