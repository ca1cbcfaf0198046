"""What clients send: the AI SDK's chat request body and the WebSocket frames, as pydantic models.

Validation is strict on what the gateway acts on (ids, roles, triggers, tool part states) and
lenient on the rest (extra keys are kept, unknown part types are carried along), since the AI SDK
adds fields between minor versions.

A posted history costs what is new in it, not its length
----------------------------------------------------------
`useChat` posts the whole history on every turn, and a session already holds every message but the
last. So a request (`ChatRequest`, or a `send` frame) validates its *last* message in full — the one
the turn acts on — and the others only when they are used. As the transports parse them
(`adk_gateway.core.jsonparse.loads_request`), the earlier messages are the bytes the client sent
(`msgspec.Raw`), not parsed. `history_digest()` fingerprints a history over those bytes, so the chat
service can tell, with one pass of a hash, whether the posted messages still begin with the ones
its session ran (see `adk_gateway.services.chat`); `checked_heads()` parses the messages after those
and checks that each is an object with a string `id`, a known `role` and a `parts` list; and
`validated_history()` parses, depth-checks and validates every earlier message when a chat is
imported or rebuilt from them. An earlier message given as a value (a body parsed whole) gets the
head check when the request is validated, as a plain loop that builds nothing.

A history longer than a few thousand messages (only with a raised `--max-history-messages`) is
checked a batch at a time, giving the event loop back between batches.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from adk_gateway.core.jsonparse import PostedMessage, depth_exceeds, parse_posted, too_deep
from adk_gateway.core.pacing import Pacer

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
    "checked_heads",
    "describe",
    "history_digest",
    "history_digests",
    "message_count",
    "message_value",
    "parse_frame",
    "validate_chat_request",
    "validate_frame",
    "validated_history",
]

ChatId = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f/]+$")]
# An app's name (ADK's app names are Python identifiers; App names may also carry "." and "-").
AppName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.-]+$")]
# The hard ceiling (the largest `--max-history-messages`); the configured cap is checked first, 413.
MAX_MESSAGES = 100_000
# Messages whose id, role and parts are checked between two returns to the event loop (about 1 ms).
MESSAGE_BATCH: Final = 4_000
MAX_PARTS = 1_000
MAX_MESSAGE_ID: Final = 256
ROLES: Final = frozenset({"system", "user", "assistant"})
# Set in a validation context once `validate_chat_request`/`validate_frame` checked the messages'
# heads a batch at a time, so the model does not check them again in one go.
_HEADS_CHECKED: Final = "heads_checked"
# Set in a validation context to the last message already validated (a `send` frame's, for the
# `ChatRequest` it becomes), so it is not validated again.
_LAST_VALIDATED: Final = "last_validated"


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
    id: str = Field(max_length=MAX_MESSAGE_ID)
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


class MessageHead(_Loose):
    """What is checked of every posted message (`_head_ok` is the same check, without a model)."""

    id: str = Field(max_length=MAX_MESSAGE_ID)
    role: Literal["system", "user", "assistant"]
    parts: list[Any] = Field(max_length=MAX_PARTS)


def _head_ok(message: Any) -> bool:
    if type(message) is not dict:
        return False
    message_id, parts = message.get("id"), message.get("parts")
    return (
        type(message_id) is str
        and len(message_id) <= MAX_MESSAGE_ID
        and message.get("role") in ROLES
        and type(parts) is list
        and len(parts) <= MAX_PARTS
    )


def _relocated(exc: ValidationError, prefix: tuple[str | int, ...]) -> ValidationError:
    """`exc` with every error's location under `prefix` (a message validated on its own)."""
    errors: list[Any] = [
        {"type": e["type"], "loc": (*prefix, *e["loc"]), "input": e["input"],
         **({"ctx": e["ctx"]} if "ctx" in e else {})}
        for e in exc.errors()
    ]
    return ValidationError.from_exception_data(exc.title, errors)


def _check_head(message: Any, index: int) -> None:
    """Raises `ValidationError`, located at `messages.<index>`, unless `message` is an object with
    an id, a role and a parts list."""
    if not _head_ok(message):
        try:
            MessageHead.model_validate(message)
        except ValidationError as exc:
            raise _relocated(exc, ("messages", index)) from None


