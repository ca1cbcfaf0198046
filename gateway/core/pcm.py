"""Pure PCM16 audio helpers for the live (audio) mode.

Everything here works on raw PCM16 little-endian mono bytes or on float
sample arrays in ``[-1, 1)``; it does no I/O (apart from :func:`write_wav`, a
debugging export) and no asyncio, so it can be unit tested in isolation.

Browsers send PCM16 mono at :data:`INPUT_RATE` (16 kHz, the rate the model
expects); the model answers at :data:`OUTPUT_RATE` (24 kHz).  Clients that
capture at another rate (48 kHz, 44.1 kHz, ...) are converted with
:func:`to_input_pcm`, or with a :class:`Resampler` when the stream arrives in
small frames and each frame should not be filtered in isolation.

Resampling
----------
:class:`Resampler` is a band-limited (Kaiser-windowed sinc) resampler written
with numpy only.  Output sample ``n`` sits exactly at input time
``n * from_rate / to_rate`` (tracked with integers, so there is no drift), and
is a weighted sum of the input samples within ``half_width`` of that time.  The
filter's cut-off is just below the Nyquist frequency of the lower of the two
rates, so downsampling does not alias.  The stateful object keeps the last
``half_width`` input samples between calls, so feeding a stream in pieces gives
the same output (up to rounding) as resampling it in one go; :func:`resample`
is the one-shot form.

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
import functools
import io
import math
import os
import wave
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "INPUT_FORMAT",
    "INPUT_RATE",
    "MAX_RATE",
    "MIN_RATE",
    "OUTPUT_FORMAT",
    "OUTPUT_RATE",
    "SAMPLE_WIDTH",
    "SILENCE_DBFS",
    "BytesLike",
    "EnergyVad",
    "PcmFormat",
    "PcmFormatError",
    "Resampler",
    "VadEvent",
    "VadEventKind",
    "chunk_bytes",
    "dominant_frequency",
    "duration_ms",
    "float_to_pcm16",
    "pcm16_to_float",
    "resample",
    "rms_dbfs",
    "to_input_pcm",
    "tone",
    "validate_frame",
    "validate_rate",
    "wav_bytes",
    "write_wav",
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

_PCM_DTYPE: Final = np.dtype("<i2")  # explicit little-endian, whatever the host order
_FULL_SCALE: Final = 32768.0
_RMS_FLOOR: Final = 10.0 ** (SILENCE_DBFS / 20.0)

# Resampler filter design: zero crossings of the sinc on each side (at the lower
# rate), cut-off as a fraction of the lower Nyquist frequency, Kaiser beta.
_ZERO_CROSSINGS: Final = 24
_ROLLOFF: Final = 0.9
_KAISER_BETA: Final = 9.0
_MAX_TABLE_ENTRIES: Final = 1 << 20  # precompute per-phase weights up to 8 MiB
_BLOCK_OUTPUTS: Final = 4096  # outputs computed per vectorised block

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


def _check_whole_samples(data: BytesLike) -> int:
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
    _check_whole_samples(data)


# --------------------------------------------------------------------------- conversion


def pcm16_to_float(data: BytesLike) -> FloatArray:
    """Decode PCM16 little-endian bytes to float32 samples in ``[-1, 1)``."""
    _check_whole_samples(data)
    ints = np.frombuffer(data, dtype=_PCM_DTYPE)
    return (ints.astype(np.float32) / np.float32(_FULL_SCALE)).astype(np.float32, copy=False)


def float_to_pcm16(samples: npt.ArrayLike) -> bytes:
    """Encode float samples (nominally ``[-1, 1]``) as PCM16 little-endian, clipping out-of-range values.

    NaN encodes as 0.  Values are rounded to the nearest integer step, so
    ``float_to_pcm16(pcm16_to_float(b)) == b`` for every valid ``b``.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    ints = np.clip(np.rint(x * _FULL_SCALE), -32768, 32767).astype(_PCM_DTYPE)
    return ints.tobytes()


def _as_float64(samples: npt.ArrayLike) -> npt.NDArray[np.float64]:
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
    return 20.0 * math.log10(max(rms, _RMS_FLOOR))


# --------------------------------------------------------------------------- resampling


def _kaiser_sinc(d: npt.NDArray[np.float64], cutoff: float, half: int) -> npt.NDArray[np.float64]:
    """Kaiser-windowed sinc at distances ``d`` (input samples); zero outside ``|d| < half``."""
    x = d / half
    window = np.i0(_KAISER_BETA * np.sqrt(np.clip(1.0 - x * x, 0.0, None))) / np.i0(_KAISER_BETA)
    window = np.where(np.abs(x) < 1.0, window, 0.0)
    return np.asarray(cutoff * np.sinc(cutoff * d) * window, dtype=np.float64)


