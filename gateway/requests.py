"""What clients send: the AI SDK's chat request body and the WebSocket frames, as pydantic models.

Validation is strict on what the gateway acts on (ids, roles, triggers, tool part states) and
lenient on the rest (extra keys are kept, unknown part types are carried along), since the AI SDK
adds fields between minor versions.

Transports parse the JSON first (`gateway.jsonparse`, depth-bounded) and check the history's length
against `--max-history-messages` before validating here; a long history is validated a batch of
messages at a time (`validate_chat_request`, `validate_frame`), giving the event loop back between
batches.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

__all__ = [
    "AbortFrame",
    "ApprovalPart",
    "ChatRequest",
    "ClientFrame",
    "ResumeFrame",
    "SendFrame",
    "ToolPart",
    "UIMessage",
    "ValidationError",
    "message_count",
    "parse_frame",
    "validate_chat_request",
    "validate_frame",
]

ChatId = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f/]+$")]
# The hard ceiling (the largest `--max-history-messages`); the configured cap is checked first, 413.
MAX_MESSAGES = 100_000
# Messages validated between two returns to the event loop (about 1 ms of validation).
MESSAGE_BATCH: Final = 250
MAX_PARTS = 1_000


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ApprovalPart(_Loose):
    id: str = Field(min_length=1, max_length=256)
    approved: bool | None = None
    reason: str | None = Field(default=None, max_length=2_000)


class ToolPart(_Loose):
    """A `tool-<name>` or `dynamic-tool` part of a UI message."""

    type: str
    toolCallId: str = Field(min_length=1, max_length=256)
    state: Literal[
        "input-streaming",
        "input-available",
        "approval-requested",
        "approval-responded",
        "output-available",
        "output-error",
        "output-denied",
    ]
    toolName: str | None = None
    input: Any = None
    output: Any = None
    errorText: str | None = None
    providerExecuted: bool | None = None
    preliminary: bool | None = None
    approval: ApprovalPart | None = None

    @property
    def tool_name(self) -> str:
        if self.type == "dynamic-tool":
            return self.toolName or "unknown"
        return self.type.removeprefix("tool-")


class UIMessage(_Loose):
    id: str = Field(max_length=256)
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]] = Field(max_length=MAX_PARTS)
    metadata: Any = None

    @field_validator("parts")
    @classmethod
    def _parts_have_types(cls, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, part in enumerate(parts):
            if not isinstance(part.get("type"), str):
                raise ValueError(f"part {index} has no string 'type'")
            if part["type"].startswith("tool-") or part["type"] == "dynamic-tool":
                ToolPart.model_validate(part)
        return parts

    def text(self) -> str:
        return "".join(str(p.get("text", "")) for p in self.parts if p.get("type") == "text")

    def tool_parts(self) -> list[ToolPart]:
        return [
            ToolPart.model_validate(p)
            for p in self.parts
            if p["type"].startswith("tool-") or p["type"] == "dynamic-tool"
        ]


class ChatRequest(_Loose):
    """The body `DefaultChatTransport` POSTs (extra body fields are allowed and kept)."""

    id: ChatId
    messages: list[UIMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=256)


class SendFrame(_Loose):
    type: Literal["send"]
    requestId: str = Field(min_length=1, max_length=256)
    id: ChatId
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=256)
    messages: list[UIMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)
    metadata: Any = None

    def chat_request(self) -> ChatRequest:
        return ChatRequest.model_validate(
            {
                **self.body,
                "id": self.id,
                # Already validated: pydantic takes the instances as they are (no dump and re-parse
                # of a long history).
                "messages": list(self.messages),
                "trigger": self.trigger,
                **({"messageId": self.messageId} if self.messageId is not None else {}),
            }
        )


class ResumeFrame(_Loose):
    type: Literal["resume"]
    requestId: str = Field(min_length=1, max_length=256)
    id: ChatId
    lastSequence: int | None = Field(default=None, ge=-1)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)
    metadata: Any = None


class AbortFrame(_Loose):
    type: Literal["abort"]
    requestId: str = Field(min_length=1, max_length=256)


class LiveStartFrame(_Loose):
    """Live (audio) extension: opens a live session for a chat on this socket."""

    type: Literal["live-start"]
    requestId: str = Field(min_length=1, max_length=256)
    id: ChatId
    sampleRate: int = Field(default=16_000, ge=8_000, le=96_000)
    handsFree: bool = False
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)


class LiveControlFrame(_Loose):
    """Live extension: `live-activity-start`/`-end` mark an utterance, `live-interrupt` barges in,
    `live-stop` ends the live session; `live-text` and `live-image` add content."""

    type: Literal["live-activity-start", "live-activity-end", "live-interrupt", "live-stop"]
    requestId: str = Field(min_length=1, max_length=256)


class LiveTextFrame(_Loose):
    type: Literal["live-text"]
    requestId: str = Field(min_length=1, max_length=256)
    text: str = Field(min_length=1, max_length=100_000)


class LiveImageFrame(_Loose):
    type: Literal["live-image"]
    requestId: str = Field(min_length=1, max_length=256)
    mediaType: Literal["image/png", "image/jpeg", "image/webp"]
    data: str = Field(min_length=1)  # base64


class LiveApprovalFrame(_Loose):
    """Live extension: answers a `tool-approval-request` of a live turn."""

    type: Literal["live-approval"]
    requestId: str = Field(min_length=1, max_length=256)
    approvalId: str = Field(min_length=1, max_length=256)
    approved: bool
    reason: str | None = Field(default=None, max_length=2_000)


class LiveToolOutputFrame(_Loose):
    """Live extension: a browser tool's result (or error) for a live turn."""

    type: Literal["live-tool-output"]
    requestId: str = Field(min_length=1, max_length=256)
    toolCallId: str = Field(min_length=1, max_length=256)
    output: Any = None
    errorText: str | None = Field(default=None, max_length=10_000)


