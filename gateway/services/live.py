"""One live (audio) session: a WebSocket's live extension bridged to ADK `run_live`.

How it works
------------
`start_live()` is the one call that opens a session for a connection: it claims the chat (one
answerer per chat; `--max-live-sessions`), creates the session and its `StreamLog`, makes the log
the chat's resumable stream and starts the session as the chat's run. The caller gets a
`LiveHandle` to drive the session with; its `deliver` follows the log to the client, exactly as a chat run's
response is delivered (`transports.base.deliver`: the same chunk-version adapter, the same
slow-reader guard), and a `resume` for the chat follows the same log.

`LiveSession.run()` opens an ADK live invocation for the chat (`AgentHost.run_live` with a
`LiveRequestQueue`) and runs, in one task group, the *answerer* (it turns the invocation's
events into chunks and appends them to the log) and the delivery, until `stop()`, cancellation,
or the end of the invocation. The first failure of the delivery cancels the rest; a failure of
the answerer is told to the client (an `error` chunk) before the session ends with it.

Input. The client-facing methods are synchronous and only put requests on the queue: audio frames
are validated, resampled to 16 kHz with one `Resampler` per session, and sent as realtime blobs;
activity start/end mark the user's utterances (in hands-free mode an `EnergyVad` marks them, and
~300 ms of audio before a detected start is replayed after it so the onset is not lost). Voice
detection is always the gateway's: the model's own is switched off in the `RunConfig`.

Output. Each model turn is one complete UI message, written by a `LiveTurn` (the core's engine,
`gateway.core.converter`): `start` (a new messageId), steps, its parts, `finish`. This module
only decides when a turn ends: `turn_complete` ends it with `finish` (`stop`), the model's
`interrupted` with `interrupted`, a model error with `error`.

Barge-in. `interrupt()`, `activity_start()` (also from the VAD) and new text or images cut the
open turn at once: audio the client has not received is dropped from the log
(`StreamLog.discard_unread`), the turn ends with `finish`, and what the model still sends for it
is discarded until it acknowledges with `interrupted` (or `turn_complete`). `interrupt()` tells
the model with an empty activity.

Memory. The log's byte cap bounds what waits for the client: a client that reads slower than the
model speaks falls behind its budget and is cut as a slow reader, so nothing grows without bound.

Tools (the section "held calls" below). ADK runs tools inside `run_live`, but cannot confirm them
there, so `PermissionPlugin` asks this session (the `LiveToolGate` attached for our queue). The
session's `LiveBook` (gateway.core.approval, the one approval authority) decides everything about
those calls; the session keeps only a future per held call and carries out what the book says. A
call that needs approval is held: once the call has been announced, the client gets
`tool-approval-request` and the step ends; the session waits for `answer_approval` (or the
approval timeout, which ends the call as a tool error). A browser tool waits for `tool_output`,
which becomes the tool's result. Every wait is released with an error result when its turn is
cut or the session ends.

Cleanup. `run()` always closes the queue, releases every wait, detaches from the plugin, ends an
open turn with `finish` and closes the log; cancellation propagates. A graceful `stop()` lets ADK
finish (bounded) and lets the delivery send what was decided (bounded) first.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from agents.adk import AgentHost
from agents.tools import APPROVALS_STATE_KEY
from gateway.core import chunks as c
from gateway.core.approval import (
    ENDED_TEXT,
    TIMEOUT_TEXT,
    ApprovalRefused,
    AwaitClient,
    CallState,
    HeldAnswer,
    Hold,
    LiveApproval,
    LiveBook,
    LiveStep,
    ToolPolicy,
)
from gateway.core.converter import CallAnnounced, MessageConverter, Mode, map_finish_reason, raised_in_agent
from gateway.core.errors import ApprovalInvalid
from gateway.core.events import AgentEvent, FunctionCall
from gateway.core.kinds import ToolKind
from gateway.core.pacing import Pacer
from gateway.core.pcm import INPUT_RATE, float_to_pcm16, pcm16_to_float, validate_frame, validate_rate
from gateway.core.requests import LiveApprovalFrame, LiveControlFrame, LiveTextFrame, LiveToolOutputFrame
from gateway.core.resample import Resampler
from gateway.core.vad import EnergyVad, VadEventKind
from gateway.metrics import Metrics
from gateway.services.streams import StreamLog
from gateway.services.turn import told_safely

if TYPE_CHECKING:
    from gateway.services.chat import ChatService
    from gateway.services.registry import ChatRun, Connection

__all__ = [
    "ENDED_TEXT",
    "TIMEOUT_TEXT",
    "Deliver",
    "LiveFrame",
    "LiveHandle",
    "LiveOptions",
    "LiveSession",
    "start_live",
]

log = structlog.get_logger("gateway.services.live")

# Follows a session's log to its client until the log is closed and read.
Deliver = Callable[[StreamLog], Coroutine[Any, Any, None]]
# The frames a running session carries out (`LiveSession.apply`); images come decoded (`send_image`).
LiveFrame = LiveTextFrame | LiveApprovalFrame | LiveToolOutputFrame | LiveControlFrame

FAILED_TEXT: Final = "The live session failed."
STOP_GRACE_S: Final = 2.0  # how long a graceful stop waits for ADK, then for the client
PREROLL_MS: Final = 300
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


def _new_approval_id() -> str:
    return f"apr-{secrets.token_urlsafe(18)}"


class LiveSession:
    """See the module docstring. Methods other than `run()` are synchronous and never block."""

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
        self.input_rate = validate_rate(input_rate)
        self.hands_free = hands_free
        self.approval_timeout_s = approval_timeout_s
        self._channel = host.live_channel()
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
        self._turn = self._new_turn()
        self._turns = 0
        self._discarding = False
        # Held calls (see that section): the book decides, the futures wait.
        self._book = LiveBook()
        self._waiting: dict[str, asyncio.Future[HeldAnswer]] = {}
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
        self._channel.activity_start()

    def activity_end(self) -> None:
        if self.closed or not self._user_active:
            return
        self._user_active = False
        self._channel.activity_end()

    def interrupt(self) -> None:
        """Barge-in without speech: ends the current answer now and tells the model."""
        if self.closed:
            return
        self._cut_turn()
        if not self._user_active:
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

    def apply(self, frame: LiveFrame) -> None:
        """Carries out a live frame of the client: text, an approval's answer, a browser tool's
        output, an utterance's start or end, an interrupt, a stop.

        Raises:
            ApprovalInvalid: the frame answers an approval this session did not issue, or one
                already answered.
        """
        if isinstance(frame, LiveTextFrame):
            self.send_text(frame.text)
        elif isinstance(frame, LiveApprovalFrame):
            try:
                self.answer_approval(frame.approvalId, frame.approved, frame.reason)
            except ApprovalRefused as exc:
                if self.metrics is not None:
                    self.metrics.approvals_refused.inc()
                log.warning("approval_refused", approval_id=exc.approval_id, reason=exc.reason)
                raise ApprovalInvalid("This approval was not issued for this live session, or was already "
                                      "answered.", detail=str(exc)) from None
        elif isinstance(frame, LiveToolOutputFrame):
            self.tool_output(frame.toolCallId, frame.output, frame.errorText)
        elif frame.type == "live-activity-start":
            self.activity_start()
        elif frame.type == "live-activity-end":
            self.activity_end()
        elif frame.type == "live-interrupt":
            self.interrupt()
        else:
            self.stop()

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
            self._closing = True
            self._channel.close()
            self._carry_out(self._book.close())
            self._end_turn("interrupted")
            self.log.close()
        if self._failure is not None:
            raise self._failure
        log.info("live_ended", chat_id=self.chat_id, turns=self._turns)

    async def _wind_down(self, answerer: asyncio.Task[None], delivery: asyncio.Task[None] | None) -> None:
        """A graceful end: ADK finishes the invocation once the queue is closed (bounded), then an
        open turn ends with `finish` and the client gets what was decided (bounded)."""
        self._closing = True
        self._channel.close()
        self._carry_out(self._book.close())
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
            await self._prepare()
            events = self.host.run_live(self.user_id, self.chat_id, self._channel, self)
            # A live model that sends event after event without waiting would hold the loop
            # (`gateway.core.pacing`), as a chat's would.
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

    async def _prepare(self) -> None:
        session = await self.host.get_session(self.user_id, self.chat_id)
        if session is None:
            session = await self.host.create_session(self.user_id, self.chat_id)
        if not self._book.closed:  # (a session stopped meanwhile keeps its closed book)
            self._book = LiveBook.for_chat(session.state.get(APPROVALS_STATE_KEY))

    # --- output: turns -----------------------------------------------------------------------

    def _emit(self, chunks: list[c.Chunk]) -> None:
        if chunks and not self.log.closed:
            self.log.append_chunks(chunks)

    def _new_turn(self) -> MessageConverter:
        return MessageConverter(f"msg-{uuid.uuid4().hex}", mode=Mode.LIVE, tools=self._tool_kind,
                                reported=self._reported)

    def _end_turn(self, reason: c.FinishReason) -> None:
        """Ends the open turn (if anything of it was written) and starts afresh."""
        turn = self._turn
        if not turn.started:
            return
        self._emit(turn.finish(reason))
        self._turns += 1
        self._turn = self._new_turn()
        self._book.forget(turn.calls)

    def _cut_turn(self) -> None:
        """Barge-in: audio the client has not received is dropped (also of a turn the model
        already finished, when the client is slow), and the open turn ends now with its open calls."""
        self.log.discard_unread(PCM_CHUNK)
        turn = self._turn
        if not turn.started:
            return
        self._emit(turn.close_parts())
        self._carry_out(self._book.cut(turn.calls))
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
            self._discard_calls(event)
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
                # The model calls a tool: the book hears of it (and issues it, if the plugin holds it already).
                self._carry_out(self._book.announce(effect.tool_call_id, effect.tool_name, browser=effect.client,
                                                    input=effect.input, now=time.time()))
        if event.interrupted:
            self._end_turn("interrupted")
        elif event.turn_complete:
            self._end_turn(map_finish_reason(event.finish_reason))

    # --- input helpers -----------------------------------------------------------------------

    def _send_blob(self, data: bytes) -> None:
        self._channel.audio(data)

    # --- held calls (approvals and browser tools) ----------------------------------------------
    #
    # The session's `LiveBook` decides everything about the tool calls of its turns; this section
    # only tells it what happened and carries out its `LiveStep`s: it writes what is to be shown
    # into the open turn, and wakes the waiting futures (`_waiting`, by call id).
    # `PermissionPlugin` calls `request_approval` / `browser_output` inside ADK's tool pipeline and
    # waits; the client answers with `answer_approval` / `tool_output`; a cut turn or the session's
    # end wakes every waiter.

    def answer_approval(self, approval_id: str, approved: bool, reason: str | None) -> None:
        """Answers a `tool-approval-request` of this session; raises `ApprovalRefused` otherwise."""
        step = self._book.answer(approval_id, approved, reason)
        if self.metrics is not None:
            for decision in step.decisions:
                self.metrics.approvals_answered.labels(decision=decision.value).inc()
        self._carry_out(step)

    def tool_output(self, tool_call_id: str, output: Any = None, error_text: str | None = None) -> None:
        """The browser's result for a browser tool call; the book ignores one it does not expect."""
        step = self._book.browser_output(tool_call_id, output, error_text)
        if step is None:
            log.warning("live_tool_output_ignored", tool_call_id=tool_call_id)
            return
        self._carry_out(step)

    async def request_approval(self, tool_call_id: str, tool_name: str, *, browser: bool) -> LiveApproval:
        answer = await self._hold(tool_call_id, tool_name, browser=browser, hold=Hold.APPROVAL)
        assert isinstance(answer, LiveApproval)  # the book answers a hold in its kind
        return answer

    async def browser_output(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        answer = await self._hold(tool_call_id, tool_name, browser=True, hold=Hold.OUTPUT)
        assert not isinstance(answer, LiveApproval)
        return answer

    async def _hold(self, tool_call_id: str, tool_name: str, *, browser: bool, hold: Hold) -> HeldAnswer:
        """Waits until the book resumes the call (or answers it at once); an approval waits at
        most until the book's deadline for it (`approval_timeout_s` after it was issued; 0: no
        limit). The book always hears that the waiter is gone."""
        step = self._book.hold(tool_call_id, tool_name, browser=browser, hold=hold, approval_id=_new_approval_id(),
                               now=time.time())
        if step.answer is not None:
            return step.answer
        future: asyncio.Future[HeldAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[tool_call_id] = future
        try:
            self._carry_out(step)
            if hold is Hold.APPROVAL and self.approval_timeout_s > 0:
                # (Held before the model's call was announced, the approval is not issued yet: it
                # expires as long after now as it would after its issue.)
                deadline = self._book.deadline(tool_call_id, self.approval_timeout_s) or (
                    time.time() + self.approval_timeout_s)
                loop = asyncio.get_running_loop()
                try:
                    async with asyncio.timeout_at(loop.time() + max(0.0, deadline - time.time())):
                        return await future
                except TimeoutError:
                    # (The timeout cancels the future it interrupts; one resumed just before stands.)
                    if future.done() and not future.cancelled():
                        return future.result()
                    log.info("live_approval_timeout", tool_call_id=tool_call_id)
                    expired = self._book.expire(tool_call_id)
                    self._carry_out(expired)
                    assert expired.answer is not None
                    return expired.answer
            return await future
        finally:
            if self._waiting.get(tool_call_id) is future:
                del self._waiting[tool_call_id]
            self._book.release(tool_call_id)

    def _carry_out(self, step: LiveStep) -> None:
        """Shows what the book says to show, in the open turn, and wakes the waiters it resumes."""
        for item in step.shown:
            if self._in_turn(item.tool_call_id, type(item).__name__):
                self._emit(self._turn.show([item]))
                # Counted as a chat run counts its questions: when the client is asked.
                if isinstance(item, AwaitClient) and item.approval_id is not None and self.metrics is not None:
                    self.metrics.approvals_issued.inc()
        for resume in step.resumes:
            future = self._waiting.pop(resume.tool_call_id, None)
            if future is not None and not future.done():
                future.set_result(resume.answer)

    def _in_turn(self, tool_call_id: str, what: str) -> bool:
        """Whether the open turn announced the call. Anything about a call is written only into the
        message that has it (the client's reader refuses a chunk for a call it does not know); a
        call whose turn ended while it was held gets nothing more."""
        if tool_call_id in self._turn.calls:
            return True
        log.warning("live_call_outside_turn", tool_call_id=tool_call_id, shown=what)
        return False

    def _is_browser(self, tool_name: str) -> bool:
        """Announced for the browser to run: a browser tool the chat does not refuse ("never")."""
        return (self.host.tool_kind(tool_name).browser
                and self._book.policy(tool_name, needs_approval=False) is not ToolPolicy.REFUSE)

    def _tool_kind(self, tool_name: str) -> ToolKind:
        """How a turn shows the tool's calls (long-running tools run inside the live invocation)."""
        return ToolKind(browser=True) if self._is_browser(tool_name) else ToolKind()

    def _reported(self, tool_call_id: str, outcome: CallState) -> bool:
        """A tool's result: shown once, for a call the open turn announced."""
        return self._book.reported(tool_call_id, outcome) and self._in_turn(tool_call_id, "tool_result")

    def _discard_calls(self, event: AgentEvent) -> None:
        """Calls the model still makes for a cut turn never run (and are never shown)."""
        for part in event.parts:
            if isinstance(part, FunctionCall) and part.id:
                name = part.name or "unknown"
                self._carry_out(self._book.drop(part.id, name, browser=self._is_browser(name)))
