"""Profiles the gateway's hot path in process, as written up in docs/perf/profile-hot-path.md.

    .venv/bin/python docs/perf/profile_hot_path.py CASE [--out DIR] [--interval S] [--no-timing]
                                                        [--sessions DIR]

CASE is one of:

- ``fresh-chat``: 300 turns of ``/echo one two three`` over SSE, each in a new chat; turns 100-299
  are profiled.
- ``reused-chat``: 210 turns of one chat over SSE, the whole history posted each turn as ``useChat``
  does (``adk_gateway.loadtest``'s reused-chat client, prompt ``/echo hello from the load
  generator``); turns 15-29 and 195-209 are profiled (two profiles, to see what grows).
- ``stream-sse`` / ``stream-ws``: 20 turns of ``/stream 1000 0`` (1,000 text deltas) over SSE or over
  the WebSocket (one socket, as a browser tab keeps it); all but the first are profiled.
- ``all``: the four in turn.

The gateway is built as ``python -m adk_gateway`` builds it (``make_app(Settings(model="scripted"))``,
the ``memory://`` session and stream stores, logs configured by ``configure_logging`` with the
default settings and written to /dev/null, ``gc.freeze()`` after start, no access log) and served
by aiohttp's ``TestServer`` on 127.0.0.1. One client (``adk_gateway.loadtest``'s ``Client``) runs in
the same process and on the same event loop, so the profile holds both sides.

Each case runs twice, each time in a fresh app: first without the profiler, for the per-turn
times (pyinstrument's hook on every call and return slows call-heavy Python code two to three
times, so the profiled pass's times are reported but are not the ones to quote), then with
pyinstrument (``async_mode="disabled"``: every sample of the thread, whichever task it belongs
to). Written to DIR (default: this file's directory):

- ``NAME.html``: pyinstrument's HTML, resampled to a coarser interval when needed to stay under
  2 MB (the summary uses every sample);
- ``NAME.txt``: pyinstrument's text tree (library frames folded);
- ``CASE.summary.txt``: times per turn, the split of the samples by owner (each sample goes to the
  innermost frame that belongs to ADK, the gateway, the scripted model, the client, aiohttp or
  asyncio; library frames such as pydantic, json or copy count for whoever called them), the
  inclusive share of the top functions, and the innermost owner frames.

Paths in these files are written as ``/repo``, ``/venv`` and ``/python``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gateway, whatever is installed in the venv

import aiohttp  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402
from pyinstrument import Profiler  # noqa: E402
from pyinstrument.frame_info import parse_frame_info  # noqa: E402
from pyinstrument.renderers import HTMLRenderer  # noqa: E402

import gateway  # noqa: E402
from adk_gateway.app import make_app  # noqa: E402
from adk_gateway.config import Settings  # noqa: E402
from adk_gateway.logs import configure_logging  # noqa: E402
from adk_gateway.loadtest import Client, LoadConfig, Sample, chat_turn  # noqa: E402

assert Path(gateway.__file__).resolve().is_relative_to(ROOT), gateway.__file__

CASES = ("fresh-chat", "reused-chat", "stream-sse", "stream-ws")


@dataclass
class Plan:
    transport: str
    chat: str
    prompt: str
    turns: int
    windows: dict[str, range]  # profile name -> turns (0-based) it records
    per: str = "turn"
    tokens: int = 1


def plan_for(case: str) -> Plan:
    if case == "fresh-chat":
        return Plan("sse", "fresh", "/echo one two three", 300, {"fresh-chat": range(100, 300)})
    if case == "reused-chat":
        return Plan("sse", "reused", "/echo hello from the load generator", 210,
                    {"reused-chat-early": range(15, 30), "reused-chat": range(195, 210)})
    if case in ("stream-sse", "stream-ws"):
        return Plan(case.split("-")[1], "fresh", "/stream 1000 0", 20, {case: range(1, 20)}, per="token",
                    tokens=1000)
    raise SystemExit(f"unknown case {case!r}; one of {', '.join(CASES)}, all")


@dataclass
class Run:
    times_ms: list[float] = field(default_factory=list)
    sessions: dict[str, object] = field(default_factory=dict)


async def drive(plan: Plan, profile: bool, interval: float) -> Run:
    settings = Settings(model="scripted")
    app = make_app(settings)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(access_log=None)
    gc.collect()
    gc.freeze()
    run = Run()
    try:
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        cfg = LoadConfig(url=str(server.make_url("")).rstrip("/"), transport=plan.transport,  # type: ignore[arg-type]
                         chat=plan.chat, prompt=plan.prompt, timeout_s=60.0)  # type: ignore[arg-type]
        worker = Client(0, cfg, http)
        profiler: Profiler | None = None
        try:
            for turn in range(plan.turns):
                name = next((n for n, r in plan.windows.items() if turn == r.start), None)
                if profile and name is not None:
                    profiler = Profiler(interval=interval, async_mode="disabled")
                    profiler.start()
                sample = Sample(index=turn, chat_id=worker.chat_id)
                started = time.perf_counter()
                await chat_turn(worker, sample)
                run.times_ms.append((time.perf_counter() - started) * 1000)
                if not sample.ok:
                    raise RuntimeError(f"turn {turn} failed: {sample.error} {sample.detail}")
                if sample.text_deltas != plan.tokens and plan.per == "token":
                    raise RuntimeError(f"turn {turn}: {sample.text_deltas} deltas")
                ending = next((n for n, r in plan.windows.items() if turn == r.stop - 1), None)
                if profiler is not None and ending is not None:
                    run.sessions[ending] = profiler.stop()
                    run.sessions[ending + ":profiler"] = profiler
                    profiler = None
        finally:
            await worker.close()
            await http.close()
    finally:
        await server.close()
        gc.unfreeze()
    return run


# --- who owns a sample -------------------------------------------------------------------------

# A sample is the client's when its stack holds one of these (the script's own frames are at the
# root of every stack, so they do not count).
CLIENT_MODULES = ("aiohttp/client", "aiohttp/connector.py", "gateway/loadtest/")
CLIENT_DIRS = ("tests/", "docs/", "gateway/loadtest/")
GATEWAY_DIRS = ("gateway/", "transports/", "agents/")


def _where(frame_info: str) -> tuple[str, str]:
    identifier, _ = parse_frame_info(frame_info)
    parts = identifier.split("\x00")
    return parts[0], (parts[1] if len(parts) > 1 else "")


def _repo_path(path: str) -> str | None:
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


_repo_cache: dict[str, str | None] = {}


def repo_path(path: str) -> str | None:
    if path not in _repo_cache:
        _repo_cache[path] = _repo_path(path) if path.startswith("/") else None
    return _repo_cache[path]


def gateway_part(rel: str, function: str) -> str:
    if rel.startswith("agents/memory_store.py"):
        return "adk:store (agents/memory_store.py)"
    if rel.startswith("agents/scripted"):
        return "model:scripted model"
    if rel == "gateway/core/requests.py" and function in ("history_digest", "validated_history", "_as_posted"):
        return "gateway:history sync"
    if rel == "gateway/services/chat.py" and function in ("_continues", "_role"):
        return "gateway:history sync"
    if rel in ("gateway/core/jsonparse.py", "gateway/core/requests.py") or (rel, function) == ("transports/sse.py", "_read_body"):
        return "gateway:body parse and validation"
    if rel == "agents/adk.py" and function in ("import_history", "history_events", "message_events",
                                               "ui_message_content", "stamp_history", "append_history_in_memory",
                                               "_tool_response", "_data_url_part"):
        return "gateway:history sync"
    if rel == "gateway/services/chat.py" and function.startswith(("_plan", "_apply_answers", "_answer", "_interrupt")):
        return "gateway:history sync"
    if rel in ("gateway/core/converter.py", "gateway/core/chunks.py") or (rel == "gateway/services/chat.py" and function in (
            "_convert", "_already_settled", "_settle_from_chunk")):
        return "gateway:event -> UI chunk conversion"
    if rel == "gateway/core/encoding.py":
        return "gateway:encoding"
    if rel == "gateway/services/streams.py":
        return "gateway:stream log"
    if rel.startswith("transports/"):
        return "gateway:transports"
    if rel == "agents/adk.py":
        return "gateway:agent host (agents/adk.py)"
    if rel == "agents/tools.py":
        return "gateway:ADK plugins (agents/tools.py)"
    if rel == "gateway/services/chat.py":
        return "gateway:run loop (gateway/services/chat.py)"
    if rel in ("gateway/app.py", "gateway/services/auth.py"):
        return "gateway:middlewares"
    if rel in ("gateway/services/registry.py", "gateway/services/leases.py"):
        return "gateway:registry"
    if rel == "gateway/logs.py":
        return "gateway:logging"
    return f"gateway:other ({rel})"


def adk_part(path: str) -> str:
    rel = path.split("/google/adk/", 1)[1]
    if rel == "agents/remote_a2a_agent.py":
        return "adk:optional A2A import, retried each call"
    if rel.startswith("telemetry/"):
        return "adk:telemetry"
    if rel.startswith("flows/llm_flows/") and ("contents" in rel or "request_processor" in rel
                                               or rel.endswith(("basic.py", "instructions.py", "identity.py"))):
        return "adk:request building"
    if rel.startswith("flows/"):
        return "adk:flows"
    if rel.startswith("runners"):
        return "adk:runner"
    if rel.startswith("sessions/"):
        return "adk:sessions (base)"
    if rel.startswith("agents/"):
        return "adk:agents"
    if rel.startswith("models/"):
        return "adk:models"
    if rel.startswith("events/"):
        return "adk:events"
    if rel.startswith("workflow/"):
        return "adk:workflow (node scheduling)"
    if rel.startswith("tools/"):
        return "adk:tools (declarations)"
    return f"adk:other ({rel.split('/')[0]})"


def owner_of(stack: Sequence[str]) -> str:
    """The innermost frame that belongs to an owner (ADK, the gateway, the client, aiohttp or
    asyncio) decides; library frames (pydantic, json, copy, opentelemetry, structlog...) count for
    whoever called them."""
    for info in reversed(stack):
        function, path = _where(info)
        rel = repo_path(path)
        if rel is not None:
            if rel.startswith(CLIENT_DIRS):
                return "client:load generator"
            if rel.startswith(GATEWAY_DIRS):
                return gateway_part(rel, function)
        if "/google/adk/" in path:
            return adk_part(path)
        if "/aiohttp/" in path:
            if any(m in _where(i)[1] for i in stack for m in CLIENT_MODULES):
                return "client:aiohttp client"
            return "aio:aiohttp server"
        if "/asyncio/" in path or path.endswith("selectors.py"):
            if function == "select":
                return "aio:waiting in select"
            if any(m in _where(i)[1] for i in stack for m in CLIENT_MODULES):
                return "client:asyncio under the client"
            return "aio:asyncio"
    return "other:unattributed"


def innermost(session: object) -> dict[str, float]:
    """Seconds per innermost owner frame (file:function): where `split` puts each sample."""
    totals: dict[str, float] = defaultdict(float)
    for stack, seconds in session.frame_records:  # type: ignore[attr-defined]
        key = "?"
        for info in reversed(stack):
            function, path = _where(info)
            rel = repo_path(path)
            if (rel is not None and rel.startswith((*GATEWAY_DIRS, "tests/", "docs/"))) or any(
                    m in path for m in ("/google/adk/", "/aiohttp/", "/asyncio/", "selectors.py")):
                key = f"{rel or path.split('site-packages/', 1)[-1].split('python3.11/', 1)[-1]}:{function}"
                break
        totals[key] += seconds
    return dict(totals)


def split(session: object) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for stack, seconds in session.frame_records:  # type: ignore[attr-defined]
        totals[owner_of(stack)] += seconds
    return dict(totals)


def inclusive(session: object, keep: Callable[[str, str], bool]) -> dict[str, float]:
    """Inclusive seconds per function (file:function), each counted once per sample."""
    totals: dict[str, float] = defaultdict(float)
    for stack, seconds in session.frame_records:  # type: ignore[attr-defined]
        seen = set()
        for info in stack:
            function, path = _where(info)
            if keep(function, path):
                rel = repo_path(path) or path.split("site-packages/", 1)[-1]
                seen.add(f"{rel}:{function}")
        for key in seen:
            totals[key] += seconds
    return dict(totals)


def _interesting(function: str, path: str) -> bool:
    if repo_path(path) is not None:
        return True
    return any(m in path for m in ("/google/adk/", "/aiohttp/", "/pydantic/", "/json/", "copy.py",
                                   "/opentelemetry/", "/structlog/", "/google/genai/"))


# --- report ------------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> str:
    return f"mean {statistics.fmean(values):.2f} / median {statistics.median(values):.2f}"


HTML_MAX_BYTES = 2_000_000

# Where this machine keeps things, written as neutral stand-ins in the saved files (the same
# everywhere in a file, so pyinstrument's HTML still tells library code from the project's).
_PLACES = sorted({sys.prefix: "/venv", str(ROOT): "/repo", sys.base_prefix: "/python"}.items(),
                 key=lambda kv: -len(kv[0]))


def neutral(text: str) -> str:
    for place, stand_in in _PLACES:
        text = text.replace(place, stand_in)
    return text


def html_under(session: object, limit: int) -> tuple[str, float | None]:
    """pyinstrument's HTML, of the session resampled to a coarser interval when it would pass
    `limit` bytes (pyinstrument's renderer only resamples past 100,000 samples)."""
    html = HTMLRenderer(resample_interval=0).render(session)
    resample = None
    interval = session.duration / max(1, session.sample_count)  # type: ignore[attr-defined]
    for _ in range(8):
        if len(html.encode()) <= limit:
            break
        interval = interval * len(html.encode()) / (0.8 * limit)
        resample = round(interval, 4)
        html = HTMLRenderer(resample_interval=0).render(session.resample(resample))  # type: ignore[attr-defined]
    return html, resample


def report(case: str, plan: Plan, timing: Run | None, profiled: Run, out: Path) -> str:
    lines = [f"case {case}: {plan.turns} turns of {plan.prompt!r} over {plan.transport}, chat {plan.chat}"]
    for label, run in (("unprofiled", timing), ("profiled", profiled)):
        if run is None:
            continue
        t = run.times_ms
        lines.append(f"  {label}: ms per turn, all turns: {_stats(t)}")
        tenth = max(1, len(t) // 10)
        lines.append(f"    first tenth {_stats(t[:tenth])}; last tenth {_stats(t[-tenth:])}")
        if plan.chat == "reused":
            for start in range(0, len(t), 20):
                lines.append(f"    turns {start}-{min(start + 19, len(t) - 1)}: {_stats(t[start:start + 20])}")
        for name, window in plan.windows.items():
            w = t[window.start:window.stop]
            lines.append(f"    window {name} (turns {window.start}-{window.stop - 1}): {_stats(w)}"
                         + (f"; per token {statistics.fmean(w) / plan.tokens * 1000:.1f} us" if plan.per == "token"
                            else ""))
    for name, window in plan.windows.items():
        session = profiled.sessions[name]
        turns = len(window)
        total = sum(s for _, s in session.frame_records)  # type: ignore[attr-defined]
        lines.append(f"\n== profile {name}: turns {window.start}-{window.stop - 1}, {turns} turns, "
                     f"{total * 1000:.0f} ms sampled, {total * 1000 / turns:.2f} ms per turn")
        parts = split(session)
        groups: dict[str, float] = defaultdict(float)
        for key, seconds in parts.items():
            groups[key.split(":")[0]] += seconds
        for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {group:8} {100 * seconds / total:5.1f}%  {seconds * 1000 / turns:7.2f} ms/turn")
            for key, s in sorted(((k, v) for k, v in parts.items() if k.startswith(group + ":")),
                                 key=lambda kv: -kv[1]):
                label = key.split(":", 1)[1]
                lines.append(f"      {label:45} {100 * s / total:5.1f}%  {s * 1000 / turns:7.2f} ms/turn")
        lines.append("  inclusive, top functions (share of samples, ms per turn):")
        inc = inclusive(session, _interesting)
        for key, s in sorted(inc.items(), key=lambda kv: -kv[1])[:90]:
            lines.append(f"    {100 * s / total:5.1f}%  {s * 1000 / turns:7.2f}  {key}")
        lines.append("  exclusive, by innermost owner frame (share, ms per turn):")
        for key, s in sorted(innermost(session).items(), key=lambda kv: -kv[1])[:45]:
            lines.append(f"    {100 * s / total:5.1f}%  {s * 1000 / turns:7.2f}  {key}")
        profiler = profiled.sessions[name + ":profiler"]
        html, resample = html_under(session, HTML_MAX_BYTES)
        (out / f"{name}.html").write_text(neutral(html), encoding="utf-8")
        if resample:
            lines.append(f"  the HTML is resampled to {resample * 1000:.1f} ms to stay under "
                         f"{HTML_MAX_BYTES / 1e6:.0f} MB (the numbers above use every sample)")
        text = profiler.output_text(unicode=True, color=False, show_all=False)  # type: ignore[attr-defined]
        (out / f"{name}.txt").write_text(neutral(text), encoding="utf-8")
        lines.append(f"  wrote {name}.html ({len(html.encode()) / 1e6:.2f} MB) and {name}.txt")
    summary = "\n".join(lines) + "\n"
    (out / f"{case}.summary.txt").write_text(neutral(summary), encoding="utf-8")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=(*CASES, "all"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="Where the HTML, text and summary files go (default: docs/perf).")
    parser.add_argument("--interval", type=float, default=0.0005, help="pyinstrument's sampling interval (s).")
    parser.add_argument("--no-timing", action="store_true", help="Skip the unprofiled timing pass.")
    parser.add_argument("--sessions", type=Path, default=None,
                        help="Also save each pyinstrument session here (NAME.pyisession, for `pyinstrument --load`).")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the logs' sink for the whole run
    stderr, sys.stderr = sys.stderr, devnull
    defaults = Settings()
    configure_logging(defaults.log_format, defaults.log_level)
    sys.stderr = stderr
    print(f"gateway from {Path(gateway.__file__).parent}", file=sys.stderr)
    for case in CASES if args.case == "all" else (args.case,):
        plan = plan_for(case)
        timing = None if args.no_timing else asyncio.run(drive(plan, profile=False, interval=args.interval))
        profiled = asyncio.run(drive(plan, profile=True, interval=args.interval))
        print(report(case, plan, timing, profiled, args.out))
        if args.sessions is not None:
            args.sessions.mkdir(parents=True, exist_ok=True)
            for name in plan.windows:
                profiled.sessions[name].save(args.sessions / f"{name}.pyisession")  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
