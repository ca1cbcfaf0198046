"""ADK events -> UI message chunks, for one response. Pure: no I/O, no asyncio.

Theory of operation
-------------------
One `ResponseConverter` lives for one response (one POST, one WebSocket `send`, or one live
turn) and is fed ADK events in order. It returns, for each event, the chunks to send and the
*effects* the caller must act on (an approval to issue, a browser tool to wait for).

- A model call is one step. ADK gives every partial event of a model call the same `Event.id` as
  its final aggregated event, so a new model event id opens a step (`start-step`) and closes the
  previous one (`finish-step`). Function responses that arrive before the first model event (a
  continuation after an approval) are emitted before any step, as the AI SDK's own server does.
- Text and thoughts stream as true deltas of one part each, with ids derived from the event id.
  The final aggregated event repeats all text; when partials were seen for that event id, its
  text is skipped.
- ADK's `adk_request_confirmation` calls never reach the client as tools: they become
  `NeedsApproval` effects for the original call, and ADK's placeholder response ("requires
  confirmation") is hidden. ADK's rejection of a denied call becomes `tool-output-denied`.
- Browser tools are announced without `providerExecuted`; server tools with it.
- Error text from a model or a tool goes through `safe_error_text` (first line, paths replaced,
  at most 300 characters) before it reaches a client.

`finish()` closes whatever is open and ends the response with a finish reason mapped from ADK's.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.adk.events import Event
from google.genai import types

from gateway.core import chunks as c
from gateway.core.approval import REJECTED_TEXT

__all__ = [
    "BrowserCall",
    "ConversionResult",
    "NeedsApproval",
    "ResponseConverter",
    "ToolKind",
    "map_finish_reason",
    "safe_error_text",
]

CONFIRMATION_TOOL: Final = "adk_request_confirmation"
PLACEHOLDER_ERROR: Final = "This tool call requires confirmation, please approve or reject."
MAX_ERROR_TEXT: Final = 300


@dataclass(frozen=True, slots=True)
class ToolKind:
    """How the gateway treats a tool: where it runs and whether the gateway asks first."""

    browser: bool = False
    # Only browser tools are asked about by the gateway; server tools ask through ADK.
    needs_approval: bool = False


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    tool_call_id: str
    tool_name: str
    confirmation_id: str | None  # ADK's confirmation call id (server tools)
    browser: bool


@dataclass(frozen=True, slots=True)
class BrowserCall:
    """A browser tool the client must run now (no approval needed)."""

    tool_call_id: str
    tool_name: str


Effect = NeedsApproval | BrowserCall


@dataclass(slots=True)
class ConversionResult:
    chunks: list[c.Chunk] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)


_FINISH_REASONS: Final[Mapping[str, c.FinishReason]] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content-filter",
    "RECITATION": "content-filter",
    "BLOCKLIST": "content-filter",
    "PROHIBITED_CONTENT": "content-filter",
    "SPII": "content-filter",
    "IMAGE_SAFETY": "content-filter",
    "IMAGE_PROHIBITED_CONTENT": "content-filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
}


def map_finish_reason(reason: types.FinishReason | str | None) -> c.FinishReason:
    """ADK's (Gemini's) finish reason -> the AI SDK's."""
    if reason is None:
        return "stop"
    name = reason.name if isinstance(reason, types.FinishReason) else str(reason)
    return _FINISH_REASONS.get(name.upper(), "other")


_PATH = re.compile(r"(?<![:/\\])(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")


def safe_error_text(message: str | None, fallback: str = "The agent failed.") -> str:
    """One short line for a client: the first line only (a traceback's header at most), file
    paths replaced by `…`, bounded length."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines or lines[0].startswith("Traceback"):
        return fallback
    text = _PATH.sub("…", " ".join(lines[0].split()))
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


def add_usage(totals: dict[str, int], usage: types.GenerateContentResponseUsageMetadata) -> None:
    """Adds ADK's (Gemini's) token counts to `totals`, in the AI SDK's usage names."""
    pairs = (
        ("inputTokens", usage.prompt_token_count),
        ("outputTokens", usage.candidates_token_count),
        ("totalTokens", usage.total_token_count),
    )
    for key, value in pairs:
        if value:
            totals[key] = totals.get(key, 0) + int(value)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@dataclass(slots=True)
