"""Unit tests for adk_gateway.loadtest.stats: the histogram's percentiles against exact ones."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.loadtest.stats import Histogram, percentiles


def nearest_rank(values: list[float], percentile: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


def test_an_empty_histogram_has_no_values() -> None:
    histogram = Histogram()
    assert histogram.count == 0
    assert histogram.value_at(50) is None
    assert histogram.summary() == {"count": 0, "p50": None, "p90": None, "p95": None, "p99": None,
                                   "p99.9": None, "mean": None, "min": None, "max": None}


def test_small_values_are_exact() -> None:
    # Below 2**11 microseconds (about 2 ms) every microsecond has its own bucket.
    histogram = Histogram().record_all([v / 1e6 for v in range(1, 101)])
    assert histogram.count == 100
    assert histogram.value_at(50) == pytest.approx(50e-6)
    assert histogram.value_at(99) == pytest.approx(99e-6)
    assert histogram.value_at(100) == pytest.approx(100e-6)
    assert histogram.value_at(0) == pytest.approx(1e-6)  # the first value, not below it
    assert histogram.mean == pytest.approx(50.5e-6)


def test_summary_is_in_milliseconds_with_exact_extremes() -> None:
    histogram = Histogram().record_all([0.010, 0.020, 0.030, None, 1.234567])
    summary = histogram.summary()
    assert summary["count"] == 4  # None is skipped
    assert summary["min"] == 10.0 and summary["max"] == 1234.57
    assert summary["mean"] == pytest.approx((10 + 20 + 30 + 1234.567) / 4, abs=0.01)
    assert summary["p50"] == pytest.approx(20.0, rel=1e-3)
    # The top value's bucket is about 1 ms wide at 1.2 s: its middle is read, never past the maximum.
    assert summary["p99.9"] == pytest.approx(1234.57, rel=1 / 2048)
    assert summary["p99.9"] <= summary["max"]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(min_value=0, max_value=600, allow_nan=False), min_size=1, max_size=200),
       percentile=st.sampled_from([0, 1, 25, 50, 90, 95, 99, 99.9, 100]))
def test_percentiles_are_within_the_relative_precision(values: list[float], percentile: float) -> None:
    histogram = Histogram().record_all(values)
    exact = nearest_rank([round(v * 1e6) / 1e6 for v in values], percentile)
    got = histogram.value_at(percentile)
    assert got is not None
    # 11 significant bits: a bucket is at most 1/1024 of its values wide, and its middle is read.
    assert got == pytest.approx(exact, rel=1 / 1024, abs=1e-6)
    assert histogram.min is not None and histogram.max is not None
    assert histogram.min <= got <= histogram.max


def test_large_values_use_few_buckets() -> None:
    histogram = Histogram()
    for micros in range(0, 10_000_000, 997):  # up to 10 s, every ~1 ms
        histogram.record(micros / 1e6)
    assert len(histogram._counts) < 7 * 1024  # logarithmic, not one bucket a value
    assert histogram.value_at(50) == pytest.approx(5.0, rel=1e-3)


def test_record_with_a_count_and_merge() -> None:
    one = Histogram()
    one.record(0.001, count=3)
    other = Histogram().record_all([0.002, 0.004])
    one.merge(other)
    assert one.count == 5
    assert one.value_at(60) == pytest.approx(0.001)
    assert one.value_at(80) == pytest.approx(0.002)
    assert one.max == pytest.approx(0.004)
    with pytest.raises(ValueError, match="same"):
        one.merge(Histogram(significant_bits=8))


@pytest.mark.parametrize("value", [-0.001, math.inf, math.nan])
def test_values_must_be_finite_and_not_negative(value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        Histogram().record(value)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        Histogram(significant_bits=1)
    with pytest.raises(ValueError):
        Histogram().record(1.0, count=0)
    with pytest.raises(ValueError):
        Histogram().value_at(101)


def test_exact_percentiles_of_a_list() -> None:
    stats = percentiles([float(v) for v in range(1, 101)])
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["min"] == 1 and stats["max"] == 100
    assert percentiles([])["p99"] is None
