"""Latency statistics: a histogram with bounded relative error (the HdrHistogram layout) and the
exact percentiles of a list.

`Histogram` keeps counts, not values, so a run of millions of requests costs a few kilobytes.
Values are recorded in whole units (microseconds by default). Below `2 ** significant_bits` units
every value has its own bucket; above, a bucket spans `2 ** shift` units where the value has
`significant_bits` significant bits, so any value read back is within `2 ** -(significant_bits - 1)`
of one recorded in its bucket (0.1 % with the default 11 bits). The minimum, the maximum and the
mean are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["DEFAULT_POINTS", "Histogram", "percentiles"]

DEFAULT_POINTS: tuple[float, ...] = (50, 90, 95, 99, 99.9)


class Histogram:
    """Counts of non-negative values in logarithmic buckets of linear sub-buckets."""

    def __init__(self, significant_bits: int = 11, unit: float = 1e-6) -> None:
        if not 2 <= significant_bits <= 20:
            raise ValueError("significant_bits must be 2..20")
        if not unit > 0:
            raise ValueError("unit must be positive")
        self.significant_bits = significant_bits
        self.unit = unit
        self._counts: dict[int, int] = {}
        self.count = 0
        self._total_units = 0
        self._min: int | None = None
        self._max: int | None = None

    # --- buckets ---------------------------------------------------------------------------

    def _key(self, units: int) -> int:
        """The bucket of `units`: keys grow with the values they hold."""
        shift = max(0, units.bit_length() - self.significant_bits)
        return (shift << self.significant_bits) | (units >> shift)

    def _bounds(self, key: int) -> tuple[int, int]:
        """The lowest and highest value (in units) of bucket `key`."""
        shift, mantissa = key >> self.significant_bits, key & ((1 << self.significant_bits) - 1)
        return mantissa << shift, ((mantissa + 1) << shift) - 1

    # --- recording -------------------------------------------------------------------------

    def record(self, value: float, count: int = 1) -> None:
        """Adds `value` (in seconds when the unit is a microsecond) `count` times.

        Raises:
            ValueError: the value is negative or not finite, or the count is below one.
        """
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"cannot record {value!r}: values must be finite and >= 0")
        if count < 1:
            raise ValueError("count must be at least 1")
        units = round(value / self.unit)
        key = self._key(units)
        self._counts[key] = self._counts.get(key, 0) + count
        self.count += count
        self._total_units += units * count
        self._min = units if self._min is None else min(self._min, units)
        self._max = units if self._max is None else max(self._max, units)

    def record_all(self, values: Iterable[float | None]) -> Histogram:
        """Records every value that is not None; returns the histogram."""
        for value in values:
            if value is not None:
                self.record(value)
        return self

    def merge(self, other: Histogram) -> None:
        """Adds the counts of `other` (same layout) to this histogram."""
        if (other.significant_bits, other.unit) != (self.significant_bits, self.unit):
            raise ValueError("only histograms with the same significant bits and unit merge")
        for key, count in other._counts.items():
            self._counts[key] = self._counts.get(key, 0) + count
        self.count += other.count
        self._total_units += other._total_units
        for bound in (other._min, other._max):
            if bound is not None:
                self._min = bound if self._min is None else min(self._min, bound)
                self._max = bound if self._max is None else max(self._max, bound)

    # --- reading ---------------------------------------------------------------------------

    @property
    def min(self) -> float | None:
        return None if self._min is None else self._min * self.unit

    @property
    def max(self) -> float | None:
        return None if self._max is None else self._max * self.unit

    @property
    def mean(self) -> float | None:
        return None if not self.count else self._total_units / self.count * self.unit

    def value_at(self, percentile: float) -> float | None:
        """The value below or at which `percentile` % of the recorded values lie (nearest rank:
        the ceil(p/100 * count)-th smallest, at least the first), as the middle of its bucket
        kept within the exact minimum and maximum. None when nothing was recorded."""
        if not 0 <= percentile <= 100:
            raise ValueError("percentile must be 0..100")
        if not self.count or self._min is None or self._max is None:
            return None
        rank = max(1, math.ceil(percentile / 100 * self.count))
        seen = 0
        for key in sorted(self._counts):
            seen += self._counts[key]
            if seen >= rank:
                low, high = self._bounds(key)
                middle = min(max((low + high) / 2, self._min), self._max)
                return middle * self.unit
        return self._max * self.unit  # not reached: the counts add up to `count`

    def summary(self, points: Sequence[float] = DEFAULT_POINTS, scale: float = 1000.0,
                digits: int = 2) -> dict[str, float | int | None]:
        """`count`, `p50`… (`p99.9`), `mean`, `min`, `max`, multiplied by `scale` (seconds to
        milliseconds by default) and rounded."""

        def shown(value: float | None) -> float | None:
            return None if value is None else round(value * scale, digits)

        result: dict[str, float | int | None] = {"count": self.count}
        for point in points:
            result[f"p{point:g}"] = shown(self.value_at(point))
        result["mean"], result["min"], result["max"] = shown(self.mean), shown(self.min), shown(self.max)
        return result


def percentiles(values: Sequence[float], points: Sequence[float] = (50, 95, 99)) -> dict[str, float | None]:
    """Exact `p50`/`p95`/`p99` (linear interpolation between closest ranks), mean, min and max of a
    list (the benchmarks' figures; a load test's summary uses `Histogram`)."""
    if not values:
        return {**{f"p{p:g}": None for p in points}, "mean": None, "min": None, "max": None}
    ordered = sorted(values)
    result: dict[str, float | None] = {}
    for p in points:
        rank = (len(ordered) - 1) * p / 100
        low, high = math.floor(rank), math.ceil(rank)
        result[f"p{p:g}"] = ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
    result["mean"] = sum(ordered) / len(ordered)
    result["min"], result["max"] = ordered[0], ordered[-1]
    return result