class ResponseConverter:
    """Converts the ADK events of one response; see the module docstring."""

    message_id: str | None = None
    tool_kinds: Callable[[str], ToolKind] = field(default=lambda _name: ToolKind())
    # Tools the chat refuses without asking; announced as server-run so the client never runs them.
    refused_tools: frozenset[str] = frozenset()

    _started: bool = False
    _in_step: bool = False
    _model_event_id: str | None = None
    _streamed_event_ids: set[str] = field(default_factory=set)
    _text_id: str | None = None
    _reasoning_id: str | None = None
    _part_counter: int = 0
    _announced: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    _awaiting_client: set[str] = field(default_factory=set)
    _last_finish: types.FinishReason | str | None = None
    _errored: bool = False
    _finished: bool = False
    _usage: dict[str, int] = field(default_factory=dict)

    # --- public ----------------------------------------------------------------------------

    def start(self) -> list[c.Chunk]:
        if self._started:
            return []
        self._started = True
        return [c.Start(messageId=self.message_id)]

    @property
    def errored(self) -> bool:
        return self._errored

    @property
    def awaiting_client(self) -> bool:
        """True when the response ends waiting for an approval or a browser tool."""
        return bool(self._awaiting_client)

    def await_client(self, tool_call_id: str) -> None:
        self._awaiting_client.add(tool_call_id)

    def convert(self, event: Event) -> ConversionResult:
        result = ConversionResult(self.start())
        # After an `error` chunk nothing more is sent (the client stops reading at it).
        if self._finished or self._errored or event.author == "user":
            return result
        if event.error_code or event.error_message:
            result.chunks += self._close_parts()
            result.chunks.append(c.Error(errorText=safe_error_text(event.error_message or event.error_code)))
            self._errored = True
            return result
        self._add_usage(event.usage_metadata)
        content = event.content
        if content is None or not content.parts:
            return result
        parts = list(content.parts)
        if any(p.function_response for p in parts):
            self._function_responses(event, parts, result)
            return result
        if content.role == "model" or content.role is None:
            self._model_event(event, parts, result)
        return result

    def finish(self, reason: c.FinishReason | None = None, metadata: Any = None) -> list[c.Chunk]:
        """Closes the response. After an `error` chunk nothing more is sent."""
        out = self.start()
        if self._finished:
            return out
        self._finished = True
        if self._errored:
            return out
        out += self._close_step()
        if reason is None:
            reason = "tool-calls" if self._awaiting_client else map_finish_reason(self._last_finish)
        if metadata is None and self._usage:
            metadata = {"usage": dict(self._usage)}
        out.append(c.Finish(finishReason=reason, messageMetadata=metadata))
        return out

    def error(self, text: str) -> list[c.Chunk]:
        out = self.start()
        if self._finished or self._errored:
            return out
        out += self._close_parts()
        self._errored = True
        self._finished = True
        out.append(c.Error(errorText=safe_error_text(text)))
        return out

    # --- helpers ---------------------------------------------------------------------------

    def _add_usage(self, usage: types.GenerateContentResponseUsageMetadata | None) -> None:
        if usage is not None:
            add_usage(self._usage, usage)

    def _next_id(self, prefix: str) -> str:
        self._part_counter += 1
        return f"{prefix}-{self._model_event_id or 'x'}-{self._part_counter}"

    def _close_parts(self) -> list[c.Chunk]:
        out: list[c.Chunk] = []
        if self._reasoning_id is not None:
            out.append(c.ReasoningEnd(id=self._reasoning_id))
            self._reasoning_id = None
        if self._text_id is not None:
            out.append(c.TextEnd(id=self._text_id))
            self._text_id = None
        return out

    def _close_step(self) -> list[c.Chunk]:
        out = self._close_parts()
        if self._in_step:
            out.append(c.FinishStep())
            self._in_step = False
        return out

    def _enter_model_event(self, event_id: str, result: ConversionResult) -> None:
        if event_id == self._model_event_id and self._in_step:
            return
        result.chunks += self._close_step()
        result.chunks.append(c.StartStep())
        self._in_step = True
        self._model_event_id = event_id

    def _text(self, text: str, thought: bool, result: ConversionResult) -> None:
        if not text:
            return
        if thought:
            if self._text_id is not None:
                result.chunks.append(c.TextEnd(id=self._text_id))
                self._text_id = None
            if self._reasoning_id is None:
                self._reasoning_id = self._next_id("reasoning")
                result.chunks.append(c.ReasoningStart(id=self._reasoning_id))
            result.chunks.append(c.ReasoningDelta(id=self._reasoning_id, delta=text))
        else:
            if self._reasoning_id is not None:
                result.chunks.append(c.ReasoningEnd(id=self._reasoning_id))
                self._reasoning_id = None
            if self._text_id is None:
                self._text_id = self._next_id("text")
                result.chunks.append(c.TextStart(id=self._text_id))
            result.chunks.append(c.TextDelta(id=self._text_id, delta=text))

    def _model_event(self, event: Event, parts: list[types.Part], result: ConversionResult) -> None:
        confirmations = [
            p.function_call for p in parts if p.function_call and p.function_call.name == CONFIRMATION_TOOL
        ]
        if confirmations and len(confirmations) == len(parts):
            # ADK's own confirmation event: not a model step, only approval requests.
            for call in confirmations:
                self._confirmation(call, result)
            return
        self._enter_model_event(event.id, result)
        if event.partial:
            self._streamed_event_ids.add(event.id)
        skip_text = not event.partial and event.id in self._streamed_event_ids
        for part in parts:
            if part.text is not None and not skip_text:
                self._text(part.text, bool(part.thought), result)
            elif part.inline_data is not None and not event.partial:
                result.chunks += self._close_parts()
                blob = part.inline_data
                encoded = base64.b64encode(blob.data or b"").decode("ascii")
                media_type = blob.mime_type or "application/octet-stream"
                result.chunks.append(c.File(url=f"data:{media_type};base64,{encoded}", mediaType=media_type))
            elif part.file_data is not None and part.file_data.file_uri and not event.partial:
                result.chunks += self._close_parts()
                result.chunks.append(
                    c.File(
                        url=part.file_data.file_uri,
                        mediaType=part.file_data.mime_type or "application/octet-stream",
                    )
                )
            elif part.function_call is not None and not event.partial:
                if part.function_call.name == CONFIRMATION_TOOL:
                    self._confirmation(part.function_call, result)
                else:
                    self._function_call(part.function_call, result)
        if not event.partial:
            result.chunks += self._close_parts()
            if event.finish_reason is not None:
                self._last_finish = event.finish_reason

    def _function_call(self, call: types.FunctionCall, result: ConversionResult) -> None:
        call_id = call.id or self._next_id("call")
        name = call.name or "unknown"
        kind = self.tool_kinds(name)
        browser = kind.browser and name not in self.refused_tools
        provider_executed = None if browser else True
        args = _json_safe(dict(call.args or {}))
        result.chunks += self._close_parts()
        result.chunks.append(
            c.ToolInputStart(toolCallId=call_id, toolName=name, providerExecuted=provider_executed)
        )
        result.chunks.append(
            c.ToolInputDelta(toolCallId=call_id, inputTextDelta=json.dumps(args, separators=(",", ":")))
        )
        result.chunks.append(
            c.ToolInputAvailable(
                toolCallId=call_id, toolName=name, input=args, providerExecuted=provider_executed
            )
        )
        self._announced[call_id] = name
        if browser:
            self._awaiting_client.add(call_id)
            if kind.needs_approval:
                result.effects.append(NeedsApproval(call_id, name, None, browser=True))
            else:
                result.effects.append(BrowserCall(call_id, name))

    def _confirmation(self, call: types.FunctionCall, result: ConversionResult) -> None:
        args = dict(call.args or {})
        original = args.get("originalFunctionCall") or {}
        original_id = original.get("id")
        if not original_id:
            return
        name = str(original.get("name") or self._announced.get(original_id, "unknown"))
        self._awaiting_client.add(original_id)
        result.effects.append(NeedsApproval(original_id, name, call.id, browser=False))

    def _function_responses(self, event: Event, parts: list[types.Part], result: ConversionResult) -> None:
        requested = set((event.actions.requested_tool_confirmations or {}).keys()) if event.actions else set()
        for part in parts:
            response = part.function_response
            if response is None or response.name == CONFIRMATION_TOOL:
                continue
            call_id = response.id or ""
            payload = dict(response.response or {})
            if call_id in requested or payload == {"error": PLACEHOLDER_ERROR}:
                continue
            kind = self.tool_kinds(response.name or "")
            provider_executed = None if kind.browser and response.name not in self.refused_tools else True
            self._awaiting_client.discard(call_id)
            error = payload.get("error") if len(payload) == 1 else None
            if error == REJECTED_TEXT:
                result.chunks += self._close_parts()
                result.chunks.append(c.ToolOutputDenied(toolCallId=call_id))
            elif isinstance(error, str):
                # A tool's own error text (an exception message, a path) reaches the client only
                # through the same scrubber as a model's.
                result.chunks += self._close_parts()
                result.chunks.append(
                    c.ToolOutputError(toolCallId=call_id, errorText=safe_error_text(error, "The tool failed."),
                                      providerExecuted=provider_executed)
                )
            else:
                result.chunks += self._close_parts()
                result.chunks.append(
                    c.ToolOutputAvailable(
                        toolCallId=call_id, output=_json_safe(payload), providerExecuted=provider_executed
                    )
                )


