"""One live (audio) session: a WebSocket's live extension bridged to ADK `run_live`.

Theory of operation
-------------------
`LiveSession.run()` opens an ADK live invocation for the chat (`AgentHost.run_live` with a
`LiveRequestQueue`) and runs two tasks it owns until `stop()`, cancellation, or the end of the
invocation: the *consumer* turns ADK events into UI message chunks, the *writer* hands those chunks,
in order, to `emit`. Every producer of chunks (the consumer, the client-facing methods, the tool
gate) appends to one outbox, so chunk order is the order of decisions, whoever makes them.

Input. The client-facing methods are synchronous and only put requests on the queue: audio frames
are validated, resampled to 16 kHz with one `Resampler` per session, and sent as realtime blobs;
activity start/end mark the user's utterances (in hands-free mode an `EnergyVad` marks them, and
~300 ms of audio before a detected start is replayed after it so the onset is not lost). Voice
detection is always the gateway's: the model's own is switched off in the `RunConfig`.

Output. Each model turn is one complete UI message: `start` (a new messageId), `start-step`, its
parts, `finish-step`, `finish`. ADK gives every live response a fresh event id, so turns and steps
are tracked here rather than by `ResponseConverter` (whose chunk shapes are reused):

- the model's speech transcript and its text become one text part per step (partials stream as
  deltas; the aggregated copy that follows is skipped); thoughts become reasoning parts;
- audio becomes transient `data-pcm` chunks (not stored in the client's message);
- the user's speech becomes a `data-transcription` part `{role: "user", text, finished}` with a
  stable id, updated in place as the transcription grows;
- `turn_complete` ends the message with `finish` (`stop`); the model's `interrupted` with
  `interrupted` (`stop` for an ai 6 client).

Barge-in. `interrupt()`, `activity_start()` (also from the VAD) and new text or images cut the
open turn at once: audio not yet handed to `emit` is dropped from the outbox, the turn ends with
`finish`, and what the model still sends for it is discarded until it acknowledges with
`interrupted` (or `turn_complete`). `interrupt()` tells the model with an empty activity.

Tools. ADK runs tools inside `run_live`, but cannot confirm them there, so `PermissionPlugin` asks
this session (the `LiveToolGate` attached for our queue). A call that needs approval is held: the
session issues an approval id, sends `tool-approval-request` and `finish-step` once the call has
been announced, and waits for `answer_approval` (or the approval timeout, which ends the call as a
tool error). A browser tool waits for `tool_output`, which becomes the tool's result. Every wait is
released with an error result when its turn is cut or the session ends.

Cleanup. `run()` always closes the queue, releases every wait, cancels and awaits both tasks and
detaches from the plugin; cancellation propagates. A graceful `stop()` lets ADK finish (bounded),
closes an open turn with `finish` and drains the outbox first.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import structlog
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.events import Event
from google.genai import types

from agents.adk import AgentHost
from agents.tools import APPROVALS_STATE_KEY, PLUGIN_NAME, LiveApproval, PermissionPlugin
from gateway.core import chunks as c
from gateway.core.approval import (
    INTERRUPT_TEXT,
    REJECTED_TEXT,
    ApprovalBook,
    ApprovalRefused,
    Decision,
    Permission,
    decision_from_response,
    interrupt_result,
)
from gateway.core.converter import add_usage, map_finish_reason, safe_error_text
from gateway.core.pcm import INPUT_RATE, OUTPUT_RATE, float_to_pcm16, pcm16_to_float, validate_frame, validate_rate
from gateway.core.resample import Resampler
from gateway.core.vad import EnergyVad, VadEventKind

__all__ = ["LiveSession", "pcm_chunk_data"]

log = structlog.get_logger("gateway.services.live")

Emit = Callable[[dict[str, Any]], Awaitable[None]]

INPUT_MIME: Final = f"audio/pcm;rate={INPUT_RATE}"
ENDED_TEXT: Final = "The live session ended."
TIMEOUT_TEXT: Final = "The approval timed out."
CUT_TEXT: Final = "Interrupted by the user."
STOP_GRACE_S: Final = 2.0  # how long a graceful stop waits for ADK and for the client
OUTBOX_HIGH: Final = 256  # the consumer waits while more chunks than this are unsent
PREROLL_MS: Final = 300
_RATE = re.compile(r"rate=(\d+)")


def pcm_chunk_data(pcm: bytes, sample_rate: int = OUTPUT_RATE) -> dict[str, Any]:
    """The `data` of a `data-pcm` chunk."""
    return {"content": base64.b64encode(pcm).decode("ascii"), "sampleRate": sample_rate, "channels": 1,
            "bitDepth": 16}


def _audio_rate(mime_type: str) -> int:
    match = _RATE.search(mime_type)
    return int(match.group(1)) if match else OUTPUT_RATE


def _failure(task: asyncio.Task[Any]) -> BaseException | None:
    return task.exception() if task.done() and not task.cancelled() else None


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@dataclass(slots=True)
class _Out:
    wire: dict[str, Any]
    pcm_turn: int | None = None  # set for data-pcm chunks (their turn), so a barge-in can drop them unsent


@dataclass(eq=False)
class _Turn:
    """Per-turn state; a new one for every model turn."""

    seq: int
    message_id: str
    in_step: bool = False
    text_id: str | None = None
    reasoning_id: str | None = None
    text_streamed: bool = False
    reasoning_streamed: bool = False
    transcript_streamed: bool = False
    model_output: bool = False
    part_counter: int = 0
    user_text: str = ""
    user_part: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def next_id(self, prefix: str) -> str:
        self.part_counter += 1
        return f"{prefix}-{self.message_id}-{self.part_counter}"


@dataclass(eq=False)
class _Held:
    """A tool call the plugin holds until the client answers."""

    call_id: str
    tool_name: str
    browser: bool
    kind: Literal["approval", "output"]
    future: asyncio.Future[Any]
    approval_id: str | None = None
    issued: bool = False


class LiveSession:
    """See the module docstring. Methods other than `run()` are synchronous and never block."""

    def __init__(
        self,
        host: AgentHost,
        *,
        user_id: str,
        chat_id: str,
        emit: Emit,
        input_rate: int = INPUT_RATE,
        hands_free: bool = False,
        vad_silence_ms: int = 700,
        vad_threshold_dbfs: float = -45.0,
        approval_timeout_s: float = 0.0,
        major: int = 6,
    ) -> None:
        self.host = host
        self.user_id = user_id
        self.chat_id = chat_id
        self.input_rate = validate_rate(input_rate)
        self.hands_free = hands_free
        self.approval_timeout_s = approval_timeout_s
        self.major = major
        self._emit = emit
        self._queue = LiveRequestQueue()
        self._resampler = Resampler(self.input_rate, INPUT_RATE) if self.input_rate != INPUT_RATE else None
        self._vad = (
            EnergyVad(INPUT_RATE, threshold_dbfs=vad_threshold_dbfs, silence_ms=vad_silence_ms)
            if hands_free
            else None
        )
        self._preroll: deque[bytes] = deque()
        self._preroll_bytes = 0
        self._user_active = False
        # Output.
        self._outbox: deque[_Out] = deque()
        self._out_ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._out_closed = False
        self._turn: _Turn | None = None
        self._turns = 0
        self._discarding = False
        # Tools.
        self._permissions: dict[str, Permission] = {}
        self._call_info: dict[str, tuple[str, Any]] = {}  # call id -> (tool name, input)
        self._announced: set[str] = set()
        self._settled: set[str] = set()
        self._cut_calls: set[str] = set()
        self._held: dict[str, _Held] = {}
        self._approvals: dict[str, _Held] = {}
        self._answered: set[str] = set()
        self._early_outputs: dict[str, dict[str, Any]] = {}
        # Life cycle.
        self._stop = asyncio.Event()
        self._started = False
        self._closing = False

    # --- client-facing -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closing or self._stop.is_set()

    def send_audio(self, pcm: bytes) -> None:
        """One binary frame of PCM16 mono at `input_rate`; raises `PcmFormatError` for a bad frame."""
        validate_frame(pcm)
        if self.closed:
            return
        resampler = self._resampler
        data = bytes(pcm) if resampler is None else float_to_pcm16(resampler.process(pcm16_to_float(pcm)))
        if not data:
            return
        if self._vad is None:
            self._send_blob(data)
            return
        if self._user_active:
            self._send_blob(data)
        else:
            self._preroll.append(data)
            self._preroll_bytes += len(data)
            limit = INPUT_RATE * 2 * PREROLL_MS // 1000
            while self._preroll_bytes - len(self._preroll[0]) >= limit:
                self._preroll_bytes -= len(self._preroll.popleft())
        for event in self._vad.feed(data):
            if event.kind is VadEventKind.SPEECH_START and not self._user_active:
                self.activity_start()
                while self._preroll:
                    self._send_blob(self._preroll.popleft())
                self._preroll_bytes = 0
            elif event.kind is VadEventKind.SPEECH_END and self._user_active:
                self.activity_end()

    def activity_start(self) -> None:
        """The user starts speaking: a barge-in if the model is answering."""
        if self.closed or self._user_active:
            return
        self._user_active = True
        self._cut_turn()
        self._queue.send_activity_start()

    def activity_end(self) -> None:
        if self.closed or not self._user_active:
            return
        self._user_active = False
        self._queue.send_activity_end()

    def interrupt(self) -> None:
        """Barge-in without speech: ends the current answer now and tells the model."""
        if self.closed:
            return
        self._cut_turn()
        if not self._user_active:
            # An empty activity interrupts the model and asks nothing.
            self._queue.send_activity_start()
            self._queue.send_activity_end()

    def send_text(self, text: str) -> None:
        if self.closed:
            return
        self._cut_turn()
        self._queue.send_content(types.Content(role="user", parts=[types.Part(text=text)]))

    def send_image(self, media_type: str, data: bytes) -> None:
        if self.closed or not data:
            return
        self._cut_turn()
        blob = types.Blob(mime_type=media_type or "application/octet-stream", data=bytes(data))
        self._queue.send_content(types.Content(role="user", parts=[types.Part(inline_data=blob)]))

    def answer_approval(self, approval_id: str, approved: bool, reason: str | None) -> None:
        """Answers a `tool-approval-request` of this session; raises `ApprovalRefused` otherwise."""
        held = self._approvals.pop(approval_id, None)
        if held is None:
            raise ApprovalRefused("answered" if approval_id in self._answered else "unknown", approval_id)
        self._answered.add(approval_id)
        decision = decision_from_response(approved, reason)
        if decision is Decision.ALLOW_ALWAYS:
            self._permissions[held.tool_name] = Permission.ALWAYS
        elif decision is Decision.DENY_NEVER:
            self._permissions[held.tool_name] = Permission.NEVER
        if decision is Decision.DENY_AND_STOP:
            answer = LiveApproval(approved=False, decision=decision, error=interrupt_result())
        else:
            answer = LiveApproval(approved=decision.approved, decision=decision)
        if held.browser and decision.approved:
            # The browser's signal to run the tool now, as on the HTTP path.
            name, args = self._call_info.get(held.call_id, (held.tool_name, {}))
            self._push(c.ToolInputAvailable(toolCallId=held.call_id, toolName=name, input=args))
        if not held.future.done():
            held.future.set_result(answer)

    def tool_output(self, tool_call_id: str, output: Any = None, error_text: str | None = None) -> None:
        """The browser's result for a browser tool call; unknown or settled calls are ignored."""
        if error_text is not None:
            result: dict[str, Any] = {"error": error_text}
        elif isinstance(output, dict) and output:
            result = _json_safe(output)
        else:
            result = {"result": _json_safe(output)}
        held = self._held.get(tool_call_id)
        if held is not None and held.kind == "output":
            if not held.future.done():
                held.future.set_result(result)
            return
        info = self._call_info.get(tool_call_id)
        if info is None or tool_call_id in self._settled or tool_call_id in self._cut_calls:
            log.warning("live_tool_output_ignored", tool_call_id=tool_call_id)
            return
        if not self.host.tool_kind(info[0]).browser:
            log.warning("live_tool_output_ignored", tool_call_id=tool_call_id, reason="not a browser tool")
            return
        self._early_outputs[tool_call_id] = result

    def stop(self) -> None:
        self._stop.set()

    # --- the tool gate (called by PermissionPlugin inside ADK's tool pipeline) ----------------

    async def request_approval(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveApproval:
        if self._closing:
            return LiveApproval(approved=False, error=ENDED_TEXT)
        if tool_call_id in self._cut_calls:
            return LiveApproval(approved=False, error=interrupt_result())
        held = _Held(tool_call_id, tool_name, browser, "approval", asyncio.get_running_loop().create_future())
        self._held[tool_call_id] = held
        if tool_call_id in self._announced:
            self._issue(held)
        try:
            if self.approval_timeout_s > 0:
                try:
                    async with asyncio.timeout(self.approval_timeout_s):
                        answer: LiveApproval = await held.future
                except TimeoutError:
                    log.info("live_approval_timeout", tool_call_id=tool_call_id)
                    return LiveApproval(approved=False, error=TIMEOUT_TEXT)
                return answer
            answer = await held.future
            return answer
        finally:
            self._forget(held)

    async def browser_output(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        if self._closing:
            return {"error": ENDED_TEXT}
        if tool_call_id in self._cut_calls:
            return {"error": interrupt_result()}
        early = self._early_outputs.pop(tool_call_id, None)
        if early is not None:
            return early
        held = _Held(tool_call_id, tool_name, True, "output", asyncio.get_running_loop().create_future())
        self._held[tool_call_id] = held
        if tool_call_id in self._announced:
            self._issue(held)
        try:
            result: dict[str, Any] = await held.future
            return result
        finally:
            self._forget(held)

    def _forget(self, held: _Held) -> None:
        if self._held.get(held.call_id) is held:
            del self._held[held.call_id]
        if held.approval_id is not None and self._approvals.get(held.approval_id) is held:
            del self._approvals[held.approval_id]
            self._answered.add(held.approval_id)

    def _issue(self, held: _Held) -> None:
        """Tells the client a call waits for it (after the call was announced), then ends the step."""
        if held.issued:
            return
        held.issued = True
        if held.kind == "approval":
            held.approval_id = f"apr-{secrets.token_urlsafe(18)}"
            self._approvals[held.approval_id] = held
            self._push(c.ToolApprovalRequest(approvalId=held.approval_id, toolCallId=held.call_id))
        turn = self._turn
        if turn is not None and turn.in_step:
            self._close_parts(turn)
            self._push(c.FinishStep())
            turn.in_step = False

    def _release_all(self, text: str) -> None:
        for held in list(self._held.values()):
            self._release(held, text)

    def _release(self, held: _Held, text: str) -> None:
        if held.future.done():
            return
        if held.kind == "approval":
            held.future.set_result(LiveApproval(approved=False, error=text))
        else:
            held.future.set_result({"error": text})

    # --- running -----------------------------------------------------------------------------

    def run_config(self) -> RunConfig:
        return RunConfig(
            streaming_mode=StreamingMode.BIDI,
            response_modalities=[types.Modality.AUDIO],
            input_audio_transcription=types.AudioTranscriptionConfig(),
            output_audio_transcription=types.AudioTranscriptionConfig(),
            # The gateway (client or VAD) marks every utterance; the model must not guess.
            realtime_input_config=types.RealtimeInputConfig(
                automatic_activity_detection=types.AutomaticActivityDetection(disabled=True)
            ),
            max_llm_calls=self.host.max_llm_calls,
        )

    async def run(self) -> None:
        """Runs until `stop()`, cancellation, or the end of the live invocation."""
        if self._started:
            raise RuntimeError("a LiveSession runs only once")
        self._started = True
        plugin = self.host.runner.plugin_manager.get_plugin(PLUGIN_NAME)
        if not isinstance(plugin, PermissionPlugin):
            plugin = None
            log.warning("live_without_permission_plugin", chat_id=self.chat_id)
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self._prepare()
            if plugin is not None:
                plugin.attach_live(self._queue, self)
            writer = asyncio.create_task(self._write(), name=f"live-write:{self.chat_id}")
            tasks.append(writer)
            consumer = asyncio.create_task(self._consume(), name=f"live-consume:{self.chat_id}")
            tasks.append(consumer)
            stopper = asyncio.create_task(self._stop.wait(), name=f"live-stop:{self.chat_id}")
            tasks.append(stopper)
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            self._closing = True
            self._queue.close()
            self._release_all(ENDED_TEXT)
            if not consumer.done() and not writer.done():
                # A graceful stop: ADK ends the invocation once the queue is closed.
                await asyncio.wait([consumer, writer], timeout=STOP_GRACE_S, return_when=asyncio.FIRST_COMPLETED)
            if not writer.done():
                # Whatever was decided reaches the client, and an open turn still ends with `finish`.
                self._end_turn("interrupted")
                self._close_outbox()
                await asyncio.wait([writer], timeout=STOP_GRACE_S)
            failure = _failure(consumer) or _failure(writer)
            if failure is not None:
                raise failure
            log.info("live_ended", chat_id=self.chat_id, turns=self._turns)
        finally:
            self._closing = True
            self._queue.close()
            self._release_all(ENDED_TEXT)
            if plugin is not None:
                plugin.detach_live(self._queue)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
                for task in tasks:
                    _failure(task)  # retrieved: raised above, or superseded by the error in flight

    async def _prepare(self) -> None:
        session = await self.host.get_session(self.user_id, self.chat_id)
        if session is None:
            session = await self.host.create_session(self.user_id, self.chat_id)
        book = ApprovalBook.from_state(session.state.get(APPROVALS_STATE_KEY))
        self._permissions = dict(book.permissions)

    async def _consume(self) -> None:
        events = self.host.run_live(self.user_id, self.chat_id, self._queue, self.run_config())
        async with aclosing(events) as stream:
            async for event in stream:
                self._on_event(event)
                while len(self._outbox) > OUTBOX_HIGH:
                    self._room.clear()
                    await self._room.wait()

    async def _write(self) -> None:
        while True:
            while self._outbox:
                item = self._outbox.popleft()
                if len(self._outbox) <= OUTBOX_HIGH // 2:
                    self._room.set()
                await self._emit(item.wire)
            if self._out_closed:
                return
            self._out_ready.clear()
            await self._out_ready.wait()

    # --- output ------------------------------------------------------------------------------

    def _push(self, chunk: c.Chunk, *, pcm_turn: int | None = None) -> None:
        if self._out_closed:
            return
        adapted = c.for_client(chunk, self.major)
        if adapted is None:
            return
        self._outbox.append(_Out(adapted.to_wire(), pcm_turn))
        self._out_ready.set()

    def _close_outbox(self) -> None:
        self._out_closed = True
        self._out_ready.set()

    def _open_turn(self) -> _Turn:
        if self._turn is None:
            self._turns += 1
            self._turn = _Turn(seq=self._turns, message_id=f"msg-{uuid.uuid4().hex}")
            self._push(c.Start(messageId=self._turn.message_id))
        return self._turn

    def _open_step(self) -> _Turn:
        turn = self._open_turn()
        turn.model_output = True
        if not turn.in_step:
            self._push(c.StartStep())
            turn.in_step = True
        return turn

    def _close_parts(self, turn: _Turn) -> None:
        if turn.reasoning_id is not None:
            self._push(c.ReasoningEnd(id=turn.reasoning_id))
            turn.reasoning_id = None
        if turn.text_id is not None:
            self._push(c.TextEnd(id=turn.text_id))
            turn.text_id = None

    def _end_turn(self, reason: c.FinishReason) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        self._close_parts(turn)
        if turn.in_step:
            self._push(c.FinishStep())
        metadata = {"usage": dict(turn.usage)} if turn.usage else None
        self._push(c.Finish(finishReason=reason, messageMetadata=metadata))
        # Settled calls need no bookkeeping once their message is complete (a late response for a
        # call no longer known is ignored), so a long session does not accumulate it.
        for call_id in turn.calls:
            if call_id in self._settled and call_id not in self._held:
                self._settled.discard(call_id)
                self._announced.discard(call_id)
                self._call_info.pop(call_id, None)
                self._early_outputs.pop(call_id, None)

    def _cut_turn(self) -> None:
        """Barge-in: unsent audio is dropped (also of a turn the model already finished, when the
        client is slow), and the open turn ends now with its open calls."""
        if any(item.pcm_turn is not None for item in self._outbox):
            self._outbox = deque(item for item in self._outbox if item.pcm_turn is None)
            if len(self._outbox) <= OUTBOX_HIGH // 2:
                self._room.set()
        turn = self._turn
        if turn is None:
            return
        self._close_parts(turn)
        for call_id in turn.calls:
            if call_id in self._settled:
                continue
            self._settled.add(call_id)
            self._cut_calls.add(call_id)
            held = self._held.get(call_id)
            if held is not None and held.kind == "approval":
                self._push(c.ToolOutputDenied(toolCallId=call_id))
            else:
                browser = self._is_browser(self._call_info.get(call_id, ("", None))[0])
                self._push(c.ToolOutputError(toolCallId=call_id, errorText=CUT_TEXT,
                                             providerExecuted=None if browser else True))
            if held is not None:
                self._release(held, interrupt_result())
        if turn.model_output:
            self._discarding = True
        self._end_turn("interrupted")

    def _is_browser(self, tool_name: str) -> bool:
        return self.host.tool_kind(tool_name).browser and self._permissions.get(tool_name) is not Permission.NEVER

    # --- ADK events -> chunks ----------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if event.input_transcription is not None:
            self._user_transcription(event.input_transcription)
            return
        if event.author == "user":
            return
        if self._discarding:
            for call in event.get_function_calls():
                if call.id:
                    self._cut_calls.add(call.id)
                    self._settled.add(call.id)
                    held = self._held.get(call.id)
                    if held is not None:
                        self._release(held, interrupt_result())
            if event.interrupted or event.turn_complete:
                self._discarding = False
            return
        if event.error_code or event.error_message:
            turn = self._open_turn()
            self._close_parts(turn)
            self._push(c.Error(errorText=safe_error_text(event.error_message or event.error_code)))
            self._end_turn("error")
            return
        if event.output_transcription is not None:
            self._model_transcription(event.output_transcription)
        content = event.content
        for part in (content.parts if content is not None else None) or ():
            self._model_part(part, bool(event.partial))
        if self._turn is not None and event.usage_metadata is not None:
            add_usage(self._turn.usage, event.usage_metadata)
        if event.interrupted:
            self._end_turn("interrupted")
        elif event.turn_complete:
            self._end_turn(map_finish_reason(event.finish_reason))

    def _user_transcription(self, transcription: types.Transcription) -> None:
        # A new utterance: whatever the model still owed the cut turn is over.
        self._discarding = False
        text = transcription.text or ""
        if not text and not transcription.finished:
            return
        turn = self._open_turn()
        turn.user_text = text if transcription.finished else turn.user_text + text
        finished = bool(transcription.finished)
        self._push(c.Data(name="transcription", id=f"{turn.message_id}-user-{turn.user_part}",
                          data={"role": "user", "text": turn.user_text, "finished": finished}))
        if finished:
            turn.user_text = ""
            turn.user_part += 1

    def _model_transcription(self, transcription: types.Transcription) -> None:
        text = transcription.text or ""
        if transcription.finished:
            turn = self._turn
            if turn is not None and turn.transcript_streamed:
                turn.transcript_streamed = False
                self._close_parts(turn)
                return
            if text:
                turn = self._open_step()
                self._text(turn, text)
                self._close_parts(turn)
            return
        if text:
            turn = self._open_step()
            turn.transcript_streamed = True
            self._text(turn, text)

    def _text(self, turn: _Turn, text: str) -> None:
        if turn.reasoning_id is not None:
            self._push(c.ReasoningEnd(id=turn.reasoning_id))
            turn.reasoning_id = None
        if turn.text_id is None:
            turn.text_id = turn.next_id("text")
            self._push(c.TextStart(id=turn.text_id))
        self._push(c.TextDelta(id=turn.text_id, delta=text))

    def _reasoning(self, turn: _Turn, text: str) -> None:
        if turn.text_id is not None:
            self._push(c.TextEnd(id=turn.text_id))
            turn.text_id = None
        if turn.reasoning_id is None:
            turn.reasoning_id = turn.next_id("reasoning")
            self._push(c.ReasoningStart(id=turn.reasoning_id))
        self._push(c.ReasoningDelta(id=turn.reasoning_id, delta=text))

    def _model_part(self, part: types.Part, partial: bool) -> None:
        if part.function_response is not None:
            self._function_response(part.function_response)
            return
        if part.function_call is not None:
            if not partial:
                self._function_call(part.function_call)
            return
        if part.text is not None:
            self._model_text(part.text, bool(part.thought), partial)
            return
        blob = part.inline_data
        if blob is not None:
            mime = blob.mime_type or "application/octet-stream"
            if mime.startswith("audio/pcm"):
                turn = self._open_step()
                self._push(c.Data(name="pcm", data=pcm_chunk_data(blob.data or b"", _audio_rate(mime)),
                                  transient=True), pcm_turn=turn.seq)
            elif not partial:
                turn = self._open_step()
                self._close_parts(turn)
                encoded = base64.b64encode(blob.data or b"").decode("ascii")
                self._push(c.File(url=f"data:{mime};base64,{encoded}", mediaType=mime))
            return
        file_data = part.file_data
        if file_data is not None and file_data.file_uri and not partial:
            turn = self._open_step()
            self._close_parts(turn)
            self._push(c.File(url=file_data.file_uri, mediaType=file_data.mime_type or "application/octet-stream"))

    def _model_text(self, text: str, thought: bool, partial: bool) -> None:
        turn = self._open_step()
        if partial:
            if thought:
                turn.reasoning_streamed = True
                if text:
                    self._reasoning(turn, text)
            else:
                turn.text_streamed = True
                if text:
                    self._text(turn, text)
            return
        # The aggregated copy of what was streamed: skip it, but it closes the part.
        if thought and turn.reasoning_streamed:
            turn.reasoning_streamed = False
            if turn.reasoning_id is not None:
                self._push(c.ReasoningEnd(id=turn.reasoning_id))
                turn.reasoning_id = None
            return
        if not thought and turn.text_streamed:
            turn.text_streamed = False
            if turn.text_id is not None:
                self._push(c.TextEnd(id=turn.text_id))
                turn.text_id = None
            return
        if text:
            (self._reasoning if thought else self._text)(turn, text)
            self._close_parts(turn)

    def _function_call(self, call: types.FunctionCall) -> None:
        call_id = call.id or f"call-{uuid.uuid4().hex[:12]}"
        name = call.name or "unknown"
        args = _json_safe(dict(call.args or {}))
        turn = self._open_step()
        self._close_parts(turn)
        provider_executed = None if self._is_browser(name) else True
        self._push(c.ToolInputStart(toolCallId=call_id, toolName=name, providerExecuted=provider_executed))
        self._push(c.ToolInputDelta(toolCallId=call_id, inputTextDelta=json.dumps(args, separators=(",", ":"))))
        self._push(c.ToolInputAvailable(toolCallId=call_id, toolName=name, input=args,
                                        providerExecuted=provider_executed))
        turn.calls.append(call_id)
        self._call_info[call_id] = (name, args)
        self._announced.add(call_id)
        held = self._held.get(call_id)
        if held is not None:
            self._issue(held)

    def _function_response(self, response: types.FunctionResponse) -> None:
        call_id = response.id or ""
        if call_id in self._settled or call_id not in self._call_info:
            return
        self._settled.add(call_id)
        self._early_outputs.pop(call_id, None)
        turn = self._open_turn()
        self._close_parts(turn)
        name = response.name or self._call_info[call_id][0]
        provider_executed = None if self._is_browser(name) else True
        payload = dict(response.response or {})
        error = payload.get("error") if len(payload) == 1 else None
        if error == REJECTED_TEXT or (isinstance(error, str) and error.startswith(INTERRUPT_TEXT)):
            self._push(c.ToolOutputDenied(toolCallId=call_id))
        elif isinstance(error, str):
            self._push(c.ToolOutputError(toolCallId=call_id, errorText=error, providerExecuted=provider_executed))
        else:
            self._push(c.ToolOutputAvailable(toolCallId=call_id, output=_json_safe(payload),
                                             providerExecuted=provider_executed))

    # --- input helpers -----------------------------------------------------------------------

    def _send_blob(self, data: bytes) -> None:
        self._queue.send_realtime(types.Blob(mime_type=INPUT_MIME, data=data))
