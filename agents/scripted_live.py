"""The scripted model's live (audio) connection: a deterministic, offline ADK `BaseLlmConnection`.

How it works
------------
ADK's `run_live` opens one connection per live invocation (`ScriptedLlm.connect()` →
`ScriptedLiveConnection.open()`), feeds it from the `LiveRequestQueue` through `send_realtime` /
`send_content`, and reads `receive()` until it returns without yielding anything.

- Audio: `ActivityStart` opens an utterance, PCM16 `types.Blob`s (``audio/pcm;rate=R``) are
  collected while it is open, `ActivityEnd` (or `audio_stream_end`) finishes it. Audio outside an
  utterance is ignored, as a model with its own voice detection switched off does; an utterance with
  no audio gets no answer. A finished utterance of N ms is answered with the user's transcription
  `[N ms of audio]`, then the spoken answer `heard N ms of audio`: its words as partial output
  transcriptions interleaved with 0.5 s of a 440 Hz tone in 24 kHz PCM16 chunks, then the finished
  transcription and `turn_complete`. With TEXT instead of AUDIO as the response modality, the same
  answer comes as text.
- Text (`send_content`): answered like the non-live model (`adk_gateway.agents.script.plan_for_text`):
  partial text deltas, the aggregated text, `turn_complete`. `/tool` lines make function calls and
  wait for ADK to send the function responses back; the model then makes the next `/then` step's
  calls or ends with one `NAME -> <response JSON>` line per call. Images get
  `saw an image (TYPE, N bytes)`.
- Barge-in: an `ActivityStart` or new content while an answer is pending (playing, queued, or
  waiting for tool results) stops it at once and yields `interrupted=True`. Audio chunks are paced
  (`chunk_delay_s` per `chunk_ms` chunk) so "stops within one chunk" can be observed.
- Answers are played by `receive()` itself from an inbox, so the connection owns no task. After
  `close()`, `receive()` returns without yielding (ADK's receive loop ends only on an empty pass).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from adk_gateway.agents.script import ScriptError, plan_for_text, tiny_png, usage
from adk_gateway.core.pcm import INPUT_RATE, OUTPUT_RATE, chunk_bytes, duration_ms, tone

__all__ = ["ScriptedLiveConnection"]

ANSWER_TONE_HZ = 440.0
ANSWER_TONE_S = 0.5
OUTPUT_MIME = f"audio/pcm;rate={OUTPUT_RATE}"
_RATE = re.compile(r"rate=(\d+)")
_WORD = re.compile(r"\S+\s*|\s+")


def _rate_of(mime_type: str | None) -> int:
    match = _RATE.search(mime_type or "")
    return int(match.group(1)) if match else INPUT_RATE


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _model(*parts: types.Part) -> types.Content:
    return types.Content(role="model", parts=list(parts))


@dataclass(eq=False)
class _Answer:
    """Responses to yield in order, each after a delay (seconds) that a barge-in cuts short."""

    items: list[tuple[float, LlmResponse]]
    interruptible: bool = True
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    complete: bool = False  # its turn_complete was yielded


@dataclass(eq=False)
class _ToolTurn:
    """A text turn whose `/tool` steps are being replayed."""

    text: str
    steps: tuple[tuple[Any, ...], ...]  # adk_gateway.agents.script.ToolCall steps
    step: int = 0
    names: list[str] = field(default_factory=list)  # every call made, in order
    responses: list[dict[str, Any] | None] = field(default_factory=list)
    step_start: int = 0

    def step_done(self) -> bool:
        return all(r is not None for r in self.responses[self.step_start :])


class ScriptedLiveConnection(BaseLlmConnection):
    """See the module docstring."""

    # Defaults for every connection ADK opens (tests may change them); per connection via `open()`.
    default_chunk_ms: ClassVar[int] = 100
    default_chunk_delay_s: ClassVar[float] = 0.02

    def __init__(
        self,
        llm_request: LlmRequest | None = None,
        *,
        chunk_ms: int | None = None,
        chunk_delay_s: float | None = None,
    ) -> None:
        config = llm_request.live_connect_config if llm_request is not None else None
        modalities = [str(getattr(m, "value", m)).upper() for m in (config.response_modalities or [])] if config else []
        self.audio_out = not modalities or "AUDIO" in modalities
        self.input_transcription = config is None or config.input_audio_transcription is not None
        self.output_transcription = config is None or config.output_audio_transcription is not None
        self.chunk_ms = chunk_ms if chunk_ms is not None else self.default_chunk_ms
        self.chunk_delay_s = chunk_delay_s if chunk_delay_s is not None else self.default_chunk_delay_s
        # The agent's tools, for the keyword rules (None without a request: all of the demo's).
        self.tools = frozenset(llm_request.tools_dict) if llm_request is not None else None
        self.history: list[types.Content] = []
        self._inbox: deque[_Answer] = deque()
        self._wake = asyncio.Event()
        self._playing: _Answer | None = None
        self._utterance: bytearray | None = None
        self._utterance_rate = INPUT_RATE
        self._tool_turn: _ToolTurn | None = None
        self._closed = False

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, llm_request: LlmRequest | None = None, **options: Any
    ) -> AsyncIterator[ScriptedLiveConnection]:
        """What `ScriptedLlm.connect()` returns: the connection, closed when the block exits."""
        connection = cls(llm_request, **options)
        try:
            yield connection
        finally:
            await connection.close()

    # --- state -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def answering(self) -> bool:
        """True while an answer is playing, queued, or waiting for tool results."""
        playing = self._playing is not None and self._playing.interruptible and not self._playing.complete
        return playing or any(a.interruptible for a in self._inbox) or self._tool_turn is not None

    # --- input -----------------------------------------------------------------------------

    async def send_history(self, history: list[types.Content]) -> None:
        # Prior turns are context only; the scripted model does not answer them again.
        self.history = list(history)

    async def send_content(self, content: types.Content) -> None:
        if self._closed:
            return
        parts = list(content.parts or ())
        responses = [p.function_response for p in parts if p.function_response is not None]
        if responses:
            self._tool_results(responses)
            return
        self._barge_in()
        images = [p.inline_data for p in parts if p.inline_data is not None]
        if images:
            lines = [f"saw an image ({b.mime_type or 'application/octet-stream'}, {len(b.data or b'')} bytes)"
                     for b in images]
            self._enqueue(self._text_answer("image", _words("\n".join(lines))))
            return
        text = "".join(p.text or "" for p in parts if p.text and not p.thought)
        self._answer_text(text)

    async def send_realtime(self, blob: Any) -> None:
        if self._closed:
            return
        if isinstance(blob, types.ActivityStart):
            self._barge_in()
            self._utterance = bytearray()
        elif isinstance(blob, types.ActivityEnd):
            self._finish_utterance()
        elif isinstance(blob, types.LiveClientRealtimeInput):
            if blob.audio_stream_end:
                self._finish_utterance()
        elif isinstance(blob, types.Blob):
            mime = blob.mime_type or ""
            if mime.startswith("audio/") and self._utterance is not None and blob.data:
                if not self._utterance:
                    self._utterance_rate = _rate_of(mime)
                self._utterance += blob.data

    # --- output ----------------------------------------------------------------------------

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        while not self._closed:
            if not self._inbox:
                self._wake.clear()
                await self._wake.wait()
                continue
            answer = self._inbox.popleft()
            self._playing = answer
            try:
                for delay, response in answer.items:
                    if delay > 0 and not answer.interrupted.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(delay):
                                await answer.interrupted.wait()
                    if self._closed or answer.interrupted.is_set():
                        break
                    if response.turn_complete:
                        answer.complete = True  # from here on there is nothing left to interrupt
                    yield response
                # Also when the barge-in came while the last response was being handled.
                if answer.interrupted.is_set() and not self._closed:
                    yield LlmResponse(interrupted=True)
            finally:
                self._playing = None

    async def close(self) -> None:
        self._closed = True
        if self._playing is not None:
            self._playing.interrupted.set()
        self._inbox.clear()
        self._tool_turn = None
        self._wake.set()

    # --- behaviour -------------------------------------------------------------------------

    def _enqueue(self, answer: _Answer) -> None:
        self._inbox.append(answer)
        self._wake.set()

    def _barge_in(self) -> None:
        """Stops the pending answer; the model says so with `interrupted=True`."""
        dropped = [a for a in self._inbox if a.interruptible]
        pending_tools = self._tool_turn is not None
        self._tool_turn = None
        if dropped:
            self._inbox = deque(a for a in self._inbox if not a.interruptible)
        playing = self._playing
        if playing is not None and playing.interruptible and not playing.complete:
            playing.interrupted.set()
        elif dropped or pending_tools:
            self._enqueue(_Answer([(0.0, LlmResponse(interrupted=True))], interruptible=False))

    def _finish_utterance(self) -> None:
        audio, self._utterance = self._utterance, None
        if not audio:
            return
        millis = duration_ms(bytes(audio), self._utterance_rate)
        heard = f"[{millis} ms of audio]"
        if self.input_transcription:
            said = LlmResponse(input_transcription=types.Transcription(text=heard, finished=True), partial=False)
            self._enqueue(_Answer([(0.0, said)], interruptible=False))
        answer = f"heard {millis} ms of audio"
        if self.audio_out:
            self._enqueue(self._spoken_answer(heard, answer))
        else:
            self._enqueue(self._text_answer(heard, _words(answer)))

    def _spoken_answer(self, prompt: str, answer: str) -> _Answer:
        chunks = chunk_bytes(tone(ANSWER_TONE_HZ, ANSWER_TONE_S), self.chunk_ms, OUTPUT_RATE)
        words = _words(answer) if self.output_transcription else []
        items: list[tuple[float, LlmResponse]] = []
        for index in range(max(len(chunks), len(words))):
            delay = self.chunk_delay_s if index else 0.0
            if index < len(words):
                transcript = types.Transcription(text=words[index], finished=False)
                items.append((delay, LlmResponse(output_transcription=transcript, partial=True)))
                delay = 0.0
            if index < len(chunks):
                blob = types.Blob(mime_type=OUTPUT_MIME, data=chunks[index])
                items.append((delay, LlmResponse(content=_model(types.Part(inline_data=blob)), partial=True)))
        if self.output_transcription:
            final = types.Transcription(text=answer, finished=True)
            items.append((0.0, LlmResponse(output_transcription=final, partial=False)))
        items.append((0.0, self._turn_complete(prompt, answer)))
        return _Answer(items)

    def _text_answer(
        self,
        prompt: str,
        deltas: list[str] | tuple[str, ...],
        *,
        delay_s: float = 0.0,
        thought: str | None = None,
        extra: list[types.Part] | None = None,
    ) -> _Answer:
        items: list[tuple[float, LlmResponse]] = []
        final_parts: list[types.Part] = []
        if thought is not None:
            for piece in _words(thought) or [""]:
                items.append((0.0, LlmResponse(content=_model(types.Part(text=piece, thought=True)), partial=True)))
            final_parts.append(types.Part(text=thought, thought=True))
        for index, delta in enumerate(deltas):
            partial = LlmResponse(content=_model(types.Part(text=delta)), partial=True)
            items.append((delay_s if index else 0.0, partial))
        answer = "".join(deltas)
        if answer:
            final_parts.append(types.Part(text=answer))
        final_parts.extend(extra or ())
        if final_parts:
            items.append((0.0, LlmResponse(content=_model(*final_parts), partial=False)))
        items.append((0.0, self._turn_complete(prompt, answer)))
        return _Answer(items)

    @staticmethod
    def _turn_complete(prompt: str, answer: str) -> LlmResponse:
        return LlmResponse(
            turn_complete=True, finish_reason=types.FinishReason.STOP, usage_metadata=usage(prompt, answer)
        )

    def _answer_text(self, text: str) -> None:
        try:
            plan = plan_for_text(text, self.tools)
        except ScriptError as exc:
            self._enqueue(_Answer([(0.0, LlmResponse(error_code="SCRIPT_ERROR", error_message=str(exc),
                                                     turn_complete=True))]))
            return
        if plan.error is not None:
            self._enqueue(_Answer([(0.0, LlmResponse(error_code="MODEL_ERROR", error_message=plan.error,
                                                     turn_complete=True))]))
            return
        if plan.steps:
            self._tool_turn = _ToolTurn(text=text, steps=plan.steps)
            self._call_step()
            return
        extra = [types.Part(inline_data=types.Blob(mime_type="image/png", data=tiny_png()))] if plan.image else []
        self._enqueue(self._text_answer(text, plan.deltas, delay_s=plan.delay_s, thought=plan.thought, extra=extra))

    def _call_step(self) -> None:
        turn = self._tool_turn
        if turn is None:
            return
        calls = turn.steps[turn.step]
        turn.step_start = len(turn.names)
        for call in calls:
            turn.names.append(call.name)
            turn.responses.append(None)
        parts = [types.Part(function_call=types.FunctionCall(name=call.name, args=dict(call.args))) for call in calls]
        self._enqueue(_Answer([(0.0, LlmResponse(content=_model(*parts), partial=False))]))

    def _tool_results(self, responses: list[types.FunctionResponse]) -> None:
        turn = self._tool_turn
        if turn is None:
            return  # the turn was interrupted; a late result gets no answer
        for response in responses:
            for index in range(turn.step_start, len(turn.names)):
                if turn.names[index] == response.name and turn.responses[index] is None:
                    turn.responses[index] = dict(response.response or {})
                    break
        if not turn.step_done():
            return
        turn.step += 1
        if turn.step < len(turn.steps):
            self._call_step()
            return
        self._tool_turn = None
        lines = [f"{name} -> {_compact(response)}" for name, response in zip(turn.names, turn.responses, strict=True)]
        self._enqueue(self._text_answer(turn.text, _words("\n".join(lines))))
