"""Pure PCM16 audio helpers for the live (audio) mode.

Everything here works on raw PCM16 little-endian mono bytes or on float
sample arrays in ``[-1, 1)``; it does no I/O and no asyncio, so it can be unit tested in isolation.

Browsers send PCM16 mono at :data:`INPUT_RATE` (16 kHz, the rate the model
expects); the model answers at :data:`OUTPUT_RATE` (24 kHz).  Clients that
capture at another rate (48 kHz, 44.1 kHz, ...) are converted with
:func:`to_input_pcm`, or with a :class:`Resampler` when the stream arrives in
small frames and each frame should not be filtered in isolation.

Resampling is in :mod:`adk_gateway.core.resample`, voice activity detection in
:mod:`adk_gateway.core.vad`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "FULL_SCALE",
    "INPUT_FORMAT",
    "INPUT_RATE",
    "MAX_RATE",
    "MIN_RATE",
    "OUTPUT_FORMAT",
    "OUTPUT_RATE",
    "PCM_DTYPE",
    "RMS_FLOOR",
    "SAMPLE_WIDTH",
    "SILENCE_DBFS",
    "BytesLike",
    "FloatArray",
    "PcmFormat",
    "PcmFormatError",
    "as_float64",
    "check_whole_samples",
    "chunk_bytes",
    "duration_ms",
    "float_to_pcm16",
    "pcm16_to_float",
    "rms_dbfs",
    "tone",
    "validate_frame",
    "validate_rate",
]

INPUT_RATE: Final = 16000
"""Sample rate (Hz) of the audio the model consumes."""
OUTPUT_RATE: Final = 24000
"""Sample rate (Hz) of the audio the model produces."""
SAMPLE_WIDTH: Final = 2
"""Bytes per PCM16 sample."""
MIN_RATE: Final = 8000
MAX_RATE: Final = 96000
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024
SILENCE_DBFS: Final = -120.0
"""Level reported for digital silence (the dBFS floor)."""

PCM_DTYPE: Final = np.dtype("<i2")  # explicit little-endian, whatever the host order
FULL_SCALE: Final = 32768.0
RMS_FLOOR: Final = 10.0 ** (SILENCE_DBFS / 20.0)


BytesLike = bytes | bytearray | memoryview
"""Anything holding raw PCM16 bytes."""

FloatArray = npt.NDArray[np.float32]


class PcmFormatError(ValueError):
    """Audio input is malformed or unsupported; the message is safe to show a client."""


@dataclass(frozen=True, slots=True)
class PcmFormat:
    """Describes a PCM stream; :meth:`as_json` gives the ``data-pcm`` metadata fields."""

    sample_rate: int
    channels: int = 1
    bit_depth: int = 16

    def as_json(self) -> dict[str, int]:
        return {"sampleRate": self.sample_rate, "channels": self.channels, "bitDepth": self.bit_depth}


INPUT_FORMAT: Final = PcmFormat(INPUT_RATE)
OUTPUT_FORMAT: Final = PcmFormat(OUTPUT_RATE)


# --------------------------------------------------------------------------- validation


def _nbytes(data: BytesLike) -> int:
    return memoryview(data).nbytes


def validate_rate(rate: int) -> int:
    """Return ``rate`` if it is a supported sample rate, else raise :class:`PcmFormatError`."""
    if isinstance(rate, bool) or not isinstance(rate, int | np.integer):
        raise PcmFormatError("sample rate must be an integer")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise PcmFormatError(f"unsupported sample rate (must be {MIN_RATE}..{MAX_RATE} Hz)")
    return int(rate)


def check_whole_samples(data: BytesLike) -> int:
    n = _nbytes(data)
    if n % SAMPLE_WIDTH:
        raise PcmFormatError("audio has an odd number of bytes; PCM16 needs whole samples")
    return n


def validate_frame(data: BytesLike, *, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
    """Check one binary frame from a client: non-empty, whole samples, at most ``max_bytes``."""
    n = _nbytes(data)
    if n == 0:
        raise PcmFormatError("empty audio frame")
    if n > max_bytes:
        raise PcmFormatError(f"audio frame too large ({n} bytes, max {max_bytes})")
    check_whole_samples(data)


# --------------------------------------------------------------------------- conversion


def pcm16_to_float(data: BytesLike) -> FloatArray:
    """Decode PCM16 little-endian bytes to float32 samples in ``[-1, 1)``."""
    check_whole_samples(data)
    ints = np.frombuffer(data, dtype=PCM_DTYPE)
    return (ints.astype(np.float32) / np.float32(FULL_SCALE)).astype(np.float32, copy=False)


def float_to_pcm16(samples: npt.ArrayLike) -> bytes:
    """Encode float samples (nominally ``[-1, 1]``) as PCM16 little-endian, clipping out-of-range values.

    NaN encodes as 0.  Values are rounded to the nearest integer step, so
    ``float_to_pcm16(pcm16_to_float(b)) == b`` for every valid ``b``.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    ints = np.clip(np.rint(x * FULL_SCALE), -32768, 32767).astype(PCM_DTYPE)
    return ints.tobytes()


