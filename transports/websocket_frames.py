"""Reading a WebSocket's text frames: a raw message becomes a validated frame or a refusal.

How it works
------------
`FrameReader.read()` takes the text of one frame and checks it in the order that costs least
first: JSON within `--max-json-depth` (parsed in slices that give the event loop back, as a POST
body is), an object, a known `type`, a `send` frame's history within `--max-history-messages`,
then the frame's model (`adk_gateway.core.requests.validate_frame`). It returns the frame, or a
`Refusal`: the `error` frame to answer with, carrying the frame's `requestId` when one can be
read.

Most refusals are *bad frames*: a protocol violation by the client. The socket's `FrameReader`
counts them (`refused`), wherever they were found — here, or later by the socket (a duplicate
`requestId`, a live frame without a live session, bad audio) — and after `MAX_BAD_FRAMES` the
socket is to be closed (`exhausted`). A history that is too long is no violation: the request is
refused and the socket is fine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog
from pydantic import ValidationError

from adk_gateway.core import encoding, jsonparse
from adk_gateway.core.errors import HistoryTooLong
from adk_gateway.core.requests import LIVE_FRAME_TYPES, ClientFrame, message_count, validate_frame

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.metrics import Metrics

__all__ = ["KNOWN_FRAME_TYPES", "MAX_BAD_FRAMES", "FrameReader", "Refusal"]

log = structlog.get_logger("adk_gateway.transports.websocket")

MAX_BAD_FRAMES: Final = 10
KNOWN_FRAME_TYPES: Final = frozenset({"send", "resume", "abort", *LIVE_FRAME_TYPES})


@dataclass(frozen=True, slots=True)
class Refusal:
    """A frame answered with an `error` frame instead of being carried out.

    `reason` labels a bad frame in `adk_gateway_ws_frames_refused_total`; None: not a bad frame
    but a request refused (counted by its `code` in `adk_gateway_request_errors_total`).
    """

    request_id: str | None
    text: str
    code: str
    reason: str | None


class FrameReader:
    """Reads one socket's text frames and counts its bad ones; see the module docstring."""

    __slots__ = ("bad_frames", "max_history_messages", "max_json_depth", "metrics")

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.max_json_depth = settings.max_json_depth
        self.max_history_messages = settings.max_history_messages
        self.metrics = metrics
        self.bad_frames = 0

    @property
    def exhausted(self) -> bool:
        """The socket has sent `MAX_BAD_FRAMES` bad frames: it is to be closed (1008)."""
        return self.bad_frames >= MAX_BAD_FRAMES

    async def read(self, data: str) -> ClientFrame | Refusal:
        """The frame `data` holds, or why it is refused (not counted yet: see `refused`)."""
        try:
            raw = await jsonparse.loads_request_async(data, max_depth=self.max_json_depth)
        except jsonparse.JsonRejected as exc:
            if exc.reason == "depth":
                return Refusal(None, exc.message, "invalid_json", "too_deep")
            return Refusal(None, "The frame is not JSON.", "invalid_json", "not_json")
        if not isinstance(raw, dict):
            return Refusal(None, "The frame must be a JSON object.", "invalid_frame", "not_object")
        request_id = raw.get("requestId")
        request_id = request_id if isinstance(request_id, str) else None
        frame_type = raw.get("type")
        if frame_type not in KNOWN_FRAME_TYPES:
            return Refusal(request_id, f"Unknown frame type {str(frame_type)[:40]!r}.", "unknown_type",
                           "unknown_type")
        count = message_count(raw) if frame_type == "send" else 0
        if count > self.max_history_messages and request_id is not None:
            error = HistoryTooLong(f"The chat history has {count} messages; at most "
                                   f"{self.max_history_messages} are accepted.")
            return Refusal(request_id, error.message, error.error_code, None)
        try:
            return await validate_frame(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:]) or "frame"
            return Refusal(request_id, f"Invalid {frame_type} frame at '{where}': {first['msg']}.",
                           "invalid_frame", "invalid_fields")

    def refused(self, refusal: Refusal) -> str:
        """Counts and logs a refusal; returns the `error` frame that answers it."""
        if refusal.reason is not None:
            self.bad_frames += 1
            self.metrics.ws_frames_refused.labels(reason=refusal.reason).inc()
            log.info("frame_refused", request_id=refusal.request_id, code=refusal.code, detail=refusal.text)
        else:
            self.metrics.request_errors.labels(code=refusal.code).inc()
            log.info("request_refused", code=refusal.code, request_id=refusal.request_id)
        return encoding.ws_error(refusal.request_id, refusal.text, refusal.code)
