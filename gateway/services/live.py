"""One live (audio) session: a WebSocket's live extension bridged to ADK `run_live`.

How it works
------------
`start_live()` is the one call that opens a session for a connection: it claims the chat (one
answerer per chat; `--max-live-sessions`), creates the session and its `StreamLog`, makes the log
the chat's resumable stream and starts the session as the chat's run. The caller gets a
`LiveHandle` to drive the session with; its `deliver` follows the log to the client, exactly as a chat run's
response is delivered (`adk_gateway.transports.base.deliver`: the same chunk-version adapter, the same
slow-reader guard), and a `resume` for the chat follows the same log.

`LiveSession.run()` opens an ADK live invocation for the chat (`AgentHost.run_live` with a
`LiveChannel`) and runs, in one task group, the *answerer* (it turns the invocation's
events into chunks and appends them to the log) and the delivery, until `stop()`, cancellation,
or the end of the invocation. The first failure of the delivery cancels the rest; a failure of
the answerer is told to the client (an `error` chunk) before the session ends with it.

The session is three parts. Input: the client-facing methods are synchronous and only put
requests on the channel; audio and the marks of utterances go through the session's
`AudioInput` (`adk_gateway.services.live_audio`: resampling, voice detection, pre-roll). Tools: the
calls held for the client (approvals, browser tools) are its `HeldCalls`
(`adk_gateway.services.live_calls`), which the permission plugin asks through the session. Output,
this module: the turns.

Output. Each model turn is one complete UI message, written by a `MessageConverter` in live mode
(the core's engine, `adk_gateway.core.converter`): `start` (a new messageId), steps, its parts,
`finish`. This module only decides when a turn ends: `turn_complete` ends it with `finish`
(`stop`), the model's `interrupted` with `interrupted`, a model error with `error`. Anything
about a tool call is written only into the turn that announced the call.

Barge-in. `interrupt()`, the start of an utterance (also from the voice detector) and new text or
images cut the open turn at once: audio the client has not received is dropped from the log
(`StreamLog.discard_unread`), the turn ends with `finish`, its held calls end, and what the model
still sends for it is discarded until it acknowledges with `interrupted` (or `turn_complete`).
`interrupt()` tells the model with an empty activity.

Memory. The log's byte cap bounds what waits for the client: a client that reads slower than the
model speaks falls behind its budget and is cut as a slow reader, so nothing grows without bound.

Cleanup. `run()` always closes the channel, ends every held call, detaches from the plugin, ends
an open turn with `finish` and closes the log; cancellation propagates. A graceful `stop()` lets
ADK finish (bounded) and lets the delivery send what was decided (bounded) first.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from adk_gateway.agents.adk import AgentHost
from adk_gateway.agents.tools import APPROVALS_STATE_KEY
from adk_gateway.core import chunks as c
from adk_gateway.core.approval import ENDED_TEXT, TIMEOUT_TEXT, ApprovalRefused, LiveApproval, ToolNotice
from adk_gateway.core.converter import MessageConverter, Mode, map_finish_reason, raised_in_agent
from adk_gateway.core.effects import CallAnnounced
from adk_gateway.core.errors import ApprovalInvalid
from adk_gateway.core.events import AgentEvent
from adk_gateway.core.pacing import Pacer
from adk_gateway.core.pcm import INPUT_RATE, validate_frame
from adk_gateway.core.requests import LiveApprovalFrame, LiveControlFrame, LiveTextFrame, LiveToolOutputFrame
from adk_gateway.metrics import Metrics
from adk_gateway.services.live_audio import AudioInput
from adk_gateway.services.live_calls import HeldCalls
from adk_gateway.services.streams import StreamLog
from adk_gateway.services.turn import told_safely

if TYPE_CHECKING:
    from adk_gateway.services.chat import ChatService
    from adk_gateway.services.registry import ChatRun, Connection

__all__ = [
    "ENDED_TEXT",
    "TIMEOUT_TEXT",
    "Deliver",
    "LiveFrame",
    "LiveHandle",
    "LiveOptions",
    "LiveSession",
    "apply_frame",
    "start_live",
]

log = structlog.get_logger("adk_gateway.services.live")

# Follows a session's log to its client until the log is closed and read.
Deliver = Callable[[StreamLog], Coroutine[Any, Any, None]]
# The frames a running session carries out (`apply_frame`); images come decoded (`send_image`).
LiveFrame = LiveTextFrame | LiveApprovalFrame | LiveToolOutputFrame | LiveControlFrame

FAILED_TEXT: Final = "The live session failed."
STOP_GRACE_S: Final = 2.0  # how long a graceful stop waits for ADK, then for the client
LOG_BYTES: Final = 8 * 1024 * 1024  # a session's log cap when none is given (`--stream-buffer-bytes`)
PCM_CHUNK: Final = "data-pcm"


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """How a live session listens (from the `live-start` frame and the settings)."""

    input_rate: int = INPUT_RATE
    hands_free: bool = False
    vad_silence_ms: int = 700
    vad_threshold_dbfs: float = -45.0
    approval_timeout_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LiveHandle:
    """A running live session, as the connection that opened it drives it."""

    session: LiveSession
    run: ChatRun

    @property
    def active(self) -> bool:
        """Until the session's run has ended (also one stopped before it began)."""
        return self.run.active


