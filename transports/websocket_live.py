"""The live extension of the WebSocket protocol: `live-*` frames and binary audio to a live session.

How it works
------------
A socket has at most one live session at a time. `live-start` opens it with one service call
(`adk_gateway.services.live.start_live`), as a request of the socket: the session's log reaches the
client like a `send`'s response (`start`, `chunk`s, `end` under the frame's `requestId`), through
the socket's delivery (`SocketSession.delivery_for`). From then on every other live frame — text,
an image (base64 here, decoded for the session), an approval's answer, a browser tool's output,
utterance marks, an interrupt, a stop — and every binary frame (PCM audio) goes to that session
(`apply_frame`, `LiveSession.send_audio`). This module only checks that a frame is for the
session that runs (its `requestId`) and answers what cannot be carried out with a bad frame. A
session whose run has ended is let go at the next frame that asks for it; an `abort` for its
`requestId` stops it.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Protocol

from adk_gateway.core import encoding
from adk_gateway.core.errors import GatewayError
from adk_gateway.core.pcm import PcmFormatError
from adk_gateway.core.requests import ClientFrame, LiveImageFrame, LiveStartFrame
from adk_gateway.services.live import LiveFrame, LiveHandle, LiveOptions, apply_frame, start_live
from adk_gateway.tracing import frame_span
from adk_gateway.transports.websocket_frames import Refusal

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.services.chat import ChatService, RequestContext
    from adk_gateway.services.live import Deliver
    from adk_gateway.services.registry import Connection

__all__ = ["LiveExtension", "LiveSocket"]


class LiveSocket(Protocol):
    """What the extension uses of its socket (`SocketSession`)."""

    conn: Connection
    service: ChatService
    settings: Settings

    async def send(self, text: str) -> None: ...

    async def refuse(self, refusal: Refusal) -> None: ...

    async def context(self, headers: dict[str, str], request_id: str) -> RequestContext | None: ...

    def delivery_for(self, request_id: str, major: int) -> Deliver: ...


class LiveExtension:
    """One socket's live session (`handle`, the request `request_id`); see the module docstring.
    Made by the socket's first live frame or binary frame."""

    __slots__ = ("handle", "request_id", "socket")

    def __init__(self, socket: LiveSocket) -> None:
        self.socket = socket
        self.handle: LiveHandle | None = None
        self.request_id: str | None = None

    def running(self) -> LiveHandle | None:
        """The socket's live session while it runs (one that has ended is let go here)."""
        if self.handle is not None and not self.handle.active:
            self.handle, self.request_id = None, None
        return self.handle

    def owns(self, request_id: str) -> bool:
        """Whether `request_id` names the live session that runs."""
        return self.running() is not None and request_id == self.request_id

    def stop(self, request_id: str) -> bool:
        """An `abort` for the live session stops it; False: `request_id` is not the live session."""
        live = self.running()
        if live is None or request_id != self.request_id:
            return False
        live.session.stop()
        return True

    async def on_frame(self, frame: ClientFrame) -> None:
        """A live frame: `live-start` opens the session; the others go to it."""
        if isinstance(frame, LiveStartFrame):
            await self._start(frame)
            return
        live = self.running()
        if live is None or frame.requestId != self.request_id:
            await self.socket.refuse(Refusal(frame.requestId, "No live session with this requestId.",
                                             "no_live_session", "no_live"))
            return
        if isinstance(frame, LiveImageFrame):
            try:
                data = base64.b64decode(frame.data, validate=True)
            except (binascii.Error, ValueError):
                await self.socket.refuse(Refusal(frame.requestId, "live-image data is not base64.", "invalid_frame",
                                                 "invalid_fields"))
                return
            live.session.send_image(frame.mediaType, data)
        elif isinstance(frame, LiveFrame):
            apply_frame(live.session, frame)

    async def on_audio(self, data: bytes) -> None:
        """A binary frame: PCM audio for the live session."""
        live = self.running()
        if live is None:
            await self.socket.refuse(Refusal(None, "Binary frames are live audio; open a live session first.",
                                             "no_live_session", "binary_without_live"))
            return
        try:
            live.session.send_audio(data)
        except PcmFormatError as exc:
            await self.socket.refuse(Refusal(self.request_id, str(exc), "invalid_audio", "invalid_audio"))

    async def _start(self, frame: LiveStartFrame) -> None:
        socket = self.socket
        if self.running() is not None:
            await socket.refuse(Refusal(frame.requestId, "A live session is already open on this socket.",
                                        "live_busy", "live_busy"))
            return
        ctx = await socket.context(frame.headers, frame.requestId)
        if ctx is None:
            return
        request_id = frame.requestId
        settings = socket.settings
        options = LiveOptions(
            input_rate=frame.sampleRate,
            hands_free=frame.handsFree,
            vad_silence_ms=settings.vad_silence_ms,
            vad_threshold_dbfs=settings.vad_threshold_dbfs,
            approval_timeout_s=settings.approval_timeout_s,
        )
        try:
            # As a `send` frame's run: the session starts inside the frame's span.
            with frame_span("chat live-start", frame.headers, **{"gateway.request_id": request_id}):
                live = await start_live(socket.service, socket.conn, user_id=ctx.user_id, chat_id=frame.id,
                                        options=options, deliver=socket.delivery_for(request_id, ctx.major),
                                        app=frame.app)
        except GatewayError as exc:
            # Over `--max-live-sessions` too: an `error` frame `overloaded` for this request, not a
            # 1013 close, which would also end every other request on the socket.
            await socket.send(encoding.ws_error(request_id, exc.message, exc.error_code))
            return
        self.handle, self.request_id = live, request_id
