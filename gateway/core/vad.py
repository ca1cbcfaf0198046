"""Voice activity detection for the live mode's hands-free input (pure: numpy, no I/O).

Voice activity detection
------------------------
:class:`EnergyVad` is a small, stateful, energy-based detector used for the
hands-free mode (the gateway ends the user's turn after a configurable silence
for clients that do not mark the end of an utterance themselves):

* :meth:`EnergyVad.feed` accepts PCM16 bytes of any length - even a length that
  splits a sample.  The bytes are appended to an internal buffer and only whole
  frames of ``frame_ms`` are analysed; the remainder waits for the next call.
  Feeding a stream in arbitrary pieces therefore yields exactly the same events
  as feeding it at once.
* For each frame the RMS level is computed in dBFS (0 dBFS is an RMS of 1.0,
  so a full-scale sine is about -3 dBFS; digital silence is clamped to
  :data:`SILENCE_DBFS`).  A frame at or above ``threshold_dbfs`` is "voiced".
* While idle, a run of consecutive voiced frames lasting ``min_speech_ms``
  emits ``SPEECH_START``; any unvoiced frame before that discards the run, so
  clicks and short noises never start an utterance.
* While in speech, ``silence_ms`` of consecutive unvoiced frames emit
  ``SPEECH_END``; a voiced frame resets the silence count.
* Every :class:`VadEvent` carries ``offset_ms`` (where the boundary lies in the
  stream: the onset of the first voiced frame for a start, the end of the last
  voiced frame for an end) and ``detected_ms`` (the stream position at which
  the detector could decide, i.e. ``offset_ms`` plus the ``min_speech_ms`` or
  ``silence_ms`` of evidence, rounded up to whole frames).
* :meth:`EnergyVad.flush` marks the end of the stream: a trailing partial frame
  is dropped and, if speech is in progress, ``SPEECH_END`` is emitted at once.
  The detector is then reset.  :meth:`EnergyVad.reset` clears all state
  without emitting anything.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from adk_gateway.core.pcm import (
    FULL_SCALE,
    INPUT_RATE,
    PCM_DTYPE,
    RMS_FLOOR,
    SAMPLE_WIDTH,
    SILENCE_DBFS,
    BytesLike,
    validate_rate,
)

__all__ = ["EnergyVad", "VadEvent", "VadEventKind"]

# --------------------------------------------------------------------------- voice activity detection


class VadEventKind(enum.StrEnum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True, slots=True)
class VadEvent:
    """A speech boundary found by :class:`EnergyVad` (times from the start of the stream)."""

    kind: VadEventKind
    offset_ms: int
    """Where the boundary lies: speech onset (start) or end of the last voiced frame (end)."""
    detected_ms: int
    """Stream position at which the detector emitted the event."""


class EnergyVad:
    """Energy-threshold voice activity detector over PCM16 mono; see the module docstring."""

    def __init__(
        self,
        rate: int = INPUT_RATE,
        frame_ms: int = 20,
        threshold_dbfs: float = -45.0,
        silence_ms: int = 700,
        min_speech_ms: int = 100,
    ) -> None:
        self.rate = validate_rate(rate)
        if not 1 <= frame_ms <= 1000:
            raise ValueError("frame_ms must be in 1..1000")
        if not (math.isfinite(threshold_dbfs) and SILENCE_DBFS < threshold_dbfs <= 0.0):
            raise ValueError(f"threshold_dbfs must be in ({SILENCE_DBFS}, 0]")
        if silence_ms <= 0:
            raise ValueError("silence_ms must be positive")
        if min_speech_ms < 0:
            raise ValueError("min_speech_ms must not be negative")
        self.frame_ms = frame_ms
        self.threshold_dbfs = float(threshold_dbfs)
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.frame_samples = max(1, self.rate * frame_ms // 1000)
        self._frame_bytes = self.frame_samples * SAMPLE_WIDTH
        self._min_speech_frames = max(1, math.ceil(min_speech_ms / frame_ms))
        self._silence_frames = max(1, math.ceil(silence_ms / frame_ms))
        self.reset()

    def reset(self) -> None:
        """Forget all audio and state; the next byte fed is time 0."""
        self._pending = bytearray()
        self._frames = 0  # whole frames analysed so far
        self._in_speech = False
        self._run_start = 0  # first frame of the current voiced run (while idle)
        self._run_len = 0
        self._silence_len = 0
        self._last_voiced_end = 0  # frame index just after the last voiced frame

    @property
    def in_speech(self) -> bool:
        """True between a ``SPEECH_START`` and its ``SPEECH_END``."""
        return self._in_speech

    @property
    def position_ms(self) -> int:
        """Duration of the audio analysed so far (whole frames only)."""
        return self._ms(self._frames)

    def _ms(self, frames: int) -> int:
        return frames * self.frame_samples * 1000 // self.rate

    def _frame_levels(self, raw: bytes) -> npt.NDArray[np.float64]:
        x = np.frombuffer(raw, dtype=PCM_DTYPE).astype(np.float64) / FULL_SCALE
        frames = x.reshape(-1, self.frame_samples)
        rms = np.sqrt(np.mean(frames * frames, axis=1))
        return np.asarray(20.0 * np.log10(np.maximum(rms, RMS_FLOOR)), dtype=np.float64)

    def feed(self, pcm: BytesLike) -> list[VadEvent]:
        """Analyse the next piece of the stream; return the events it completes, in order."""
        self._pending += pcm
        whole = len(self._pending) // self._frame_bytes * self._frame_bytes
        if whole == 0:
            return []
        raw = bytes(self._pending[:whole])
        del self._pending[:whole]
        events: list[VadEvent] = []
        for level in self._frame_levels(raw):
            self._step(bool(level >= self.threshold_dbfs), events)
        return events

    def _step(self, voiced: bool, events: list[VadEvent]) -> None:
        i = self._frames
        self._frames += 1
        if not self._in_speech:
            if not voiced:
                self._run_len = 0
                return
            if self._run_len == 0:
                self._run_start = i
            self._run_len += 1
            if self._run_len >= self._min_speech_frames:
                self._in_speech = True
                self._silence_len = 0
                self._last_voiced_end = i + 1
                events.append(
                    VadEvent(VadEventKind.SPEECH_START, self._ms(self._run_start), self._ms(self._frames))
                )
            return
        if voiced:
            self._silence_len = 0
            self._last_voiced_end = i + 1
            return
        self._silence_len += 1
        if self._silence_len >= self._silence_frames:
            self._in_speech = False
            self._run_len = 0
            events.append(
                VadEvent(VadEventKind.SPEECH_END, self._ms(self._last_voiced_end), self._ms(self._frames))
            )

    def flush(self) -> list[VadEvent]:
        """End of stream: drop any partial frame, end speech in progress, then reset."""
        events: list[VadEvent] = []
        if self._in_speech:
            events.append(
                VadEvent(VadEventKind.SPEECH_END, self._ms(self._last_voiced_end), self._ms(self._frames))
            )
        self.reset()
        return events