@dataclass(frozen=True, slots=True, eq=False)
class _FilterDesign:
    """Filter for one rate pair; time is counted in units of ``1/up`` input samples."""

    up: int  # to_rate / gcd
    down: int  # from_rate / gcd: time step per output sample
    cutoff: float  # fraction of the input Nyquist frequency
    half_width: int  # taps on each side, in input samples
    taps: npt.NDArray[np.int64]  # tap offsets relative to floor(output time)
    table: npt.NDArray[np.float64] | None  # weights per phase, or None if too large to keep

    def weights(self, phases: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Weights for outputs at fractional input times ``phases / up`` (one row each)."""
        if self.table is not None:
            return self.table[phases]
        return _phase_weights(phases, self.up, self.taps, self.cutoff, self.half_width)


def _phase_weights(
    phases: npt.NDArray[np.int64],
    up: int,
    taps: npt.NDArray[np.int64],
    cutoff: float,
    half: int,
) -> npt.NDArray[np.float64]:
    frac = phases.astype(np.float64) / up
    w = _kaiser_sinc(frac[:, None] - taps[None, :], cutoff, half)
    # Normalise every phase to unit DC gain.
    return np.asarray(w / w.sum(axis=1, keepdims=True), dtype=np.float64)


@functools.lru_cache(maxsize=16)
def _design(from_rate: int, to_rate: int) -> _FilterDesign:
    """Design (and cache: rate pairs repeat) the filter for a pair of validated rates."""
    g = math.gcd(from_rate, to_rate)
    up, down = to_rate // g, from_rate // g
    cutoff = min(1.0, to_rate / from_rate) * _ROLLOFF
    half = math.ceil(_ZERO_CROSSINGS / cutoff)
    taps = np.arange(-half + 1, half + 1, dtype=np.int64)
    taps.setflags(write=False)
    table = None
    if up * taps.size <= _MAX_TABLE_ENTRIES:
        table = _phase_weights(np.arange(up, dtype=np.int64), up, taps, cutoff, half)
        table.setflags(write=False)
    return _FilterDesign(up, down, cutoff, half, taps, table)


class Resampler:
    """Streaming band-limited resampler (mono float samples, numpy only).

    Call :meth:`process` with successive pieces of a stream and :meth:`flush`
    once at its end; concatenating all outputs gives ``ceil(n_in * to_rate /
    from_rate)`` samples, the same as :func:`resample` on the whole input.
    Output lags input by at most ``half_width`` input samples (about 1.7 ms at
    48 kHz -> 16 kHz).
    """

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self.from_rate = validate_rate(from_rate)
        self.to_rate = validate_rate(to_rate)
        self._f = _design(self.from_rate, self.to_rate)
        self.half_width = self._f.half_width
        self.reset()

    @property
    def passthrough(self) -> bool:
        return self.from_rate == self.to_rate

    def reset(self) -> None:
        """Forget the stream so far."""
        # Invariant: self._buf holds input samples [self._start, self._n_in); samples
        # before index 0 are the implicit zeros preceding the stream.
        self._buf = np.zeros(self.half_width, dtype=np.float64)
        self._start = -self.half_width
        self._n_in = 0
        self._n_out = 0

    def _emit(self, n_end: int) -> FloatArray:
        """Compute outputs ``self._n_out .. n_end - 1`` from the buffer, then trim it."""
        f = self._f
        count = max(0, n_end - self._n_out)
        out = np.empty(count, dtype=np.float64)
        for lo in range(0, count, _BLOCK_OUTPUTS):
            hi = min(count, lo + _BLOCK_OUTPUTS)
            num = np.arange(self._n_out + lo, self._n_out + hi, dtype=np.int64) * f.down
            base, phase = np.divmod(num, f.up)
            idx = (base - self._start)[:, None] + f.taps[None, :]
            w = f.weights(phase)
            out[lo:hi] = np.einsum("ij,ij->i", self._buf[idx], w)
        self._n_out = max(self._n_out, n_end)
        # Keep only what the next output's leftmost tap still needs.
        keep_from = (self._n_out * f.down) // f.up - self.half_width + 1
        drop = max(0, min(keep_from - self._start, self._buf.size))
        if drop:
            self._buf = self._buf[drop:]
            self._start += drop
        return out.astype(np.float32)

    def _total_outputs(self) -> int:
        # Outputs n with time n*down/up < n_in.
        return -(-(self._n_in * self._f.up) // self._f.down)

    def process(self, samples: npt.ArrayLike) -> FloatArray:
        """Feed the next piece of the stream; return the output samples that are now final."""
        x = _as_float64(samples)
        if self.passthrough:
            self._n_in += x.size
            self._n_out = self._n_in
            return x.astype(np.float32)
        if x.size:
            self._buf = np.concatenate((self._buf, x))
            self._n_in += x.size
        # Output n needs input up to floor(n*down/up) + half_width - 1 < n_in.
        last_base = self._n_in - self.half_width
        ready = -(-(last_base * self._f.up) // self._f.down) if last_base > 0 else 0
        return self._emit(min(ready, self._total_outputs()))

    def flush(self) -> FloatArray:
        """End the stream: return the remaining output (treating what follows as silence) and reset."""
        if self.passthrough:
            self.reset()
            return np.zeros(0, dtype=np.float32)
        self._buf = np.concatenate((self._buf, np.zeros(self.half_width, dtype=np.float64)))
        out = self._emit(self._total_outputs())
        self.reset()
        return out


def resample(samples: npt.ArrayLike, from_rate: int, to_rate: int) -> FloatArray:
    """Resample mono float samples from ``from_rate`` to ``to_rate`` (Hz).

    Returns ``ceil(len(samples) * to_rate / from_rate)`` float32 samples; with
    equal rates, a float32 copy of the input.
    """
    validate_rate(from_rate)
    validate_rate(to_rate)
    x = _as_float64(samples)
    if from_rate == to_rate:
        return x.astype(np.float32)
    r = Resampler(from_rate, to_rate)
    return np.concatenate((r.process(x), r.flush())).astype(np.float32, copy=False)


def to_input_pcm(data: BytesLike, rate: int) -> bytes:
    """Convert PCM16 mono at ``rate`` Hz to PCM16 mono at :data:`INPUT_RATE`.

    Each call is resampled on its own (silence assumed before and after); use a
    :class:`Resampler` to convert a stream of small frames seamlessly.
    """
    validate_rate(rate)
    samples = pcm16_to_float(data)
    if rate == INPUT_RATE:
        return bytes(data)
    return float_to_pcm16(resample(samples, rate, INPUT_RATE))


# --------------------------------------------------------------------------- synthesis and analysis


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


def dominant_frequency(data: BytesLike, rate: int) -> float:
    """Frequency (Hz) of the strongest spectral peak of PCM16 ``data``; 0.0 for silence.

    Uses a Hann-windowed real FFT with Gaussian (log-parabolic) peak
    interpolation, so the estimate is accurate to a small fraction of a bin
    (``rate / len``).  DC is ignored.
    """
    validate_rate(rate)
    x = pcm16_to_float(data).astype(np.float64)
    if x.size < 4:
        raise PcmFormatError("too little audio to analyse")
    x -= x.mean()
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    spectrum[0] = 0.0
    k = int(np.argmax(spectrum))
    if spectrum[k] <= 0.0:
        return 0.0
    offset = 0.0
    if 0 < k < spectrum.size - 1 and spectrum[k - 1] > 0.0 and spectrum[k + 1] > 0.0:
        a, b, c = np.log(spectrum[k - 1 : k + 2])
        denom = a - 2.0 * b + c
        if denom < 0.0:
            offset = float(0.5 * (a - c) / denom)
    return (k + offset) * rate / x.size


def duration_ms(data: BytesLike, rate: int) -> int:
    """Duration of PCM16 ``data`` at ``rate`` Hz in whole milliseconds (rounded down)."""
    validate_rate(rate)
    samples = _check_whole_samples(data) // SAMPLE_WIDTH
    return samples * 1000 // rate


def chunk_bytes(data: BytesLike, chunk_ms: int, rate: int) -> list[bytes]:
    """Split PCM16 ``data`` into chunks of ``chunk_ms`` (the last may be shorter), on sample boundaries."""
    validate_rate(rate)
    if chunk_ms <= 0:
        raise ValueError("chunk_ms must be positive")
    n = _check_whole_samples(data)
    step = max(1, rate * chunk_ms // 1000) * SAMPLE_WIDTH
    raw = bytes(data)
    return [raw[i : i + step] for i in range(0, n, step)]


# --------------------------------------------------------------------------- WAV export


def wav_bytes(data: BytesLike, rate: int) -> bytes:
    """Wrap PCM16 mono ``data`` in a RIFF/WAVE container."""
    validate_rate(rate)
    _check_whole_samples(data)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(SAMPLE_WIDTH)
        w.setframerate(rate)
        w.writeframes(data)
    return buf.getvalue()


def write_wav(path: str | os.PathLike[str], data: BytesLike, rate: int) -> None:
    """Write PCM16 mono ``data`` to ``path`` as a WAV file (for debugging)."""
    payload = wav_bytes(data, rate)
    with open(path, "wb") as f:
        f.write(payload)


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
        x = np.frombuffer(raw, dtype=_PCM_DTYPE).astype(np.float64) / _FULL_SCALE
        frames = x.reshape(-1, self.frame_samples)
        rms = np.sqrt(np.mean(frames * frames, axis=1))
        return np.asarray(20.0 * np.log10(np.maximum(rms, _RMS_FLOOR)), dtype=np.float64)

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