def as_float64(samples: npt.ArrayLike) -> npt.NDArray[np.float64]:
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1:
        raise PcmFormatError("expected mono (1-D) samples")
    return x


def rms_dbfs(data: BytesLike) -> float:
    """RMS level of PCM16 ``data`` in dBFS (RMS 1.0 = 0 dBFS), floored at :data:`SILENCE_DBFS`."""
    x = pcm16_to_float(data).astype(np.float64)
    if x.size == 0:
        return SILENCE_DBFS
    rms = math.sqrt(float(np.mean(x * x)))
    return 20.0 * math.log10(max(rms, RMS_FLOOR))


# --------------------------------------------------------------------------- synthesis and framing


def tone(
    frequency_hz: float,
    duration_s: float,
    rate: int = OUTPUT_RATE,
    amplitude: float = 0.3,
    *,
    fade_ms: float = 0.0,
) -> bytes:
    """PCM16 sine of ``round(duration_s * rate)`` samples, starting at phase 0.

    ``fade_ms`` applies a linear fade-in and fade-out (avoids clicks on playback).
    """
    validate_rate(rate)
    if not (math.isfinite(frequency_hz) and 0.0 <= frequency_hz < rate / 2):
        raise ValueError("frequency must be in [0, rate/2)")
    if not (math.isfinite(duration_s) and duration_s >= 0.0):
        raise ValueError("duration must be a non-negative number of seconds")
    if not (math.isfinite(amplitude) and 0.0 <= amplitude <= 1.0):
        raise ValueError("amplitude must be in [0, 1]")
    if not (math.isfinite(fade_ms) and fade_ms >= 0.0):
        raise ValueError("fade_ms must be non-negative")
    n = round(duration_s * rate)
    t = np.arange(n, dtype=np.float64) / rate
    x = amplitude * np.sin(2.0 * np.pi * frequency_hz * t)
    fade = min(round(fade_ms * rate / 1000.0), n // 2)
    if fade:
        ramp = np.arange(1, fade + 1, dtype=np.float64) / (fade + 1)
        x[:fade] *= ramp
        x[n - fade :] *= ramp[::-1]
    return float_to_pcm16(x)


def duration_ms(data: BytesLike, rate: int) -> int:
    """Duration of PCM16 ``data`` at ``rate`` Hz in whole milliseconds (rounded down)."""
    validate_rate(rate)
    samples = check_whole_samples(data) // SAMPLE_WIDTH
    return samples * 1000 // rate


def chunk_bytes(data: BytesLike, chunk_ms: int, rate: int) -> list[bytes]:
    """Split PCM16 ``data`` into chunks of ``chunk_ms`` (the last may be shorter), on sample boundaries."""
    validate_rate(rate)
    if chunk_ms <= 0:
        raise ValueError("chunk_ms must be positive")
    n = check_whole_samples(data)
    step = max(1, rate * chunk_ms // 1000) * SAMPLE_WIDTH
    raw = bytes(data)
    return [raw[i : i + step] for i in range(0, n, step)]
