"""The benchmark's throughput chart (tests/bench/compare.py, `throughput_chart`) draws from plain
numbers: made-up rates give a PNG, missing ones included. matplotlib comes with the `bench` extra;
without it these tests are skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tests.bench.compare import THROUGHPUT_CHART_NAME, throughput_chart

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

RATES: dict[tuple[str, str, int], float | None] = {
    (server, mode, clients): rate
    for clients, scale in ((1, 1.0), (16, 1.4))
    for (server, mode), rate in {
        ("api_server", "fresh"): 106.5 * scale,
        ("api_server", "reused"): 90.4 * scale,
        ("runner", "fresh"): 310.5 * scale,
        ("runner", "reused"): 232.0 * scale,
        ("sse", "fresh"): 153.6 * scale,
        ("sse", "reused"): 151.2 * scale,
        ("ws", "fresh"): 209.7 * scale,
        ("ws", "reused"): 157.0 * scale,
    }.items()
}


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_SIGNATURE


def test_the_throughput_chart_is_written(tmp_path: Path) -> None:
    path = tmp_path / "charts" / THROUGHPUT_CHART_NAME
    assert throughput_chart(RATES, path) == path
    assert is_png(path)


def test_missing_rates_and_other_rows_are_drawn_around(tmp_path: Path) -> None:
    # No api_server (the bench's --no-adk), a load with no answered turn, and a row the chart does not show.
    rates = {key: rate for key, rate in RATES.items() if key[0] != "api_server"}
    rates[("ws", "reused", 16)] = None
    rates[("api_server", "run-only", 1)] = 118.2
    path = throughput_chart(rates, tmp_path / "partial.png")
    assert is_png(path)


def test_the_comparison_draws_it_beside_the_turn_time_chart(tmp_path: Path) -> None:
    """`make bench` calls `Comparison.chart` (tests/bench/run.py): with the table's loads it also
    writes the throughput chart. The comparison is built without its servers and runners."""
    from adk_gateway.loadtest import Sample
    from tests.bench.compare import CHART_NAME, Comparison, Load, Sizes

    comparison = Comparison.__new__(Comparison)
    comparison.sizes = Sizes(turns={1: 4, 16: 4}, chat_turns=2, rounds=1, long_turns=10, long_rounds=1)
    comparison.loads = {}
    for (server, mode, clients), rate in RATES.items():
        load = Load(server, mode, clients, samples=[Sample(index=n, chat_id="c", ok=True) for n in range(4)])
        load.elapsed_s = 4 / rate if rate else 1.0
        comparison.loads[(server, mode, clients)] = load
    comparison.long = {"sse": [[0.005 + n / 10_000 for n in range(10)]]}
    assert comparison.throughput()[("sse", "fresh", 1)] == pytest.approx(153.6)
    assert comparison.chart(tmp_path) == tmp_path / CHART_NAME
    assert is_png(tmp_path / CHART_NAME)
    assert is_png(tmp_path / THROUGHPUT_CHART_NAME)
