"""Unit tests for the pure audio modules: adk_gateway.core.pcm (PCM16 helpers), adk_gateway.core.resample
and adk_gateway.core.vad, and the tests' own probes (tests/audio.py)."""

from __future__ import annotations

import io
import itertools
import math
import struct
import wave
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.core import pcm
from adk_gateway.core import resample as resampling
from adk_gateway.core.pcm import INPUT_RATE, OUTPUT_RATE, SAMPLE_WIDTH, PcmFormatError
from adk_gateway.core.resample import Resampler
from adk_gateway.core.vad import EnergyVad, VadEvent, VadEventKind
from tests import audio

START = VadEventKind.SPEECH_START
END = VadEventKind.SPEECH_END


def sine(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return amplitude * np.sin(2 * np.pi * freq * t)


def silence(seconds: float, rate: int = INPUT_RATE) -> bytes:
    return bytes(round(seconds * rate) * SAMPLE_WIDTH)


def noise(seconds: float, dbfs: float, rate: int = INPUT_RATE, seed: int = 1) -> bytes:
    """White noise whose RMS level is ``dbfs``."""
    x = np.random.default_rng(seed).standard_normal(round(seconds * rate))
    x *= 10 ** (dbfs / 20) / np.sqrt(np.mean(x * x))
    return pcm.float_to_pcm16(x)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, dtype=np.float64) ** 2)))


# --------------------------------------------------------------------------- constants and formats


def test_constants() -> None:
    assert (pcm.INPUT_RATE, pcm.OUTPUT_RATE, pcm.SAMPLE_WIDTH) == (16000, 24000, 2)


def test_output_format_matches_data_pcm_metadata() -> None:
    assert pcm.OUTPUT_FORMAT.as_json() == {"sampleRate": 24000, "channels": 1, "bitDepth": 16}
    assert pcm.INPUT_FORMAT.sample_rate == 16000


def test_pcm_format_error_is_value_error() -> None:
    assert issubclass(PcmFormatError, ValueError)


# --------------------------------------------------------------------------- validation


def test_validate_frame_accepts_whole_samples() -> None:
    pcm.validate_frame(b"\x00\x01" * 160)
    pcm.validate_frame(bytearray(64 * 1024))
    pcm.validate_frame(memoryview(b"\x00\x00"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"\x00", "odd"),
        (b"\x00" * 321, "odd"),
        (b"\x00" * (64 * 1024 + 2), "too large"),
    ],
)
def test_validate_frame_rejects(data: bytes, message: str) -> None:
    with pytest.raises(PcmFormatError, match=message):
        pcm.validate_frame(data)


def test_validate_frame_custom_limit() -> None:
    pcm.validate_frame(b"\x00" * 100, max_bytes=100)
    with pytest.raises(PcmFormatError, match="too large"):
        pcm.validate_frame(b"\x00" * 102, max_bytes=100)


def test_error_messages_are_short_and_do_not_echo_data() -> None:
    with pytest.raises(PcmFormatError) as info:
        pcm.validate_frame(b"secret!")
    assert "secret" not in str(info.value)
    assert len(str(info.value)) < 100


@pytest.mark.parametrize("rate", [0, 7999, 96001, -16000, True, 16000.0, "16000"])
def test_validate_rate_rejects(rate: object) -> None:
    with pytest.raises(PcmFormatError):
        pcm.validate_rate(rate)  # type: ignore[arg-type]


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000, 96000, np.int64(24000)])
def test_validate_rate_accepts(rate: int) -> None:
    assert pcm.validate_rate(rate) == int(rate)
    assert type(pcm.validate_rate(rate)) is int


# --------------------------------------------------------------------------- float <-> pcm16


def test_pcm16_to_float_known_values() -> None:
    data = struct.pack("<4h", 0, 16384, -32768, 32767)
    x = pcm.pcm16_to_float(data)
    assert x.dtype == np.float32
    assert x.tolist() == [0.0, 0.5, -1.0, 32767 / 32768]


