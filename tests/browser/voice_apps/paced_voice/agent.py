"""A voice agent whose offline live model speaks as a real model does: its answer streams while it
plays, so the gateway still holds part of it when the user speaks over it.

The `scripted` model sends its 0.5 s answer in about 80 ms; this one answers every utterance with
3 s of a 440 Hz tone in 100 ms chunks sent 50 ms apart (twice real time, for 1.45 s), preceded by
the user's transcription `[N ms of audio]` and followed by the output transcription and
`turn_complete`. An `ActivityStart` (the user speaks, or the gateway's `live-interrupt`) or typed
text stops the answer at once and yields `interrupted`. Typed text is answered `typed: TEXT`.

Only ADK's public model interfaces are used (`BaseLlm`, `BaseLlmConnection`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import math
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from google.adk.agents import Agent
from google.adk.models import BaseLlm
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

INPUT_RATE = 16_000
OUTPUT_RATE = 24_000
ANSWER_S = 3.0
ANSWER_HZ = 440.0
CHUNK_MS = 100
CHUNK_GAP_S = 0.05
SPOKEN = "a long answer"


def _tone_chunks() -> list[bytes]:
    samples = array.array(
        "h",
        (
            int(0.3 * 32767 * math.sin(2 * math.pi * ANSWER_HZ * i / OUTPUT_RATE))
            for i in range(int(ANSWER_S * OUTPUT_RATE))
        ),
    )
    data = samples.tobytes()
    step = OUTPUT_RATE * CHUNK_MS // 1000 * 2
    return [data[i : i + step] for i in range(0, len(data), step)]


CHUNKS = _tone_chunks()


def _model(*parts: types.Part) -> types.Content:
    return types.Content(role="model", parts=list(parts))


def _finished(text: str) -> LlmResponse:
    return LlmResponse(
        content=_model(types.Part(text=text)), partial=False, turn_complete=True, finish_reason=types.FinishReason.STOP
    )


class PacedVoiceConnection(BaseLlmConnection):
    """See the module docstring."""

    def __init__(self) -> None:
        self._inbox: deque[tuple[str, Any]] = deque()  # ("audio", millis) | ("text", text)
        self._wake = asyncio.Event()
        self._stop_answer = asyncio.Event()
        self._answering = False
        self._utterance: bytearray | None = None
        self._closed = False

    async def send_history(self, history: list[types.Content]) -> None:
        pass

    async def send_content(self, content: types.Content) -> None:
        text = "".join(p.text or "" for p in content.parts or () if p.text)
        if text:
            self._barge_in()
            self._enqueue(("text", text))

    async def send_realtime(self, blob: Any) -> None:
        if isinstance(blob, types.ActivityStart):
            self._barge_in()
            self._utterance = bytearray()
        elif isinstance(blob, types.ActivityEnd):
            audio, self._utterance = self._utterance, None
            if audio:
                self._enqueue(("audio", len(audio) * 1000 // (2 * INPUT_RATE)))
        elif isinstance(blob, types.Blob) and self._utterance is not None and blob.data:
            self._utterance += blob.data

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        while not self._closed:
            if not self._inbox:
                self._wake.clear()
                await self._wake.wait()
                continue
            kind, value = self._inbox.popleft()
            if kind == "text":
                yield _finished(f"typed: {value}")
                continue
            self._stop_answer.clear()
            self._answering = True
            try:
                heard = types.Transcription(text=f"[{value} ms of audio]", finished=True)
                yield LlmResponse(input_transcription=heard, partial=False)
                for index, chunk in enumerate(CHUNKS):
                    if index:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(CHUNK_GAP_S):
                                await self._stop_answer.wait()
                    if self._closed or self._stop_answer.is_set():
                        break
                    blob = types.Blob(mime_type=f"audio/pcm;rate={OUTPUT_RATE}", data=chunk)
                    yield LlmResponse(content=_model(types.Part(inline_data=blob)), partial=True)
                if self._stop_answer.is_set():
                    if not self._closed:
                        yield LlmResponse(interrupted=True)
                    continue
                spoken = types.Transcription(text=SPOKEN, finished=True)
                yield LlmResponse(output_transcription=spoken, partial=False)
                yield LlmResponse(turn_complete=True, finish_reason=types.FinishReason.STOP)
            finally:
                self._answering = False

    async def close(self) -> None:
        self._closed = True
        self._stop_answer.set()
        self._inbox.clear()
        self._wake.set()

    def _enqueue(self, item: tuple[str, Any]) -> None:
        self._inbox.append(item)
        self._wake.set()

    def _barge_in(self) -> None:
        self._inbox.clear()
        if self._answering:
            self._stop_answer.set()


class PacedVoiceLlm(BaseLlm):
    """Offline; a typed (non-live) message is answered `typed: TEXT`."""

    model: str = "paced-voice"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        texts = [p.text for c in llm_request.contents or () if c.role == "user" for p in c.parts or () if p.text]
        yield _finished(f"typed: {texts[-1] if texts else ''}")

    def connect(self, llm_request: LlmRequest) -> Any:
        return _open()


@contextlib.asynccontextmanager
async def _open() -> AsyncIterator[PacedVoiceConnection]:
    connection = PacedVoiceConnection()
    try:
        yield connection
    finally:
        await connection.close()


root_agent = Agent(
    name="paced_voice",
    model=PacedVoiceLlm(),
    description="Answers every utterance with a long spoken answer that streams as it plays.",
    instruction="Answer the user.",
)