LIVE_FRAME_TYPES = frozenset(
    {
        "live-start",
        "live-activity-start",
        "live-activity-end",
        "live-interrupt",
        "live-stop",
        "live-text",
        "live-image",
        "live-approval",
        "live-tool-output",
    }
)

ClientFrame = Annotated[
    SendFrame
    | ResumeFrame
    | AbortFrame
    | LiveStartFrame
    | LiveControlFrame
    | LiveTextFrame
    | LiveImageFrame
    | LiveApprovalFrame
    | LiveToolOutputFrame,
    Field(discriminator="type"),
]

_FRAME_ADAPTER: TypeAdapter[ClientFrame] = TypeAdapter(ClientFrame)


def parse_frame(raw: str | bytes) -> ClientFrame:
    """Parses one JSON text frame. Raises pydantic's `ValidationError` for a bad frame."""
    return _FRAME_ADAPTER.validate_json(raw)


def message_count(data: dict[str, Any]) -> int:
    """How many messages a raw request body or `send` frame carries (0 when `messages` is no list)."""
    messages = data.get("messages")
    return len(messages) if isinstance(messages, list) else 0


_MESSAGES_ADAPTER: TypeAdapter[list[UIMessage]] = TypeAdapter(list[UIMessage])


async def _with_messages_validated(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with a long `messages` list replaced by validated `UIMessage`s, a batch at a time;
    pydantic then takes the instances as they are. A batch that fails leaves `data` as it was,
    so the whole validation reports the error with its full location."""
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) <= MESSAGE_BATCH:
        return data
    validated: list[UIMessage] = []
    for start in range(0, len(messages), MESSAGE_BATCH):
        try:
            validated += _MESSAGES_ADAPTER.validate_python(messages[start : start + MESSAGE_BATCH])
        except ValidationError:
            return data
        await asyncio.sleep(0)
    return {**data, "messages": validated}


async def validate_chat_request(data: dict[str, Any]) -> ChatRequest:
    """Validates a parsed request body. Raises pydantic's `ValidationError`."""
    return ChatRequest.model_validate(await _with_messages_validated(data))


async def validate_frame(data: dict[str, Any]) -> ClientFrame:
    """Validates a parsed text frame. Raises pydantic's `ValidationError`."""
    if data.get("type") == "send":
        data = await _with_messages_validated(data)
    return _FRAME_ADAPTER.validate_python(data)
