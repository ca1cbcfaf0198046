"""What a load test shows: the JSON summary, the summary table, and the live progress bar."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from adk_gateway.loadtest.clients import Sample
from adk_gateway.loadtest.config import LoadConfig, redact
from adk_gateway.loadtest.runner import LATE_AFTER_S
from adk_gateway.loadtest.stats import Histogram

__all__ = ["BarProgress", "progress_wanted", "render_table", "summarize"]

PCM_OUT_BYTES_PER_MS = 48  # the live extension's audio out: PCM16 mono at 24 kHz


def _ms(values: Sequence[float | None]) -> dict[str, float | int | None]:
    return Histogram().record_all(values).summary()


def summarize(samples: Sequence[Sample], elapsed: float, cfg: LoadConfig, stopped_by: str,
              include_samples: bool = False) -> dict[str, Any]:
    """The JSON summary: counts, rates, and percentiles (from a `Histogram`) in milliseconds."""
    sent = [s for s in samples if not s.dropped]
    done = [s for s in sent if not s.unfinished]
    ok = [s for s in done if s.ok]
    complete = [s for s in ok if not s.aborted]
    failed = [s for s in done if not s.ok]
    config = {k: v for k, v in asdict(cfg).items() if k not in ("headers", "token")}
    config["token"] = "[redacted]" if cfg.token is not None else None
    config["header_names"] = sorted(cfg.headers)
    sends_text = cfg.scenario != "live" and not (cfg.scenario == "idle" and cfg.transport == "ws")
    config["prompt"] = cfg.prompt_text() if sends_text else None
    requests: dict[str, int] = {
        "sent": len(sent),
        "ok": len(complete),
        "aborted": sum(1 for s in done if s.aborted),
        "failed": len(failed),
        "unfinished": len(sent) - len(done),
    }
    summary: dict[str, Any] = {
        "target": cfg.url,
        "mode": cfg.mode,
        "scenario": cfg.scenario,
        "transport": cfg.transport,
        "config": config,
        "stopped_by": stopped_by,
        "elapsed_s": round(elapsed, 3),
        "requests": requests,
        "errors": dict(Counter(s.error or "unknown" for s in failed).most_common()),
        "req_per_s": round(len(complete) / elapsed, 2) if elapsed > 0 else None,
        "tokens_per_s": round(sum(s.text_deltas for s in complete) / elapsed, 1) if elapsed > 0 else None,
    }
    if cfg.rate is not None:
        requests["arrivals"] = len(samples)
        requests["dropped"] = len(samples) - len(sent)
        requests["late"] = sum(1 for s in sent if s.lag is not None and s.lag > LATE_AFTER_S)
        summary["offered_per_s"] = cfg.rate
        summary["schedule_lag_ms"] = _ms([s.lag for s in sent])
    summary["round_trips"] = {
        "posts": sum(s.posts for s in sent),
        "approvals_answered": sum(s.approvals for s in sent),
        "tool_outputs_sent": sum(s.tool_outputs for s in sent),
        "posts_per_ok_request": round(sum(s.posts for s in complete) / len(complete), 2) if complete else None,
    }
    summary["ttfc_ms"] = _ms([s.ttfc for s in complete])
    summary["ttft_ms"] = _ms([s.ttft for s in complete])
    summary["finish_ms"] = _ms([s.finish for s in complete])
    summary["total_ms"] = _ms([s.total for s in complete])
    if any(s.setup for s in complete):
        summary["setup_ms"] = _ms([s.setup for s in complete])
    if cfg.scenario == "idle":
        summary["idle"] = {
            "held": len(sent),
            "stayed_open": len(complete),
            "closed_early": sum(1 for s in failed if s.error == "closed_early"),
            "not_opened": sum(1 for s in failed if s.error != "closed_early"),
        }
    if cfg.scenario == "live":
        summary["live"] = {
            "audio_ms_sent": sum(s.audio_ms_sent for s in sent),
            "audio_ms_received": sum(s.audio_bytes for s in sent) // PCM_OUT_BYTES_PER_MS,
            "first_audio_ms": _ms([s.first_audio for s in complete]),
        }
    summary["bytes"] = {
        "total": sum(s.bytes for s in done),
        "per_ok_request": round(sum(s.bytes for s in complete) / len(complete), 1) if complete else None,
    }
    summary["chunks"] = {
        "total": sum(s.chunks for s in done),
        "per_ok_request": round(sum(s.chunks for s in complete) / len(complete), 2) if complete else None,
        "text_deltas_per_ok_request": (
            round(sum(s.text_deltas for s in complete) / len(complete), 2) if complete else None
        ),
    }
    examples: dict[str, str | None] = {}
    for s in failed:
        examples.setdefault(s.error or "unknown", None if s.detail is None else redact(s.detail))
    if examples:
        summary["error_examples"] = examples
    if include_samples:
        summary["samples"] = [
            {k: (redact(v) if k == "detail" and v is not None else v) for k, v in asdict(s).items() if k != "text"}
            for s in samples
        ]
    return summary


# --- the table -------------------------------------------------------------------------------

_LATENCIES = (
    ("ttfc_ms", "first chunk"),
    ("ttft_ms", "first text"),
    ("finish_ms", "finish"),
    ("total_ms", "total"),
    ("setup_ms", "connect / setup"),
    ("schedule_lag_ms", "schedule lag"),
)
_POINTS = ("p50", "p90", "p99", "p99.9", "max", "mean")


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_table(summary: Mapping[str, Any], console: Console) -> None:
    """Prints the summary as tables: what ran, the counts, the latencies, the errors."""
    requests = summary["requests"]
    overview = Table(title="adk-gateway loadtest", show_header=False, title_justify="left")
    overview.add_column(style="bold", no_wrap=True)
    overview.add_column()
    config = summary["config"]
    load = (f"{config['concurrency']} clients" if summary["mode"] == "concurrency"
            else f"{summary['offered_per_s']:g} requests/s, at most {config['max_in_flight']} in flight")
    rows: list[tuple[str, Any]] = [
        ("target", summary["target"]),
        ("scenario", f"{summary['scenario']} over {summary['transport']}"),
        ("load", load),
        ("stopped by", f"{summary['stopped_by']} after {summary['elapsed_s']:.2f} s"),
        ("requests", ", ".join(f"{k} {v:,}" for k, v in requests.items())),
        ("requests/s (ok)", summary["req_per_s"]),
        ("text deltas/s", summary["tokens_per_s"]),
    ]
    trips = summary["round_trips"]
    if trips["approvals_answered"] or trips["tool_outputs_sent"]:
        rows.append(("round trips", f"{trips['posts']:,} requests, {trips['approvals_answered']:,} approvals "
                                    f"answered, {trips['tool_outputs_sent']:,} tool outputs sent"))
    if "idle" in summary:
        idle = summary["idle"]
        rows.append(("connections", f"{idle['stayed_open']:,} of {idle['held']:,} stayed open, "
                                    f"{idle['closed_early']:,} closed early, {idle['not_opened']:,} not opened"))
    if "live" in summary:
        live = summary["live"]
        rows.append(("audio", f"{live['audio_ms_sent']:,} ms sent, {live['audio_ms_received']:,} ms received"))
    for name, value in rows:
        overview.add_row(name, _shown(value))
    console.print(overview)

    latencies = Table(title="latency (ms, requests that completed)", title_justify="left")
    latencies.add_column("", no_wrap=True)
    for point in _POINTS:
        latencies.add_column(point, justify="right")
    sources = list(_LATENCIES)
    if "live" in summary:
        sources.append(("first_audio_ms", "first audio out"))
    for key, label in sources:
        values = summary.get(key) if key != "first_audio_ms" else summary["live"][key]
        if values and values.get("count"):
            latencies.add_row(label, *(_shown(values.get(point)) for point in _POINTS))
    console.print(latencies)

    if summary["errors"]:
        errors = Table(title="errors", title_justify="left")
        errors.add_column("kind")
        errors.add_column("count", justify="right")
        errors.add_column("example")
        examples = summary.get("error_examples", {})
        for kind, count in summary["errors"].items():
            errors.add_row(kind, f"{count:,}", (examples.get(kind) or "")[:100])
        console.print(errors)


# --- the progress bar ------------------------------------------------------------------------


def progress_wanted(stream: IO[str], disabled: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """A live progress bar goes to a terminal only: not with --no-progress, not when the output
    is a pipe or a file, not on a terminal that cannot redraw a line (TERM=dumb)."""
    if disabled:
        return False
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
    environ = os.environ if environ is None else environ
    return terminal and environ.get("TERM", "") != "dumb"


class BarProgress:
    """A rich progress bar: requests done out of the limit, the time out of the duration, and the
    counts so far. It disappears when the run ends (the summary follows it)."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            refresh_per_second=8,
        )
        self.requests: TaskID | None = None
        self.clock: TaskID | None = None
        self.ok = self.failed = self.dropped = 0
        self.in_flight = 0
        self.elapsed = 0.0

    def begin(self, total: int, duration_s: float) -> None:
        self.bar.start()
        self.requests = self.bar.add_task("requests", total=total, stats="")
        self.clock = self.bar.add_task("seconds ", total=max(1, math.ceil(duration_s)), stats="")

    def finished(self, sample: Sample) -> None:
        if sample.dropped:
            self.dropped += 1
        elif sample.ok:
            self.ok += 1
        elif not sample.unfinished:
            self.failed += 1
        if self.requests is not None:
            self.bar.update(self.requests, advance=1, stats=self._stats())

    def tick(self, elapsed: float, in_flight: int) -> None:
        self.in_flight, self.elapsed = in_flight, elapsed
        if self.clock is not None and self.requests is not None:
            total = self.bar.tasks[self.clock].total or 0
            self.bar.update(self.clock, completed=min(round(elapsed), total))
            self.bar.update(self.requests, stats=self._stats())

    def _stats(self) -> str:
        rate = f"{self.ok / self.elapsed:,.1f} ok/s" if self.elapsed > 0 else ""
        parts = [f"ok {self.ok:,}", f"failed {self.failed:,}"]
        if self.dropped:
            parts.append(f"dropped {self.dropped:,}")
        if self.in_flight:
            parts.append(f"in flight {self.in_flight:,}")
        if rate:
            parts.append(rate)
        return " · ".join(parts)

    def end(self) -> None:
        self.bar.stop()
