"""A live session's audio input: the client's microphone frames, and the marks of its utterances.

How it works
------------
`AudioInput.feed()` takes one valid frame of PCM16 mono at the session's input rate, resamples it
to 16 kHz (one streaming `Resampler` per session, so no frame boundary is heard) and puts it on
the invocation's `LiveChannel` as a realtime blob. An utterance is marked by `start_utterance()`
and `end_utterance()`: by the client (`live-activity-start`/`-end`), or, in hands-free mode, by an
`EnergyVad` that hears every frame fed. Voice detection is always the gateway's: the model's own
is switched off (`adk_gateway.agents.live.live_run_config`).

Pre-roll. A voice detector notices speech only once it has heard some, so in hands-free mode the
audio between utterances is not sent but held: the last `PREROLL_MS` of it, dropped from the
front as new audio comes. When speech starts, the utterance is marked first and the held audio
sent after the mark, so the model hears the word's onset as part of the utterance.

Barge-in. Starting an utterance calls `on_speech` before the mark goes out: the session cuts the
turn the model is speaking (see `adk_gateway.services.live`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from adk_gateway.agents.live import LiveChannel
from adk_gateway.core.pcm import INPUT_RATE, float_to_pcm16, pcm16_to_float, validate_rate
from adk_gateway.core.resample import Resampler
from adk_gateway.core.vad import EnergyVad, VadEventKind

__all__ = ["PREROLL_MS", "AudioInput"]

PREROLL_MS: Final = 300
# Bytes of 16 kHz PCM16 that make the pre-roll.
_PREROLL_BYTES: Final = INPUT_RATE * 2 * PREROLL_MS // 1000


class AudioInput:
    """The audio and utterance marks of one live invocation; see the module docstring.

    Args:
        channel: where the audio and the marks go.
        input_rate: the client's sample rate (`PcmFormatError` for one the gateway does not take).
        hands_free: whether the gateway's voice detector marks the utterances.
        vad_silence_ms, vad_threshold_dbfs: the detector's settings (hands-free only).
        on_speech: called when an utterance starts, before its mark goes out.
    """

    __slots__ = ("_channel", "_held", "_held_bytes", "_on_speech", "_resampler", "_vad", "input_rate", "speaking")

    def __init__(
        self,
        channel: LiveChannel,
        *,
        input_rate: int = INPUT_RATE,
        hands_free: bool = False,
        vad_silence_ms: int = 700,
        vad_threshold_dbfs: float = -45.0,
        on_speech: Callable[[], None],
    ) -> None:
        self.input_rate = validate_rate(input_rate)
        self.speaking = False  # between an utterance's start and its end
        self._channel = channel
        self._on_speech = on_speech
        self._resampler = Resampler(self.input_rate, INPUT_RATE) if self.input_rate != INPUT_RATE else None
        self._vad = (
            EnergyVad(INPUT_RATE, threshold_dbfs=vad_threshold_dbfs, silence_ms=vad_silence_ms)
            if hands_free
            else None
        )
        self._held: deque[bytes] = deque()  # the pre-roll
        self._held_bytes = 0

    def feed(self, pcm: bytes) -> None:
        """One valid frame (`pcm.validate_frame`) at `input_rate`."""
        resampler = self._resampler
        data = bytes(pcm) if resampler is None else float_to_pcm16(resampler.process(pcm16_to_float(pcm)))
        if not data:
            return
        if self._vad is None or self.speaking:
            self._channel.audio(data)
        else:
            self._hold(data)
        if self._vad is None:
            return
        for event in self._vad.feed(data):
            if event.kind is VadEventKind.SPEECH_START and not self.speaking:
                self.start_utterance()
                self._send_held()
            elif event.kind is VadEventKind.SPEECH_END and self.speaking:
                self.end_utterance()

    def start_utterance(self) -> None:
        """The user starts speaking (nothing if an utterance is open already)."""
        if self.speaking:
            return
        self.speaking = True
        self._on_speech()
        self._channel.activity_start()

    def end_utterance(self) -> None:
        if not self.speaking:
            return
        self.speaking = False
        self._channel.activity_end()

    def _hold(self, data: bytes) -> None:
        """Keeps `data` in the pre-roll, which drops its oldest frames past `PREROLL_MS`."""
        self._held.append(data)
        self._held_bytes += len(data)
        while self._held_bytes - len(self._held[0]) >= _PREROLL_BYTES:
            self._held_bytes -= len(self._held.popleft())

    def _send_held(self) -> None:
        while self._held:
            self._channel.audio(self._held.popleft())
        self._held_bytes = 0
