"""Pure wire encoders: SSE events and WebSocket frames. No I/O.

SSE: each chunk is one `data: <one-line JSON>` event followed by a blank line; the stream ends
with `data: [DONE]`. JSON never contains a raw newline (json.dumps escapes control characters), so
one `data:` line per event is always enough. Comments (`: keep-alive`) keep idle streams open
through proxies.
"""

from __future__ import annotations

import json
from typing import Any, Final

from gateway.core.chunks import Chunk

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
    """A chunk's JSON as UTF-8, the one serialisation a logged chunk gets (`StreamLog.append`).

    Values JSON cannot hold (a tool output's datetime) become strings rather than failing the run;
    text with a lone surrogate (not encodable as UTF-8) is written with `\\u` escapes instead.
    """
    text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(wire, separators=(",", ":"), allow_nan=False, default=str).encode("ascii")


def sse_event(wire: dict[str, Any]) -> bytes:
    return b"data: " + dumps(wire).encode("utf-8") + b"\n\n"


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
    return dumps({"type": "chunk", "requestId": request_id, "sequence": sequence, "chunk": wire})


def ws_chunk_encoded(request_id: str, sequence: int, chunk: bytes) -> bytes:
    """`ws_chunk` for a chunk already serialised with `chunk_json`: the same text, as UTF-8."""
    return (b'{"type":"chunk","requestId":' + dumps(request_id).encode("utf-8") + b',"sequence":'
            + str(sequence).encode("ascii") + b',"chunk":' + chunk + b"}")


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
