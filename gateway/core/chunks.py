"""UI message stream chunks: the AI SDK's `uiMessageChunkSchema`, as frozen dataclasses.

Field names are the wire names (camelCase) so that a chunk *is* its JSON shape. `to_wire()`
drops every optional field that is `None` (the SDK rejects `null` in optional fields) but keeps the
fields the schema declares as present-but-`unknown` (`input`, `output`, `data`), which may be
`null`. v7-only chunks and fields are marked; `adapt_wire()` downgrades a chunk for an ai 6 client.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

FinishReason = Literal["stop", "length", "content-filter", "tool-calls", "error", "other", "interrupted"]

V6_FINISH_REASONS: frozenset[str] = frozenset(
    {"stop", "length", "content-filter", "tool-calls", "error", "other"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """Base class; `type` is the chunk's wire type."""

    type: ClassVar[str] = ""
    # Fields the schema requires to be present even when their value is null.
    always_present: ClassVar[frozenset[str]] = frozenset()
    v7_only: ClassVar[bool] = False

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name not in self.always_present:
                continue
            wire[f.name] = value
        return wire


@dataclass(frozen=True, slots=True, kw_only=True)
class Start(Chunk):
    type: ClassVar[str] = "start"
    messageId: str | None = None
    messageMetadata: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartStep(Chunk):
    type: ClassVar[str] = "start-step"


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishStep(Chunk):
    type: ClassVar[str] = "finish-step"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish(Chunk):
    type: ClassVar[str] = "finish"
    finishReason: FinishReason | None = None
    messageMetadata: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Abort(Chunk):
    type: ClassVar[str] = "abort"
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Error(Chunk):
    type: ClassVar[str] = "error"
    errorText: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageMetadata(Chunk):
    type: ClassVar[str] = "message-metadata"
    always_present: ClassVar[frozenset[str]] = frozenset({"messageMetadata"})
    messageMetadata: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class TextStart(Chunk):
    type: ClassVar[str] = "text-start"
    id: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(Chunk):
    type: ClassVar[str] = "text-delta"
    id: str
    delta: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEnd(Chunk):
    type: ClassVar[str] = "text-end"
    id: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningStart(Chunk):
    type: ClassVar[str] = "reasoning-start"
    id: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta(Chunk):
    type: ClassVar[str] = "reasoning-delta"
    id: str
    delta: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningEnd(Chunk):
    type: ClassVar[str] = "reasoning-end"
    id: str
    providerMetadata: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInputStart(Chunk):
    type: ClassVar[str] = "tool-input-start"
    toolCallId: str
    toolName: str
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInputDelta(Chunk):
    type: ClassVar[str] = "tool-input-delta"
    toolCallId: str
    inputTextDelta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInputAvailable(Chunk):
    type: ClassVar[str] = "tool-input-available"
    always_present: ClassVar[frozenset[str]] = frozenset({"input"})
    toolCallId: str
    toolName: str
    input: Any
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInputError(Chunk):
    type: ClassVar[str] = "tool-input-error"
    always_present: ClassVar[frozenset[str]] = frozenset({"input"})
    toolCallId: str
    toolName: str
    input: Any
    errorText: str
    providerExecuted: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolApprovalRequest(Chunk):
    type: ClassVar[str] = "tool-approval-request"
    approvalId: str
    toolCallId: str
    isAutomatic: bool | None = None  # v7 field (ai 6 accepts and ignores extra keys)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolApprovalResponse(Chunk):
    """v7 only: an approval decided without asking (always/never allow)."""

    type: ClassVar[str] = "tool-approval-response"
    v7_only: ClassVar[bool] = True
    approvalId: str
    approved: bool
    reason: str | None = None
    providerExecuted: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputAvailable(Chunk):
    type: ClassVar[str] = "tool-output-available"
    always_present: ClassVar[frozenset[str]] = frozenset({"output"})
    toolCallId: str
    output: Any
    providerExecuted: bool | None = None
    dynamic: bool | None = None
    preliminary: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputError(Chunk):
    type: ClassVar[str] = "tool-output-error"
    toolCallId: str
    errorText: str
    providerExecuted: bool | None = None
    dynamic: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputDenied(Chunk):
    type: ClassVar[str] = "tool-output-denied"
    toolCallId: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceUrl(Chunk):
    type: ClassVar[str] = "source-url"
    sourceId: str
    url: str
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceDocument(Chunk):
    type: ClassVar[str] = "source-document"
    sourceId: str
    mediaType: str
    title: str
    filename: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class File(Chunk):
    type: ClassVar[str] = "file"
    url: str
    mediaType: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Data(Chunk):
    """A `data-<name>` chunk; `name` becomes part of the wire type."""

    always_present: ClassVar[frozenset[str]] = frozenset({"data"})
    name: str
    data: Any
    id: str | None = None
    transient: bool | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": f"data-{self.name}", "data": self.data}
        if self.id is not None:
            wire["id"] = self.id
        if self.transient is not None:
            wire["transient"] = self.transient
        return wire


def _chunk_classes(base: type[Chunk]) -> list[type[Chunk]]:
    found: list[type[Chunk]] = []
    for cls in base.__subclasses__():
        found += [cls, *_chunk_classes(cls)]
    return found


# Chunk types only `ai` 7 knows, and every type an `ai` 6 client may need changed (`adapt_wire`).
V7_ONLY_TYPES: frozenset[str] = frozenset(cls.type for cls in _chunk_classes(Chunk) if cls.v7_only)
ADAPTED_FOR_V6: frozenset[str] = V7_ONLY_TYPES | {Finish.type}


def adapt_wire(wire: dict[str, Any], major: int) -> dict[str, Any] | None:
    """Adapts a chunk (its wire dict, in the v7 chunk set) to the client's `ai` major version;
    `None` means "do not send". The one adapter: every transport sends through it.

    ai 6 rejects a whole stream at the first chunk type or enum value it does not know, so the
    v7 additions are dropped (`tool-approval-response`) or mapped (`interrupted` -> `stop`).
    Chunks that need nothing are returned as they are (the same object).
    """
    if major >= 7:
        return wire
    kind = wire.get("type")
    if kind in V7_ONLY_TYPES:
        return None
    if kind == Finish.type and wire.get("finishReason") not in (None, *V6_FINISH_REASONS):
        return {**wire, "finishReason": "stop"}
    return wire