def test_pcm16_to_float_rejects_odd_length() -> None:
    with pytest.raises(PcmFormatError):
        pcm.pcm16_to_float(b"\x00\x00\x00")


def test_pcm16_to_float_empty() -> None:
    assert pcm.pcm16_to_float(b"").size == 0


def test_float_to_pcm16_is_little_endian_and_clips() -> None:
    out = pcm.float_to_pcm16([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, math.nan, math.inf, -math.inf])
    assert out == struct.pack("<10h", 0, 16384, -16384, 32767, -32768, 32767, -32768, 0, 32767, -32768)


def test_float_to_pcm16_rounds_to_nearest() -> None:
    step = 1 / 32768
    assert pcm.float_to_pcm16([0.4 * step, 0.6 * step, -0.6 * step]) == struct.pack("<3h", 0, 1, -1)


@given(st.lists(st.integers(-32768, 32767), max_size=500))
def test_pcm16_float_pcm16_is_identity(values: list[int]) -> None:
    data = struct.pack(f"<{len(values)}h", *values)
    x = pcm.pcm16_to_float(data)
    assert np.all(x >= -1.0)
    assert np.all(x < 1.0)
    assert pcm.float_to_pcm16(x) == data


@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), max_size=200))
def test_float_pcm16_float_error_is_half_a_step(values: list[float]) -> None:
    back = pcm.pcm16_to_float(pcm.float_to_pcm16(values)).astype(np.float64)
    # +1.0 clips to 32767, one step below full scale.
    assert np.all(np.abs(back - np.asarray(values)) <= 1 / 32768 + 1e-12)


# --------------------------------------------------------------------------- resampling


def test_resample_same_rate_returns_copy() -> None:
    x = np.linspace(-0.5, 0.5, 100, dtype=np.float32)
    y = resampling.resample(x, 16000, 16000)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(x, y)
    y[0] = 9.0
    assert x[0] == np.float32(-0.5)


def test_resample_48k_to_16k_keeps_1khz_tone_and_length() -> None:
    x = sine(1000, 1.0, 48000)
    y = resampling.resample(x, 48000, 16000)
    assert y.dtype == np.float32
    assert y.size == 16000
    assert audio.dominant_frequency(pcm.float_to_pcm16(y), 16000) == pytest.approx(1000, abs=1.0)
    # Unity gain in the pass band (ignore the edges, where silence is assumed outside).
    assert rms(y[1000:-1000]) == pytest.approx(rms(x), rel=1e-3)


def test_resample_matches_ideal_signal() -> None:
    y = resampling.resample(sine(1000, 1.0, 48000), 48000, 16000)
    ideal = sine(1000, 1.0, 16000)
    assert np.max(np.abs(y[500:-500] - ideal[500:-500])) < 1e-3


@pytest.mark.parametrize(("from_rate", "to_rate"), [(48000, 16000), (44100, 16000), (24000, 16000)])
def test_resample_downsampling_rejects_aliases(from_rate: int, to_rate: int) -> None:
    # A tone above the new Nyquist frequency must not fold back into the band
    # (linear interpolation or plain decimation would keep it at full level).
    x = sine(to_rate * 0.6, 1.0, from_rate)
    y = resampling.resample(x, from_rate, to_rate)
    assert rms(y[500:-500]) < 1e-3 * rms(x)


@pytest.mark.parametrize(
    ("from_rate", "to_rate", "n_in", "n_out"),
    [
        (44100, 16000, 44100, 16000),
        (16000, 24000, 16000, 24000),
        (24000, 16000, 1, 1),
        (48000, 16000, 961, 321),
        (8000, 96000, 10, 120),
        (16000, 48000, 0, 0),
    ],
)
def test_resample_length(from_rate: int, to_rate: int, n_in: int, n_out: int) -> None:
    assert resampling.resample(np.zeros(n_in), from_rate, to_rate).size == n_out


