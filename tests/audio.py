"""Audio helpers for tests only: frequency probes and WAV export of PCM16 mono."""

from __future__ import annotations

import io
import os
import wave

import numpy as np

from adk_gateway.core.pcm import (
    SAMPLE_WIDTH,
    BytesLike,
    PcmFormatError,
    check_whole_samples,
    pcm16_to_float,
    validate_rate,
)

__all__ = ["dominant_frequency", "wav_bytes", "write_wav"]

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


def wav_bytes(data: BytesLike, rate: int) -> bytes:
    """Wrap PCM16 mono ``data`` in a RIFF/WAVE container."""
    validate_rate(rate)
    check_whole_samples(data)
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