async def start_live(
    service: ChatService,
    conn: Connection,
    *,
    user_id: str,
    chat_id: str,
    options: LiveOptions,
    deliver: Deliver,
    app: str | None = None,
) -> LiveHandle:
    """Opens a live session of app `app` (None: the default app) for `conn` (see the module
    docstring) and returns it running; `deliver` follows the session's log to the client.

    Raises:
        GatewayError: before anything starts — no such app (`UnknownApp`), the chat is busy
            (`ChatBusy`), or the process runs `--max-live-sessions` already (`Overloaded`).
    """
    host = service.apps.host(app)
    key = (user_id, chat_id)
    stream_log = StreamLog(key=key, max_bytes=service.stream_max_bytes)
    session = LiveSession(
        host, user_id=user_id, chat_id=chat_id, log=stream_log, input_rate=options.input_rate,
        hands_free=options.hands_free, vad_silence_ms=options.vad_silence_ms,
        vad_threshold_dbfs=options.vad_threshold_dbfs, approval_timeout_s=options.approval_timeout_s,
        metrics=service.metrics,
    )
    # A live session holds its chat like a run: one answerer per chat at a time.
    run, _ = await service.open_run(key, conn, stream_log, _nothing_to_prepare, live=True)

    async def body() -> str:
        try:
            await session.run(deliver)
        except Exception as exc:
            log.exception("live_failed", chat_id=chat_id, error=repr(exc))
            return "error"
        return "ok"

    service.start_run(run, body, chat_id=chat_id, live=True)
    return LiveHandle(session, run)


async def _nothing_to_prepare() -> None:
    """(A live session reads its chat's session once it runs.)"""


def apply_frame(session: LiveSession, frame: LiveFrame) -> None:
    """Carries out a live frame of the client on its session: text, an approval's answer, a
    browser tool's output, an utterance's start or end, an interrupt, a stop.

    Raises:
        ApprovalInvalid: the frame answers an approval this session did not issue, or one
            already answered.
    """
    if isinstance(frame, LiveTextFrame):
        session.send_text(frame.text)
    elif isinstance(frame, LiveApprovalFrame):
        try:
            session.answer_approval(frame.approvalId, frame.approved, frame.reason)
        except ApprovalRefused as exc:
            if session.metrics is not None:
                session.metrics.approvals_refused.inc()
            log.warning("approval_refused", approval_id=exc.approval_id, reason=exc.reason)
            raise ApprovalInvalid("This approval was not issued for this live session, or was already "
                                  "answered.", detail=str(exc)) from None
    elif isinstance(frame, LiveToolOutputFrame):
        session.tool_output(frame.toolCallId, frame.output, frame.errorText)
    elif frame.type == "live-activity-start":
        session.activity_start()
    elif frame.type == "live-activity-end":
        session.activity_end()
    elif frame.type == "live-interrupt":
        session.interrupt()
    else:
        session.stop()


