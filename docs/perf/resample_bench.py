"""Streaming resamplers on live-mode chunks: the gateway's `Resampler` against python-soxr.

    .venv/bin/python docs/perf/resample_bench.py          # soxr columns only when `soxr` is importable

For each rate pair and chunk length it streams 3 s of PCM16 (a tone with some noise) through a
fresh resampler 15 times, the way a live session feeds it (PCM16 bytes in, PCM16 bytes out, one
resampler per stream), and prints the median time per chunk. It then prints how much audio each
resampler holds back after a chunk (output owed for the input fed so far, in ms: the latency it
adds), the most and the mean over the stream. Numbers and the decision they led to:
docs/perf/resampling.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from adk_gateway.core.pcm import float_to_pcm16, pcm16_to_float
from adk_gateway.core.resample import Resampler

try:
    import soxr
except ImportError:
    soxr = None

PAIRS = [(24000, 16000), (48000, 16000), (44100, 16000), (16000, 24000)]
CHUNKS_MS = [20, 40, 100]
ROUNDS = 15

Step = Callable[[bytes], bytes]


def chunks_of(rate: int, ms: int, seconds: float = 3.0) -> list[bytes]:
    n = int(rate * seconds)
    t = np.arange(n) / rate
    x = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(1).standard_normal(n)
    data = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    step = rate * ms // 1000 * 2
    return [data[i : i + step] for i in range(0, len(data), step)]


def gateway(from_rate: int, to_rate: int) -> Step:
    r = Resampler(from_rate, to_rate)
    return lambda chunk: float_to_pcm16(r.process(pcm16_to_float(chunk)))


def with_soxr(quality: str, dtype: str = "float32") -> Callable[[int, int], Step]:
    def make(from_rate: int, to_rate: int) -> Step:
        stream = soxr.ResampleStream(from_rate, to_rate, 1, dtype=dtype, quality=quality)
        if dtype == "int16":
            return lambda chunk: stream.resample_chunk(np.frombuffer(chunk, dtype="<i2")).tobytes()
        return lambda chunk: float_to_pcm16(stream.resample_chunk(pcm16_to_float(chunk)))

    return make


def median_us(make: Callable[[int, int], Step], from_rate: int, to_rate: int, chunks: list[bytes]) -> float:
    times = []
    for _ in range(ROUNDS):
        step = make(from_rate, to_rate)
        for chunk in chunks:
            start = time.perf_counter_ns()
            step(chunk)
            times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def held_back_ms(
    make: Callable[[int, int], Step], from_rate: int, to_rate: int, chunks: list[bytes]
) -> tuple[float, float]:
    step = make(from_rate, to_rate)
    n_in = n_out = 0
    owed = []
    for chunk in chunks:
        n_in += len(chunk) // 2
        n_out += len(step(chunk)) // 2
        owed.append((-(-n_in * to_rate // from_rate) - n_out) / to_rate * 1000)
    return max(owed[5:]), statistics.fmean(owed[5:])


def main() -> None:
    makers: dict[str, Callable[[int, int], Step]] = {"gateway": gateway}
    if soxr is not None:
        makers |= {"soxr HQ": with_soxr("HQ"), "soxr HQ int16": with_soxr("HQ", "int16"), "soxr LQ": with_soxr("LQ")}
        print(f"soxr {soxr.__version__}")
    print("median µs per chunk")
    print(f"{'rates':>14} {'chunk':>6} " + " ".join(f"{name:>14}" for name in makers))
    for from_rate, to_rate in PAIRS:
        for ms in CHUNKS_MS:
            chunks = chunks_of(from_rate, ms)
            row = " ".join(f"{median_us(make, from_rate, to_rate, chunks):14.0f}" for make in makers.values())
            print(f"{from_rate:>6}->{to_rate:<6} {ms:>4}ms {row}")
    print("\naudio held back after a chunk, ms: most / mean")
    held = {name: make for name, make in makers.items() if name != "soxr HQ int16"}
    print(f"{'rates':>14} {'chunk':>6} " + " ".join(f"{name:>14}" for name in held))
    for from_rate, to_rate in PAIRS:
        for ms in (20, 100):
            chunks = chunks_of(from_rate, ms)
            row = " ".join("{:>7.1f} / {:<4.1f}".format(*held_back_ms(make, from_rate, to_rate, chunks))
                           for make in held.values())
            print(f"{from_rate:>6}->{to_rate:<6} {ms:>4}ms {row}")


if __name__ == "__main__":
    main()