def _check_heads(messages: Any, start: int = 0, stop: int | None = None) -> None:
    """`_check_head` for each message in `messages[start:stop]` given as a value; messages kept as
    posted are checked when they are parsed (see the module docstring)."""
    if not isinstance(messages, list):
        return  # the field's own type check reports it
    for index in range(start, len(messages) if stop is None else min(stop, len(messages))):
        message = messages[index]
        if type(message) is not msgspec.Raw and type(message) is not PostedMessage:
            _check_head(message, index)


def message_value(message: Any) -> Any:
    """A posted message's value, parsed now if it came as bytes (JsonRejected when they are not JSON)."""
    return _value(message)


def _value(message: Any) -> Any:
    """A posted message's value, parsed now if it came as bytes (JsonRejected when they are not JSON)."""
    kind = type(message)
    if kind is msgspec.Raw:
        return parse_posted(message)
    return message.value if kind is PostedMessage else message


def _validated_message(messages: Sequence[Any], index: int) -> UIMessage:
    try:
        return UIMessage.model_validate(_value(messages[index]))
    except ValidationError as exc:
        raise _relocated(exc, ("messages", index)) from None


class PostedHistory(_Loose):
    """A posted `messages` list: the last message validated, the others as posted (see the
    module docstring)."""

    messages: list[Any] = Field(min_length=1, max_length=MAX_MESSAGES)
    _last: UIMessage = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _heads(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and not (info.context or {}).get(_HEADS_CHECKED):
            _check_heads(data.get("messages"))
        return data

    @model_validator(mode="after")
    def _validate_last(self, info: ValidationInfo) -> PostedHistory:
        last = (info.context or {}).get(_LAST_VALIDATED)
        self._last = last if isinstance(last, UIMessage) else _validated_message(self.messages, len(self.messages) - 1)
        return self

    @property
    def last(self) -> UIMessage:
        """The message the request acts on, validated."""
        return self._last

    @property
    def earlier(self) -> list[Any]:
        """Every message before the last, as posted (`validated_history` validates them)."""
        return self.messages[:-1]


class ChatRequest(PostedHistory):
    """The body `DefaultChatTransport` POSTs (extra body fields are allowed and kept). `app` (an
    extra body field of the transport's `body` option) names the app to answer; absent: the
    default app. `state` sets session state before the run (the keys the client may set)."""

    id: ChatId
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=256)
    app: AppName | None = None
    # Session state the client sets before the run (only `--client-state` keys).
    state: dict[str, Any] | None = None
    # The last-message form (the AI SDK's persistence pattern): only the message the request acts
    # on, the server holding the history. It becomes the request's only message.
    message: Any = None

    @model_validator(mode="before")
    @classmethod
    def _last_message_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("message") is not None:
            return {**data, "messages": [data["message"]]}
        return data

    @property
    def last_only(self) -> bool:
        """The request carries only its last message: the server's history is the chat's."""
        return self.message is not None