class LiveSession:
    """See the module docstring. Methods other than `run()` (and the plugin's waits) are
    synchronous and never block."""

    def __init__(
        self,
        host: AgentHost,
        *,
        user_id: str,
        chat_id: str,
        log: StreamLog | None = None,
        input_rate: int = INPUT_RATE,
        hands_free: bool = False,
        vad_silence_ms: int = 700,
        vad_threshold_dbfs: float = -45.0,
        approval_timeout_s: float = 0.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.host = host
        self.metrics = metrics
        self.user_id = user_id
        self.chat_id = chat_id
        self.log = log if log is not None else StreamLog(key=(user_id, chat_id), max_bytes=LOG_BYTES)
        self._channel = host.live_channel()
        self._audio = AudioInput(self._channel, input_rate=input_rate, hands_free=hands_free,
                                 vad_silence_ms=vad_silence_ms, vad_threshold_dbfs=vad_threshold_dbfs,
                                 on_speech=self._cut_turn)
        self._calls = HeldCalls(is_browser_tool=lambda name: host.tool_kind(name).browser,
                                open_calls=lambda: self._turn.calls, show=self._show,
                                approval_timeout_s=approval_timeout_s, metrics=metrics)
        self._turn = self._new_turn()
        self._turns = 0
        self._discarding = False  # the model still sends for a cut turn
        # Life cycle: `_stop` is set by `stop()` and when the invocation ends.
        self._stop = asyncio.Event()
        self._started = False
        self._closing = False
        self._failure: Exception | None = None

    # --- client-facing -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closing or self._stop.is_set()

    def send_audio(self, pcm: bytes) -> None:
        """One binary frame of PCM16 mono at the session's input rate; raises `PcmFormatError` for
        a bad frame (also once the session has closed)."""
        validate_frame(pcm)
        if not self.closed:
            self._audio.feed(pcm)

    def activity_start(self) -> None:
        """The user starts speaking: a barge-in if the model is answering."""
        if not self.closed:
            self._audio.start_utterance()

    def activity_end(self) -> None:
        if not self.closed:
            self._audio.end_utterance()

    def interrupt(self) -> None:
        """Barge-in without speech: ends the current answer now and tells the model."""
        if self.closed:
            return
        self._cut_turn()
        if not self._audio.speaking:
            # An empty activity interrupts the model and asks nothing.
            self._channel.activity_start()
            self._channel.activity_end()

    def send_text(self, text: str) -> None:
        if self.closed:
            return
        self._cut_turn()
        self._channel.text(text)

    def send_image(self, media_type: str, data: bytes) -> None:
        if self.closed or not data:
            return
        self._cut_turn()
        self._channel.image(media_type, data)

    def stop(self) -> None:
        self._stop.set()

    # The client's answers, and the permission plugin's waits (the session is the invocation's
    # `LiveToolGate`): the held calls' (`adk_gateway.services.live_calls`).

    def answer_approval(self, approval_id: str, approved: bool, reason: str | None) -> None:
        """Answers a `tool-approval-request` of this session; raises `ApprovalRefused` otherwise."""
        self._calls.answer_approval(approval_id, approved, reason)

    def tool_output(self, tool_call_id: str, output: Any = None, error_text: str | None = None) -> None:
        self._calls.tool_output(tool_call_id, output, error_text)

    async def request_approval(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveApproval:
        return await self._calls.request_approval(tool_call_id, tool_name, browser=browser)

    async def browser_output(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        return await self._calls.browser_output(tool_call_id, tool_name)

    # --- running -----------------------------------------------------------------------------

    async def run(self, deliver: Deliver | None = None) -> None:
        """Runs until `stop()`, cancellation, or the end of the live invocation; `deliver`
        (optional) follows the log to the client meanwhile.

        Raises:
            Exception: what failed — the delivery (at once), or the answerer (once the client
                has been told and the delivery has sent what it could).
        """
        if self._started:
            raise RuntimeError("a LiveSession runs only once")
        self._started = True
        try:
            async with asyncio.TaskGroup() as tasks:
                delivery: asyncio.Task[None] | None = None
                if deliver is not None:
                    delivery = tasks.create_task(deliver(self.log), name=f"live-deliver:{self.chat_id}")
                answerer = tasks.create_task(self._answer(), name=f"live-answer:{self.chat_id}")
                await self._stop.wait()
                await self._wind_down(answerer, delivery)
        except BaseExceptionGroup as group:
            # Only the delivery fails inside the group (the answerer reports its failure in the
            # log and keeps it for below): its error is the session's.
            raise group.exceptions[0] from None
        finally:
            self._close()
            self._end_turn("interrupted")
            self.log.close()
        if self._failure is not None:
            raise self._failure
        log.info("live_ended", chat_id=self.chat_id, app=self.host.app_name, turns=self._turns)

    def _close(self) -> None:
        """No more input, and every held call ends."""
        self._closing = True
        self._channel.close()
        self._calls.close()

    async def _wind_down(self, answerer: asyncio.Task[None], delivery: asyncio.Task[None] | None) -> None:
        """A graceful end: ADK finishes the invocation once the channel is closed (bounded), then
        an open turn ends with `finish` and the client gets what was decided (bounded)."""
        self._close()
        if not answerer.done():
            await asyncio.wait([answerer], timeout=STOP_GRACE_S)
            answerer.cancel()
            await asyncio.wait([answerer])
        self._end_turn("interrupted")
        self.log.close()
        if delivery is not None and not delivery.done():
            await asyncio.wait([delivery], timeout=STOP_GRACE_S)
            delivery.cancel()

    async def _answer(self) -> None:
        """The answerer: turns the invocation's events into chunks until it ends. A failure ends
        the open turn with an `error` chunk; `run()` raises it once the client has it."""
        try:
            session = await self.host.get_session(self.user_id, self.chat_id)
            if session is None:
                session = await self.host.create_session(self.user_id, self.chat_id)
            self._calls.load(session.state.get(APPROVALS_STATE_KEY))
            events = self.host.run_live(self.user_id, self.chat_id, self._channel, self)
            # A live model that sends event after event without waiting would hold the loop
            # (`adk_gateway.core.pacing`), as a chat's would.
            pacer = Pacer()
            async with aclosing(events) as stream:
                async for event in stream:
                    self._on_event(event)
                    await pacer.step()
        except Exception as exc:
            self._failure = exc
            self._emit(self._turn.error(FAILED_TEXT))
            self._end_turn("error")
        finally:
            self._stop.set()

    # --- output: turns -----------------------------------------------------------------------

    def _emit(self, chunks: list[c.Chunk]) -> None:
        if chunks and not self.log.closed:
            self.log.append_chunks(chunks)

    def _new_turn(self) -> MessageConverter:
        return MessageConverter(f"msg-{uuid.uuid4().hex}", mode=Mode.LIVE, tools=self._calls.tool_kind,
                                reported=self._calls.reported)

    def _end_turn(self, reason: c.FinishReason) -> None:
        """Ends the open turn (if anything of it was written) and starts afresh."""
        turn = self._turn
        if not turn.started:
            return
        self._emit(turn.finish(reason))
        self._turns += 1
        self._turn = self._new_turn()
        self._calls.forget(turn.calls)

    def _cut_turn(self) -> None:
        """Barge-in: audio the client has not received is dropped (also of a turn the model
        already finished, when the client is slow), and the open turn ends now with its open calls."""
        self.log.discard_unread(PCM_CHUNK)
        turn = self._turn
        if not turn.started:
            return
        self._emit(turn.close_parts())
        self._calls.cut(turn.calls)
        if turn.model_output:
            self._discarding = True
        self._end_turn("interrupted")

    def _on_event(self, event: AgentEvent) -> None:
        if event.input_transcription is not None:
            # A new utterance: whatever the model still owed the cut turn is over.
            self._discarding = False
            self._emit(self._turn.user_transcription(event.input_transcription))
            return
        if event.author == "user":
            return
        if self._discarding:
            self._calls.drop(event)
            if event.interrupted or event.turn_complete:
                self._discarding = False
            return
        if raised_in_agent(event):
            event = told_safely(event, self.chat_id)
        result = self._turn.convert(event)
        self._emit(result.chunks)
        if event.error_code or event.error_message:  # (shown: the turn ends with it)
            self._end_turn("error")
            return
        for effect in result.effects:
            if isinstance(effect, CallAnnounced):
                self._calls.announce(effect)
        if event.interrupted:
            self._end_turn("interrupted")
        elif event.turn_complete:
            self._end_turn(map_finish_reason(event.finish_reason))

    def _show(self, item: ToolNotice) -> None:
        self._emit(self._turn.show([item]))
