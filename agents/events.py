"""ADK `Event` -> the core's `AgentEvent` (`adk_gateway.core.events`): the converter never sees ADK.

The one reading of ADK's events: their parts (text, thoughts, calls, responses, files), their
metadata (usage, finish reason, the model's name, grounding) and their actions (state and
artifact changes, confirmations and sign-ins asked for). Called once per event, on the hot path
of every streamed token: it reads the fields the core needs and builds small frozen values around
ADK's own payloads (no copies, no validation); what is rare (grounding, actions) costs a check.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from google.adk.events import Event
from google.genai import types

from adk_gateway.core import events as core

__all__ = ["agent_event", "finish_reason_name"]

OCTET_STREAM: Final = "application/octet-stream"
_NO_ARGS: Final[Mapping[str, Any]] = {}


def agent_event(event: Event, models: Mapping[str, str] | None = None) -> core.AgentEvent:
    """The core's reading of `event`; `models` names each agent's model, for a response that does
    not say which model made it."""
    content = event.content
    adk_parts = content.parts if content is not None else None
    usage = event.usage_metadata
    actions = event.actions
    requested = sign_ins = state_delta = artifact_delta = None
    if actions is not None:
        requested = actions.requested_tool_confirmations
        sign_ins = actions.requested_auth_configs
        state_delta = actions.state_delta
        artifact_delta = actions.artifact_delta
    grounding = event.grounding_metadata
    heard = event.input_transcription
    said = event.output_transcription
    return core.AgentEvent(
        id=event.id,
        invocation_id=event.invocation_id,
        author=event.author,
        role=content.role if content is not None else None,
        parts=tuple(map(_part, adk_parts)) if adk_parts else (),
        partial=bool(event.partial),
        turn_complete=bool(event.turn_complete),
        interrupted=bool(event.interrupted),
        error_code=event.error_code,
        error_message=event.error_message,
        finish_reason=finish_reason_name(event.finish_reason),
        usage=None if usage is None else core.Usage(
            input_tokens=usage.prompt_token_count or 0,
            output_tokens=usage.candidates_token_count or 0,
            total_tokens=usage.total_token_count or 0,
        ),
        requested_confirmations=frozenset(requested) if requested else core.NO_IDS,
        requested_sign_ins=frozenset(sign_ins) if sign_ins else core.NO_IDS,
        model=event.model_version or (models.get(event.author) if models and content is not None else None),
        sources=_sources(grounding) if grounding is not None else (),
        search_suggestions=_search_html(grounding) if grounding is not None else None,
        state_delta=state_delta or None,
        artifact_delta=artifact_delta or None,
        input_transcription=None if heard is None else core.Transcription(heard.text or "", bool(heard.finished)),
        output_transcription=None if said is None else core.Transcription(said.text or "", bool(said.finished)),
    )


def _sources(grounding: types.GroundingMetadata) -> tuple[core.Source, ...]:
    """The sources a grounded response cites: web pages (Google Search), and what a retrieval
    tool found (Vertex AI Search, RAG: a web page when its URI is http(s), else a document), and
    places (Google Maps)."""
    sources: list[core.Source] = []
    for chunk in grounding.grounding_chunks or ():
        page = chunk.web or chunk.maps  # a web page, or a place on Google Maps
        if page is not None and page.uri:
            sources.append(core.Source(page.title or page.uri, page.uri))
            continue
        found = chunk.retrieved_context
        if found is not None and (found.uri or found.title):
            uri = found.uri or ""
            web_page = uri.startswith(("http://", "https://"))
            sources.append(core.Source(found.title or uri.rsplit("/", 1)[-1] or "document", uri if web_page else None))
    return tuple(sources)


def _search_html(grounding: types.GroundingMetadata) -> str | None:
    entry = grounding.search_entry_point
    return entry.rendered_content or None if entry is not None else None


def finish_reason_name(reason: types.FinishReason | str | None) -> str | None:
    """A finish reason by name (`STOP`, …): how the core knows it."""
    if reason is None:
        return None
    return reason.name if isinstance(reason, enum.Enum) else str(reason)


def _part(part: types.Part) -> core.Part:
    # Checked in the order they occur: text on every streamed token, the rest rarely.
    if part.text is not None:
        return core.Text(part.text, bool(part.thought))
    call = part.function_call
    if call is not None:
        return core.FunctionCall(call.id, call.name or "", call.args or _NO_ARGS)
    response = part.function_response
    if response is not None:
        return core.FunctionResponse(response.id, response.name or "", response.response or _NO_ARGS)
    blob = part.inline_data
    if blob is not None:
        return core.InlineData(blob.mime_type or OCTET_STREAM, blob.data or b"")
    file_data = part.file_data
    if file_data is not None:
        return core.FileData(file_data.file_uri or "", file_data.mime_type or OCTET_STREAM)
    return core.Text("")  # a part of a kind the UI does not show (code, results of code): nothing to write
