"""The agent's events as the core sees them: small frozen values, no ADK types.

`adk_gateway.agents.events.agent_event` builds one from an ADK `Event`; the converters
(`adk_gateway.core.converter`) read only these. The fields are the ones the UI message stream needs;
anything else of ADK's stays in `agents/`. Payloads (`args`, `response`, `data`) are the ADK
objects' own values, not copies: an event is read once, on the hot path of every streamed token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NO_IDS",
    "AgentEvent",
    "FileData",
    "FunctionCall",
    "FunctionResponse",
    "InlineData",
    "Part",
    "Source",
    "Text",
    "Transcription",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class Text:
    """Text of the model, or its thought (`thought`: a reasoning part)."""

    text: str
    thought: bool = False


@dataclass(frozen=True, slots=True)
class FunctionCall:
    id: str | None
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class FunctionResponse:
    id: str | None
    name: str
    response: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class InlineData:
    """Bytes the model sent inline: an image, a file, or audio (`audio/pcm;rate=…`)."""

    mime_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class FileData:
    """A file the model refers to by URI."""

    uri: str
    mime_type: str


Part = Text | FunctionCall | FunctionResponse | InlineData | FileData


@dataclass(frozen=True, slots=True)
class Transcription:
    """What was said, as text: the user's speech (input) or the model's (output)."""

    text: str
    finished: bool


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model response (zero: not reported)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Source:
    """A source a grounded answer cites: a web page (`url`, http or https) or a document the
    agent retrieved (`url` None: a corpus file, a datastore entry)."""

    title: str
    url: str | None = None


NO_IDS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One event of an agent run.

    `id`: the model call's id (every partial event of one model call shares it with its final
    event); `invocation_id`: the run's. `role`: the content's role (`model`, `user`; None when
    unset). `finish_reason`: the model's, by name (`STOP`, `MAX_TOKENS`, …). `model`: the model's
    name (the version it reported, else the agent's model). `requested_confirmations`: ids of
    the calls ADK asks a confirmation for in this event; `requested_sign_ins`: ids of the calls
    whose (placeholder) response waits for the user to sign in. `sources` and
    `search_suggestions` (the HTML of Google Search's suggestions): the response's grounding.
    `state_delta`, `artifact_delta` (name -> version): what the event changed in the session.
    """

    id: str = ""
    invocation_id: str = ""
    author: str = ""
    role: str | None = None
    parts: tuple[Part, ...] = ()
    partial: bool = False
    turn_complete: bool = False
    interrupted: bool = False
    error_code: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    requested_confirmations: frozenset[str] = NO_IDS
    requested_sign_ins: frozenset[str] = NO_IDS
    model: str | None = None
    sources: tuple[Source, ...] = ()
    search_suggestions: str | None = None
    state_delta: Mapping[str, Any] | None = None
    artifact_delta: Mapping[str, int] | None = None
    input_transcription: Transcription | None = None
    output_transcription: Transcription | None = None
