"""The input side of one ADK live invocation, in the gateway's terms.

A live session (`adk_gateway.services.live`) hears audio, text, images and the marks of the user's
utterances from its socket; a `LiveChannel` puts each on ADK's `LiveRequestQueue` as ADK wants it
(PCM16 at 16 kHz as realtime blobs, text and images as user content, activity start and end).
`live_run_config` is the `RunConfig` of every live invocation: audio answers with both
transcriptions, and the model's own voice detection off, since the gateway (the client, or its
voice detector) marks every utterance.
"""

from __future__ import annotations

from typing import Final

from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.genai import types

from adk_gateway.core.pcm import INPUT_RATE

__all__ = ["INPUT_MIME", "LiveChannel", "live_run_config"]

INPUT_MIME: Final = f"audio/pcm;rate={INPUT_RATE}"


class LiveChannel:
    """What the user sends one live invocation; every method returns at once."""

    __slots__ = ("queue",)

    def __init__(self) -> None:
        self.queue = LiveRequestQueue()

    def audio(self, pcm: bytes) -> None:
        """PCM16 mono at 16 kHz."""
        self.queue.send_realtime(types.Blob(mime_type=INPUT_MIME, data=pcm))

    def text(self, text: str) -> None:
        self.queue.send_content(types.Content(role="user", parts=[types.Part(text=text)]))

    def image(self, media_type: str, data: bytes) -> None:
        blob = types.Blob(mime_type=media_type or "application/octet-stream", data=bytes(data))
        self.queue.send_content(types.Content(role="user", parts=[types.Part(inline_data=blob)]))

    def activity_start(self) -> None:
        self.queue.send_activity_start()

    def activity_end(self) -> None:
        self.queue.send_activity_end()

    def close(self) -> None:
        self.queue.close()


def live_run_config(max_llm_calls: int) -> RunConfig:
    return RunConfig(
        streaming_mode=StreamingMode.BIDI,
        response_modalities=[types.Modality.AUDIO],
        input_audio_transcription=types.AudioTranscriptionConfig(),
        output_audio_transcription=types.AudioTranscriptionConfig(),
        # The gateway (client or VAD) marks every utterance; the model must not guess.
        realtime_input_config=types.RealtimeInputConfig(
            automatic_activity_detection=types.AutomaticActivityDetection(disabled=True)
        ),
        max_llm_calls=max_llm_calls,
    )
