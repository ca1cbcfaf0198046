"""`make bench`: the gateway side by side with ADK's bare `Runner` and `adk api_server`, plus its memory.

    python -m tests.bench.run [--quick] [--json results.json] [--charts DIR] [--no-adk] [--only PARTS]
                              [--gateway-root DIR]

The gateway runs as a subprocess with its default settings (scripted model, memory stores) except
the abuse caps (`BENCH_CAPS`); `adk api_server` serves the same demo agent from a temporary apps
folder; ADK's bare `Runner` runs in this process. The clients run in this process too, so client
and servers share the machine's cores. Scenarios, in order:

1. warm-up of the gateway (SSE and WebSocket);
2. side by side (`tests.bench.compare`, prompt `/echo one two three`): the bare Runner (fresh and
   reused sessions), `adk api_server` (create + run, run only, reused session) and the gateway
   over SSE and WebSocket (fresh chats, reused chats with the whole history posted), each at 1 and
   16 clients, with turns/s, per-turn and first-text percentiles and ratios to the Runner's and
   api_server's matching rows; the gateway's added time to first text; 200-turn chats (8 per
   server: the Runner on ADK's store and on ours too; the gateway's with the whole history posted
   and with only the last message, the AI SDK's persistence pattern), by tenth, with a chart in
   `--charts`;
3. streaming throughput (`/stream 100 0`: 100 text deltas per answer), 10 clients, SSE and WebSocket;
4. memory of the load gateway (RSS idle, after the runs) and cleanup: 200 clients disconnect
   mid-stream; time until `/metrics` shows `adk_gateway_active_runs 0`;
5. loading a chat, on a new gateway process: a 1,000-message chat made of 500 last-message turns
   of `/echo one two three` over SSE, then 200 `GET /api/chats/{id}` one after the other (checked:
   1,000 messages, the ids the client held), with their percentiles;
6. memory per connection, each on a new gateway process: 1,000 then 10,000 idle WebSockets (this
   process raises its open-files limit to the hard limit first, and the gateways inherit it; a
   count the limit cannot hold is skipped with a note), and 500 open SSE streams each waiting on
   the model (`/stream 1 60000`);
7. RSS over 100,000 turns: a gateway with `memory://` eviction on (`CHURN_ARGS`), 16 clients
   (8 SSE, 8 WebSocket) in fresh chats, RSS read after a 5,000-turn warm-up and every 5,000 turns;
8. floods (`tests.bench.floods`, part `flood`), each on a new gateway process, in 3 rounds: a
   `/stream 50000 0` chat read at full speed over SSE, then over the WebSocket, with `/healthz` and
   an `/echo hi` turn sent every 100 ms beside it (p50 / p99 / max), its duration, the deltas it
   got and the process's peak RSS growth; a reader that stops after the first line of
   `/stream 100000 0` (seconds until the gateway's `slow_reader_cut` line, RSS growth); the SSE
   flood on a gateway with PYTHONASYNCIODEBUG=1 and asyncio's slow-callback threshold at 50 ms
   (callbacks over it, the longest); the longest `/healthz` answer, sent every 10 ms, while 50
   `/stream 100000 100` streams run and a 10,000-message `regenerate-message` body is refused (413,
   `--max-history-messages 500`), then a 500-message one imported and answered. Each probe and
   wait is capped (a probe at 30 s, counted as 30 s), so the part ends on any gateway.

`--gateway-root DIR` runs every gateway process from another checkout (cwd DIR, `python -m
gateway` with this checkout's interpreter, so DIR's packages are the ones imported), e.g. the
figures before a change: `git worktree add /tmp/bench-before COMMIT`, then
`python -m tests.bench.run --only flood --gateway-root /tmp/bench-before`. The report names the
checkout and its commit. The clients, the `adk api_server` rows and the bare Runner stay this
checkout's.

`--quick` shrinks every count (the 100,000 turns to 10,000; the loaded chat keeps its 1,000
messages, 50 GETs; one round of floods) for a smoke run of about 3 minutes. `--only` runs some parts (PARTS below,
comma-separated) on the warmed-up gateway: e.g. `--only last-message,chat-load`; the long chat's
bare Runner rows run with either of its parts.
Everything is bounded: each load by its count and a duration, each wait by a deadline. Nothing here
asserts timings; it prints Markdown tables (and, with `--json`, every figure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp

from adk_gateway.loadtest import LoadConfig, Sample, open_sse_stream, percentiles, run_load, summarize, user_message
from tests.bench import floods
from tests.bench.compare import (
    GATEWAY_SERVERS,
    LONG_SERVERS,
    PROMPT,
    Comparison,
    GatewayClient,
    Sizes,
    Targets,
    churn,
    drive,
)
from tests.bench.soak import raise_open_files_limit
from tests.gateway_process import free_port, gateway_python

__all__ = ["PARTS", "Bench", "Plan", "main"]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_S = 60.0
ECHO = PROMPT
STREAM = "/stream 100 0"
HOLD_PROMPT = "/stream 1 60000"  # `start`, then the model "thinks" for 60 s
DISCONNECT_PROMPT = "/stream 2000 5"  # ~10 s of tokens: certainly mid-stream when the client leaves
ADK_APP = "bench_app"


BENCH_CAPS = ("--max-runs", "10000", "--max-sends-per-minute", "100000")
# The RSS-over-many-turns gateway: `memory://` keeps at most 1,000 chats and drops any idle for a
# minute, so fresh chats are evicted all along and the RSS shows what is left behind besides them.
CHURN_ARGS = ("--memory-max-chats", "1000", "--memory-ttl-s", "60")
# Open files this process keeps for itself beside the held sockets (logs, pipes, pooled connections).
SPARE_FILES = 512
CHART_DIR = ROOT / "benchmarks"
# The parts of the benchmark, in the order they run (`--only` picks some). `long-chat` is the
# long chat with the whole history posted, `last-message` the same chat posting only the new message.
PARTS = ("table", "first-text", "long-chat", "last-message", "streaming", "cleanup", "chat-load", "memory",
         "churn", "flood")
SIDE_BY_SIDE_PARTS = frozenset({"table", "first-text", "long-chat", "last-message"})


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- server processes ----------------------------------------------------------------------


@dataclass
class Server:
    """A server subprocess on a loopback port, with its RSS and CPU time from /proc."""

    name: str
    argv: list[str]
    port: int
    health_path: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT  # where it runs: `python -m adk_gateway` imports the gateway's code from there
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, workdir: Path) -> None:
        self.log_path = workdir / f"{self.name}.log"
        env = {**os.environ, **self.env}
        env.pop("GOOGLE_API_KEY", None)  # the offline scripted model
        started = time.perf_counter()
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = started + STARTUP_DEADLINE_S
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(self.url + self.health_path, timeout=aiohttp.ClientTimeout(total=1)) as r:
                        if r.status == 200:
                            break
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{self.name} did not answer {self.health_path} in {STARTUP_DEADLINE_S} s")
                await asyncio.sleep(0.05)
        self.ready_s = time.perf_counter() - started

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_file(self) -> Path:
        assert self.log_path is not None
        return self.log_path

    def _status(self) -> str:
        assert self.proc is not None
        return Path(f"/proc/{self.proc.pid}/status").read_text()

    def rss_mib(self) -> float:
        match = re.search(r"^VmRSS:\s+(\d+) kB", self._status(), re.M)
        return int(match.group(1)) / 1024 if match else float("nan")

    def cpu_s(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


async def active_runs(http: aiohttp.ClientSession, url: str) -> float:
    async with http.get(url + "/metrics") as response:
        text = await response.text()
    match = re.search(r"^adk_gateway_active_runs\s+(\S+)", text, re.M)
    return float(match.group(1)) if match else float("nan")


async def wait_runs(http: aiohttp.ClientSession, url: str, target: float, deadline_s: float,
                    interval_s: float = 0.01) -> float | None:
    """Polls /metrics until active runs == target; seconds it took, or None at the deadline."""
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        if await active_runs(http, url) == target:
            return time.perf_counter() - started
        await asyncio.sleep(interval_s)
    return None


# --- results -------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    transport: str
    clients: int
    summary: dict[str, Any]
    server_cpu_ms_per_req: float | None = None
    note: str = ""


def fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def triple(stats: dict[str, float | None]) -> str:
    return " / ".join(fmt(stats.get(k)) for k in ("p50", "p95", "p99"))


def load_table(rows: Sequence[Row]) -> str:
    lines = [
        "| scenario | transport | clients | requests ok / failed | req/s | tokens/s | TTFC p50 / p95 / p99 ms "
        "| first text p50 / p95 ms | total p50 / p95 / p99 ms | bytes / answer | server CPU ms / req |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s = row.summary
        req = s["requests"]
        errors = "" if not s["errors"] else " (" + ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) + ")"
        lines.append(
            f"| {row.name}{' — ' + row.note if row.note else ''} | {row.transport} | {row.clients} "
            f"| {req['ok']} / {req['failed'] + req['unfinished']}{errors} | {fmt(s['req_per_s'])} "
            f"| {fmt(s['tokens_per_s'], 0)} | {triple(s['ttfc_ms'])} "
            f"| {fmt(s['ttft_ms']['p50'])} / {fmt(s['ttft_ms']['p95'])} | {triple(s['total_ms'])} "
            f"| {fmt(s['bytes']['per_ok_request'], 0)} | {fmt(row.server_cpu_ms_per_req, 2)} |"
        )
    return "\n".join(lines)


# --- the benchmark -------------------------------------------------------------------------


@dataclass
class Plan:
    compare_turns: dict[int, int] = field(default_factory=lambda: {1: 100, 16: 320})  # clients -> turns
    chat_turns: int = 20  # turns of a reused chat in the side-by-side table
    rounds: int = 6  # rows alternated between rounds: the more rounds, the less a slow minute lands on one row
    long_turns: int = 200
    # Chats per server of the long chat. Its growth figure (last tenth less first) moves by up to
    # 3 ms from one chat to the next on this VM; 4 chats left about ±0.5 ms between runs.
    long_rounds: int = 8
    first_text_turns: int = 500  # per server and chats, in lock step at 1 client
    stream_requests: int = 150
    disconnect: int = 200
    hold_sse: int = 500
    hold_ws: tuple[int, ...] = (1_000, 10_000)
    churn_turns: int = 100_000
    churn_warmup: int = 5_000
    churn_every: int = 5_000
    churn_duration_s: float = 1_200.0
    chat_load_turns: int = 500  # last-message turns of the loaded chat: 2 messages each
    chat_load_gets: int = 200
    flood_rounds: int = 3  # each flood measurement this many times, each on a new gateway process
    warmup: int = 20
    parts: frozenset[str] = frozenset(PARTS)

    @classmethod
    def quick(cls) -> Plan:
        """A smoke run: every part, with small counts."""
        return replace(cls(), compare_turns={1: 40, 16: 160}, chat_turns=10, rounds=1, long_turns=50,
                       long_rounds=1, first_text_turns=40, stream_requests=30, disconnect=40, hold_sse=100,
                       hold_ws=(500, 1_000),
                       churn_turns=10_000, churn_warmup=2_000, churn_every=1_000, churn_duration_s=240.0,
                       chat_load_gets=50, flood_rounds=1, warmup=10)

    def long_servers(self) -> tuple[str, ...]:
        """The long chat's servers for the parts asked: the bare Runners and `adk api_server` with
        either part, the gateway's full-history and last-message chats with their own."""
        gateway = {"long-chat": ("sse", "ws"), "last-message": ("sse-last", "ws-last")}
        asked = {s for part, servers in gateway.items() if part in self.parts for s in servers}
        if not asked:
            return ()
        return tuple(s for s in LONG_SERVERS if s in asked or s not in GATEWAY_SERVERS)


