"""Agent events -> UI message chunks, for chat responses and live turns. Pure: no I/O, no asyncio.

Both read the core's events (`gateway.core.events`; `agents.events` adapts ADK's) and write
through a `MessageWriter`, which keeps the part bookkeeping. The rules both follow are here once:
what a tool's result means (`write_tool_result`: ADK's rejection and the interrupt result are
denials, a lone `error` is a tool error, anything else the output), how what the approval book
decides is shown (`write_shown`), how a file is sent (`write_file`), which error text reaches a
client (`safe_error_text`) and how ADK's finish reasons map to the AI SDK's (`map_finish_reason`).

Chat: `ResponseConverter`
-------------------------
One converter lives for one response (one POST, or one WebSocket `send`) and is fed the run's
events in order. It returns, for each event, the chunks to send and the *effects* the caller must
act on (an approval to issue, a browser tool to wait for).

- A model call is one step. ADK gives every partial event of a model call the same event id as
  its final aggregated event, so a new model event id opens a step and closes the previous one.
  Function responses that arrive before the first model event (a continuation after an
  approval) are written before any step, as the AI SDK's own server does.
- Text and thoughts stream as deltas; the final aggregated event repeats all text, so when
  partials were seen for that event id, its text is skipped.
- ADK's `adk_request_confirmation` calls never reach the client as tools: they become
  `NeedsApproval` effects for the original call, and ADK's placeholder response ("requires
  confirmation") is hidden.
- Browser tools are announced without `providerExecuted`; server tools (and browser tools the
  chat refuses) with it.
- A call shows one outcome: `reported` (the chat book's) records each tool result and says
  whether it is new; one that is not (ADK's rejection of an approval that had expired) is not
  shown. What the book decides outside the events — an approval request, outcomes shown before
  the run — is written with `show`.
- An error event ends the response with an `error` chunk; `finish()` ends it otherwise, with the
  reason mapped from the model's (`tool-calls` while a call waits for the client).

Live: `LiveTurn`
----------------
One model turn of a live session is one complete UI message. ADK gives every live response a
fresh event id, so a turn's step is not tied to event ids: it opens with the first model output
and closes when a call waits for the client (`LiveTurn.pause`) or at the turn's end. The model's
speech transcript and its text become text parts (partials stream; the aggregated copy that
follows is skipped), audio becomes transient `data-pcm` chunks, the user's speech a
`data-transcription` part with a stable id, updated as it grows. Tool calls and responses go to
the session, whose approval book (`LiveBook`) decides about them; the turn writes what it decides
(`tool_call`, `tool_result`, `show`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.core import chunks as c
from gateway.core.approval import INTERRUPT_TEXT, REJECTED_TEXT, AwaitClient, CallState, RunInBrowser, Shown
from gateway.core.events import (
    AgentEvent,
    FileData,
    FunctionCall,
    FunctionResponse,
    InlineData,
    Text,
    Transcription,
)
from gateway.core.kinds import CONFIRMATION_TOOL, PLACEHOLDER_ERROR, ToolKind
from gateway.core.pcm import OUTPUT_RATE
from gateway.core.writer import MessageWriter

__all__ = [
    "MAX_ERROR_TEXT",
    "BrowserCall",
    "ConversionResult",
    "LiveTurn",
    "NeedsApproval",
    "ResponseConverter",
    "is_denial",
    "map_finish_reason",
    "message_replay_chunks",
    "pcm_chunk_data",
    "result_outcome",
    "safe_error_text",
    "write_file",
    "write_shown",
    "write_tool_result",
]

MAX_ERROR_TEXT: Final = 300
TOOL_FAILED: Final = "The tool failed."

# --- the shared rules ------------------------------------------------------------------------------

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


def map_finish_reason(reason: str | None) -> c.FinishReason:
    """The model's finish reason (by name, any case) -> the AI SDK's."""
    if reason is None:
        return "stop"
    return _FINISH_REASONS.get(reason.upper(), "other")


_PATH = re.compile(r"(?<![:/\\])(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")


def safe_error_text(message: str | None, fallback: str = "The agent failed.") -> str:
    """One short line for a client: the first line only (a traceback's header at most), file
    paths replaced by `…`, bounded length."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines or lines[0].startswith("Traceback"):
        return fallback
    text = _PATH.sub("…", " ".join(lines[0].split()))
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


def is_denial(error: str) -> bool:
    """Whether a tool's error result says the user denied it: ADK's rejection, or the interrupt
    result of "deny and stop" and of a barge-in."""
    return error == REJECTED_TEXT or error.startswith(INTERRUPT_TEXT)


def result_outcome(payload: Mapping[str, Any]) -> CallState:
    """How a tool's result ends its call for the client: denied (`is_denial`), failed (a lone
    `error` text) or its output."""
    error = payload.get("error") if len(payload) == 1 else None
    if not isinstance(error, str):
        return CallState.OUTPUT_AVAILABLE
    return CallState.OUTPUT_DENIED if is_denial(error) else CallState.OUTPUT_ERROR


def write_tool_result(writer: MessageWriter, call_id: str, payload: Mapping[str, Any], *,
                      provider_executed: bool) -> None:
    """A tool's result as the client sees it: denied, failed (scrubbed text) or its output."""
    outcome = result_outcome(payload)
    if outcome is CallState.OUTPUT_DENIED:
        writer.tool_denied(call_id)
    elif outcome is CallState.OUTPUT_ERROR:
        # A tool's own error text (an exception message, a path) reaches the client only through
        # the same scrubber as a model's.
        writer.tool_error(call_id, safe_error_text(payload["error"], TOOL_FAILED), provider_executed=provider_executed)
    else:
        writer.tool_output(call_id, payload, provider_executed=provider_executed)


def write_shown(writer: MessageWriter, item: Shown) -> None:
    """What the approval authority says to show the client: an approval request, a browser tool
    re-announced to run now, or how a call ended (denied, or an error with its text)."""
    if isinstance(item, AwaitClient):
        if item.approval_id is not None:  # None: the browser runs it unasked, nothing to say
            writer.approval_request(item.approval_id, item.tool_call_id)
    elif isinstance(item, RunInBrowser):
        writer.tool_input_available(item.tool_call_id, item.tool_name, item.input)
    elif item.state is CallState.OUTPUT_DENIED:
        writer.tool_denied(item.tool_call_id)
    else:
        writer.tool_error(item.tool_call_id, item.error_text or TOOL_FAILED, provider_executed=not item.browser)


def write_file(writer: MessageWriter, part: InlineData | FileData) -> None:
    """A file part: inline bytes as a data URL, a file by its URI (one without a URI: nothing)."""
    if isinstance(part, InlineData):
        encoded = base64.b64encode(part.data).decode("ascii")
        writer.file(f"data:{part.mime_type};base64,{encoded}", part.mime_type)
    elif part.uri:
        writer.file(part.uri, part.mime_type)


_RATE = re.compile(r"rate=(\d+)")


def pcm_chunk_data(pcm: bytes, sample_rate: int = OUTPUT_RATE) -> dict[str, Any]:
    """The `data` of a `data-pcm` chunk."""
    return {"content": base64.b64encode(pcm).decode("ascii"), "sampleRate": sample_rate, "channels": 1,
            "bitDepth": 16}


def _audio_rate(mime_type: str) -> int:
    match = _RATE.search(mime_type)
    return int(match.group(1)) if match else OUTPUT_RATE


# --- chat ------------------------------------------------------------------------------------------


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


def _any_kind(_name: str) -> ToolKind:
    return ToolKind()


class ResponseConverter:
    """Converts the events of one chat response; see the module docstring."""

    __slots__ = ("_announced", "_awaiting_client", "_last_finish", "_model_event_id", "_out", "_streamed",
                 "_writer", "message_id", "refused_tools", "reported", "tool_kinds")

    def __init__(
        self,
        message_id: str | None = None,
        tool_kinds: Callable[[str], ToolKind] = _any_kind,
        # Tools the chat refuses without asking; announced as server-run so the client never runs them.
        refused_tools: frozenset[str] = frozenset(),
        # Records a call's outcome and says whether it is new (`ApprovalBook.reported`): a call
        # shows one outcome, e.g. not ADK's rejection of an approval that had already expired.
        reported: Callable[[str, CallState], bool] | None = None,
    ) -> None:
        self.message_id = message_id
        self.tool_kinds = tool_kinds
        self.refused_tools = refused_tools
        self.reported = reported
        self._out: list[c.Chunk] = []
        self._writer = MessageWriter(self._out.append, message_id=message_id)
        self._model_event_id: str | None = None
        self._streamed: set[str] = set()  # model event ids whose text came as partials
        self._announced: dict[str, str] = {}  # call id -> tool name
        self._awaiting_client: set[str] = set()
        self._last_finish: str | None = None

    def _take(self) -> list[c.Chunk]:
        out = self._out[:]
        self._out.clear()
        return out

    # --- public ----------------------------------------------------------------------------------

    def start(self) -> list[c.Chunk]:
        self._writer.start()
        return self._take()

    @property
    def errored(self) -> bool:
        return self._writer.errored

    @property
    def usage(self) -> dict[str, int]:
        """The response's token counts so far (what its `finish` reports)."""
        return self._writer.usage

    @property
    def awaiting_client(self) -> bool:
        """True when the response ends waiting for an approval or a browser tool."""
        return bool(self._awaiting_client)

    def await_client(self, tool_call_id: str) -> None:
        self._awaiting_client.add(tool_call_id)

    def convert(self, event: AgentEvent) -> ConversionResult:
        writer = self._writer
        writer.start()
        result = ConversionResult()
        # After the end (an `error` chunk) nothing more is sent: the client stops reading there.
        if not writer.ended and event.author != "user":
            self._convert(event, result)
        result.chunks = self._take()
        return result

    def finish(self, reason: c.FinishReason | None = None, metadata: Any = None) -> list[c.Chunk]:
        """Ends the response (nothing after an `error` chunk)."""
        writer = self._writer
        writer.start()
        if not writer.ended:
            if reason is None:
                reason = "tool-calls" if self._awaiting_client else map_finish_reason(self._last_finish)
            writer.finish(reason, metadata)
        return self._take()

    def error(self, text: str) -> list[c.Chunk]:
        """Ends the response with an `error` chunk (its text scrubbed)."""
        self._writer.error(safe_error_text(text))
        return self._take()

    def abort(self, reason: str | None = None) -> list[c.Chunk]:
        """Ends a response that was stopped with `abort`."""
        self._writer.abort(reason)
        return self._take()

    def show(self, items: Iterable[Shown]) -> list[c.Chunk]:
        """What the approval book says to show the client (`write_shown`), in order."""
        for item in items:
            write_shown(self._writer, item)
        return self._take()

    # --- events ----------------------------------------------------------------------------------

    def _convert(self, event: AgentEvent, result: ConversionResult) -> None:
        writer = self._writer
        if event.error_code or event.error_message:
            writer.error(safe_error_text(event.error_message or event.error_code))
            return
        if event.usage is not None:
            writer.add_usage(event.usage)
        parts = event.parts
        if not parts:
            return
        if any(isinstance(part, FunctionResponse) for part in parts):
            self._function_responses(event, result)
        elif event.role == "model" or event.role is None:
            self._model_event(event, result)

    def _browser(self, name: str) -> bool:
        return self.tool_kinds(name).browser and name not in self.refused_tools

    def _model_event(self, event: AgentEvent, result: ConversionResult) -> None:
        writer = self._writer
        parts = event.parts
        if all(isinstance(part, FunctionCall) and part.name == CONFIRMATION_TOOL for part in parts):
            # ADK's own confirmation event: not a model step, only approval requests.
            for part in parts:
                self._confirmation(part, result)  # type: ignore[arg-type]
            return
        if event.id != self._model_event_id or not writer.in_step:
            writer.finish_step()
            writer.start_step()
            self._model_event_id = event.id
            writer.scope = event.id or "x"
        partial = event.partial
        if partial:
            self._streamed.add(event.id)
        skip_text = not partial and event.id in self._streamed
        for part in parts:
            if isinstance(part, Text):
                if not skip_text:
                    (writer.reasoning if part.thought else writer.text)(part.text)
            elif partial:
                continue  # calls and files come whole in the final event
            elif isinstance(part, FunctionCall):
                if part.name == CONFIRMATION_TOOL:
                    self._confirmation(part, result)
                else:
                    self._function_call(part, result)
            elif isinstance(part, InlineData | FileData):
                write_file(writer, part)
        if not partial:
            writer.close_parts()
            if event.finish_reason is not None:
                self._last_finish = event.finish_reason

    def _function_call(self, call: FunctionCall, result: ConversionResult) -> None:
        call_id = call.id or self._writer.next_id("call")
        name = call.name or "unknown"
        browser = self._browser(name)
        self._writer.tool_call(call_id, name, call.args, provider_executed=not browser)
        self._announced[call_id] = name
        if browser:
            self._awaiting_client.add(call_id)
            if self.tool_kinds(name).needs_approval:
                result.effects.append(NeedsApproval(call_id, name, None, browser=True))
            else:
                result.effects.append(BrowserCall(call_id, name))

    def _confirmation(self, call: FunctionCall, result: ConversionResult) -> None:
        original = call.args.get("originalFunctionCall") or {}
        original_id = original.get("id")
        if not original_id:
            return
        name = str(original.get("name") or self._announced.get(original_id, "unknown"))
        self._awaiting_client.add(original_id)
        result.effects.append(NeedsApproval(original_id, name, call.id, browser=False))

    def _function_responses(self, event: AgentEvent, result: ConversionResult) -> None:
        requested = event.requested_confirmations
        for part in event.parts:
            if not isinstance(part, FunctionResponse) or part.name == CONFIRMATION_TOOL:
                continue
            call_id = part.id or ""
            payload = part.response
            if call_id in requested or (len(payload) == 1 and payload.get("error") == PLACEHOLDER_ERROR):
                continue
            self._awaiting_client.discard(call_id)
            if self.reported is not None and not self.reported(call_id, result_outcome(payload)):
                continue
            write_tool_result(self._writer, call_id, payload, provider_executed=not self._browser(part.name))


# --- live ------------------------------------------------------------------------------------------


class LiveTurn:
    """One model turn of a live session (one UI message); see the module docstring.

    The session creates one per turn and drops it once it has ended; `writer.started` says
    whether anything of it reached the log yet.
    """

    __slots__ = ("_reasoning_streamed", "_text_streamed", "_transcript_streamed", "_user_part", "_user_text",
                 "calls", "message_id", "model_output", "writer")

    def __init__(self, emit: Callable[[c.Chunk], None], message_id: str) -> None:
        self.message_id = message_id
        self.writer = MessageWriter(emit, message_id=message_id)
        self.model_output = False  # the model said something in this turn
        self.calls: list[str] = []  # the tool calls announced in it
        self._text_streamed = False
        self._reasoning_streamed = False
        self._transcript_streamed = False
        self._user_text = ""
        self._user_part = 0

    def _step(self) -> MessageWriter:
        self.model_output = True
        self.writer.start_step()
        return self.writer

    def model_event(
        self,
        event: AgentEvent,
        on_call: Callable[[FunctionCall], None],
        on_response: Callable[[FunctionResponse], None],
    ) -> None:
        """Writes the event's transcript, text, audio and files, in order; its tool calls (whole,
        in final events) and responses go to `on_call` / `on_response`, which decide about them."""
        if event.output_transcription is not None:
            self._model_transcription(event.output_transcription)
        partial = event.partial
        for part in event.parts:
            if isinstance(part, Text):
                self._model_text(part.text, part.thought, partial)
            elif isinstance(part, FunctionResponse):
                on_response(part)
            elif isinstance(part, FunctionCall):
                if not partial:
                    on_call(part)
            elif isinstance(part, InlineData) and part.mime_type.startswith("audio/pcm"):
                self._step().data("pcm", pcm_chunk_data(part.data, _audio_rate(part.mime_type)), transient=True)
            elif not partial and (isinstance(part, InlineData) or part.uri):
                write_file(self._step(), part)
        if event.usage is not None and self.writer.started:
            self.writer.add_usage(event.usage)

    def user_transcription(self, transcription: Transcription) -> None:
        """The user's speech so far: one `data-transcription` part per utterance, replaced as it grows."""
        text = transcription.text
        if not text and not transcription.finished:
            return
        self._user_text = text if transcription.finished else self._user_text + text
        self.writer.data("transcription", {"role": "user", "text": self._user_text,
                                           "finished": transcription.finished},
                         part_id=f"{self.message_id}-user-{self._user_part}")
        if transcription.finished:
            self._user_text = ""
            self._user_part += 1

    def _model_transcription(self, transcription: Transcription) -> None:
        text = transcription.text
        if transcription.finished:
            if self._transcript_streamed:  # the aggregated copy of what streamed: it ends the part
                self._transcript_streamed = False
                self.writer.close_parts()
            elif text:
                self._step().text(text)
                self.writer.close_parts()
        elif text:
            self._transcript_streamed = True
            self._step().text(text)

    def _model_text(self, text: str, thought: bool, partial: bool) -> None:
        writer = self._step()
        if partial:
            if thought:
                self._reasoning_streamed = True
                writer.reasoning(text)
            else:
                self._text_streamed = True
                writer.text(text)
        elif thought and self._reasoning_streamed:  # the aggregated copy: skipped, but it ends the part
            self._reasoning_streamed = False
            writer.end_reasoning()
        elif not thought and self._text_streamed:
            self._text_streamed = False
            writer.end_text()
        elif text:
            (writer.reasoning if thought else writer.text)(text)
            writer.close_parts()

    def tool_call(self, call: FunctionCall, *, browser: bool) -> tuple[str, str, Any]:
        """Announces a call; returns its (id, name, input) as announced."""
        call_id = call.id or self.writer.next_id("call")
        name = call.name or "unknown"
        announced = self._step().tool_call(call_id, name, call.args, provider_executed=not browser)
        self.calls.append(call_id)
        return call_id, name, announced

    def tool_result(self, call_id: str, payload: Mapping[str, Any], *, browser: bool) -> None:
        write_tool_result(self.writer, call_id, payload, provider_executed=not browser)

    def pause(self) -> None:
        """A call waits for the client: the step ends here (the answer opens the next one)."""
        self.writer.finish_step()

    def show(self, item: Shown) -> None:
        """What the approval book says to show (`write_shown`); a call that now waits for the
        client ends the step."""
        write_shown(self.writer, item)
        if isinstance(item, AwaitClient):
            self.pause()

    def error(self, message: str | None) -> None:
        """The model failed: an `error` chunk; the turn then ends with `finish` (`error`)."""
        self.writer.error(safe_error_text(message), final=False)

    def end(self, reason: c.FinishReason) -> None:
        self.writer.finish(reason)


# --- replays ---------------------------------------------------------------------------------------


def message_replay_chunks(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chunks that rebuild an assistant message's existing parts (wire dicts).

    A resumed continuation is replayed into an empty message (the AI SDK treats a resume as a full
    replay), so its tool outputs would refer to calls the client no longer has. Prefixing the
    replay with these chunks makes it self-contained.
    """
    out: list[dict[str, Any]] = []
    writer = MessageWriter(lambda chunk: out.append(chunk.to_wire()), scope="replay", started=True)
    for part in parts:
        kind = str(part.get("type", ""))
        if kind == "step-start":
            writer.finish_step()
            writer.start_step()
        elif kind == "text":
            writer.text(str(part.get("text", "")))
            writer.end_text()
        elif kind == "reasoning":
            writer.reasoning(str(part.get("text", "")))
            writer.end_reasoning()
        elif kind == "file" and isinstance(part.get("url"), str):
            writer.file(part["url"], str(part.get("mediaType", "application/octet-stream")))
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            _replay_tool_part(writer, kind, part)
        elif kind.startswith("data-") and "data" in part:
            writer.data(kind.removeprefix("data-"), part["data"], part_id=part.get("id"))
    writer.finish_step()
    return out


def _replay_tool_part(writer: MessageWriter, kind: str, part: dict[str, Any]) -> None:
    call_id = part.get("toolCallId")
    if not isinstance(call_id, str):
        return
    dynamic = kind == "dynamic-tool"
    name = str(part.get("toolName") if dynamic else kind.removeprefix("tool-"))
    executed = part.get("providerExecuted") is True
    writer.tool_input_available(call_id, name, part.get("input"), provider_executed=executed, dynamic=dynamic)
    approval = part.get("approval")
    if isinstance(approval, dict) and isinstance(approval.get("id"), str):
        writer.approval_request(approval["id"], call_id)
    state = part.get("state")
    if state == "output-available":
        writer.tool_output(call_id, part.get("output"), provider_executed=executed)
    elif state == "output-error":
        writer.tool_error(call_id, str(part.get("errorText") or "error"), provider_executed=executed)
    elif state == "output-denied":
        writer.tool_denied(call_id)