def message_replay_chunks(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chunks that rebuild an assistant message's existing parts (wire dicts).

    A resumed continuation is replayed into an empty message (the AI SDK treats a resume as a full
    replay), so its tool outputs would refer to calls the client no longer has. Prefixing the
    replay with these chunks makes it self-contained.
    """
    out: list[dict[str, Any]] = []
    in_step = False
    for index, part in enumerate(parts):
        kind = str(part.get("type", ""))
        pid = f"replay-{index}"
        if kind == "step-start":
            if in_step:
                out.append(c.FinishStep().to_wire())
            out.append(c.StartStep().to_wire())
            in_step = True
        elif kind in ("text", "reasoning"):
            text = str(part.get("text", ""))
            if kind == "text":
                out += [c.TextStart(id=pid).to_wire(), c.TextDelta(id=pid, delta=text).to_wire(),
                        c.TextEnd(id=pid).to_wire()]
            else:
                out += [c.ReasoningStart(id=pid).to_wire(), c.ReasoningDelta(id=pid, delta=text).to_wire(),
                        c.ReasoningEnd(id=pid).to_wire()]
        elif kind == "file" and isinstance(part.get("url"), str):
            out.append(c.File(url=part["url"], mediaType=str(part.get("mediaType", "application/octet-stream")))
                       .to_wire())
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            out += _tool_part_replay(kind, part)
        elif kind.startswith("data-") and "data" in part:
            out.append(c.Data(name=kind.removeprefix("data-"), data=part["data"], id=part.get("id")).to_wire())
    if in_step:
        out.append(c.FinishStep().to_wire())
    return out


def _tool_part_replay(kind: str, part: dict[str, Any]) -> list[dict[str, Any]]:
    call_id = part.get("toolCallId")
    if not isinstance(call_id, str):
        return []
    dynamic = kind == "dynamic-tool"
    name = str(part.get("toolName") if dynamic else kind.removeprefix("tool-"))
    executed = True if part.get("providerExecuted") is True else None
    out = [c.ToolInputAvailable(toolCallId=call_id, toolName=name, input=part.get("input"),
                                providerExecuted=executed, dynamic=True if dynamic else None).to_wire()]
    approval = part.get("approval")
    state = part.get("state")
    if isinstance(approval, dict) and isinstance(approval.get("id"), str):
        out.append(c.ToolApprovalRequest(approvalId=approval["id"], toolCallId=call_id).to_wire())
    if state == "output-available":
        out.append(c.ToolOutputAvailable(toolCallId=call_id, output=part.get("output"),
                                         providerExecuted=executed).to_wire())
    elif state == "output-error":
        out.append(c.ToolOutputError(toolCallId=call_id, errorText=str(part.get("errorText") or "error"),
                                     providerExecuted=executed).to_wire())
    elif state == "output-denied":
        out.append(c.ToolOutputDenied(toolCallId=call_id).to_wire())
    return out
