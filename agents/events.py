"""ADK `Event` -> the core's `AgentEvent` (`gateway.core.events`): the converters never see ADK.

Called once per event, on the hot path of every streamed token: it reads the fields the core
needs and builds small frozen values around ADK's own payloads (no copies, no validation).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from google.adk.events import Event
from google.genai import types

from gateway.core.events import (
    NO_IDS,
    AgentEvent,
    FileData,
    FunctionCall,
    FunctionResponse,
    InlineData,
    Part,
    Text,
    Transcription,
    Usage,
)

__all__ = ["agent_event", "finish_reason_name"]

OCTET_STREAM: Final = "application/octet-stream"
_NO_ARGS: Final[Mapping[str, Any]] = {}


def agent_event(event: Event) -> AgentEvent:
    content = event.content
    adk_parts = content.parts if content is not None else None
    usage = event.usage_metadata
    actions = event.actions
    requested = actions.requested_tool_confirmations if actions is not None else None
    heard = event.input_transcription
    said = event.output_transcription
    return AgentEvent(
        id=event.id,
        author=event.author,
        role=content.role if content is not None else None,
        parts=tuple(map(_part, adk_parts)) if adk_parts else (),
        partial=bool(event.partial),
        turn_complete=bool(event.turn_complete),
        interrupted=bool(event.interrupted),
        error_code=event.error_code,
        error_message=event.error_message,
        finish_reason=finish_reason_name(event.finish_reason),
        usage=None if usage is None else Usage(
            input_tokens=usage.prompt_token_count or 0,
            output_tokens=usage.candidates_token_count or 0,
            total_tokens=usage.total_token_count or 0,
        ),
        requested_confirmations=frozenset(requested) if requested else NO_IDS,
        input_transcription=None if heard is None else Transcription(heard.text or "", bool(heard.finished)),
        output_transcription=None if said is None else Transcription(said.text or "", bool(said.finished)),
    )


def finish_reason_name(reason: types.FinishReason | str | None) -> str | None:
    """A finish reason by name (`STOP`, …): how the core knows it."""
    if reason is None:
        return None
    return reason.name if isinstance(reason, enum.Enum) else str(reason)


def _part(part: types.Part) -> Part:
    # Checked in the order they occur: text on every streamed token, the rest rarely.
    if part.text is not None:
        return Text(part.text, bool(part.thought))
    call = part.function_call
    if call is not None:
        return FunctionCall(call.id, call.name or "", call.args or _NO_ARGS)
    response = part.function_response
    if response is not None:
        return FunctionResponse(response.id, response.name or "", response.response or _NO_ARGS)
    blob = part.inline_data
    if blob is not None:
        return InlineData(blob.mime_type or OCTET_STREAM, blob.data or b"")
    file_data = part.file_data
    if file_data is not None:
        return FileData(file_data.file_uri or "", file_data.mime_type or OCTET_STREAM)
    return Text("")  # a part of a kind the UI does not show (code, results of code): nothing to write
