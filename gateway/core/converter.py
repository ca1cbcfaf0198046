"""Agent events -> UI message chunks, for chat responses and live turns alike. Pure: no I/O, no asyncio.

One `MessageConverter` writes one assistant message: a chat response (one POST, or one WebSocket
`send`), or one model turn of a live session. It is fed the core's events (`adk_gateway.core.events`;
`adk_gateway.agents.events` reads ADK's) in order and returns, for each, the chunks to send and the *effects*
the caller acts on; it writes through a `MessageWriter`, which keeps the part bookkeeping. The two
kinds of message differ only in how steps are cut and what an error does (`Mode`).

The rules, once for both:

- Steps: in a chat a model call is one step (every partial event of a call shares its final
  event's id); in a live turn the step opens with the first output and ends when a call waits for
  the client. Whenever a step's author differs from the previous step's (the first step included)
  the step opens with a `data-agent` part naming it. Function responses that arrive before the
  first model event (a continuation after an approval) are written before any step, as the AI
  SDK's own server does.
- Text and thoughts stream as deltas; the aggregated copy that follows them (ADK's final event,
  a live turn's full text or transcript) is skipped and ends the part.
- Tool calls: a browser tool is announced without `providerExecuted` (the client answers it), a
  server tool with it (also a browser tool the chat refuses: the caller's `tools` says how each
  tool is shown). Each announced call is a `CallAnnounced` effect: the caller's approval book
  decides what follows. A long-running tool that the client answers later (`ToolKind.long_running`) is
  shown at the end of the response, with its interim result as a `data-tool-status` part: ADK calls
  the model again after that result, and a stock client's `lastAssistantMessageIsCompleteWithToolCalls`
  reads only the message's last step.
- ADK's own requests never reach the client as tools: `adk_request_confirmation` becomes
  `NeedsApproval` for the original call (its placeholder response is hidden), and
  `adk_request_credential` becomes `SignInRequested`, which the caller shows with `sign_in` (the
  tool's placeholder response is hidden; a tool still asking after a sign-in failed).
- A call shows one outcome: `reported` (the approval book's) records each tool result and says
  whether it is new. What the book decides outside the events is written with `show`.
- What a whole response carries besides its parts: its usage (each model call counted once, from
  its final response), its grounding (`source-url` / `source-document` parts and the search
  suggestions as `data-search-suggestions`, each once a message), state changes to the keys the
  client sees (`data-state`, one id, updated in place) and saved artifacts (`ArtifactSaved`: the
  caller writes the `file` part with a link it signs).
- The message ends with `finish` (its reason mapped from the model's, or `tool-calls` while a
  call waits for the client) whose metadata carries the usage, the model, when the message began
  and the last agent; or with an `error` chunk (in a chat it ends the message; a live turn still
  finishes), or `abort`.

The rules both messages and the chat's continuations share are module functions: what a tool's
result means (`write_tool_result`: ADK's rejection and the interrupt result are denials, a lone
`error` is a tool error, anything else the output), how what the approval book decides is shown
(`write_notice`), how a file is sent (`write_file`), which error text reaches a client
(`safe_error_text`) and how ADK's finish reasons map to the AI SDK's (`map_finish_reason`).
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from adk_gateway.core import chunks as c
from adk_gateway.core.approval import INTERRUPT_TEXT, REJECTED_TEXT, AwaitClient, CallState, RunInBrowser, ToolNotice
from adk_gateway.core.effects import ArtifactSaved, CallAnnounced, Effect, NeedsApproval, SignInRequested
from adk_gateway.core.events import (
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
from adk_gateway.core.kinds import CONFIRMATION_TOOL, CREDENTIAL_TOOL, PLACEHOLDER_ERROR, ToolKind
from adk_gateway.core.pcm import OUTPUT_RATE
from adk_gateway.core.writer import MessageWriter, json_safe

__all__ = [
    "AGENT_FAILED",
    "MAX_ERROR_TEXT",
    "SIGN_IN_FAILED",
    "ConversionResult",
    "MessageConverter",
    "Mode",
    "is_denial",
    "map_finish_reason",
    "message_replay_chunks",
    "pcm_chunk_data",
    "raised_in_agent",
    "result_outcome",
    "safe_error_text",
    "write_file",
    "write_notice",
    "write_tool_result",
]

MAX_ERROR_TEXT: Final = 300
TOOL_FAILED: Final = "The tool failed."
AGENT_FAILED: Final = "The agent failed while answering."

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


_EXCEPTION_NAME = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception)")


def raised_in_agent(event: AgentEvent) -> bool:
    """Whether an error event stands for an exception raised in the agent's own code (a tool, a
    callback, an artifact store): ADK names such an event's code after the exception's class.
    Its message is the exception's text, which is not for the client (a model's own error, e.g.
    a safety block, is)."""
    code = event.error_code
    return code is not None and _EXCEPTION_NAME.fullmatch(code) is not None


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


def write_notice(writer: MessageWriter, item: ToolNotice) -> None:
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




@dataclass(slots=True)
class ConversionResult:
    chunks: list[c.Chunk] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)


class Mode(enum.Enum):
    """How a message's steps are cut, and what ends it.

    CHAT: one response to one request. A model call is one step (every partial event of a call
    shares the final event's id, so a new id opens the next step); an error ends the message.
    LIVE: one model turn of a live session. ADK gives every live response a fresh id, so the turn's
    step opens with its first output and ends when a call waits for the client (`show` of an
    approval, `pause`) or with the turn; an error is shown and the turn still ends with `finish`.
    """

    CHAT = "chat"
    LIVE = "live"


def _any_kind(_name: str) -> ToolKind:
    return ToolKind()


# Names of ADK's own calls that are requests to the client, not tools of the agent.
_ADK_REQUESTS: Final = frozenset({CONFIRMATION_TOOL, CREDENTIAL_TOOL})
SIGN_IN_FAILED: Final = "The sign-in did not complete; the tool could not run."


class MessageConverter:
    """Converts one assistant message's events (a chat response, or a live turn) into chunks.

    `tools` says how each tool is shown (its effective kind: a tool the chat refuses is a server
    tool); `reported` (the approval book's) records each tool result and says whether it is new.
    `agent`, `usage` and `created_at` carry what an earlier response of the same message said
    (a continuation); `client_state_keys` are the session state keys the client sees, and
    `client_state` their values before the message. See the module docstring for the rules."""

    __slots__ = ("_announced", "_artifacts", "_awaiting_client", "_client_keys", "_client_state", "_created_at",
                 "_deferred", "_last_finish", "_model", "_out", "_reasoning_streamed", "_search_html", "_sign_ins",
                 "_sources", "_step_event_id", "_text_streamed", "_transcript_streamed", "_user_part",
                 "_user_text", "_writer", "agent", "message_id", "mode", "model_output", "reported", "tools")

    def __init__(
        self,
        message_id: str | None = None,
        *,
        mode: Mode = Mode.CHAT,
        tools: Callable[[str], ToolKind] = _any_kind,
        reported: Callable[[str, CallState], bool] | None = None,
        agent: str | None = None,
        usage: Mapping[str, int] | None = None,
        created_at: int | None = None,
        client_state_keys: frozenset[str] = frozenset(),
        client_state: Mapping[str, Any] | None = None,
    ) -> None:
        self.message_id = message_id
        self.mode = mode
        self.tools = tools
        self.reported = reported
        self.agent = agent  # the author of the message's last step
        self.model_output = False  # the model said something in this message
        self._out: list[c.Chunk] = []
        self._writer = MessageWriter(self._out.append, message_id=message_id)
        if usage:
            self._writer.add_usage(Usage(usage.get("inputTokens", 0), usage.get("outputTokens", 0),
                                         usage.get("totalTokens", 0)))
        self._created_at = created_at
        self._model: str | None = None
        self._client_keys = client_state_keys
        self._client_state = {k: v for k, v in (client_state or {}).items() if k in client_state_keys}
        self._step_event_id: str | None = None
        self._text_streamed = False
        self._reasoning_streamed = False
        self._transcript_streamed = False
        self._announced: dict[str, str] = {}  # call id -> tool name, in the order shown
        self._awaiting_client: set[str] = set()
        self._deferred: dict[str, tuple[FunctionCall, Any]] = {}  # long-running calls -> (call, interim result)
        self._sign_ins: set[str] = set()  # the tools' calls a sign-in was asked for in this response
        self._sources: set[tuple[str | None, str]] = set()
        self._search_html: set[str] = set()
        self._artifacts: set[tuple[str, int]] = set()
        self._last_finish: str | None = None
        self._user_text = ""
        self._user_part = 0

    def _take(self) -> list[c.Chunk]:
        out = self._out[:]
        self._out.clear()
        return out

    # --- state -----------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._writer.started

    @property
    def ended(self) -> bool:
        return self._writer.ended

    @property
    def errored(self) -> bool:
        return self._writer.errored

    @property
    def usage(self) -> dict[str, int]:
        """The message's token counts so far (each model call counted once)."""
        return self._writer.usage

    @property
    def calls(self) -> list[str]:
        """The calls this message announced, in order."""
        return list(self._announced)

    @property
    def awaiting_client(self) -> bool:
        """True when the message ends waiting for an approval or the client's tool result."""
        return bool(self._awaiting_client or self._deferred)

    def await_client(self, tool_call_id: str) -> None:
        self._awaiting_client.add(tool_call_id)

    def metadata(self) -> dict[str, Any]:
        """The message's metadata as its end reports it: usage, the model, when it began, the agent."""
        metadata: dict[str, Any] = {}
        if self._writer.usage:
            metadata["usage"] = self._writer.usage
        if self._model:
            metadata["model"] = self._model
        if self._created_at is not None:
            metadata["createdAt"] = self._created_at
        if self.agent:
            metadata["agent"] = self.agent
        return metadata

    # --- the message -----------------------------------------------------------------------------

    def start(self) -> list[c.Chunk]:
        self._writer.start()
        return self._take()

    def convert(self, event: AgentEvent) -> ConversionResult:
        """The chunks of one event, and what the caller must act on."""
        result = ConversionResult()
        writer = self._writer
        if self.mode is Mode.CHAT:
            writer.start()
        # After the end (an `error` chunk) nothing more is sent: the client stops reading there.
        if not writer.ended and event.author != "user":
            self._convert(event, result)
        result.chunks = self._take()
        return result

    def show(self, items: Iterable[ToolNotice]) -> list[c.Chunk]:
        """What the approval book says to show the client (`write_notice`), in order; in a live
        turn, a call that now waits for the client ends the step."""
        for item in items:
            write_notice(self._writer, item)
            if self.mode is Mode.LIVE and isinstance(item, AwaitClient):
                self._writer.finish_step()
        return self._take()

    def file(self, url: str, media_type: str) -> list[c.Chunk]:
        """A file the agent made (an artifact version), at the link the caller gives it."""
        self._writer.file(url, media_type)
        return self._take()

    def sign_in(self, tool_call_id: str, input: Mapping[str, Any]) -> list[c.Chunk]:
        """Shows ADK's sign-in request as a tool part the client answers (`addToolOutput`) once
        the user has signed in; `input` carries what to open (`authUri`)."""
        self._writer.tool_call(tool_call_id, CREDENTIAL_TOOL, input, provider_executed=False)
        self._announced[tool_call_id] = CREDENTIAL_TOOL
        self._awaiting_client.add(tool_call_id)
        return self._take()

    def client_state(self, values: Mapping[str, Any]) -> list[c.Chunk]:
        """Sets (and shows) the client's view of the session state, e.g. after a request's `state`."""
        self._set_client_state(values)
        return self._take()

    def _set_client_state(self, values: Mapping[str, Any]) -> None:
        """A `data-state` part (one id: the client updates it in place) with every key the client
        sees, when `values` touches one of them."""
        keys = self._client_keys
        touched = {key: value for key, value in values.items() if key in keys}
        if touched:
            shown = self._client_state
            shown.update(json_safe(touched))
            self._writer.data("state", dict(shown), part_id="state")

    def user_transcription(self, transcription: Transcription) -> list[c.Chunk]:
        """The user's speech so far (live): one `data-transcription` part per utterance, replaced as
        it grows."""
        text = transcription.text
        if text or transcription.finished:
            self._user_text = text if transcription.finished else self._user_text + text
            self._writer.data("transcription", {"role": "user", "text": self._user_text,
                                                "finished": transcription.finished},
                              part_id=f"{self.message_id}-user-{self._user_part}")
            if transcription.finished:
                self._user_text = ""
                self._user_part += 1
        return self._take()

    def pause(self) -> list[c.Chunk]:
        """A call waits for the client (live): the step ends here (the answer opens the next one)."""
        self._writer.finish_step()
        return self._take()

    def close_parts(self) -> list[c.Chunk]:
        self._writer.close_parts()
        return self._take()

    def finish(self, reason: c.FinishReason | None = None, metadata: Mapping[str, Any] | None = None
               ) -> list[c.Chunk]:
        """Ends the message with `finish` and its metadata (`metadata`: more of it), unless it
        ended already. Without a reason: `tool-calls` while a call waits for the client, else the
        model's."""
        writer = self._writer
        if not writer.ended:
            writer.start()
            self._write_deferred()
            if reason is None:
                reason = "tool-calls" if self.awaiting_client else map_finish_reason(self._last_finish)
            writer.finish(reason, {**self.metadata(), **(metadata or {})} or None)
        return self._take()

    def error(self, text: str | None, *, final: bool | None = None) -> list[c.Chunk]:
        """An `error` chunk (its text scrubbed). `final` (default: in a chat) ends the message;
        a live turn goes on, to end with `finish`."""
        self._write_deferred()
        self._writer.error(safe_error_text(text), final=self.mode is Mode.CHAT if final is None else final)
        return self._take()

    def unsend_end(self) -> None:
        """The chunks that ended the message will not be sent (see `MessageWriter.unsend_end`)."""
        self._writer.unsend_end()

    def abort(self, reason: str | None = None) -> list[c.Chunk]:
        """Ends a message that was stopped with `abort`."""
        self._write_deferred()
        self._writer.abort(reason)
        return self._take()

    # --- events ----------------------------------------------------------------------------------

    def _convert(self, event: AgentEvent, result: ConversionResult) -> None:
        if event.error_code or event.error_message:
            self._write_deferred()
            self._writer.error(safe_error_text(event.error_message or event.error_code),
                               final=self.mode is Mode.CHAT)
            return
        if event.output_transcription is not None:
            self._model_transcription(event.output_transcription, event)
        model_parts = responses = False
        for part in event.parts:
            if isinstance(part, FunctionResponse):
                responses = True
            elif isinstance(part, FunctionCall) and part.name in _ADK_REQUESTS:
                self._adk_request(part, result)
            else:
                model_parts = True
        if model_parts and event.role in ("model", None):
            self._model_event(event, result)
        if responses:
            self._function_responses(event)
        if event.partial:
            return
        # What a whole response says besides its parts: its tokens, sources, state and files.
        if event.usage is not None and self._writer.started:
            self._writer.add_usage(event.usage)
        if event.sources or event.search_suggestions:
            self._grounding(event)
        if self._client_keys and event.state_delta:
            self._set_client_state(event.state_delta)
        for name, version in (event.artifact_delta or {}).items():
            if (name, version) not in self._artifacts:
                self._artifacts.add((name, version))
                result.effects.append(ArtifactSaved(name, version))

    def _enter_step(self, event: AgentEvent) -> MessageWriter:
        """The step the event's model output belongs to (see `Mode`); a new author is named first."""
        writer = self._writer
        if self.mode is Mode.CHAT and (event.id != self._step_event_id or not writer.in_step):
            writer.finish_step()
            self._step_event_id = event.id
            writer.scope = event.id or "x"
            self._text_streamed = self._reasoning_streamed = False
        if not writer.in_step:
            writer.start_step()
            author = event.author
            if author and author != self.agent:
                self.agent = author
                writer.data("agent", {"name": author})
        self.model_output = True
        return writer

    def _defers(self, part: Part) -> bool:
        """A long-running call the client answers later: shown at the end of the response."""
        if self.mode is not Mode.CHAT or not isinstance(part, FunctionCall):
            return False
        kind = self.tools(part.name or "unknown")
        return kind.long_running and not kind.browser

    def _model_event(self, event: AgentEvent, result: ConversionResult) -> None:
        partial = event.partial
        if all(self._defers(part) for part in event.parts):
            # Nothing to show in this step (its calls are shown at the end): no step for it.
            if not partial:
                for part in event.parts:
                    self._function_call(part, event, result)  # type: ignore[arg-type]
            return
        writer = self._enter_step(event)
        chat = self.mode is Mode.CHAT
        for part in event.parts:
            if isinstance(part, Text):
                self._text(part, partial)
            elif isinstance(part, InlineData) and part.mime_type.startswith("audio/pcm"):
                # Live audio comes in partial responses only; a chat's repeats in its final one.
                if not (chat and partial):
                    writer.data("pcm", pcm_chunk_data(part.data, _audio_rate(part.mime_type)), transient=True)
            elif partial:
                continue  # calls and files come whole in the final event
            elif isinstance(part, FunctionCall):
                if part.name not in _ADK_REQUESTS:
                    self._function_call(part, event, result)
            elif isinstance(part, FunctionResponse):
                continue
            elif isinstance(part, InlineData | FileData):
                write_file(writer, part)
        if not partial:
            if chat:
                writer.close_parts()
            if event.finish_reason is not None:
                self._last_finish = event.finish_reason
            if event.model:
                self._model = event.model

    def _text(self, part: Text, partial: bool) -> None:
        """A text or thought part. Streamed partials are written as deltas; the aggregated copy
        that follows them repeats them, so it is skipped (it ends the part)."""
        writer = self._writer
        if partial:
            if part.thought:
                self._reasoning_streamed = True
                writer.reasoning(part.text)
            else:
                self._text_streamed = True
                writer.text(part.text)
        elif part.thought and self._reasoning_streamed:
            self._reasoning_streamed = False
            writer.end_reasoning()
        elif not part.thought and self._text_streamed:
            self._text_streamed = False
            writer.end_text()
        elif part.text:
            (writer.reasoning if part.thought else writer.text)(part.text)
            writer.close_parts()

    def _model_transcription(self, transcription: Transcription, event: AgentEvent) -> None:
        """The model's speech as text (live): partials stream; the finished copy ends the part."""
        text = transcription.text
        if transcription.finished:
            if self._transcript_streamed:
                self._transcript_streamed = False
                self._writer.close_parts()
            elif text:
                self._enter_step(event).text(text)
                self._writer.close_parts()
        elif text:
            self._transcript_streamed = True
            self._enter_step(event).text(text)

    def _function_call(self, call: FunctionCall, event: AgentEvent, result: ConversionResult) -> None:
        call_id = call.id or self._writer.next_id("call")
        name = call.name or "unknown"
        kind = self.tools(name)
        if self._defers(call):
            # A long-running tool the client answers later. ADK calls the model again after the
            # tool's interim result, in new steps, but `lastAssistantMessageIsCompleteWithToolCalls`
            # reads only the message's last step: the call is shown at the end of the response.
            self._deferred[call_id] = (FunctionCall(call_id, name, call.args), None)
            self._announced[call_id] = name
            result.effects.append(CallAnnounced(call_id, name, json_safe(call.args), client=True))
            return
        client = kind.browser
        announced = self._writer.tool_call(call_id, name, call.args, provider_executed=not client)
        self._announced[call_id] = name
        if client:
            self._awaiting_client.add(call_id)
        result.effects.append(CallAnnounced(call_id, name, announced, client=client))

    def _write_deferred(self) -> None:
        """The long-running calls held for the message's last step, each with its interim result."""
        writer = self._writer
        if not self._deferred or writer.ended:
            return
        for call_id, (call, interim) in self._deferred.items():
            writer.tool_call(call_id, call.name, call.args, provider_executed=False)
            self._awaiting_client.add(call_id)
            if interim is not None:
                writer.data("tool-status", {"toolCallId": call_id, "toolName": call.name, "output": interim},
                            part_id=f"tool-status-{call_id}")
        self._deferred.clear()

    def _adk_request(self, call: FunctionCall, result: ConversionResult) -> None:
        """ADK's own requests to the client: a confirmation of a server tool's call, or a sign-in."""
        args = call.args
        if call.name == CONFIRMATION_TOOL:
            original = args.get("originalFunctionCall") or {}
            original_id = original.get("id")
            if original_id:
                name = str(original.get("name") or self._announced.get(original_id, "unknown"))
                self._awaiting_client.add(original_id)
                result.effects.append(NeedsApproval(original_id, name, call.id))
            return
        for_call = str(args.get("functionCallId") or "")
        config = args.get("authConfig")
        if call.id and isinstance(config, Mapping):
            self._sign_ins.add(for_call)
            result.effects.append(SignInRequested(call.id, for_call, config))

    def _function_responses(self, event: AgentEvent) -> None:
        requested = event.requested_confirmations
        for part in event.parts:
            if not isinstance(part, FunctionResponse) or part.name in _ADK_REQUESTS:
                continue
            call_id = part.id or ""
            payload = part.response
            if call_id in requested or (len(payload) == 1 and payload.get("error") == PLACEHOLDER_ERROR):
                continue
            deferred = self._deferred.get(call_id)
            if deferred is not None:  # a long-running tool's interim result
                self._deferred[call_id] = (deferred[0], json_safe(payload))
                continue
            if call_id in event.requested_sign_ins:
                if call_id in self._sign_ins:
                    continue  # the tool waits for the sign-in this response asks for
                # Asked again after a sign-in: ADK could not get the credential (a failed exchange).
                payload = {"error": SIGN_IN_FAILED}
            self._awaiting_client.discard(call_id)
            if self.reported is not None and not self.reported(call_id, result_outcome(payload)):
                continue
            write_tool_result(self._writer, call_id, payload, provider_executed=not self.tools(part.name).browser)

    def _grounding(self, event: AgentEvent) -> None:
        """Sources of a grounded response, and the search suggestions shown with it; each once a
        message (ADK repeats the grounding on the last partial and the final response)."""
        writer = self._writer
        for source in event.sources:
            key = (source.url, source.title)
            if key in self._sources:
                continue
            self._sources.add(key)
            if source.url is not None:
                writer.source_url(writer.next_id("source"), source.url, source.title)
            else:
                writer.source_document(writer.next_id("source"), source.title or "document")
        html = event.search_suggestions
        if html and html not in self._search_html:
            self._search_html.add(html)
            writer.data("search-suggestions", {"html": html})


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