def test_resample_upsampling_keeps_tone() -> None:
    x = sine(440, 0.5, 16000)
    y = resampling.resample(x, 16000, 24000)
    assert y.size == 12000
    assert audio.dominant_frequency(pcm.float_to_pcm16(y), 24000) == pytest.approx(440, abs=0.5)
    assert np.max(np.abs(y[300:-300] - sine(440, 0.5, 24000)[300:-300])) < 1e-3


def test_resample_preserves_dc() -> None:
    y = resampling.resample(np.full(4410, 0.25), 44100, 16000)
    np.testing.assert_allclose(y[200:-200], 0.25, atol=1e-6)


def test_resample_validates() -> None:
    with pytest.raises(PcmFormatError):
        resampling.resample(np.zeros(10), 4000, 16000)
    with pytest.raises(PcmFormatError):
        resampling.resample(np.zeros(10), 16000, 192000)
    with pytest.raises(PcmFormatError, match="mono"):
        resampling.resample(np.zeros((10, 2)), 48000, 16000)


@settings(max_examples=40, deadline=None)
@given(
    rates=st.sampled_from([(48000, 16000), (44100, 16000), (16000, 24000), (22050, 16000), (16000, 16000)]),
    cuts=st.lists(st.integers(0, 3000), max_size=8),
)
def test_streaming_resampler_matches_one_shot(rates: tuple[int, int], cuts: list[int]) -> None:
    from_rate, to_rate = rates
    x = np.random.default_rng(7).uniform(-0.8, 0.8, 3000)
    whole = resampling.resample(x, from_rate, to_rate)
    r = Resampler(from_rate, to_rate)
    bounds = [0, *sorted(cuts), x.size]
    parts = [r.process(x[a:b]) for a, b in itertools.pairwise(bounds)]
    parts.append(r.flush())
    streamed = np.concatenate(parts)
    assert streamed.size == whole.size
    np.testing.assert_allclose(streamed, whole, atol=1e-6)


def test_resampler_is_reusable_after_flush() -> None:
    r = Resampler(48000, 16000)
    x = sine(1000, 0.1, 48000)
    first = np.concatenate([r.process(x), r.flush()])
    second = np.concatenate([r.process(x), r.flush()])
    np.testing.assert_array_equal(first, second)


def test_resampler_memory_is_bounded() -> None:
    r = Resampler(48000, 16000)
    frame = sine(300, 0.02, 48000)
    for _ in range(200):
        r.process(frame)
    assert r._buf.size < frame.size + 4 * r.half_width


def test_to_input_pcm_from_48k() -> None:
    data = pcm.tone(1000, 1.0, rate=48000)
    out = resampling.to_input_pcm(data, 48000)
    assert len(out) == 16000 * SAMPLE_WIDTH
    assert audio.dominant_frequency(out, INPUT_RATE) == pytest.approx(1000, abs=1.0)


def test_to_input_pcm_from_44k1() -> None:
    out = resampling.to_input_pcm(pcm.tone(500, 0.5, rate=44100), 44100)
    assert len(out) == 8000 * SAMPLE_WIDTH
    assert audio.dominant_frequency(out, INPUT_RATE) == pytest.approx(500, abs=1.0)


def test_to_input_pcm_at_16k_is_unchanged() -> None:
    data = noise(0.1, -20)
    assert resampling.to_input_pcm(bytearray(data), INPUT_RATE) == data


def test_to_input_pcm_validates() -> None:
    with pytest.raises(PcmFormatError):
        resampling.to_input_pcm(b"\x00\x00\x00", 48000)
    with pytest.raises(PcmFormatError):
        resampling.to_input_pcm(b"\x00\x00", 1000)


# --------------------------------------------------------------------------- tone, analysis, chunking


def test_tone_440_is_half_a_second_of_440_hz() -> None:
    data = pcm.tone(440, 0.5)
    assert len(data) == 12000 * SAMPLE_WIDTH
    assert pcm.duration_ms(data, OUTPUT_RATE) == 500
    assert audio.dominant_frequency(data, OUTPUT_RATE) == pytest.approx(440, abs=0.5)
    x = pcm.pcm16_to_float(data)
    assert float(np.max(np.abs(x))) == pytest.approx(0.3, abs=1e-3)
    assert rms(x) == pytest.approx(0.3 / math.sqrt(2), rel=1e-3)


