"""Pure wire encoders: SSE events and WebSocket frames. No I/O.

SSE: each chunk is one `data: <one-line JSON>` event followed by a blank line; the stream ends
with `data: [DONE]`. JSON never contains a raw newline (both orjson and json.dumps escape control
characters), so one `data:` line per event is always enough. Comments (`: keep-alive`) keep idle
streams open through proxies.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

from adk_gateway.core.chunks import Chunk

SSE_HEADERS: Final[dict[str, str]] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}

SSE_DONE: Final[bytes] = b"data: [DONE]\n\n"
SSE_OPEN: Final[bytes] = b": stream-open\n\n"
SSE_KEEPALIVE: Final[bytes] = b": keep-alive\n\n"


def dumps(value: Any) -> str:
    """Compact JSON with UTF-8 kept as is (the transport encodes to UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def chunk_json(wire: dict[str, Any]) -> bytes:
    """A chunk's JSON as UTF-8, the one serialisation a chunk gets (`StreamLog.append`, and the
    SSE events and WebSocket frames built from it).

    orjson, a tenth of the standard library's time per chunk. Values JSON cannot hold do not fail
    the run: a tool output's datetime is written as RFC 3339, a dataclass as an object, anything
    else orjson does not know as its `str()`; NaN and infinities (not JSON) as null; keys that are
    not strings as their JSON text. What orjson refuses (text with a lone surrogate, which UTF-8
    cannot hold; integers past 64 bits) goes through the standard library (`_chunk_json_slowly`).
    """
    try:
        # Copied: the bytes orjson returns keep the whole buffer it wrote into (4 KiB for the
        # smallest chunk, 1 MiB for a 64 KiB one), and a logged chunk lives as long as its log.
        return memoryview(orjson.dumps(wire, default=str, option=orjson.OPT_NON_STR_KEYS)).tobytes()
    except orjson.JSONEncodeError:
        return _chunk_json_slowly(wire)


def _chunk_json_slowly(wire: dict[str, Any]) -> bytes:
    """`chunk_json` by the standard library: exact digits for any integer, `\\u` escapes for text
    that UTF-8 cannot hold, NaN and infinities as null, other values JSON cannot hold as `str()`."""
    value = _finite(wire)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=str).encode("ascii")


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None, in any list or dict inside it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def sse_event(wire: dict[str, Any]) -> bytes:
    return sse_data(chunk_json(wire))


def sse_data(chunk: bytes) -> bytes:
    """The SSE event of a chunk already serialised with `chunk_json`."""
    return b"data: " + chunk + b"\n\n"


def sse_chunk(chunk: Chunk) -> bytes:
    return sse_event(chunk.to_wire())


def sse_comment(text: str) -> bytes:
    # A comment line must not contain a newline, or the rest would be parsed as a field.
    return b": " + " ".join(text.splitlines()).encode("utf-8") + b"\n\n"


# --- WebSocket frames (the frame protocol of ai 7's WebSocketChatTransport) -----------------


def ws_start(request_id: str) -> str:
    return dumps({"type": "start", "requestId": request_id})


def ws_chunk(request_id: str, sequence: int, wire: dict[str, Any]) -> str:
    return ws_chunk_encoded(ws_chunk_head(request_id), sequence, chunk_json(wire)).decode("utf-8")


def ws_chunk_head(request_id: str) -> bytes:
    """What every chunk frame of one request starts with, up to its sequence number: serialised
    once per request, not once per chunk."""
    return b'{"type":"chunk","requestId":' + dumps(request_id).encode("utf-8") + b',"sequence":'


def ws_chunk_encoded(head: bytes, sequence: int, chunk: bytes) -> bytes:
    """`ws_chunk` for a chunk already serialised with `chunk_json`, behind its request's
    `ws_chunk_head`: the same text, as UTF-8."""
    return head + str(sequence).encode("ascii") + b',"chunk":' + chunk + b"}"


def ws_end(request_id: str) -> str:
    return dumps({"type": "end", "requestId": request_id})


def ws_error(request_id: str | None, error_text: str, code: str | None = None) -> str:
    frame: dict[str, Any] = {"type": "error", "errorText": error_text}
    if request_id is not None:
        frame["requestId"] = request_id
    if code is not None:
        frame["code"] = code
    return dumps(frame)


def ws_no_active(request_id: str) -> str:
    return dumps({"type": "no-active", "requestId": request_id})
