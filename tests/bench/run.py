"""`make bench`: start the gateway on a free loopback port, run a fixed set of scenarios, print Markdown.

    python -m tests.bench.run [--quick] [--json results.json] [--no-adk]

The gateway runs as a subprocess with its default settings (scripted model, memory stores); the load
generator (`tests.bench.loadgen`) runs in this process, so client and server share the machine's
cores. Scenarios, in order:

1. warm-up (SSE and WebSocket);
2. short answers (`/echo one two three`: 3 text deltas, 9 chunks) in a fresh chat per request, one
   client (200 requests), then 10 and 50 clients; the same over the WebSocket;
3. streaming throughput (`/stream 100 0`: 100 text deltas per answer), 10 clients, SSE and WebSocket;
4. one chat reused for 100 turns (the client posts the growing history, as `useChat` does);
5. memory: gateway RSS (VmRSS) idle, after the runs, holding 500 open SSE streams (each waiting on
   the model: `/stream 1 60000`) and holding 500 idle WebSockets;
6. cleanup: 200 clients disconnect mid-stream; time until `/metrics` shows `adk_gateway_active_runs 0`;
7. optional, when `adk` is installed in the environment: ADK's own `adk api_server` serving the same
   demo agent on the same scripted model, run alternately with the gateway (ABAB), prompt "hi".

Everything is bounded: each load run by request count and a duration, each wait by a deadline.
Nothing here asserts timings; it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench.loadgen import LoadConfig, Sample, open_sse_stream, run_load, summarize, user_message
from tests.gateway_process import free_port, gateway_python

__all__ = ["Bench", "Plan", "main"]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_S = 60.0
ECHO = "/echo one two three"
STREAM = "/stream 100 0"
HOLD_PROMPT = "/stream 1 60000"  # `start`, then the model "thinks" for 60 s
DISCONNECT_PROMPT = "/stream 2000 5"  # ~10 s of tokens: certainly mid-stream when the client leaves


BENCH_CAPS = ("--max-runs", "10000", "--max-sends-per-minute", "100000")


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
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
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
    sequential: int = 200
    concurrent: int = 500
    stream_requests: int = 150
    turns: int = 100
    hold: int = 500
    disconnect: int = 200
    adk_requests: int = 200
    adk_turns: int = 100
    warmup: int = 20

    def scaled(self, factor: float) -> Plan:
        return Plan(**{k: max(2, int(v * factor)) for k, v in self.__dict__.items()})


class Bench:
    def __init__(self, plan: Plan, workdir: Path, with_adk: bool) -> None:
        self.plan = plan
        self.workdir = workdir
        self.with_adk = with_adk
        self.gateway = self.new_gateway("gateway")
        self.rows: list[Row] = []
        self.memory: dict[str, Any] = {}
        self.cleanup: dict[str, Any] = {}
        self.reused: dict[str, Any] = {}
        self.adk: dict[str, Any] = {}

    @staticmethod
    def new_gateway(name: str) -> Server:
        """The gateway as `python -m gateway` runs it: default settings (scripted model, memory stores),
        except the abuse caps, raised above what the scenarios send (hundreds of `send` frames a minute
        on one socket, 500 streams at once): a benchmark measures the gateway, not its refusals."""
        port = free_port()
        command = [gateway_python(), "-m", "gateway", "--host", "127.0.0.1", "--port", str(port), *BENCH_CAPS]
        return Server(name, command, port, "/readyz")

    async def warm(self, server: Server) -> None:
        for transport in ("sse", "ws"):
            await self.load("warm-up", transport, 2, self.plan.warmup, ECHO, server=server)
            await self.load("warm-up", transport, 2, 4, STREAM, server=server)
        await asyncio.sleep(0.5)

    async def on_fresh_gateway(self, name: str, measure: Any) -> None:
        """Runs `measure(server)` on a new, warmed-up gateway process, so that memory freed by earlier
        runs (which the allocator keeps) does not hide what the held connections cost."""
        server = self.new_gateway(name)
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
            await self.scenarios()
            if self.with_adk:
                await self.compare_adk()
        finally:
            self.gateway.stop()

    async def scenarios(self) -> None:
        p = self.plan
        log("warm-up")
        await self.warm(self.gateway)
        self.memory["idle_warm"] = self.gateway.rss_mib()

        log("load")
        for transport in ("sse", "ws"):
            for clients, count in ((1, p.sequential), (10, p.concurrent), (50, p.concurrent)):
                row, _ = await self.load(f"`{ECHO}`, fresh chat", transport, clients, count, ECHO)
                self.rows.append(row)
            row, _ = await self.load(f"`{STREAM}`, fresh chat", transport, 10, p.stream_requests, STREAM)
            self.rows.append(row)
        for transport in ("sse", "ws"):
            row, samples = await self.load(f"`{ECHO}`, one chat reused for {p.turns} turns", transport, 1,
                                           p.turns, ECHO, chat="reused")
            self.rows.append(row)
            self.reused[transport] = self.turn_growth(samples)
        await asyncio.sleep(0.5)
        self.memory["after_runs"] = self.gateway.rss_mib()
        self.memory["chats"] = sum(r.summary["requests"]["sent"] for r in self.rows
                                   if r.summary["config"]["chat"] == "fresh") + len(self.reused)

        log("cleanup after disconnects")
        await self.disconnects()
        await asyncio.sleep(0.5)
        self.memory["end"] = self.gateway.rss_mib()

        log("memory: idle WebSockets (a new gateway process)")
        await self.on_fresh_gateway("gateway-ws-memory", self.hold_ws)
        log("memory: held SSE streams (a new gateway process)")
        await self.on_fresh_gateway("gateway-sse-memory", self.hold_sse)

    @staticmethod
    def turn_growth(samples: Sequence[Sample]) -> dict[str, Any]:
        ok = [s.total for s in samples if s.ok and s.total is not None]
        k = max(1, min(10, len(ok) // 4))
        return {
            "first_turns_median_ms": round(statistics.median(ok[:k]) * 1000, 1) if ok else None,
            "last_turns_median_ms": round(statistics.median(ok[-k:]) * 1000, 1) if ok else None,
            "turns_per_group": k,
        }

    async def _gather_bounded(self, coros: Sequence[Any], limit: int = 50) -> list[Any]:
        gate = asyncio.Semaphore(limit)

        async def one(coro: Any) -> Any:
            async with gate:
                return await coro

        return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)

    async def hold_sse(self, server: Server) -> None:
        n = self.plan.hold
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
        n = self.plan.hold
        ws_url = server.url.replace("http://", "ws://") + "/api/chat/ws"
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            before = server.rss_mib()
            opened = await self._gather_bounded([http.ws_connect(ws_url, autoping=True) for _ in range(n)])
            held = [w for w in opened if isinstance(w, aiohttp.ClientWebSocketResponse)]
            failures = [repr(w)[:120] for w in opened if not isinstance(w, aiohttp.ClientWebSocketResponse)]
            await asyncio.sleep(1.0)
            during = server.rss_mib()
            await asyncio.gather(*(w.close() for w in held), return_exceptions=True)
            await asyncio.sleep(1.0)
            self.memory["ws"] = {
                "held": len(held),
                "failed": len(failures),
                "failures": failures[:3],
                "rss_before": before,
                "rss_held": during,
                "kib_per_socket": (during - before) * 1024 / len(held) if held else None,
                "rss_after_close": server.rss_mib(),
            }

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
        apps = self.workdir / "adk_apps" / "bench_app"
        apps.mkdir(parents=True, exist_ok=True)
        (apps / "__init__.py").write_text("from . import agent  # noqa: F401\n")
        (apps / "agent.py").write_text(
            "from agents.demo import build_demo_agent\n\nroot_agent = build_demo_agent('scripted')\n"
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

    async def compare_adk(self) -> None:
        server = self.adk_server()
        if server is None:
            self.adk = {"skipped": "the `adk` command is not installed in this environment"}
            return
        log("ADK api_server, side by side (ABAB)")
        try:
            await server.start(self.workdir)
        except RuntimeError as exc:
            self.adk = {"skipped": f"adk api_server did not start: {str(exc)[:300]}"}
            return
        try:
            await asyncio.sleep(0.5)
            self.adk["ready_s"] = server.ready_s
            self.adk["rss_idle"] = server.rss_mib()
            # Warm both (ADK loads the agent on the first run).
            await self.load("warm-up", "adk", 1, 10, "hi", server=server, adk_app="bench_app")
            await self.load("warm-up", "sse", 1, 10, "hi")
            runs: list[Row] = []
            for _ in range(2):
                for label, chat, count in (("fresh", "fresh", self.plan.adk_requests),
                                           ("reused", "reused", self.plan.adk_turns)):
                    row, _ = await self.load(f'"hi", {label}', "adk", 1, count, "hi", server=server,
                                             adk_app="bench_app", chat=chat,
                                             note="ADK api_server /run_sse")
                    runs.append(row)
                    row, _ = await self.load(f'"hi", {label}', "sse", 1, count, "hi", chat=chat,
                                             note="gateway /api/chat")
                    runs.append(row)
            self.adk["rows"] = runs
            self.adk["rss_after"] = server.rss_mib()
        finally:
            server.stop()

    # --- report ----------------------------------------------------------------------------

    def markdown(self) -> str:
        m = self.memory
        out = ["### Load", "", load_table(self.rows), ""]
        growth = [
            f"{t}: median of the first {g['turns_per_group']} turns {g['first_turns_median_ms']} ms, "
            f"of the last {g['turns_per_group']} turns {g['last_turns_median_ms']} ms"
            for t, g in self.reused.items()
        ]
        if growth:
            out += ["Reused chat, first vs last turns — " + "; ".join(growth) + ".", ""]
        sse, ws = m.get("sse", {}), m.get("ws", {})
        chats = m.get("chats") or 0
        grown = (m["after_runs"] - m["idle_warm"]) * 1024 / chats if chats and "after_runs" in m else None
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
            f"| a new gateway | after warm-up | {fmt(ws.get('rss_before'))} | |",
            f"| | holding {ws.get('held')} idle WebSockets ({ws.get('failed')} failed to open) "
            f"| {fmt(ws.get('rss_held'))} | {fmt(ws.get('kib_per_socket'))} KiB / socket |",
            f"| | 1 s after they closed | {fmt(ws.get('rss_after_close'))} | |",
            f"| another new gateway | after warm-up | {fmt(sse.get('rss_before'))} | |",
            f"| | holding {sse.get('held')} open SSE streams, each run waiting on the model "
            f"({sse.get('failed')} failed to open) | {fmt(sse.get('rss_held'))} "
            f"| {fmt(sse.get('kib_per_stream'))} KiB / stream |",
            f"| | 1 s after they closed | {fmt(sse.get('rss_after_close'))} | |",
            "",
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
            c = self.cleanup.get(kind)
            if c:
                out.append(f"| {label} | {c['clients']} | {fmt(c['runs_before'], 0)} | {self._secs(c['seconds'])} |")
        out.append("")
        out += ["### ADK api_server side by side (ABAB, one client, prompt \"hi\" → 3 text deltas)", ""]
        if "rows" in self.adk:
            out += [
                load_table(self.adk["rows"]),
                "",
                f"ADK api_server: ready after {fmt(self.adk.get('ready_s'), 2)} s, RSS idle "
                f"{fmt(self.adk.get('rss_idle'))} MiB, after the runs {fmt(self.adk.get('rss_after'))} MiB. "
                "Its fresh-chat rows include the session-creation POST in TTFC and total "
                f"(median of that POST: {self._adk_setup()} ms).",
            ]
        else:
            out.append(f"Skipped: {self.adk.get('skipped', 'not requested')}.")
        return "\n".join(out)

    def _adk_setup(self) -> str:
        values = [r.summary["setup_ms"]["p50"] for r in self.adk.get("rows", [])
                  if r.transport == "adk" and r.summary["config"]["chat"] == "fresh" and "setup_ms" in r.summary]
        return " / ".join(fmt(v) for v in values) or "—"

    @staticmethod
    def _secs(value: float | None) -> str:
        return "not within the deadline" if value is None else f"{value * 1000:,.0f} ms"

    def as_json(self) -> dict[str, Any]:
        def row(r: Row) -> dict[str, Any]:
            return {"name": r.name, "transport": r.transport, "clients": r.clients, "note": r.note,
                    "server_cpu_ms_per_req": r.server_cpu_ms_per_req, "summary": r.summary}

        adk = {k: v for k, v in self.adk.items() if k != "rows"}
        if "rows" in self.adk:
            adk["rows"] = [row(r) for r in self.adk["rows"]]
        return {"gateway_ready_s": self.gateway.ready_s, "rows": [row(r) for r in self.rows],
                "memory": self.memory, "cleanup": self.cleanup, "reused_growth": self.reused, "adk": adk}


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


async def amain(args: argparse.Namespace) -> int:
    plan = Plan().scaled(0.1) if args.quick else Plan()
    with tempfile.TemporaryDirectory(prefix="adk-gateway-bench-") as tmp:
        bench = Bench(plan, Path(tmp), with_adk=not args.no_adk)
        started = time.perf_counter()
        load_before = loadavg()
        try:
            await bench.run()
        except Exception:
            log(bench.gateway.tail())
            raise
        elapsed = time.perf_counter() - started
        report = [
            f"Run {time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}.",
            f"Gateway ready after {fmt(bench.gateway.ready_s, 2)} s; the whole benchmark took {elapsed:.0f} s"
            + (" (--quick: a tenth of the requests)." if args.quick else ".")
            + f" Load average (1 min) before: {load_before}, after: {loadavg()}; the client shares the cores.",
            "",
            bench.markdown(),
        ]
        print("\n".join(report))
        if args.json is not None:
            args.json.write_text(json.dumps(bench.as_json(), indent=1) + "\n", encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="A tenth of the requests (a smoke run).")
    parser.add_argument("--no-adk", action="store_true", help="Skip the ADK api_server comparison.")
    parser.add_argument("--json", type=Path, default=None, help="Also write every figure as JSON to this file.")
    args = parser.parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())