def test_tone_is_deterministic_and_starts_at_zero() -> None:
    a = pcm.tone(440, 0.1)
    assert a == pcm.tone(440, 0.1)
    assert a[:2] == b"\x00\x00"


def test_tone_fade() -> None:
    data = pcm.tone(1000, 0.1, rate=16000, amplitude=1.0, fade_ms=10)
    x = pcm.pcm16_to_float(data)
    assert np.max(np.abs(x[:16])) < 0.1
    assert np.max(np.abs(x[-16:])) < 0.1
    assert np.max(np.abs(x[800:1000])) > 0.99


@pytest.mark.parametrize(
    "kwargs",
    [
        {"frequency_hz": -1.0, "duration_s": 1.0},
        {"frequency_hz": 12000.0, "duration_s": 1.0},
        {"frequency_hz": 440.0, "duration_s": -0.1},
        {"frequency_hz": 440.0, "duration_s": math.inf},
        {"frequency_hz": 440.0, "duration_s": 1.0, "amplitude": 1.5},
    ],
)
def test_tone_rejects_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        pcm.tone(**kwargs)  # type: ignore[arg-type]


@given(
    freq=st.floats(100.0, 7000.0),
    rate=st.sampled_from([16000, 24000, 44100, 48000]),
)
@settings(max_examples=30, deadline=None)
def test_dominant_frequency_finds_tones(freq: float, rate: int) -> None:
    data = pcm.tone(freq, 0.25, rate=rate)
    bin_hz = rate / (0.25 * rate)
    assert abs(audio.dominant_frequency(data, rate) - freq) < 0.25 * bin_hz


def test_dominant_frequency_picks_the_louder_tone() -> None:
    x = sine(440, 0.5, 24000, 0.1) + sine(3000, 0.5, 24000, 0.4)
    assert audio.dominant_frequency(pcm.float_to_pcm16(x), 24000) == pytest.approx(3000, abs=1)


def test_dominant_frequency_of_silence_and_short_input() -> None:
    assert audio.dominant_frequency(silence(0.1), INPUT_RATE) == 0.0
    with pytest.raises(PcmFormatError):
        audio.dominant_frequency(b"", INPUT_RATE)


@pytest.mark.parametrize(
    ("nbytes", "rate", "expected"),
    [
        (0, 16000, 0),
        (32000, 16000, 1000),
        (48000, 24000, 1000),
        (2, 16000, 0),
        (32, 16000, 1),
        (1764, 44100, 20),
    ],
)
def test_duration_ms(nbytes: int, rate: int, expected: int) -> None:
    assert pcm.duration_ms(bytes(nbytes), rate) == expected


def test_duration_ms_rejects_odd_length() -> None:
    with pytest.raises(PcmFormatError):
        pcm.duration_ms(b"\x00", 16000)


def test_chunk_bytes_splits_on_sample_boundaries() -> None:
    data = pcm.tone(440, 0.105, rate=24000)  # 2520 samples
    chunks = pcm.chunk_bytes(data, 20, 24000)
    assert [len(c) for c in chunks] == [960] * 5 + [240]
    assert b"".join(chunks) == data
    assert pcm.chunk_bytes(b"", 20, 24000) == []