class Bench:
    def __init__(self, plan: Plan, workdir: Path, with_adk: bool, charts: Path, gateway_root: Path = ROOT) -> None:
        self.plan = plan
        self.workdir = workdir
        self.with_adk = with_adk
        self.charts = charts
        self.gateway_root = gateway_root
        self.gateway = self.new_gateway("gateway")
        self.rows: list[Row] = []
        self.memory: dict[str, Any] = {}
        self.cleanup: dict[str, Any] = {}
        self.adk: dict[str, Any] = {}
        self.comparison: Comparison | None = None
        self.chart: Path | None = None
        self.churn: dict[str, Any] = {}
        self.chat_load: dict[str, Any] = {}
        self.floods: dict[str, list[dict[str, Any]]] = {}
        self.open_files = raise_open_files_limit()[0]

    def new_gateway(self, name: str, *args: str, env: dict[str, str] | None = None,
                    launcher: Sequence[str] | None = None) -> Server:
        """The gateway as `python -m adk_gateway` runs it: default settings (scripted model, memory stores),
        except the abuse caps, raised above what the scenarios send (hundreds of `send` frames a minute
        on one socket, 500 streams at once): a benchmark measures the gateway, not its refusals. It runs
        in `--gateway-root` (this checkout by default) with this checkout's interpreter; `launcher`
        replaces `python -m adk_gateway` (the flood part's slow-callback launcher)."""
        port = free_port()
        module = gateway_module(self.gateway_root)
        command = [*(launcher or (gateway_python(), "-m", module)), "--host", "127.0.0.1", "--port", str(port),
                   *BENCH_CAPS, *args]
        return Server(name, command, port, "/readyz", env=dict(env or {}), cwd=self.gateway_root)

    async def warm(self, server: Server) -> None:
        for transport in ("sse", "ws"):
            await self.load("warm-up", transport, 2, self.plan.warmup, ECHO, server=server)
            await self.load("warm-up", transport, 2, 4, STREAM, server=server)
        await asyncio.sleep(0.5)

    async def on_fresh_gateway(self, name: str, measure: Any, *args: str, env: dict[str, str] | None = None,
                               launcher: Sequence[str] | None = None) -> None:
        """Runs `measure(server)` on a new, warmed-up gateway process, so that memory freed by earlier
        runs (which the allocator keeps) does not hide what the held connections cost."""
        server = self.new_gateway(name, *args, env=env, launcher=launcher)
        await server.start(self.workdir)
        try:
            await self.warm(server)
            await measure(server)
        finally:
            server.stop()

    async def load(self, name: str, transport: str, clients: int, requests: int, prompt: str,
                   server: Server | None = None, note: str = "", **extra: Any) -> tuple[Row, list[Sample]]:
        server = server or self.gateway
        cfg = LoadConfig(url=server.url, transport=transport, concurrency=clients,  # type: ignore[arg-type]
                         requests=requests, prompt=prompt, duration_s=120.0, timeout_s=60.0, **extra)
        cpu_before = server.cpu_s()
        samples, elapsed, stopped_by = await run_load(cfg)
        cpu = server.cpu_s() - cpu_before
        summary = summarize(samples, elapsed, cfg, stopped_by)
        ok = summary["requests"]["ok"]
        row = Row(name, transport, clients, summary, cpu * 1000 / ok if ok else None, note)
        log(f"  {name} [{transport} x{clients}]: {ok} ok, {summary['req_per_s']} req/s, "
            f"total p50 {summary['total_ms']['p50']} ms, errors {summary['errors'] or 0}")
        return row, samples

    async def run(self) -> None:
        await self.gateway.start(self.workdir)
        log(f"gateway ready on {self.gateway.url} after {self.gateway.ready_s:.2f} s")
        await asyncio.sleep(0.5)
        self.memory["idle_started"] = self.gateway.rss_mib()
        try:
            log("warm-up")
            await self.warm(self.gateway)
            self.memory["idle_warm"] = self.gateway.rss_mib()
            if self.plan.parts & SIDE_BY_SIDE_PARTS:
                await self.side_by_side()
            await self.scenarios()
        finally:
            self.gateway.stop()
        parts = self.plan.parts
        if "chat-load" in parts:
            log(f"loading a {2 * self.plan.chat_load_turns:,}-message chat (a new gateway process)")
            await self.on_fresh_gateway("gateway-chat-load", self.load_chat)
        if "memory" in parts:
            log("memory: idle WebSockets (a new gateway process)")
            await self.on_fresh_gateway("gateway-ws-memory", self.hold_ws)
            log("memory: held SSE streams (a new gateway process)")
            await self.on_fresh_gateway("gateway-sse-memory", self.hold_sse)
        if "churn" in parts:
            log(f"RSS over {self.plan.churn_turns:,} turns (a new gateway process, {' '.join(CHURN_ARGS)})")
            await self.on_fresh_gateway("gateway-churn", self.run_churn, *CHURN_ARGS)
        if "flood" in parts:
            await self.run_floods()

    async def run_floods(self) -> None:
        """The `flood` part (tests.bench.floods): each measurement on a new gateway process, every
        measurement once per round, the rounds one after the other."""
        rounds = self.plan.flood_rounds
        json_logs = {"ADK_GATEWAY_LOG_FORMAT": "json"}  # the cut's timestamp is read from its log line

        def keep(kind: str, measure: Any, round_: int) -> Any:
            async def run(server: Server) -> None:
                result = await measure(server)
                result["round"] = round_
                self.floods.setdefault(kind, []).append(result)
                log(f"  {kind}: {floods.one_line(kind, result)}")
            return run

        for k in range(1, rounds + 1):
            log(f"floods, round {k} of {rounds} (a new gateway process for each)")
            for transport in ("sse", "ws"):
                await self.on_fresh_gateway(f"gateway-flood-{transport}",
                                            keep(f"flood-{transport}", partial(floods.flood, transport=transport), k),
                                            env=json_logs)
            await self.on_fresh_gateway("gateway-flood-stopped", keep("stopped", floods.stopped_reader, k),
                                        "--slow-reader-grace-s", str(floods.SLOW_READER_GRACE_S), env=json_logs)
            await self.on_fresh_gateway("gateway-flood-debug", keep("debug", partial(floods.flood, transport="sse"), k),
                                        env={**json_logs, "PYTHONASYNCIODEBUG": "1"},
                                        launcher=floods.slow_callback_command(
                                            gateway_python(), module=gateway_module(self.gateway_root)))
            await self.on_fresh_gateway("gateway-flood-history", keep("history", floods.history_stalls, k),
                                        "--max-history-messages", str(floods.HISTORY_CAP),
                                        "--max-runs-per-user", str(2 * floods.BACKGROUND_STREAMS), env=json_logs)

    async def side_by_side(self) -> None:
        """The comparison with the bare Runner and `adk api_server` (tests.bench.compare)."""
        p = self.plan
        api = await self.start_adk() if self.with_adk else None
        if not self.with_adk:
            self.adk = {"skipped": "--no-adk"}
        targets = Targets(gateway_url=self.gateway.url, gateway_cpu=self.gateway.cpu_s)
        if api is not None:
            targets.api_url, targets.api_app, targets.api_cpu = api.url, ADK_APP, api.cpu_s
        sizes = Sizes(turns=p.compare_turns if "table" in p.parts else {}, chat_turns=p.chat_turns, rounds=p.rounds,
                      long_turns=p.long_turns, long_rounds=p.long_rounds,
                      first_text_turns=p.first_text_turns if "first-text" in p.parts else 0,
                      long_servers=p.long_servers())
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             timeout=aiohttp.ClientTimeout(total=None)) as http:
                self.comparison = Comparison(targets, sizes, http)
                await self.comparison.run()
            if api is not None:
                self.adk["rss_after"] = api.rss_mib()
        finally:
            if api is not None:
                api.stop()
        self.chart = self.comparison.chart(self.charts)
        if self.chart is not None:
            log(f"chart written to {self.chart}")

    async def scenarios(self) -> None:
        p = self.plan
        if "streaming" in p.parts:
            log("streaming throughput")
            for transport in ("sse", "ws"):
                row, _ = await self.load(f"`{STREAM}`, fresh chat", transport, 10, p.stream_requests, STREAM)
                self.rows.append(row)
        await asyncio.sleep(0.5)
        self.memory["after_runs"] = self.gateway.rss_mib()
        self.memory["chats"] = sum(r.summary["requests"]["sent"] for r in self.rows) + (
            self.comparison.gateway_chats if self.comparison else 0)

        if "cleanup" in p.parts:
            log("cleanup after disconnects")
            await self.disconnects()
            await asyncio.sleep(0.5)
        self.memory["end"] = self.gateway.rss_mib()

    async def load_chat(self, server: Server) -> None:
        """`GET /api/chats/{id}` of a chat of `2 * chat_load_turns` messages, made on `server` with
        last-message turns over SSE (the client keeps what it would show): the GETs one after the
        other, each timed from the request to its body's last byte; the first answer is checked to
        hold the messages the client held (same count, same ids, in order)."""
        p = self.plan
        url = server.url
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            client = GatewayClient(http, url, "sse", last_message=True)
            made = await drive([client], p.chat_load_turns, p.chat_load_turns, duration_s=600.0)
            held = [m["id"] for m in client.history]
            result: dict[str, Any] = {"turns": p.chat_load_turns, "turns_failed": made.failed,
                                      "turns_s": round(made.elapsed_s, 1), "messages_held": len(held),
                                      "gets": p.chat_load_gets}
            self.chat_load = result
            log(f"  {len(made.ok)} turns in {made.elapsed_s:.1f} s ({made.failed} failed), "
                f"{len(held)} messages held")
            times: list[float] = []
            statuses: dict[str, int] = {}
            size = 0
            cpu_before = server.cpu_s()
            for k in range(p.chat_load_gets):
                started = time.perf_counter()
                async with http.get(f"{url}/api/chats/{client.chat_id}") as response:
                    raw = await response.read()
                elapsed = time.perf_counter() - started
                statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
                if response.status != 200:
                    result.setdefault("error", raw[:300].decode("utf-8", "replace"))
                    continue
                times.append(elapsed)
                if k == 0:
                    size = len(raw)
                    loaded = [m.get("id") for m in json.loads(raw).get("messages", [])]
                    result["messages_loaded"] = len(loaded)
                    result["same_ids"] = loaded == held
            cpu = server.cpu_s() - cpu_before
        stats = percentiles(times, (50, 90, 99))
        result.update({
            "statuses": statuses, "bytes": size,
            "ms": {k: None if v is None else round(v * 1000, 2) for k, v in stats.items()},
            "server_cpu_ms_per_get": round(cpu * 1000 / len(times), 2) if times else None,
        })
        log(f"  {len(times)} GETs: p50 {fmt(result['ms']['p50'], 2)} ms, p99 {fmt(result['ms']['p99'], 2)} ms, "
            f"{size:,} bytes, {result.get('messages_loaded')} messages (same ids: {result.get('same_ids')})")

    async def run_churn(self, server: Server) -> None:
        p = self.plan
        evicted_before = await self.evictions(server)

        async def settle() -> None:
            # Read RSS once the segment's runs are gone (a finished run's objects go with it).
            async with aiohttp.ClientSession() as http:
                await wait_runs(http, server.url, 0.0, deadline_s=10)

        self.churn = await churn(server.url, server.rss_mib, total=p.churn_turns, warmup=p.churn_warmup,
                                 every=p.churn_every, sse_clients=8, ws_clients=8, duration_s=p.churn_duration_s,
                                 between=settle)
        self.churn["gateway_args"] = [*BENCH_CAPS, *CHURN_ARGS]
        self.churn["evictions"] = await self.evictions(server) - evicted_before

    @staticmethod
    async def evictions(server: Server) -> float:
        """The gateway's `memory://` evictions so far (every reason), from /metrics."""
        async with aiohttp.ClientSession() as http, http.get(server.url + "/metrics") as response:
            text = await response.text()
        return sum(float(m.group(1)) for m in re.finditer(r"^adk_gateway_memory_evictions_total\{[^}]*\}\s+(\S+)",
                                                           text, re.M))

    @staticmethod
    async def _gather_bounded(coros: Sequence[Any], limit: int = 50) -> list[Any]:
        gate = asyncio.Semaphore(limit)

        async def one(coro: Any) -> Any:
            async with gate:
                return await coro

        return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)

    async def hold_sse(self, server: Server) -> None:
        n = self.plan.hold_sse
        url = server.url
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            before = server.rss_mib()
            bodies = [{"id": f"hold-{i}-{time.time_ns()}", "messages": [user_message(HOLD_PROMPT)],
                       "trigger": "submit-message"} for i in range(n)]
            opened = await self._gather_bounded(
                [open_sse_stream(http, url + "/api/chat", b, until_chunks=1, timeout_s=30) for b in bodies]
            )
            held = [r for r in opened if isinstance(r, aiohttp.ClientResponse)]
            failures = [repr(r)[:120] for r in opened if not isinstance(r, aiohttp.ClientResponse)]
            runs = await wait_runs(http, url, float(len(held)), deadline_s=10)
            await asyncio.sleep(1.0)
            during = server.rss_mib()
            server_runs = await active_runs(http, url)
            for response in held:
                response.close()
            freed = await wait_runs(http, url, 0.0, deadline_s=15)
            await asyncio.sleep(1.0)
            self.memory["sse"] = {
                "held": len(held),
                "failed": len(failures),
                "failures": failures[:3],
                "server_active_runs": server_runs,
                "all_runs_seen_s": runs,
                "rss_before": before,
                "rss_held": during,
                "kib_per_stream": (during - before) * 1024 / len(held) if held else None,
                "registry_empty_after_close_s": freed,
                "rss_after_close": server.rss_mib(),
            }

    async def hold_ws(self, server: Server) -> None:
        """Opens idle WebSockets up to each count of the plan in turn (1,000, then 9,000 more), reading
        the RSS at each; a count the open-files limit cannot hold on both sides is skipped."""
        ws_url = server.url.replace("http://", "ws://") + "/api/chat/ws"
        connector = aiohttp.TCPConnector(limit=0)
        steps: list[dict[str, Any]] = []
        self.memory["ws"] = {"rss_before": server.rss_mib(), "steps": steps, "open_files_limit": self.open_files}
        before = self.memory["ws"]["rss_before"]
        held: list[aiohttp.ClientWebSocketResponse] = []
        failures: list[str] = []
        async with aiohttp.ClientSession(connector=connector) as http:
            try:
                for count in self.plan.hold_ws:
                    if self.open_files != resource.RLIM_INFINITY and self.open_files < count + SPARE_FILES:
                        note = (f"skipped {count:,} sockets: the open-files limit is {self.open_files:,} (the hard "
                                f"limit), below the {count + SPARE_FILES:,} they need on each side")
                        log(f"  {note}")
                        steps.append({"sockets": count, "skipped": note})
                        break
                    opened = await self._gather_bounded(
                        [http.ws_connect(ws_url, autoping=True) for _ in range(count - len(held))])
                    held += [w for w in opened if isinstance(w, aiohttp.ClientWebSocketResponse)]
                    failures += [repr(w)[:120] for w in opened if not isinstance(w, aiohttp.ClientWebSocketResponse)]
                    await asyncio.sleep(1.0)
                    during = server.rss_mib()
                    steps.append({"sockets": count, "held": len(held), "failed": len(failures),
                                  "failures": failures[:3], "rss_held": during,
                                  "kib_per_socket": (during - before) * 1024 / len(held) if held else None})
                    log(f"  {len(held):,} idle WebSockets: RSS {during:.1f} MiB")
            finally:
                await self._gather_bounded([w.close() for w in held], limit=500)
        await asyncio.sleep(1.0)
        self.memory["ws"]["rss_after_close"] = server.rss_mib()

    async def disconnects(self) -> None:
        n = self.plan.disconnect
        url = self.gateway.url
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            # SSE: each client reads a few tokens, then all close their connection at once.
            bodies = [{"id": f"drop-{i}-{time.time_ns()}", "messages": [user_message(DISCONNECT_PROMPT)],
                       "trigger": "submit-message"} for i in range(n)]
            opened = await self._gather_bounded(
                [open_sse_stream(http, url + "/api/chat", b, until_chunks=6, timeout_s=30) for b in bodies]
            )
            held = [r for r in opened if isinstance(r, aiohttp.ClientResponse)]
            running = await active_runs(http, url)
            for response in held:
                response.close()
            freed = await wait_runs(http, url, 0.0, deadline_s=15)
            self.cleanup["sse"] = {"clients": len(held), "runs_before": running, "seconds": freed,
                                   "runs_left": await active_runs(http, url),
                                   "failed_to_open": n - len(held)}

            # WebSocket: one socket per client, each with a running request; all sockets close at once.
            ws_url = url.replace("http://", "ws://") + "/api/chat/ws"

            async def open_running(i: int) -> aiohttp.ClientWebSocketResponse:
                ws = await http.ws_connect(ws_url)
                frame = {"type": "send", "requestId": f"r{i}", "id": f"dropws-{i}-{time.time_ns()}",
                         "trigger": "submit-message", "messages": [user_message(DISCONNECT_PROMPT)],
                         "headers": {}, "body": {}}
                try:
                    await ws.send_str(json.dumps(frame))
                    async with asyncio.timeout(30):
                        chunks = 0
                        while chunks < 6:
                            message = await ws.receive()
                            if message.type is not aiohttp.WSMsgType.TEXT:
                                raise RuntimeError(f"socket closed: {message.type}")
                            chunks += json.loads(message.data).get("type") == "chunk"
                except BaseException:
                    await ws.close()
                    raise
                return ws

            opened_ws = await self._gather_bounded([open_running(i) for i in range(n)])
            sockets = [w for w in opened_ws if isinstance(w, aiohttp.ClientWebSocketResponse)]
            running = await active_runs(http, url)
            closing = asyncio.gather(*(w.close() for w in sockets), return_exceptions=True)
            freed = await wait_runs(http, url, 0.0, deadline_s=15)
            left = await active_runs(http, url)
            await closing
            self.cleanup["ws"] = {"clients": len(sockets), "runs_before": running, "seconds": freed,
                                  "runs_left": left, "failed_to_open": n - len(sockets)}

    # --- ADK api_server, side by side ------------------------------------------------------

    def adk_server(self) -> Server | None:
        adk = ROOT / ".venv" / "bin" / "adk"
        adk_path = str(adk) if adk.exists() else shutil.which("adk")
        if adk_path is None:
            return None
        apps = self.workdir / "adk_apps" / ADK_APP
        apps.mkdir(parents=True, exist_ok=True)
        (apps / "__init__.py").write_text("from . import agent  # noqa: F401\n")
        (apps / "agent.py").write_text(
            "from adk_gateway.agents.demo import build_demo_agent\n\nroot_agent = build_demo_agent('scripted')\n"
        )
        port = free_port()
        return Server(
            "adk_api_server",
            [adk_path, "api_server", "--host", "127.0.0.1", "--port", str(port), "--session_service_uri",
             "memory://", "--artifact_service_uri", "memory://", str(apps.parent)],
            port,
            "/list-apps",
            env={"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )

    async def start_adk(self) -> Server | None:
        """`adk api_server` with the demo agent, started and ready; None (with the reason in
        `self.adk`) when the command is missing or does not start."""
        server = self.adk_server()
        if server is None:
            self.adk = {"skipped": "the `adk` command is not installed in this environment"}
            return None
        try:
            await server.start(self.workdir)
        except RuntimeError as exc:
            server.stop()
            self.adk = {"skipped": f"adk api_server did not start: {str(exc)[:300]}"}
            return None
        log(f"adk api_server ready on {server.url} after {server.ready_s:.2f} s")
        await asyncio.sleep(0.5)
        self.adk = {"ready_s": server.ready_s, "rss_idle": server.rss_mib(), "argv": server.argv[1:-1]}
        return server

    # --- report ----------------------------------------------------------------------------

    def markdown(self) -> str:
        out: list[str] = []
        c = self.comparison
        if c is not None:
            t = c.sizes
            levels = " and ".join(f"{n} client{'s' if n > 1 else ''} ({turns:,} turns a row"
                                  f"{f' in each of {t.rounds} rounds' if t.rounds > 1 else ''})"
                                  for n, turns in t.turns.items())
            if c.loads:  # the table ran (not with an --only that leaves it out)
                out += [
                    f"### Side by side: ADK's bare Runner, `adk api_server` and the gateway (`{PROMPT}`)",
                    "",
                    f"At {levels}; reused chats and sessions last {t.chat_turns} turns. The ratios divide a "
                    "row's turns/s by the matching row's (fresh, create + run and run only by the bare Runner's "
                    "fresh sessions and by api_server's create + run; reused by reused). The bare Runner runs in "
                    "this process, with no HTTP and no client; every other row shares the cores with its client.",
                    "",
                    c.markdown_table(),
                    "",
                ]
            if c.added_first_text():
                out += [
                    "### Gateway-added time to first text over the bare Runner, 1 client",
                    "",
                    "The bare Runner's first partial event with text against the gateway's first `text-delta` at "
                    "the client, both timed from the start of the turn. "
                    + (f"The three run in lock step, {t.first_text_turns:,} turns each for each kind of chat, in "
                       f"blocks of {t.chat_turns} turns: turns k to k + {t.chat_turns - 1} of the bare Runner, of the "
                       "gateway over SSE and over WebSocket one after the other (in an order that moves on every "
                       "block) before any goes further, so that the machine's drift falls on all three alike, while "
                       "each runs its block as a closed loop. \"Added\" is the difference of the percentiles; beside "
                       "it, the percentiles of the turn-by-turn differences (each gateway turn less the bare Runner's "
                       "turn of the same k)."
                       if t.first_text_turns > 0 else
                       "From the table's rows at 1 client; differences of percentiles."),
                    "",
                    c.markdown_first_text(),
                    "",
                ]
            last = [s for s in ("sse-last", "ws-last") if s in c.long]
            whole = [s for s in ("sse", "ws") if s in c.long]
            posted = " or ".join(what for what, ran in (("whole history", whole), ("last message", last)) if ran)
            if c.long:
                out += [
                    f"### Per-turn time over a {t.long_turns}-turn chat, 1 client, {posted or 'whole history'} posted",
                    "",
                    f"Mean / median ms per turn in each tenth of the chat"
                    f"{f' ({t.long_rounds} chats per server)' if t.long_rounds > 1 else ''}. The servers' chats run "
                    f"in lock step, {t.long_block} turns at a time: turns k to "
                    f"k + {t.long_block - 1} of every server, one after the other in an order that moves "
                    "on every block, before any goes further, so that the machine's drift falls on every server "
                    "alike. The "
                    "last columns are the mean and median, over the tenth, of the gateway's turn less the bare "
                    "Runner's turn of the same number (ADK's store, then ours). The chart plots the medians."
                    + (" The \"last message\" chats run on the same gateway beside the others, but each of their "
                       "turns sends only the new message, as `useChat` does with the persistence pattern's "
                       "`prepareSendMessagesRequest` (`{\"id\", \"message\", \"trigger\"}`; over the WebSocket a "
                       "`send` frame with `messages: [last]` and `body: {\"message\": last}`): the gateway runs the "
                       "turn on the history it holds." if last else ""),
                    "",
                    c.markdown_long(),
                    "",
                ]
            if self.chart is not None:
                out += [f"Chart: `{self.chart.relative_to(ROOT) if self.chart.is_relative_to(ROOT) else self.chart}`.",
                        ""]
        if self.adk.get("skipped"):
            out += [f"`adk api_server`: skipped ({self.adk['skipped']}).", ""]
        elif self.adk:
            out += [f"`adk api_server`: ready after {fmt(self.adk.get('ready_s'), 2)} s, RSS idle "
                    f"{fmt(self.adk.get('rss_idle'))} MiB, after the runs {fmt(self.adk.get('rss_after'))} MiB.", ""]

        cl = self.chat_load
        if cl:
            ms = cl.get("ms", {})
            statuses = ", ".join(f"{k}: {v}" for k, v in cl.get("statuses", {}).items()) or "none"
            out += [
                f"### Loading a chat: `GET /api/chats/{{id}}` of a {cl.get('messages_loaded', 0):,}-message chat",
                "",
                f"A new gateway process; one chat made of {cl['turns']:,} turns of `{PROMPT}`, each sending only "
                f"the new message over SSE ({cl['turns_s']:,.1f} s, {cl['turns_failed']} failed); then "
                f"{cl['gets']:,} GETs of it one after the other, each timed from the request to the last byte of "
                "its body. The first answer is checked against the messages the client held after streaming "
                "them (count and ids, in order).",
                "",
                "| messages held / loaded | same ids | GETs (status: count) | p50 / p90 / p99 ms | max ms "
                "| bytes / answer | server CPU ms / GET |",
                "|---|---|---|---|---|---|---|",
                f"| {cl['messages_held']:,} / {cl.get('messages_loaded', 0):,} | {cl.get('same_ids', '—')} "
                f"| {statuses} | **{fmt(ms.get('p50'), 2)}** / {fmt(ms.get('p90'), 2)} / {fmt(ms.get('p99'), 2)} "
                f"| {fmt(ms.get('max'), 2)} | {cl.get('bytes', 0):,} | {fmt(cl.get('server_cpu_ms_per_get'), 2)} |",
                "",
            ]
            if cl.get("error"):
                out += [f"First refused GET: `{cl['error']}`.", ""]

        if self.rows:
            out += ["### Streaming throughput", "", load_table(self.rows), ""]

        m = self.memory
        sse, ws = m.get("sse", {}), m.get("ws", {})
        chats = m.get("chats") or 0
        grown = (m["after_runs"] - m["idle_warm"]) * 1024 / chats if chats and "after_runs" in m else None
        if "memory" in self.plan.parts:
            out += [
                "### Memory (gateway RSS, VmRSS)",
                "",
                "| gateway process | when | RSS MiB | per connection |",
                "|---|---|---|---|",
                f"| the load gateway | started, before any request | {fmt(m.get('idle_started'))} | |",
                f"| | after warm-up | {fmt(m.get('idle_warm'))} | |",
                f"| | after the load runs ({chats:,} chats, kept in the memory session store) "
                f"| {fmt(m.get('after_runs'))} | ≈ {fmt(grown)} KiB / stored chat |",
                f"| | at the end (after the disconnect runs) | {fmt(m.get('end'))} | |",
            ]
        if ws:
            out.append(f"| a new gateway | after warm-up | {fmt(ws.get('rss_before'))} | |")
        for step in ws.get("steps", []):
            if "skipped" in step:
                out.append(f"| | {step['skipped']} | | |")
            else:
                out.append(f"| | holding {step['held']:,} idle WebSockets ({step['failed']} failed to open) "
                           f"| {fmt(step['rss_held'])} | {fmt(step['kib_per_socket'])} KiB / socket |")
        if ws:
            out.append(f"| | 1 s after they closed | {fmt(ws.get('rss_after_close'))} | |")
        if sse:
            out += [
                f"| another new gateway | after warm-up | {fmt(sse.get('rss_before'))} | |",
                f"| | holding {sse.get('held')} open SSE streams, each run waiting on the model "
                f"({sse.get('failed')} failed to open) | {fmt(sse.get('rss_held'))} "
                f"| {fmt(sse.get('kib_per_stream'))} KiB / stream |",
                f"| | 1 s after they closed | {fmt(sse.get('rss_after_close'))} | |",
            ]
        out.append("")

        ch = self.churn
        if ch:
            series = ", ".join(f"{s['rss_mib']:.1f}" for s in ch["samples"])
            errors = ", ".join(f"{k}: {v}" for k, v in ch["errors"].items()) or "none"
            out += [
                f"### RSS over {ch['turns']:,} turns (`{' '.join(ch['gateway_args'][-4:])}`)",
                "",
                f"{ch['sse_clients']} SSE and {ch['ws_clients']} WebSocket clients, a fresh chat every turn; RSS "
                f"read after a {ch['warmup_turns']:,}-turn warm-up and every {ch['every']:,} turns, once no run "
                "was active.",
                "",
                "| turns | answered | failed | evicted chats | seconds | RSS after warm-up MiB | RSS at the end MiB "
                "| growth |",
                "|---|---|---|---|---|---|---|---|",
                f"| {ch['turns']:,} | {ch['ok']:,} | {ch['turns'] - ch['ok']:,} ({errors}) | {ch['evictions']:,.0f} "
                f"| {ch['elapsed_s']:,.0f} | {fmt(ch['rss_after_warmup_mib'])} | {fmt(ch['rss_end_mib'])} "
                f"| {fmt(ch['growth_percent'])} % |",
                "",
                f"RSS MiB at each sample: {series}"
                + (" (stopped by its time bound)." if ch["stopped_by"] == "duration" else "."),
                "",
            ]

        if self.floods:
            out += [floods.markdown(self.floods), ""]

        if not (sse or self.cleanup):
            return "\n".join(out)
        out += [
            "### Cleanup after disconnects",
            "",
            "| what | clients | runs active before | registry empty after |",
            "|---|---|---|---|",
        ]
        if sse:
            freed = self._secs(sse.get("registry_empty_after_close_s"))
            out.append(f"| SSE streams waiting on the model, closed at once (the memory gateway) | {sse.get('held')} "
                       f"| {fmt(sse.get('server_active_runs'), 0)} | {freed} |")
        for kind, label in (("sse", f"SSE streams dropped mid-stream (`{DISCONNECT_PROMPT}`)"),
                           ("ws", f"WebSockets closed mid-stream (`{DISCONNECT_PROMPT}`)")):
            cleanup = self.cleanup.get(kind)
            if cleanup:
                out.append(f"| {label} | {cleanup['clients']} | {fmt(cleanup['runs_before'], 0)} "
                           f"| {self._secs(cleanup['seconds'])} |")
        return "\n".join(out)

    @staticmethod
    def _secs(value: float | None) -> str:
        return "not within the deadline" if value is None else f"{value * 1000:,.0f} ms"

    def as_json(self) -> dict[str, Any]:
        def row(r: Row) -> dict[str, Any]:
            return {"name": r.name, "transport": r.transport, "clients": r.clients, "note": r.note,
                    "server_cpu_ms_per_req": r.server_cpu_ms_per_req, "summary": r.summary}

        return {"gateway_ready_s": self.gateway.ready_s, "open_files_limit": self.open_files,
                "side_by_side": self.comparison.as_json() if self.comparison else None,
                "chart": str(self.chart) if self.chart else None, "adk_api_server": self.adk,
                "streaming": [row(r) for r in self.rows], "memory": self.memory, "cleanup": self.cleanup,
                "chat_load": self.chat_load, "rss_over_turns": self.churn, "floods": self.floods}


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


def machine() -> str:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = match.group(1).strip() if match else cpu
    mem = "unknown"
    with contextlib.suppress(OSError):
        match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem = f"{int(match.group(1)) / 1024 / 1024:.1f} GiB" if match else mem

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, aiohttp {version('aiohttp')}, google-adk {version('google-adk')}")


def versions() -> dict[str, str]:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {"python": platform.python_version(), "google-adk": version("google-adk"),
            "aiohttp": version("aiohttp")}


async def amain(args: argparse.Namespace) -> int:
    plan = replace(Plan.quick() if args.quick else Plan(), parts=args.only)
    with tempfile.TemporaryDirectory(prefix="adk-gateway-bench-") as tmp:
        bench = Bench(plan, Path(tmp), with_adk=not args.no_adk, charts=args.charts, gateway_root=args.gateway_root)
        started = time.perf_counter()
        date = time.strftime("%Y-%m-%d %H:%M %Z")
        load_before = loadavg()
        # Read before the run: the run itself rewrites the charts in this checkout.
        code = gateway_code(args.gateway_root)
        try:
            await bench.run()
        except Exception:
            log(bench.gateway.tail())
            raise
        elapsed = time.perf_counter() - started
        report = [
            f"Run {date} on {machine()}; open-files limit {bench.open_files:,}.",
            f"Gateway code: {code}.",
            f"Gateway ready after {fmt(bench.gateway.ready_s, 2)} s; the whole benchmark took {elapsed:.0f} s"
            + (" (--quick: small counts, a smoke run)." if args.quick else ".")
            + f" Load average (1 min) before: {load_before}, after: {loadavg()}; the clients share the cores.",
            "",
            bench.markdown(),
        ]
        print("\n".join(report))
        if args.json is not None:
            result = {"date": date, "machine": machine(), "versions": versions(), "quick": args.quick,
                      "gateway_code": code,
                      "parts": [part for part in PARTS if part in plan.parts],
                      "elapsed_s": round(elapsed, 1), "load_average": [load_before, loadavg()], **bench.as_json()}
            args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def gateway_code(root: Path) -> str:
    """The checkout the gateway ran from: its path and commit (a `*` when its files differ from it)."""
    def git(*args: str) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                  timeout=10, check=False)
            if done.returncode == 0:
                return done.stdout.strip()
        return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = "*" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{root} at {commit}{dirty}"


def gateway_module(root: Path) -> str:
    """What `python -m` runs in checkout `root`: `adk_gateway` (the package as it installs, which
    this checkout's editable install maps), or `gateway` for a checkout from before that name,
    imported from its own folder (the cwd)."""
    return "adk_gateway" if "adk_gateway" in (root / "pyproject.toml").read_text() else "gateway"


def gateway_root(text: str) -> Path:
    """`--gateway-root`'s value: a checkout holding the `gateway` package."""
    root = Path(text).resolve()
    if not (root / "gateway" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"{root} holds no gateway/__main__.py")
    return root


def parts(text: str) -> frozenset[str]:
    """`--only`'s value: comma-separated names of PARTS."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(PARTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown) or '(none given)'}; "
                                         f"choose from {', '.join(PARTS)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="Small counts everywhere (a smoke run of ~3 minutes).")
    parser.add_argument("--no-adk", action="store_true", help="Skip the `adk api_server` rows.")
    parser.add_argument("--json", type=Path, default=None, help="Also write every figure as JSON to this file.")
    parser.add_argument("--charts", type=Path, default=CHART_DIR,
                        help=f"Directory for the PNG charts (default: {CHART_DIR.relative_to(ROOT)}/).")
    parser.add_argument("--only", type=parts, default=frozenset(PARTS), metavar="PARTS",
                        help=f"Run only these parts, comma-separated, of: {', '.join(PARTS)} (default: all).")
    parser.add_argument("--gateway-root", type=gateway_root, default=ROOT, metavar="DIR",
                        help="Run the gateway from this checkout (cwd DIR, `python -m adk_gateway` with this "
                             "checkout's interpreter), e.g. a git worktree of an earlier commit (default: this "
                             "checkout).")
    args = parser.parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