class SendFrame(PostedHistory):
    type: Literal["send"]
    requestId: str = Field(min_length=1, max_length=256)
    id: ChatId
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=256)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)
    metadata: Any = None

    def chat_request(self) -> ChatRequest:
        return ChatRequest.model_validate(
            {
                **self.body,
                "id": self.id,
                "messages": self.messages,
                "trigger": self.trigger,
                **({"messageId": self.messageId} if self.messageId is not None else {}),
            },
            context={_HEADS_CHECKED: True, _LAST_VALIDATED: self.last},  # both done for this frame
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
    app: AppName | None = None  # the app to answer; absent: `body.app` (as a `send` frame), else the default
    sampleRate: int = Field(default=16_000, ge=8_000, le=96_000)
    handsFree: bool = False
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _app_from_body(cls, data: Any) -> Any:
        body = data.get("body") if isinstance(data, dict) else None
        if isinstance(body, dict) and body.get("app") is not None and data.get("app") is None:
            return {**data, "app": body["app"]}
        return data


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


async def _heads_checked(data: dict[str, Any]) -> dict[str, Any]:
    """Checks the heads of a long `messages` list a batch at a time (see the module docstring);
    the validation context that tells the model they are checked."""
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > MESSAGE_BATCH:
        for start in range(0, len(messages), MESSAGE_BATCH):
            _check_heads(messages, start, start + MESSAGE_BATCH)
            await asyncio.sleep(0)
    return {_HEADS_CHECKED: True}


async def validate_chat_request(data: dict[str, Any]) -> ChatRequest:
    """Validates a parsed request body. Raises pydantic's `ValidationError`."""
    return ChatRequest.model_validate(data, context=await _heads_checked(data))


async def validate_frame(data: dict[str, Any]) -> ClientFrame:
    """Validates a parsed text frame. Raises pydantic's `ValidationError`."""
    context = await _heads_checked(data) if data.get("type") == "send" else None
    return _FRAME_ADAPTER.validate_python(data, context=context)


async def validated_history(messages: Sequence[Any], *, max_depth: int) -> list[UIMessage]:
    """Earlier messages of a posted history, validated in full, giving the event loop back every
    few messages (`adk_gateway.core.pacing`): what a chat is imported or rebuilt from.

    Args:
        messages: a request's `earlier` messages (positions in the posted list).
        max_depth: `--max-json-depth` of the whole body.

    Raises:
        ValidationError: a message is invalid (located at `messages.<index>`).
        JsonRejected: a message nests deeper than the body may.
    """
    validated: list[UIMessage] = []
    pacer = Pacer()
    for index in range(len(messages)):
        if depth_exceeds(_value(messages[index]), max_depth, level=3):  # body > messages > message
            raise too_deep(max_depth)
        validated.append(_validated_message(messages, index))
        await pacer.step()
    return validated


def checked_heads(messages: Sequence[Any], start: int) -> list[Any]:
    """The values of `messages[start:]`, each checked to be an object with an id, a role and a
    parts list: the messages a turn adds to what its session ran.

    Raises:
        ValidationError: a message is no such object (located at `messages.<index>`).
        JsonRejected: a message's bytes are not JSON.
    """
    values = []
    for index in range(start, len(messages)):
        value = _value(messages[index])
        _check_head(value, index)
        values.append(value)
    return values


def _serialised(messages: Sequence[Any]) -> list[bytes | msgspec.Raw]:
    """Each message's bytes: as posted, or serialised (orjson.JSONEncodeError past orjson's depth)."""
    return [m if type(m) is msgspec.Raw else m.raw if type(m) is PostedMessage else orjson.dumps(m)
            for m in messages]


def history_digests(messages: Sequence[Any], count: int) -> tuple[str, str]:
    """`history_digest(messages[:count])` and `history_digest(messages)` with one pass of the hash
    over the messages' bytes: the prefix's hash is copied on the way."""
    try:
        parts = _serialised(messages)
    except orjson.JSONEncodeError:
        return (history_digest(messages[:count]), "")
    count = max(0, min(count, len(parts)))
    digest = hashlib.blake2b(b"[", digest_size=16)
    digest.update(b",".join(parts[:count]))
    prefix = digest.copy()
    prefix.update(b"]")
    if count < len(parts):
        digest.update(b"," if count else b"")
        digest.update(b",".join(parts[count:]))
    digest.update(b"]")
    return prefix.hexdigest(), digest.hexdigest()


def history_digest(messages: Sequence[Any]) -> str:
    """A fingerprint of posted messages as the client sent them: a hash of the JSON list of their
    bytes as posted (a message given as a value is serialised, in C, as orjson writes it; for the
    compact JSON browsers send, that is the same bytes). Equal for a client that posts the same
    messages again. "" for a value that cannot be serialised (nested past orjson's limit), which then
    matches nothing."""
    try:
        parts = _serialised(messages)
    except orjson.JSONEncodeError:
        return ""
    return hashlib.blake2b(b"[" + b",".join(parts) + b"]", digest_size=16).hexdigest()


def describe(exc: ValidationError) -> str:
    """The client's message for an invalid body: where and what, from the first error."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"Invalid request body at '{where}': {first['msg']}."