@given(
    n_samples=st.integers(0, 2000),
    chunk_ms=st.integers(1, 200),
    rate=st.sampled_from([8000, 11025, 16000, 24000, 44100]),
)
def test_chunk_bytes_property(n_samples: int, chunk_ms: int, rate: int) -> None:
    data = bytes(range(256)) * (n_samples * 2 // 256) + bytes(n_samples * 2 % 256)
    chunks = pcm.chunk_bytes(data, chunk_ms, rate)
    assert b"".join(chunks) == data
    assert all(len(c) % SAMPLE_WIDTH == 0 and c for c in chunks)
    assert len({len(c) for c in chunks[:-1]}) <= 1
    if chunks:
        assert len(chunks[0]) == max(1, rate * chunk_ms // 1000) * SAMPLE_WIDTH or len(chunks) == 1


def test_chunk_bytes_validates() -> None:
    with pytest.raises(ValueError):
        pcm.chunk_bytes(b"\x00\x00", 0, 16000)
    with pytest.raises(PcmFormatError):
        pcm.chunk_bytes(b"\x00", 20, 16000)


def test_rms_dbfs() -> None:
    assert pcm.rms_dbfs(silence(0.01)) == pcm.SILENCE_DBFS
    assert pcm.rms_dbfs(b"") == pcm.SILENCE_DBFS
    assert pcm.rms_dbfs(pcm.tone(1000, 0.1, rate=16000, amplitude=1.0)) == pytest.approx(-3.01, abs=0.02)
    assert pcm.rms_dbfs(noise(0.1, -40)) == pytest.approx(-40, abs=0.1)


# --------------------------------------------------------------------------- WAV export


def test_wav_bytes_parse_back() -> None:
    data = pcm.tone(440, 0.5)
    with wave.open(io.BytesIO(audio.wav_bytes(data, OUTPUT_RATE)), "rb") as w:
        assert w.getnchannels() == 1
        assert w.getsampwidth() == 2
        assert w.getframerate() == 24000
        assert w.getnframes() == 12000
        assert w.readframes(w.getnframes()) == data


def test_write_wav(tmp_path: Path) -> None:
    data = noise(0.05, -20)
    path = tmp_path / "out.wav"
    audio.write_wav(path, data, INPUT_RATE)
    with wave.open(str(path), "rb") as w:
        assert (w.getframerate(), w.getnframes()) == (16000, 800)
        assert w.readframes(800) == data


def test_wav_bytes_validates() -> None:
    with pytest.raises(PcmFormatError):
        audio.wav_bytes(b"\x00", 16000)
    with pytest.raises(PcmFormatError):
        audio.wav_bytes(b"\x00\x00", 100)


# --------------------------------------------------------------------------- VAD


def speech(seconds: float, rate: int = INPUT_RATE) -> bytes:
    return pcm.tone(440, seconds, rate=rate)


def feed_all(vad: EnergyVad, data: bytes) -> list[VadEvent]:
    return vad.feed(data) + vad.flush()


def test_vad_silence_only_gives_no_events() -> None:
    vad = EnergyVad()
    assert vad.feed(silence(3.0)) == []
    assert vad.feed(noise(2.0, -60)) == []
    assert vad.position_ms == 5000
    assert vad.flush() == []


def test_vad_tone_then_silence() -> None:
    vad = EnergyVad()  # 20 ms frames, min speech 100 ms, silence 700 ms
    events = vad.feed(speech(1.0) + silence(1.0))
    assert [e.kind for e in events] == [START, END]
    start, end = events
    assert abs(start.offset_ms - 0) <= 20
    assert abs(start.detected_ms - 100) <= 20
    assert abs(end.offset_ms - 1000) <= 20
    assert abs(end.detected_ms - 1700) <= 20
    assert not vad.in_speech
    assert vad.flush() == []


def test_vad_events_are_emitted_as_soon_as_decidable() -> None:
    vad = EnergyVad()
    assert vad.feed(silence(0.5)) == []
    assert vad.feed(speech(0.08)) == []  # 80 ms < min_speech_ms
    assert [e.kind for e in vad.feed(speech(0.02))] == [START]
    assert vad.in_speech
    assert vad.feed(speech(1.0) + silence(0.68)) == []
    (end,) = vad.feed(silence(0.02))
    assert end == VadEvent(END, 1600, 2300)


def test_vad_start_offset_is_speech_onset() -> None:
    vad = EnergyVad()
    events = vad.feed(noise(0.5, -70) + speech(0.5) + noise(1.0, -70))
    assert events == [VadEvent(START, 500, 600), VadEvent(END, 1000, 1700)]


def test_vad_short_speech_gives_no_events() -> None:
    vad = EnergyVad(min_speech_ms=100)
    data = silence(0.5) + speech(0.06) + silence(1.0) + speech(0.08) + silence(1.0)
    assert feed_all(vad, data) == []


def test_vad_pause_shorter_than_silence_ms_does_not_end_speech() -> None:
    vad = EnergyVad(silence_ms=700)
    events = feed_all(vad, speech(0.5) + silence(0.6) + speech(0.5) + silence(1.0))
    # The end needs a full 700 ms of silence after the last voiced frame.
    assert events == [VadEvent(START, 0, 100), VadEvent(END, 1600, 2300)]


def test_vad_two_utterances() -> None:
    vad = EnergyVad(silence_ms=300)
    events = feed_all(vad, speech(0.4) + silence(0.5) + speech(0.3) + silence(0.5))
    assert [(e.kind, e.offset_ms) for e in events] == [(START, 0), (END, 400), (START, 900), (END, 1200)]


def test_vad_threshold() -> None:
    quiet = noise(1.0, -50) + silence(1.0)
    assert feed_all(EnergyVad(threshold_dbfs=-45.0), quiet) == []
    assert [e.kind for e in feed_all(EnergyVad(threshold_dbfs=-55.0), quiet)] == [START, END]


def test_vad_flush_ends_speech_in_progress_and_resets() -> None:
    vad = EnergyVad()
    assert [e.kind for e in vad.feed(speech(0.5) + silence(0.2))] == [START]
    assert vad.flush() == [VadEvent(END, 500, 700)]
    assert not vad.in_speech
    assert vad.position_ms == 0
    assert vad.flush() == []
    # Reusable after flush: offsets restart at 0.
    assert vad.feed(silence(0.2) + speech(0.2))[0] == VadEvent(START, 200, 300)


def test_vad_reset_discards_state_without_events() -> None:
    vad = EnergyVad()
    vad.feed(speech(0.5))
    assert vad.in_speech
    vad.reset()
    assert not vad.in_speech
    assert vad.flush() == []
    # A partial frame is dropped by reset too.
    vad.feed(speech(0.01))
    vad.reset()
    assert vad.feed(silence(0.01)) == []
    assert vad.position_ms == 0


def test_vad_other_rates_and_frames() -> None:
    vad = EnergyVad(rate=48000, frame_ms=10, silence_ms=200, min_speech_ms=30)
    events = feed_all(vad, silence(0.25, 48000) + speech(0.5, 48000) + silence(0.5, 48000))
    assert events == [VadEvent(START, 250, 280), VadEvent(END, 750, 950)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 1000},
        {"frame_ms": 0},
        {"threshold_dbfs": 3.0},
        {"threshold_dbfs": math.nan},
        {"silence_ms": 0},
        {"min_speech_ms": -1},
    ],
)
def test_vad_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        EnergyVad(**kwargs)  # type: ignore[arg-type]


def test_vad_event_is_frozen() -> None:
    event = VadEvent(START, 0, 100)
    with pytest.raises(AttributeError):
        event.offset_ms = 5  # type: ignore[misc]


_VAD_AUDIO = (
    silence(0.13)
    + speech(0.31)
    + noise(0.25, -70)
    + speech(0.05)
    + silence(0.4)
    + speech(0.22)
    + silence(0.19)
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3000), max_size=30))
def test_vad_piecewise_feed_matches_whole(sizes: list[int]) -> None:
    def settings_vad() -> EnergyVad:
        return EnergyVad(silence_ms=300, min_speech_ms=60)

    expected = feed_all(settings_vad(), _VAD_AUDIO)
    assert [e.kind for e in expected] == [START, END, START, END]

    vad = settings_vad()
    events: list[VadEvent] = []
    pos = 0
    for size in sizes:  # sizes may split samples (odd byte counts)
        events += vad.feed(_VAD_AUDIO[pos : pos + size])
        pos += size
    events += vad.feed(_VAD_AUDIO[pos:])
    events += vad.flush()
    assert events == expected
