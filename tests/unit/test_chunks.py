"""Unit tests for adk_gateway.core.chunks: every chunk's wire shape and the downgrade for ai 6 clients."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from adk_gateway.core import chunks as c
from adk_gateway.core.chunks import V6_FINISH_REASONS, V7_ONLY_TYPES, adapt_wire

PM = {"adk": {"eventId": "e1"}}

# type -> (class, required fields, optional fields with example values)
CATALOGUE: dict[str, tuple[type[c.Chunk], dict[str, Any], dict[str, Any]]] = {
    "start": (c.Start, {}, {"messageId": "m1", "messageMetadata": {"a": 1}}),
    "start-step": (c.StartStep, {}, {}),
    "finish-step": (c.FinishStep, {}, {}),
    "finish": (c.Finish, {}, {"finishReason": "stop", "messageMetadata": {"usage": {"totalTokens": 3}}}),
    "abort": (c.Abort, {}, {"reason": "stopped"}),
    "error": (c.Error, {"errorText": "boom"}, {}),
    "message-metadata": (c.MessageMetadata, {"messageMetadata": {"k": "v"}}, {}),
    "text-start": (c.TextStart, {"id": "t1"}, {"providerMetadata": PM}),
    "text-delta": (c.TextDelta, {"id": "t1", "delta": "hi"}, {"providerMetadata": PM}),
    "text-end": (c.TextEnd, {"id": "t1"}, {"providerMetadata": PM}),
    "reasoning-start": (c.ReasoningStart, {"id": "r1"}, {"providerMetadata": PM}),
    "reasoning-delta": (c.ReasoningDelta, {"id": "r1", "delta": "hm"}, {"providerMetadata": PM}),
    "reasoning-end": (c.ReasoningEnd, {"id": "r1"}, {"providerMetadata": PM}),
    "tool-input-start": (
        c.ToolInputStart, {"toolCallId": "c1", "toolName": "t"},
        {"providerExecuted": True, "dynamic": False, "title": "T"},
    ),
    "tool-input-delta": (c.ToolInputDelta, {"toolCallId": "c1", "inputTextDelta": "{}"}, {}),
    "tool-input-available": (
        c.ToolInputAvailable, {"toolCallId": "c1", "toolName": "t", "input": {"a": 1}},
        {"providerExecuted": True, "dynamic": True, "title": "T"},
    ),
    "tool-input-error": (
        c.ToolInputError, {"toolCallId": "c1", "toolName": "t", "input": "{bad", "errorText": "bad json"},
        {"providerExecuted": True},
    ),
    "tool-approval-request": (
        c.ToolApprovalRequest, {"approvalId": "a1", "toolCallId": "c1"}, {"isAutomatic": True}
    ),
    "tool-approval-response": (
        c.ToolApprovalResponse, {"approvalId": "a1", "approved": True}, {"reason": "always", "providerExecuted": True}
    ),
    "tool-output-available": (
        c.ToolOutputAvailable, {"toolCallId": "c1", "output": {"ok": True}},
        {"providerExecuted": True, "dynamic": False, "preliminary": True},
    ),
    "tool-output-error": (
        c.ToolOutputError, {"toolCallId": "c1", "errorText": "failed"}, {"providerExecuted": True, "dynamic": True}
    ),
    "tool-output-denied": (c.ToolOutputDenied, {"toolCallId": "c1"}, {}),
    "source-url": (c.SourceUrl, {"sourceId": "s1", "url": "https://example.com"}, {"title": "Example"}),
    "source-document": (c.SourceDocument, {"sourceId": "s2", "mediaType": "text/plain", "title": "doc1.pdf"},
                        {"filename": "doc1.pdf"}),
    "file": (c.File, {"url": "data:image/png;base64,AA==", "mediaType": "image/png"}, {}),
}

# Fields the schema types as `unknown`: present even when null.
ALWAYS_PRESENT = {
    "message-metadata": {"messageMetadata"},
    "tool-input-available": {"input"},
    "tool-input-error": {"input"},
    "tool-output-available": {"output"},
}


def all_chunk_classes() -> set[type[c.Chunk]]:
    found: set[type[c.Chunk]] = set()
    stack = list(c.Chunk.__subclasses__())
    while stack:
        cls = stack.pop()
        # slots=True dataclasses replace their class; keep only the ones the module exports.
        if getattr(c, cls.__name__, None) is cls:
            found.add(cls)
        stack += cls.__subclasses__()
    return found


def test_catalogue_covers_every_chunk_class() -> None:
    listed = {cls for cls, _, _ in CATALOGUE.values()} | {c.Data}
    assert all_chunk_classes() == listed
    for wire_type, (cls, _, _) in CATALOGUE.items():
        assert cls.type == wire_type


@pytest.mark.parametrize("wire_type", list(CATALOGUE))
def test_required_only_omits_every_optional_field(wire_type: str) -> None:
    cls, required, _ = CATALOGUE[wire_type]
    wire = cls(**required).to_wire()
    assert wire == {"type": wire_type, **required}


@pytest.mark.parametrize("wire_type", list(CATALOGUE))
def test_optional_fields_are_sent_when_set(wire_type: str) -> None:
    cls, required, optional = CATALOGUE[wire_type]
    wire = cls(**required, **optional).to_wire()
    assert wire == {"type": wire_type, **required, **optional}
    names = {f.name for f in dataclasses.fields(cls)}
    assert names == set(required) | set(optional), "the catalogue must list every field"


@pytest.mark.parametrize("wire_type", list(CATALOGUE))
def test_null_only_where_the_schema_allows_it(wire_type: str) -> None:
    cls, required, optional = CATALOGUE[wire_type]
    # Every field None (not valid for required fields, but shows what to_wire() keeps).
    wire = cls(**dict.fromkeys((*required, *optional))).to_wire()
    assert set(wire) == {"type"} | ALWAYS_PRESENT.get(wire_type, set())
    assert all(wire[name] is None for name in ALWAYS_PRESENT.get(wire_type, ()))


def test_unknown_fields_keep_null_and_falsy_values() -> None:
    assert c.ToolInputAvailable(toolCallId="c", toolName="t", input=None).to_wire() == {
        "type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": None,
    }
    assert c.ToolOutputAvailable(toolCallId="c", output=None).to_wire()["output"] is None
    assert c.ToolOutputAvailable(toolCallId="c", output=0).to_wire()["output"] == 0
    assert c.ToolOutputAvailable(toolCallId="c", output="", providerExecuted=False).to_wire() == {
        "type": "tool-output-available", "toolCallId": "c", "output": "", "providerExecuted": False,
    }
    assert c.MessageMetadata(messageMetadata=None).to_wire() == {"type": "message-metadata", "messageMetadata": None}
    assert c.TextDelta(id="t", delta="").to_wire() == {"type": "text-delta", "id": "t", "delta": ""}


def test_data_chunks() -> None:
    assert c.Data(name="pcm", data={"content": "AA=="}).to_wire() == {"type": "data-pcm", "data": {"content": "AA=="}}
    assert c.Data(name="pcm", data=None).to_wire() == {"type": "data-pcm", "data": None}
    assert c.Data(name="x", data=[1], id="d1", transient=True).to_wire() == {
        "type": "data-x", "data": [1], "id": "d1", "transient": True,
    }
    assert c.Data(name="x", data=1, transient=False).to_wire() == {"type": "data-x", "data": 1, "transient": False}


def test_chunks_are_frozen() -> None:
    chunk = c.TextDelta(id="t", delta="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.delta = "b"  # type: ignore[misc]


# --- downgrade for ai 6 --------------------------------------------------------------------------


def test_v7_only_chunks_are_marked() -> None:
    assert {cls.type for cls in all_chunk_classes() if cls.v7_only} == {"tool-approval-response"}
    assert {cls.type for cls in all_chunk_classes() if cls.v7_only} == V7_ONLY_TYPES


@pytest.mark.parametrize("wire_type", list(CATALOGUE))
def test_adapt_wire_v7_passes_everything(wire_type: str) -> None:
    cls, required, optional = CATALOGUE[wire_type]
    wire = cls(**required, **optional).to_wire()
    assert adapt_wire(wire, 7) is wire
    assert adapt_wire(wire, 8) is wire


@pytest.mark.parametrize("wire_type", list(CATALOGUE))
def test_adapt_wire_v6(wire_type: str) -> None:
    cls, required, optional = CATALOGUE[wire_type]
    wire = cls(**required, **optional).to_wire()
    adapted = adapt_wire(wire, 6)
    if wire_type == "tool-approval-response":
        assert adapted is None
    else:
        assert adapted == wire


def test_interrupted_becomes_stop_for_v6() -> None:
    meta = {"usage": {"totalTokens": 1}}
    assert adapt_wire(c.Finish(finishReason="interrupted", messageMetadata=meta).to_wire(), 6) == c.Finish(
        finishReason="stop", messageMetadata=meta
    ).to_wire()
    interrupted = c.Finish(finishReason="interrupted").to_wire()
    assert adapt_wire(interrupted, 7) == interrupted
    for reason in V6_FINISH_REASONS:
        wire = c.Finish(finishReason=reason).to_wire()  # type: ignore[arg-type]
        assert adapt_wire(wire, 6) == wire
    assert {"stop", "length", "content-filter", "tool-calls", "error", "other"} == V6_FINISH_REASONS
