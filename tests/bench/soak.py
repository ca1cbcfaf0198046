"""`make soak`: one gateway process holds thousands of SSE streams and idle WebSockets for a bounded time.

    python -m tests.bench.soak [--sse 2000] [--ws 5000] [--hold-s 300] [--json soak.json]
    SOAK_S=30 make soak          # the hold in seconds (default 300); --hold-s wins over SOAK_S

What it does, in order:

1. Starts `python -m adk_gateway` on a free 127.0.0.1 port (scripted model, `--auth none`, JSON logs in a
   temporary folder), with the caps this load needs raised (`--max-runs`), realistic per-user caps
   (every simulated client is its own user: its own `x-user-id`), and the slow-reader settings
   `--max-pending-bytes 32768 --slow-reader-grace-s 2`. This process raises its open-files limit to the
   hard limit before it starts the gateway, which inherits it.
2. Warms the gateway up (a few short answers over SSE and the WebSocket) and takes the baseline RSS.
3. Ramps up: `--ramp-batch` connections (200) every `--ramp-interval-s` (0.3 s), SSE streams and
   WebSockets interleaved in proportion. Each SSE client is a user whose chat answers
   `/stream N 1000` (one token a second); when an answer ends the client asks again
   (`regenerate-message`, same chat), so the stream count stays constant while runs start and end.
   The first answer of each client has a random length in 1..N so that answers end evenly spread in
   time. Each WebSocket is opened and kept idle, with a reader so that it answers the gateway's pings.
4. Holds for the hold time, sampling the gateway's RSS (VmRSS in /proc/PID/status), CPU and open
   files every `--sample-s`. Meanwhile:
   - random disconnects: every second a share (`--drop-rate`) of the SSE clients and of the sockets
     drop their connection and reconnect at once (SSE: the same chat, `regenerate-message`);
   - slow readers: `--slow` SSE clients and `--slow` WebSockets (raw sockets with a 4 KiB receive
     buffer and a 1460-byte MSS, see SLOW_MSS) ask for a 512 KiB answer, read its first chunk,
     stop reading for `--slow-reader-grace-s + --slow-pause-s`, then drain what is left. The gateway should have cut
     them by then: the stream or socket ends before the answer does (SSE: with an `error` chunk when
     it could still be written; WebSocket: close 4008, or an aborted connection when the close
     frame could not be flushed past the unread bytes);
   - a reconnect storm: `--storm` (500) sockets closed at once, then all reopened at once, halfway
     through the warm-up (or through the hold, when that is shorter). RSS never shrinks after a
     peak, so the storm's one-off step belongs in the warm-up, not in the slope (it still counts for
     the peak).
5. Closes every client, waits (bounded) until the gateway reports no active run, then stops it with
   SIGTERM, and prints the report.

This driver times on its own event loop, so its own collector pauses would count against the
gateway: it runs the ramp with its collector off, then freezes the clients it built out of the
collector's generations, and it reports every pause of its collector of 20 ms or more by phase
(`CollectorWatch`).

Everything is bounded: the ramp, each open (`--open-timeout-s`), each read (a stream silent for
`STALL_S` counts as stalled), the slow readers, the storm and the teardown have deadlines, and
every loop runs for a fixed count or until the hold ends. Traffic goes to 127.0.0.1 only.

Bounds (exit status 1 when one is broken; each is printed with its measured value):

- **held**: every connection of the target (`--sse` streams, `--ws` sockets) is open at the end of
  the ramp and at the end of the hold, and no open fails (a refused or timed-out open, the storm's
  and the random reconnects' included).
- **unexpected disconnects: 0**. A disconnect is expected when this script closed the connection
  (random drop, storm, teardown) or the client is a slow reader. An SSE answer that ends with
  `finish` and `[DONE]` is a normal end, not a disconnect. Anything else counts: a stream that ends
  early or with an `error` chunk, a stream silent for `STALL_S`, a socket the gateway closes.
- **memory**: the gateway's peak RSS over ramp and hold <= baseline + 64 KiB x connections (the
  target count, slow readers included). Reference R1: bare aiohttp costs 12.5 KiB per SSE stream and
  17 KiB per idle WebSocket on this machine.
- **time to first chunk**: p99 over the SSE streams opened during the ramp <= 1 s (time from
  sending the POST to the first UI message chunk, `start`).
- **RSS slope**: least-squares slope of the RSS samples of the hold after the warm-up (the first
  `--warmup-s` seconds of the hold, default 150) <= 2,048 KiB/min. At full load that is about
  0.5 KiB per answer or 16 B per streamed token: a leak per request, per token or per reconnect
  shows up well above it, a steady state stays well below. The bound is only judged over at least
  60 s of samples (a hold of 3.5 minutes or more with the default warm-up). The warm-up is as long
  as RSS takes to level off after the ramp: until the gateway's collector has freed the reference
  cycles that the first answers, drops and the storm leave behind, which a middle collection does
  about two minutes after the ramp (measured: RSS flat from 146 s to the end of a 5-minute hold,
  after rising until then; docs/perf/benchmark-history.md, "The soak's slope window"). Over a
  window that starts earlier the slope measures that filling, not a leak. With a shorter hold the
  slope is printed and the bound is marked SKIP.
- **expected cuts**: every slow reader is cut by the gateway with the documented reason before its
  drain ends.

The script also prints what explains a broken bound: tokens delivered per second against the
tokens the scripted model schedules, the gap between a stream's tokens (p50/p99/max), the
gateway's CPU use, its error log lines and its own counters (`/metrics`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp

from adk_gateway.loadtest import SSEParser, check_target, percentiles
from tests.gateway_process import free_port, gateway_python

__all__ = ["Bounds", "Plan", "main", "rss_slope_kib_per_min"]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_S = 60.0
STALL_S = 45.0  # three times the gateway's 15 s SSE keep-alive comment: a silent stream is stuck
TEARDOWN_DEADLINE_S = 20.0
SLOW_DRAIN_S = 5.0
SLOW_WORDS = 32  # the slow readers' answer: 32 words of 16 KiB, 512 KiB in 32 chunks
SLOW_WORD_BYTES = 16 * 1024
# A slow reader's socket: a 4 KiB receive buffer and an Ethernet-sized MSS. Loopback's 64 KiB MSS
# makes the kernel size the gateway's send buffer at about 4 MiB at once (measured: 2.8 MiB taken
# by a peer that never reads); with MSS 1460 it takes about 115 KiB, as over a real network, and
# the rest of the backlog stays with the gateway, where --max-pending-bytes applies.
SLOW_RCVBUF = 4096
SLOW_MSS = 1460
SSE_PATH = "/api/chat"
WS_PATH = "/api/chat/ws"
KIB = 1024
MIB = 1024 * 1024
# The hold's first seconds, left out of the RSS slope: RSS rises until the gateway's collector frees
# the cycles of the first answers after the ramp, about two minutes in (see the docstring's bounds).
DEFAULT_WARMUP_S = 150.0
DRIVER_GC_PAUSE_MS = 20  # this driver's collector pauses from this long on are reported


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Bounds:
    """The documented bounds (see the module docstring)."""

    kib_per_connection: float = 64.0
    ttfc_p99_s: float = 1.0
    slope_kib_per_min: float = 2048.0
    slope_min_window_s: float = 60.0
    unexpected_disconnects: int = 0


@dataclass
class Plan:
    sse: int = 2000
    ws: int = 5000
    hold_s: float = 300.0
    answer_tokens: int = 30
    token_ms: int = 1000
    ramp_batch: int = 200
    ramp_interval_s: float = 0.3
    drop_rate: float = 0.001
    slow: int = 3
    storm: int = 500
    sample_s: float = 1.0
    warmup_s: float | None = None
    open_timeout_s: float = 30.0
    max_pending_bytes: int = 32 * 1024
    slow_reader_grace_s: float = 2.0
    slow_pause_s: float = 10.0
    seed: int = 8

    @property
    def warmup(self) -> float:
        return self.warmup_s if self.warmup_s is not None else DEFAULT_WARMUP_S

    @property
    def connections(self) -> int:
        return self.sse + self.ws + 2 * self.slow

    def gateway_args(self) -> list[str]:
        # Every client is its own user and holds one stream or socket; 4 leaves room for a reconnect
        # that overlaps the teardown of the connection it replaces. The process-wide run cap must fit
        # every stream plus the slow readers plus the answers being restarted.
        max_runs = self.sse + 2 * self.slow + max(50, self.sse // 10)
        return [
            "--auth", "none", "--model", "scripted",
            "--max-runs", str(max_runs), "--max-runs-per-user", "4", "--max-sockets-per-user", "4",
            "--max-pending-bytes", str(self.max_pending_bytes),
            "--slow-reader-grace-s", str(self.slow_reader_grace_s),
        ]


# --- the gateway process -------------------------------------------------------------------


def raise_open_files_limit() -> tuple[int, int]:
    """Raises this process's soft RLIMIT_NOFILE to its hard limit; returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)




class Gateway:
    """`python -m adk_gateway` as a child process, with its RSS, CPU time and open files from /proc."""

    def __init__(self, args: Sequence[str], workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "gateway.log"
        self.args = ["--host", "127.0.0.1", "--port", str(self.port), *args]
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        env = {**os.environ, "ADK_GATEWAY_LOG_FORMAT": "json"}
        env.pop("GOOGLE_API_KEY", None)  # the offline scripted model
        with self.log_path.open("wb") as out:
            # The child inherits this process's raised open-files limit (reported from /proc/PID/limits).
            raise_open_files_limit()
            self.proc = subprocess.Popen(
                [gateway_python(), "-m", "adk_gateway", *self.args], cwd=ROOT, env=env, stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the gateway exited with {self.proc.returncode}:\n{self.tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(self.url + "/healthz", timeout=aiohttp.ClientTimeout(total=1)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not answer /healthz within {STARTUP_DEADLINE_S:.0f} s")
                await asyncio.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def rss_kib(self) -> int:
        match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{self.pid}/status").read_text(), re.M)
        return int(match.group(1)) if match else 0

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid)

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def open_files_limit(self) -> int:
        match = re.search(r"^Max open files\s+(\d+)", Path(f"/proc/{self.pid}/limits").read_text(), re.M)
        return int(match.group(1)) if match else 0

    def stop(self, timeout_s: float = 30.0) -> tuple[int | None, float]:
        """SIGTERM, then a bounded wait (then SIGKILL); returns the exit code and the seconds it took."""
        if self.proc is None:
            return None, 0.0
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode, time.monotonic() - started

    def error_lines(self) -> list[str]:
        """One entry per logged error: the event of a JSON line at level error or above, or a plain-text
        error (aiohttp's own logger) as its message, its exception and the innermost frame of this
        repository's code in its traceback."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        found: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = None
            if isinstance(entry, dict):
                if str(entry.get("level", "")).lower() in ("error", "critical", "exception") or "exception" in entry:
                    found.append(str(entry.get("event", line))[:300])
                continue
            if " ERROR " not in line and not line.startswith("Traceback"):
                continue
            message, frame, exception = line.strip()[:200], "", ""
            if i < len(lines) and lines[i].startswith("Traceback"):
                i += 1
            while i < len(lines) and lines[i].startswith(" "):
                match = re.search(r'File "' + re.escape(str(ROOT)) + r'/([^"]+)", line (\d+)', lines[i])
                if match and not match.group(1).startswith(".venv"):
                    frame = f"{match.group(1)}:{match.group(2)}"
                i += 1
            if i < len(lines) and not lines[i].startswith("{"):
                exception = lines[i].strip()[:200]
                i += 1
            found.append(f"{message}: {exception} (innermost own frame: {frame or '-'})")
        return found


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped because a listen queue was full (TcpExt
    ListenOverflows, whole machine): a server whose event loop stalls stops accepting, its backlog
    fills, and new connections wait for SYN retransmits or are reset."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        rows = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines()]
        names, values = (row for row in rows if row[0] == "TcpExt:")
        return int(values[names.index("ListenOverflows")])
    return None


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def scrape_metrics(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The gateway's /metrics as {'name{labels}': value}, without comments."""
    async with http.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
        text = await response.text()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            values[name] = float(value)
    return values


# --- results -------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw; every list of times is in seconds."""

    ramp_ttfc: list[float] = field(default_factory=list)
    hold_ttfc: list[float] = field(default_factory=list)
    ws_open_ramp: list[float] = field(default_factory=list)
    ws_open_hold: list[float] = field(default_factory=list)
    token_gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    answers_finished: int = 0
    failed_opens: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    unexpected_examples: dict[str, str] = field(default_factory=dict)
    drops: Counter[str] = field(default_factory=Counter)

    def fail_open(self, kind: str, detail: str) -> None:
        self.failed_opens[kind] += 1
        self.unexpected_examples.setdefault(f"open:{kind}", detail[:200])

    def disconnect(self, kind: str, detail: str) -> None:
        self.unexpected[kind] += 1
        self.unexpected_examples.setdefault(kind, detail[:200])


def _classify(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return f"ws_handshake_{exc.status}"
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return "connect"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError | ConnectionResetError):
        return "disconnected"
    return type(exc).__name__


# --- SSE clients ---------------------------------------------------------------------------


class SSEClient:
    """One user with one chat whose answers stream one token a second, asked again as each one ends."""

    def __init__(self, number: int, soak: Soak) -> None:
        self.number = number
        self.soak = soak
        self.user = f"soak-sse-{number}"
        self.chat_id = f"soak-chat-{number}"
        self.response: aiohttp.ClientResponse | None = None
        self.connected = False  # a response is open and being read
        self.holding = False  # connected, or between one answer's normal end and the next request
        self.dropping = False  # set when this script closes the stream on purpose
        self.first_done = asyncio.Event()

    def drop(self) -> bool:
        """Closes the current stream (a random disconnect); the client reconnects at once."""
        if not self.connected or self.response is None or self.dropping:
            return False
        self.dropping = True
        self.holding = False
        self.response.close()
        return True

    def close(self) -> None:
        if self.response is not None:
            self.response.close()

    async def run(self) -> None:
        soak, plan = self.soak, self.soak.plan
        first_tokens = soak.rng.randint(1, plan.answer_tokens)
        trigger, tokens, in_ramp = "submit-message", first_tokens, True
        while not soak.stopping:
            body = {
                "id": self.chat_id,
                "messages": [{"id": f"u-{self.number}", "role": "user",
                              "parts": [{"type": "text", "text": f"/stream {tokens} {plan.token_ms}"}]}],
                "trigger": trigger,
            }
            ok = await self._answer(body, in_ramp)
            in_ramp = False
            trigger, tokens = "regenerate-message", plan.answer_tokens
            if not ok and not soak.stopping:
                await soak.pause(1.0)  # after a failure, a short back-off before asking again

    async def _answer(self, body: dict[str, Any], in_ramp: bool) -> bool:
        """One answer: True when it ended normally or by this script's own doing."""
        ok = False
        try:
            ok = await self._stream(body, in_ramp)
            return ok
        finally:
            self.holding = ok and not (self.dropping or self.soak.stopping)
            self.first_done.set()  # the ramp waits for each client's first open, however it went

    async def _stream(self, body: dict[str, Any], in_ramp: bool) -> bool:
        soak, tally = self.soak, self.soak.tally
        headers = {"x-user-id": self.user}
        started = time.perf_counter()
        self.dropping = False
        try:
            async with asyncio.timeout(soak.plan.open_timeout_s):
                self.response = await soak.http.post(soak.gateway.url + SSE_PATH, json=body, headers=headers)
        except Exception as exc:
            if soak.stopping:
                return True
            tally.fail_open(f"sse_{_classify(exc)}", repr(exc))
            return False
        response = self.response
        if response.status != 200:
            text = (await response.read())[:200].decode("utf-8", "replace")
            response.release()
            if soak.stopping:
                return True
            tally.fail_open(f"sse_http_{response.status}", text)
            return False
        parser = SSEParser()
        first = True
        last_token: float | None = None
        finished = done = False
        error: str | None = None
        self.connected = self.holding = True
        try:
            while True:
                async with asyncio.timeout(STALL_S):
                    data = await response.content.readany()
                if not data:
                    break
                now = time.perf_counter()
                for event in parser.feed(data):
                    if event == "[DONE]":
                        done = True
                        continue
                    if first:
                        first = False
                        (tally.ramp_ttfc if in_ramp else tally.hold_ttfc).append(now - started)
                        self.first_done.set()
                    chunk = json.loads(event)
                    kind = chunk.get("type")
                    if kind == "text-delta":
                        tally.tokens += 1
                        if last_token is not None:
                            tally.token_gaps.append(now - last_token)
                        last_token = now
                    elif kind == "finish":
                        finished = chunk.get("finishReason") == "stop"
                    elif kind == "error":
                        error = str(chunk.get("errorText", ""))
        except TimeoutError:
            if not (self.dropping or soak.stopping):
                tally.disconnect("sse_stalled", f"no byte for {STALL_S:.0f} s")
                response.close()
                return False
        except Exception as exc:
            if not (self.dropping or soak.stopping):
                tally.disconnect(f"sse_{_classify(exc)}", repr(exc))
                return False
        finally:
            self.connected = False
            response.release()
        if self.dropping or soak.stopping:
            return True
        if error is not None:
            tally.disconnect("sse_error_chunk", error)
            return False
        if not (finished and done):
            tally.disconnect("sse_ended_early", f"finish={finished} [DONE]={done}")
            return False
        tally.answers_finished += 1
        return True


# --- WebSocket clients ---------------------------------------------------------------------


class WSClient:
    """One user with one idle socket; a reader keeps it answering the gateway's pings."""

    def __init__(self, number: int, soak: Soak) -> None:
        self.number = number
        self.soak = soak
        self.user = f"soak-ws-{number}"
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.dropping = False
        self.reopen = asyncio.Event()  # set by the storm to reopen a socket it closed
        self.first_done = asyncio.Event()
        self.closed_by_script = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self.ws is not None and not self.ws.closed

    async def drop(self, reopen_now: bool = True) -> bool:
        """Closes the socket; it reopens at once, or when `reopen` is set (the storm)."""
        ws = self.ws
        if ws is None or ws.closed or self.dropping:
            return False
        self.dropping = True
        if reopen_now:
            self.reopen.set()
        else:
            self.reopen.clear()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await ws.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await self.closed_by_script.wait()
        return True

    async def run(self) -> None:
        soak, tally = self.soak, self.soak.tally
        in_ramp = True
        url = soak.gateway.url.replace("http://", "ws://", 1) + WS_PATH
        while not soak.stopping:
            started = time.perf_counter()
            try:
                async with asyncio.timeout(soak.plan.open_timeout_s):
                    self.ws = await soak.http.ws_connect(url, headers={"x-user-id": self.user}, autoping=True,
                                                         heartbeat=None, max_msg_size=0)
            except Exception as exc:
                if in_ramp:
                    self.first_done.set()
                in_ramp = False
                if soak.stopping:
                    return
                tally.fail_open(f"ws_{_classify(exc)}", repr(exc))
                await soak.pause(1.0)
                continue
            (tally.ws_open_ramp if in_ramp else tally.ws_open_hold).append(time.perf_counter() - started)
            if in_ramp:
                self.first_done.set()
            in_ramp = False
            self.dropping = False
            self.closed_by_script.clear()
            with contextlib.suppress(Exception):
                async for _ in self.ws:  # idle: the gateway sends nothing but pings (answered by aiohttp)
                    pass
            code = self.ws.close_code
            if not (self.dropping or soak.stopping):
                tally.disconnect(f"ws_closed_{code}", f"the gateway closed the socket with {code}")
                await soak.pause(1.0)
                continue
            self.closed_by_script.set()
            if soak.stopping:
                return
            await soak.wait_or_stop(self.reopen)


# --- slow readers (raw sockets, small receive buffer) ---------------------------------------


@dataclass
class SlowResult:
    transport: str
    outcome: str = "not_started"  # cut | not_cut | closed_otherwise | failed
    detail: str = ""
    received_bytes: int = 0
    seconds_to_end: float | None = None  # from the end of the pause to the end the client saw


def slow_prompt() -> str:
    return "/echo " + " ".join("x" * SLOW_WORD_BYTES for _ in range(SLOW_WORDS))


async def _raw_connection(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connect: it decides the window the client offers.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, SLOW_MSS)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    # A small limit too: asyncio's reader stops taking bytes from the socket past twice the limit,
    # so a client that does not read really leaves the backlog with the gateway.
    return await asyncio.open_connection(sock=sock, limit=16 * KIB)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    return status, head


class ChunkedDecoder:
    """Incremental HTTP/1.1 chunked transfer decoding."""

    def __init__(self) -> None:
        self.buffer = b""
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        self.buffer += data
        out = bytearray()
        while not self.finished:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buffer[:line_end].split(b";")[0] or b"0", 16)
            if size == 0:
                self.finished = True
                break
            if len(self.buffer) < line_end + 2 + size + 2:
                break
            out += self.buffer[line_end + 2 : line_end + 2 + size]
            self.buffer = self.buffer[line_end + 2 + size + 2 :]
        return bytes(out)


async def slow_sse_reader(soak: Soak, number: int) -> SlowResult:
    """POSTs for a big answer, reads its first chunk, stops reading, then drains what is left."""
    result = SlowResult("sse")
    plan = soak.plan
    body = json.dumps({
        "id": f"soak-slow-sse-{number}",
        "messages": [{"id": "u-slow", "role": "user", "parts": [{"type": "text", "text": slow_prompt()}]}],
        "trigger": "submit-message",
    }).encode()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(plan.open_timeout_s):
            reader, writer = await _raw_connection(soak.gateway.port)
            writer.write(
                (f"POST {SSE_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{soak.gateway.port}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 f"x-user-id: soak-slow-sse-{number}\r\nConnection: close\r\n\r\n").encode() + body
            )
            await writer.drain()
            status, head = await _read_head(reader)
            if status != 200:
                result.outcome, result.detail = "failed", head.splitlines()[0]
                return result
            decoder, parser = ChunkedDecoder(), SSEParser()
            events: list[str] = []
            while not events:
                data = await reader.read(4096)
                if not data:
                    result.outcome, result.detail = "failed", "the stream ended before its first chunk"
                    return result
                result.received_bytes += len(data)
                events.extend(parser.feed(decoder.feed(data)))
        await soak.pause(plan.slow_reader_grace_s + plan.slow_pause_s)  # not reading
        drained = time.perf_counter()
        finished = done = False
        error: str | None = None
        try:
            async with asyncio.timeout(SLOW_DRAIN_S):
                while True:
                    data = await reader.read(64 * KIB)
                    if not data:
                        break
                    result.received_bytes += len(data)
                    for event in parser.feed(decoder.feed(data)):
                        if event == "[DONE]":
                            done = True
                            continue
                        with contextlib.suppress(json.JSONDecodeError):
                            chunk = json.loads(event)
                            if chunk.get("type") == "finish":
                                finished = chunk.get("finishReason") == "stop"
                            elif chunk.get("type") == "error":
                                error = str(chunk.get("errorText", ""))
            result.seconds_to_end = time.perf_counter() - drained
        except TimeoutError:
            result.outcome, result.detail = "not_cut", f"still streaming {SLOW_DRAIN_S:.0f} s into the drain"
            return result
        except (ConnectionResetError, BrokenPipeError) as exc:
            result.seconds_to_end = time.perf_counter() - drained
            result.outcome, result.detail = "cut", f"connection reset ({type(exc).__name__})"
            return result
        if error is not None or not finished:
            result.outcome = "cut"
            result.detail = f"ended without finish; error chunk: {error!r}; [DONE]: {done}"
        else:
            result.outcome, result.detail = "not_cut", "the whole answer was delivered after the pause"
        return result
    except Exception as exc:
        result.outcome, result.detail = "failed", repr(exc)[:200]
        return result
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A masked client frame."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


async def _read_ws_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    if second & 0x80:
        await reader.readexactly(4)  # a server never masks; tolerate it anyway
    return first & 0x0F, await reader.readexactly(size)


async def slow_ws_reader(soak: Soak, number: int) -> SlowResult:
    """Opens a socket, sends one big `send`, reads its first frame, stops reading, then drains."""
    result = SlowResult("ws")
    plan = soak.plan
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(plan.open_timeout_s):
            reader, writer = await _raw_connection(soak.gateway.port)
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write(
                (f"GET {WS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{soak.gateway.port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                 f"x-user-id: soak-slow-ws-{number}\r\n\r\n").encode()
            )
            await writer.drain()
            status, head = await _read_head(reader)
            if status != 101:
                result.outcome, result.detail = "failed", head.splitlines()[0]
                return result
            frame = {
                "type": "send", "requestId": f"slow-{number}", "id": f"soak-slow-ws-{number}",
                "trigger": "submit-message", "headers": {}, "body": {},
                "messages": [{"id": "u-slow", "role": "user", "parts": [{"type": "text", "text": slow_prompt()}]}],
            }
            writer.write(_ws_frame(json.dumps(frame, separators=(",", ":")).encode()))
            await writer.drain()
            opcode, payload = await _read_ws_frame(reader)
            result.received_bytes += len(payload)
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                result.outcome, result.detail = "failed", f"closed with {code} before the answer started"
                return result
        await soak.pause(plan.slow_reader_grace_s + plan.slow_pause_s)  # not reading
        drained = time.perf_counter()
        ended = False
        try:
            async with asyncio.timeout(SLOW_DRAIN_S):
                while True:
                    opcode, payload = await _read_ws_frame(reader)
                    result.received_bytes += len(payload)
                    if opcode == 0x8:
                        code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                        reason = payload[2:].decode("utf-8", "replace")
                        result.seconds_to_end = time.perf_counter() - drained
                        result.outcome = "cut" if code == 4008 else "closed_otherwise"
                        result.detail = f"close {code} {reason!r}"
                        return result
                    if opcode == 0x1:
                        message = json.loads(payload)
                        if message.get("type") == "end":
                            ended = True
                        elif message.get("type") == "error" and not result.detail:
                            result.detail = f"error frame {message.get('code')}: {message.get('errorText')}"
        except TimeoutError:
            result.outcome = "not_cut"
            result.detail = "the answer ended and the socket stayed open" if ended else (
                f"still streaming {SLOW_DRAIN_S:.0f} s into the drain")
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            # The 4008 close frame queues behind the bytes the client never read; the gateway aborts the
            # socket when it cannot flush them, so a client that reads late sees the connection end.
            result.seconds_to_end = time.perf_counter() - drained
            if ended:
                result.outcome = "closed_otherwise"
                result.detail = f"the answer ended, then the connection ended without a close frame ({exc!r})"
            else:
                result.outcome = "cut"
                result.detail = f"the connection ended before the answer, without a close frame ({type(exc).__name__})"
        return result
    except Exception as exc:
        result.outcome, result.detail = "failed", repr(exc)[:200]
        return result
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


# --- the soak ------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float  # seconds since the ramp began
    phase: str
    rss_kib: int
    gateway_cpu_s: float
    driver_cpu_s: float
    machine_busy_s: float
    open_files: int
    sse_held: int
    ws_held: int


def _deltas(before: int | None, ramp: int | None, hold: int | None) -> dict[str, int | None]:
    def delta(start: int | None, end: int | None) -> int | None:
        return None if start is None or end is None else end - start

    return {"ramp": delta(before, ramp), "hold": delta(ramp, hold)}


def _round_ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def rss_slope_kib_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, KiB) points, in KiB per minute; None with fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60


class CollectorWatch:
    """This driver's own garbage-collector pauses, by soak phase.

    The driver times what it measures on its own event loop: a pause of its collector delays every
    read in flight and lands in their times as if the gateway had been slow. Holding 7,000 clients,
    Python's default thresholds made it run a full collection each time its heap grew by a quarter:
    eight during the ramp, up to 0.28 s each (docs/perf/benchmark-history.md, "The soak's own
    pauses"). The ramp therefore runs with the collector off (`paused`), and the clients it built
    are then frozen out of the collector's generations; the pauses still taken (the hold's) are
    recorded and reported."""

    def __init__(self, soak: Soak, threshold_s: float = DRIVER_GC_PAUSE_MS / 1000) -> None:
        self.soak = soak
        self.threshold_s = threshold_s
        self.started = 0.0
        self.pauses: dict[str, list[float]] = {}

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self.started = now
        elif now - self.started >= self.threshold_s:
            self.pauses.setdefault(self.soak.phase, []).append(now - self.started)

    def start(self) -> None:
        gc.callbacks.append(self)

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The collector off while the clients connect; what they hold is then frozen (it lives
        until the soak ends, and the cyclic garbage of a few reconnects frozen with it is not worth
        a full collection's pause)."""
        gc.disable()
        try:
            yield
        finally:
            gc.freeze()
            gc.enable()

    def summary(self) -> dict[str, dict[str, float | int]]:
        return {phase: {"count": len(p), "total_ms": round(sum(p) * 1000, 1), "max_ms": round(max(p) * 1000, 1)}
                for phase, p in self.pauses.items()}


class Soak:
    def __init__(self, plan: Plan, gateway: Gateway, http: aiohttp.ClientSession) -> None:
        self.plan = plan
        self.gateway = gateway
        self.http = http
        self.rng = random.Random(plan.seed)
        self.tally = Tally()
        self.stopping = False
        self._stop = asyncio.Event()
        self.sse = [SSEClient(i, self) for i in range(plan.sse)]
        self.ws = [WSClient(i, self) for i in range(plan.ws)]
        self.samples: list[Sample] = []
        self.phase = "baseline"
        self.t0 = time.perf_counter()
        self.report: dict[str, Any] = {}
        self.slow: list[SlowResult] = []
        self.collector = CollectorWatch(self)

    async def pause(self, seconds: float) -> None:
        """Sleeps, but wakes up at once when the soak stops."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    async def wait_or_stop(self, event: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def held(self) -> tuple[int, int]:
        return sum(c.holding for c in self.sse), sum(c.connected for c in self.ws)

    def sample(self) -> Sample:
        sse, ws = self.held()
        sample = Sample(
            t=time.perf_counter() - self.t0, phase=self.phase, rss_kib=self.gateway.rss_kib(),
            gateway_cpu_s=self.gateway.cpu_s(), driver_cpu_s=process_cpu_s(os.getpid()),
            machine_busy_s=machine_busy_s(),
            open_files=self.gateway.open_files(), sse_held=sse, ws_held=ws,
        )
        self.samples.append(sample)
        return sample

    async def sampler(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.plan.sample_s)

    async def warm_up(self) -> None:
        url = self.gateway.url
        for i in range(10):
            body = {"id": f"soak-warm-{i}", "trigger": "submit-message",
                    "messages": [{"id": "u-warm", "role": "user", "parts": [{"type": "text", "text": "/stream 5 0"}]}]}
            async with self.http.post(url + SSE_PATH, json=body, headers={"x-user-id": "soak-warm"}) as response:
                await response.read()
        ws = await self.http.ws_connect(url.replace("http://", "ws://", 1) + WS_PATH,
                                        headers={"x-user-id": "soak-warm"})
        for i in range(5):
            frame = {"type": "send", "requestId": f"warm-{i}", "id": f"soak-warm-ws-{i}", "trigger": "submit-message",
                     "headers": {}, "body": {},
                     "messages": [{"id": "u-warm", "role": "user", "parts": [{"type": "text", "text": "/stream 5 0"}]}]}
            await ws.send_str(json.dumps(frame))
            async with asyncio.timeout(30):
                while True:
                    message = await ws.receive()
                    if message.type is not aiohttp.WSMsgType.TEXT or json.loads(message.data).get("type") in (
                            "end", "error"):
                        break
        await ws.close()

    async def ramp(self) -> list[asyncio.Task[None]]:
        """Starts every client in batches; returns their tasks once each has made its first open."""
        plan = self.plan
        total = plan.sse + plan.ws
        order: list[SSEClient | WSClient] = []
        si = wi = 0
        for n in range(total):  # interleave in proportion: after n clients, n * sse / total are SSE
            if si < plan.sse and (wi >= plan.ws or si * total <= n * plan.sse):
                order.append(self.sse[si])
                si += 1
            else:
                order.append(self.ws[wi])
                wi += 1
        tasks: list[asyncio.Task[None]] = []
        for start in range(0, total, plan.ramp_batch):
            for client in order[start : start + plan.ramp_batch]:
                tasks.append(asyncio.create_task(client.run()))
            if start + plan.ramp_batch < total:
                await asyncio.sleep(plan.ramp_interval_s)
        firsts = [c.first_done.wait() for c in order]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(plan.open_timeout_s + STALL_S):
                await asyncio.gather(*firsts)
        return tasks

    async def churn(self, until: float) -> None:
        """Random disconnects: each second, a share of the streams and sockets drop and reconnect."""
        plan = self.plan
        sse_due = ws_due = 0.0
        while time.perf_counter() < until - 1:
            await asyncio.sleep(1.0)
            sse_due += plan.sse * plan.drop_rate
            ws_due += plan.ws * plan.drop_rate
            for _ in range(int(sse_due)):
                client = self.rng.choice(self.sse)
                if client.drop():
                    self.tally.drops["sse"] += 1
            sse_due -= int(sse_due)
            picks = [self.rng.choice(self.ws) for _ in range(int(ws_due))]
            ws_due -= int(ws_due)
            results = await asyncio.gather(*(c.drop() for c in picks))
            self.tally.drops["ws"] += sum(results)

    async def storm(self, at: float) -> dict[str, Any]:
        """Closes `storm` sockets at once, then reopens them all at once."""
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        count = min(self.plan.storm, self.plan.ws)
        picks = self.rng.sample([c for c in self.ws if c.connected], k=min(count, sum(c.connected for c in self.ws)))
        started = time.perf_counter()
        closed = await asyncio.gather(*(c.drop(reopen_now=False) for c in picks))
        closed_s = time.perf_counter() - started
        victims = [c for c, ok in zip(picks, closed, strict=True) if ok]
        opens_before = len(self.tally.ws_open_hold)
        failed_before = sum(v for k, v in self.tally.failed_opens.items() if k.startswith("ws_"))
        started = time.perf_counter()
        for client in victims:
            client.reopen.set()
        deadline = started + self.plan.open_timeout_s + 5
        while time.perf_counter() < deadline and not all(c.connected for c in victims):
            await asyncio.sleep(0.05)
        reopened_s = time.perf_counter() - started
        return {
            "sockets": len(victims),
            "closed_s": round(closed_s, 3),
            "reopened": sum(c.connected for c in victims),
            "reopened_s": round(reopened_s, 3),
            "open_p99_ms": _round_ms(percentiles(self.tally.ws_open_hold[opens_before:])["p99"]),
            "failed": sum(v for k, v in self.tally.failed_opens.items() if k.startswith("ws_")) - failed_before,
        }

    async def slow_readers(self) -> list[SlowResult]:
        jobs = [slow_sse_reader(self, i) for i in range(self.plan.slow)]
        jobs += [slow_ws_reader(self, i) for i in range(self.plan.slow)]
        return list(await asyncio.gather(*jobs))

    async def run(self) -> dict[str, Any]:
        plan, tally = self.plan, self.tally
        load_before = os.getloadavg()
        overflows_before = listen_overflows()
        await self.warm_up()
        await asyncio.sleep(1.0)
        baseline = self.sample()
        sampler = asyncio.create_task(self.sampler())
        self.collector.start()
        try:
            log(f"soak: ramping up {plan.sse} SSE streams and {plan.ws} WebSockets")
            self.phase = "ramp"
            ramp_started = time.perf_counter()
            with self.collector.paused():
                tasks = await self.ramp()
            ramp_s = time.perf_counter() - ramp_started
            after_ramp = self.sample()
            overflows_ramp = listen_overflows()
            log(f"soak: ramp done in {ramp_s:.1f} s (SSE {after_ramp.sse_held}, WS {after_ramp.ws_held}); "
                f"holding {plan.hold_s:.0f} s")
            self.phase = "hold"
            hold_started = time.perf_counter()
            tokens_at_hold = tally.tokens
            hold_end = hold_started + plan.hold_s
            slow_task = asyncio.create_task(self.slow_readers()) if plan.slow else None
            storm_at = hold_started + min(plan.warmup, plan.hold_s) / 2
            storm_task = (asyncio.create_task(self.storm(storm_at))
                          if plan.storm and plan.ws else None)
            churn_task = asyncio.create_task(self.churn(hold_end))
            await asyncio.sleep(max(0.0, hold_end - time.perf_counter()))
            await churn_task
            storm = await storm_task if storm_task is not None else None
            self.slow = await slow_task if slow_task is not None else []
            # Let the last random reconnects land (bounded), then count what is held.
            settle = time.perf_counter() + plan.open_timeout_s
            while time.perf_counter() < settle and self.held() != (plan.sse, plan.ws):
                await asyncio.sleep(0.1)
            end_of_hold = self.sample()
            overflows_hold = listen_overflows()
            hold_s = time.perf_counter() - hold_started
            hold_tokens_per_s = (tally.tokens - tokens_at_hold) / hold_s
            self.phase = "teardown"
            metrics_before = await scrape_metrics(self.http, self.gateway.url)
            self.stopping = True
            self._stop.set()
            for client in self.sse:
                client.close()
            await asyncio.gather(*(c.drop(reopen_now=False) for c in self.ws if c.connected))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TEARDOWN_DEADLINE_S):
                    await asyncio.gather(*tasks, return_exceptions=True)
            for task in tasks:
                task.cancel()
            cleared_s = await self._wait_runs_cleared()
            after_close = self.sample()
        finally:
            self.collector.stop()
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        metrics_after = await scrape_metrics(self.http, self.gateway.url)
        return self._report(
            load_before=load_before, baseline=baseline, after_ramp=after_ramp, ramp_s=ramp_s,
            end_of_hold=end_of_hold, hold_started=hold_started - self.t0, hold_s=hold_s, storm=storm,
            metrics_before=metrics_before, metrics_after=metrics_after, cleared_s=cleared_s,
            after_close=after_close, hold_tokens_per_s=hold_tokens_per_s,
            listen_overflows=_deltas(overflows_before, overflows_ramp, overflows_hold),
        )

    async def _wait_runs_cleared(self) -> float | None:
        started = time.perf_counter()
        while time.perf_counter() - started < TEARDOWN_DEADLINE_S:
            metrics = await scrape_metrics(self.http, self.gateway.url)
            if metrics.get("adk_gateway_active_runs", 0.0) == 0.0:
                return time.perf_counter() - started
            await asyncio.sleep(0.05)
        return None

    def _report(self, *, load_before: tuple[float, float, float], baseline: Sample, after_ramp: Sample,
                ramp_s: float, end_of_hold: Sample, hold_started: float, hold_s: float, storm: dict[str, Any] | None,
                metrics_before: dict[str, float], metrics_after: dict[str, float], cleared_s: float | None,
                after_close: Sample, hold_tokens_per_s: float,
                listen_overflows: dict[str, int | None]) -> dict[str, Any]:
        plan, tally = self.plan, self.tally
        ramp_hold = [s for s in self.samples if s.phase in ("ramp", "hold")]
        hold = [s for s in self.samples if s.phase == "hold"]
        warm = [s for s in hold if s.t >= hold_started + plan.warmup]
        slope = rss_slope_kib_per_min([(s.t, s.rss_kib) for s in warm])
        whole_hold_slope = rss_slope_kib_per_min([(s.t, s.rss_kib) for s in hold])
        peak = max(ramp_hold, key=lambda s: s.rss_kib) if ramp_hold else after_ramp
        held_after_ramp = after_ramp.sse_held + after_ramp.ws_held
        per_conn = (after_ramp.rss_kib - baseline.rss_kib) / held_after_ramp if held_after_ramp else None
        cpu: dict[str, float] = {}
        if ramp_s > 0:
            cpu["gateway_pct_of_one_core_ramp"] = round((after_ramp.gateway_cpu_s - baseline.gateway_cpu_s)
                                                        / (after_ramp.t - baseline.t) * 100, 1)
        if len(hold) >= 2:
            span = hold[-1].t - hold[0].t
            cpu |= {
                "gateway_pct_of_one_core": round((hold[-1].gateway_cpu_s - hold[0].gateway_cpu_s) / span * 100, 1),
                "driver_pct_of_one_core": round((hold[-1].driver_cpu_s - hold[0].driver_cpu_s) / span * 100, 1),
                "machine_pct_of_all_cores": round((hold[-1].machine_busy_s - hold[0].machine_busy_s)
                                                  / span / (os.cpu_count() or 1) * 100, 1),
            }
            # What neither the gateway nor this driver used: other processes, and the kernel's share.
            cpu["others_pct_of_one_core"] = round(
                ((hold[-1].machine_busy_s - hold[0].machine_busy_s) - (hold[-1].gateway_cpu_s - hold[0].gateway_cpu_s)
                 - (hold[-1].driver_cpu_s - hold[0].driver_cpu_s)) / span * 100, 1)
        tokens_expected = plan.sse * 1000 / plan.token_ms if plan.token_ms else None
        step = max(1, len(ramp_hold) // 12)
        timeline = [(round(s.t), round(s.rss_kib / KIB)) for s in ramp_hold[::step]]
        slow_counts = Counter(r.outcome for r in self.slow)

        def ms(values: Sequence[float]) -> dict[str, float | None]:
            return {k: (None if v is None else round(v * 1000, 1)) for k, v in percentiles(values).items()}

        counters = {k: v for k, v in metrics_after.items()
                    if re.match(r"adk_gateway_(rejections|slow_readers_cut|timeouts|memory_evictions|ws_frames_refused|"
                                r"request_errors|runs_finished)_total", k)}
        report: dict[str, Any] = {
            "plan": asdict(plan) | {"warmup_s": plan.warmup, "connections": plan.connections},
            "gateway_args": plan.gateway_args(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "open_files_limit": {"driver": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                                 "gateway": self.gateway.open_files_limit()},
            "ramp_s": round(ramp_s, 2),
            "held": {
                "after_ramp": {"sse": after_ramp.sse_held, "ws": after_ramp.ws_held},
                "end_of_hold": {"sse": end_of_hold.sse_held, "ws": end_of_hold.ws_held},
                "min_during_hold": {"sse": min((s.sse_held for s in hold), default=0),
                                    "ws": min((s.ws_held for s in hold), default=0)},
            },
            "failed_opens": dict(tally.failed_opens),
            "unexpected_disconnects": dict(tally.unexpected),
            "unexpected_examples": tally.unexpected_examples,
            "memory": {
                "baseline_mib": round(baseline.rss_kib / KIB, 1),
                "after_ramp_mib": round(after_ramp.rss_kib / KIB, 1),
                "kib_per_connection": None if per_conn is None else round(per_conn, 1),
                "peak_mib": round(peak.rss_kib / KIB, 1),
                "peak_at_s": round(peak.t, 1),
                "end_of_hold_mib": round(end_of_hold.rss_kib / KIB, 1),
                "after_close_mib": round(after_close.rss_kib / KIB, 1),
                "limit_mib": round((baseline.rss_kib + Bounds.kib_per_connection * plan.connections) / KIB, 1),
                "timeline_s_mib": timeline,
            },
            "slope": {"kib_per_min": None if slope is None else round(slope, 1), "samples": len(warm),
                      "window_s": round(warm[-1].t - warm[0].t, 1) if warm else 0.0,
                      "from_s": round(hold_started + plan.warmup, 1), "to_s": round(warm[-1].t, 1) if warm else None,
                      "whole_hold_kib_per_min": None if whole_hold_slope is None else round(whole_hold_slope, 1)},
            "ttfc_ms": {"ramp": ms(tally.ramp_ttfc) | {"n": len(tally.ramp_ttfc)},
                        "hold": ms(tally.hold_ttfc) | {"n": len(tally.hold_ttfc)}},
            "ws_open_ms": {"ramp": ms(tally.ws_open_ramp) | {"n": len(tally.ws_open_ramp)},
                           "hold": ms(tally.ws_open_hold) | {"n": len(tally.ws_open_hold)}},
            "tokens": {
                "delivered": tally.tokens,
                "per_s_during_hold": round(hold_tokens_per_s, 1),
                "per_s_scheduled_when_all_held": tokens_expected,
                "gap_ms": ms(tally.token_gaps) | {"n": len(tally.token_gaps)},
                "answers_finished": tally.answers_finished,
            },
            "cpu": cpu,
            "driver_gc_pauses": self.collector.summary(),
            "open_files": {"gateway_baseline": baseline.open_files, "gateway_peak": max(s.open_files for s in ramp_hold)
                           if ramp_hold else None, "gateway_after_close": after_close.open_files},
            "listen_overflows": listen_overflows,
            "drops": dict(tally.drops),
            "storm": storm,
            "slow_readers": {"counts": dict(slow_counts), "results": [asdict(r) for r in self.slow]},
            "teardown": {"runs_cleared_s": None if cleared_s is None else round(cleared_s, 3),
                         "active_runs_before": metrics_before.get("adk_gateway_active_runs")},
            "gateway_counters": counters,
            "hold_s": round(hold_s, 1),
        }
        return report


# --- verdict and printing ------------------------------------------------------------------


def verdicts(report: dict[str, Any], bounds: Bounds = Bounds()) -> list[tuple[str, bool | None, str]]:
    """(bound, kept, measured) for each documented bound; kept is None when the run cannot judge it."""
    plan = report["plan"]
    held, mem = report["held"], report["memory"]
    unexpected = sum(report["unexpected_disconnects"].values())
    failed = sum(report["failed_opens"].values())
    ttfc_p99 = report["ttfc_ms"]["ramp"]["p99"]
    slope, window = report["slope"]["kib_per_min"], report["slope"]["window_s"]
    slope_kept = None if window < bounds.slope_min_window_s or slope is None else slope <= bounds.slope_kib_per_min
    slope_measured = (f"{slope} KiB/min over {window:.0f} s" if slope_kept is not None else
                      f"not judged: {window:.0f} s of samples after the {plan['warmup_s']:.0f} s warm-up, "
                      f"{bounds.slope_min_window_s:.0f} s needed (whole hold: "
                      f"{report['slope']['whole_hold_kib_per_min']} KiB/min)")
    slow = report["slow_readers"]["counts"]
    targets = {"sse": plan["sse"], "ws": plan["ws"]}
    held_ok = held["after_ramp"] == targets and held["end_of_hold"] == targets and failed == 0
    return [
        ("held: every connection open after the ramp and at the end, 0 failed opens", held_ok,
         f"after ramp SSE {held['after_ramp']['sse']}/{plan['sse']}, WS {held['after_ramp']['ws']}/{plan['ws']}; "
         f"end SSE {held['end_of_hold']['sse']}/{plan['sse']}, WS {held['end_of_hold']['ws']}/{plan['ws']}; "
         f"failed opens {failed}"),
        (f"unexpected disconnects <= {bounds.unexpected_disconnects}", unexpected <= bounds.unexpected_disconnects,
         str(unexpected)),
        (f"peak RSS <= baseline + {bounds.kib_per_connection:.0f} KiB x {plan['connections']} connections",
         mem["peak_mib"] <= mem["limit_mib"], f"peak {mem['peak_mib']} MiB, limit {mem['limit_mib']} MiB"),
        (f"p99 time to first chunk during the ramp <= {bounds.ttfc_p99_s * 1000:.0f} ms",
         plan["sse"] == 0 or (ttfc_p99 is not None and ttfc_p99 <= bounds.ttfc_p99_s * 1000), f"{ttfc_p99} ms"),
        (f"RSS slope after the warm-up <= {bounds.slope_kib_per_min:.0f} KiB/min", slope_kept, slope_measured),
        ("every slow reader cut by the gateway", slow.get("cut", 0) == 2 * plan["slow"],
         f"cut {slow.get('cut', 0)} of {2 * plan['slow']}"
         + "".join(f", {k} {v}" for k, v in sorted(slow.items()) if k != "cut")),
    ]


def _verdict(kept: bool | None) -> str:
    return "SKIP" if kept is None else "PASS" if kept else "FAIL"


def _fmt_pcts(stats: dict[str, Any], unit: str = "ms") -> str:
    return (f"p50 {stats.get('p50')} / p99 {stats.get('p99')} / max {stats.get('max')} {unit} "
            f"(n={stats.get('n', '-')})")


def render(report: dict[str, Any], checks: list[tuple[str, bool | None, str]]) -> str:
    plan, mem = report["plan"], report["memory"]
    held = report["held"]
    lines = [
        f"soak: {plan['sse']} SSE streams (/stream {plan['answer_tokens']} {plan['token_ms']}, asked again as each "
        f"answer ends) + {plan['ws']} idle WebSockets + {plan['slow']} + {plan['slow']} slow readers; "
        f"hold {report['hold_s']} s",
        f"machine: {os.cpu_count()} CPUs; load average before {report['load_average_before']}, "
        f"after {report['load_average_after']}; open-files limit driver {report['open_files_limit']['driver']}, "
        f"gateway {report['open_files_limit']['gateway']}",
        f"gateway: python -m adk_gateway {' '.join(report['gateway_args'])}",
        f"ramp: {report['ramp_s']} s ({plan['ramp_batch']} connections every {plan['ramp_interval_s']} s)",
        f"connections held: after the ramp SSE {held['after_ramp']['sse']}, WS {held['after_ramp']['ws']}; "
        f"lowest during the hold SSE {held['min_during_hold']['sse']}, WS {held['min_during_hold']['ws']}; "
        f"end of hold SSE {held['end_of_hold']['sse']}, WS {held['end_of_hold']['ws']}",
        f"unexpected disconnects: {sum(report['unexpected_disconnects'].values())} "
        f"{report['unexpected_disconnects'] or ''}; failed opens: {sum(report['failed_opens'].values())} "
        f"{report['failed_opens'] or ''}",
    ]
    if report["unexpected_examples"]:
        lines.append(f"  examples: {report['unexpected_examples']}")
    per_conn = mem["kib_per_connection"]
    lines += [
        f"memory: baseline {mem['baseline_mib']} MiB, after the ramp {mem['after_ramp_mib']} MiB = {per_conn} KiB per "
        f"connection; peak {mem['peak_mib']} MiB at {mem['peak_at_s']} s (limit {mem['limit_mib']} MiB); end of hold "
        f"{mem['end_of_hold_mib']} MiB; after the clients left {mem['after_close_mib']} MiB",
        f"RSS over time (s, MiB): {mem['timeline_s_mib']}",
        f"RSS slope after the {plan['warmup_s']:.0f} s warm-up: {report['slope']['kib_per_min']} KiB/min "
        f"({report['slope']['samples']} samples, {report['slope']['from_s']}..{report['slope']['to_s']} s); "
        f"over the whole hold: {report['slope']['whole_hold_kib_per_min']} KiB/min",
        f"time to first chunk, SSE, ramp: {_fmt_pcts(report['ttfc_ms']['ramp'])}",
        f"time to first chunk, SSE, hold (answers asked again, reconnects): {_fmt_pcts(report['ttfc_ms']['hold'])}",
        f"WebSocket open, ramp: {_fmt_pcts(report['ws_open_ms']['ramp'])}; "
        f"hold: {_fmt_pcts(report['ws_open_ms']['hold'])}",
        f"tokens: {report['tokens']['per_s_during_hold']}/s delivered during the hold (scheduled: "
        f"{report['tokens']['per_s_scheduled_when_all_held']}/s with every stream held); "
        f"gap between a stream's tokens {_fmt_pcts(report['tokens']['gap_ms'])}; "
        f"answers finished {report['tokens']['answers_finished']}",
        f"CPU: gateway {report['cpu'].get('gateway_pct_of_one_core_ramp')}% of one core during the ramp, "
        f"{report['cpu'].get('gateway_pct_of_one_core')}% during the hold; this driver "
        f"{report['cpu'].get('driver_pct_of_one_core')}% during the hold; machine "
        f"{report['cpu'].get('machine_pct_of_all_cores')}% of all cores busy, of which everything else (other "
        f"processes, kernel) {report['cpu'].get('others_pct_of_one_core')}% of one core",
        f"this driver's collector pauses of {DRIVER_GC_PAUSE_MS} ms or more (they delay what it times): "
        f"{report['driver_gc_pauses'] or 'none'}",
        f"gateway open files: {report['open_files']}; listen queue overflows (kernel, whole machine): "
        f"{report['listen_overflows']['ramp']} during the ramp (warm-up included), "
        f"{report['listen_overflows']['hold']} during the hold",
        f"random disconnects (dropped and reopened): {report['drops'] or 'none'}",
        f"reconnect storm: {report['storm']}",
        f"slow readers: {report['slow_readers']['counts'] or 'none'} (expected cuts: "
        f"{report['slow_readers']['counts'].get('cut', 0)})",
    ]
    lines += [f"  {r['transport']}: {r['outcome']} - {r['detail']} (received {r['received_bytes']} B"
              + ("" if r["seconds_to_end"] is None else f", ended {r['seconds_to_end']:.2f} s into the drain") + ")"
              for r in report["slow_readers"]["results"]]
    lines += [
        f"after the clients left: active runs before {report['teardown']['active_runs_before']}, zero after "
        f"{report['teardown']['runs_cleared_s']} s",
        f"gateway counters: {report['gateway_counters']}",
        f"gateway exit: {report.get('gateway_exit')}; error log lines: {report.get('error_log_lines')}",
        "bounds:",
    ]
    lines += [f"  {_verdict(kept)}  {name}: {measured}" for name, kept, measured in checks]
    lines.append(f"result: {'PASS' if all(kept is not False for _, kept, _ in checks) else 'FAIL'}")
    return "\n".join(lines)


# --- command line --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    default_hold = float(os.environ.get("SOAK_S") or 300)
    p = argparse.ArgumentParser(prog="python -m tests.bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--sse", type=int, default=2000, help="SSE streams to hold.")
    p.add_argument("--ws", type=int, default=5000, help="Idle WebSockets to hold.")
    p.add_argument("--hold-s", type=float, default=default_hold, help="Hold time in seconds (env SOAK_S; 300).")
    p.add_argument("--answer-tokens", type=int, default=30, help="Tokens per answer (N of /stream N 1000).")
    p.add_argument("--token-ms", type=int, default=1000, help="Milliseconds between tokens.")
    p.add_argument("--ramp-batch", type=int, default=200, help="Connections opened per ramp step.")
    p.add_argument("--ramp-interval-s", type=float, default=0.3, help="Seconds between ramp steps.")
    p.add_argument("--drop-rate", type=float, default=0.001, help="Share of streams and sockets dropped per second.")
    p.add_argument("--slow", type=int, default=3, help="Slow readers per transport.")
    p.add_argument("--storm", type=int, default=500, help="Sockets closed and reopened at once mid-hold.")
    p.add_argument("--sample-s", type=float, default=1.0, help="Seconds between RSS samples.")
    p.add_argument("--warmup-s", type=float, default=None,
                   help=f"Hold seconds left out of the RSS slope (default {DEFAULT_WARMUP_S:.0f}).")
    p.add_argument("--open-timeout-s", type=float, default=30.0, help="Limit for one open (and its first chunk).")
    p.add_argument("--max-pending-bytes", type=int, default=32 * 1024, help="Gateway --max-pending-bytes.")
    p.add_argument("--slow-reader-grace-s", type=float, default=2.0, help="Gateway --slow-reader-grace-s.")
    p.add_argument("--slow-pause-s", type=float, default=10.0,
                   help="How long a slow reader stops reading beyond the grace.")
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--json", type=Path, default=None, help="Also write the report as JSON here.")
    p.add_argument("--gateway-log", type=Path, default=None, help="Keep the gateway's log here.")
    return p


def plan_from_args(args: argparse.Namespace) -> Plan:
    plan = Plan(
        sse=args.sse, ws=args.ws, hold_s=args.hold_s, answer_tokens=args.answer_tokens, token_ms=args.token_ms,
        ramp_batch=args.ramp_batch, ramp_interval_s=args.ramp_interval_s, drop_rate=args.drop_rate,
        slow=args.slow, storm=args.storm, sample_s=args.sample_s, warmup_s=args.warmup_s,
        open_timeout_s=args.open_timeout_s, max_pending_bytes=args.max_pending_bytes,
        slow_reader_grace_s=args.slow_reader_grace_s, slow_pause_s=args.slow_pause_s, seed=args.seed,
    )
    if min(plan.sse, plan.ws, plan.slow, plan.storm) < 0 or plan.sse + plan.ws == 0:
        raise ValueError("--sse, --ws, --slow and --storm must be >= 0, and --sse + --ws > 0")
    if plan.hold_s <= 0 or plan.answer_tokens < 1 or plan.token_ms < 0 or plan.ramp_batch < 1:
        raise ValueError("--hold-s, --answer-tokens and --ramp-batch must be positive, --token-ms >= 0")
    if not 0 <= plan.drop_rate <= 0.5:
        raise ValueError("--drop-rate must be between 0 and 0.5")
    return plan


def check_capacity(plan: Plan) -> str | None:
    """Why this machine cannot run the plan (open files, local ports), or None."""
    soft, _hard = raise_open_files_limit()
    needed = plan.connections + plan.storm + 256
    if soft != resource.RLIM_INFINITY and soft < needed:
        return (f"the open-files limit is {soft} (hard limit included) but this plan needs about {needed} "
                f"(one per connection, on each side); raise `ulimit -Hn` or pass smaller --sse/--ws")
    with contextlib.suppress(OSError, ValueError):
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        if high - low + 1 < plan.connections + plan.storm + 1000:
            return (f"only {high - low + 1} local ports ({low}-{high}) for {plan.connections} connections plus "
                    f"reconnects; widen net.ipv4.ip_local_port_range or pass smaller --sse/--ws")
    return None


async def run_soak(plan: Plan, keep_log: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        gateway = Gateway(plan.gateway_args(), Path(tmp))
        check_target(gateway.url)
        await gateway.start()
        try:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
                report = await Soak(plan, gateway, http).run()
        except BaseException:
            log(f"soak: gateway log tail:\n{gateway.tail()}")
            raise
        finally:
            exit_code, exit_s = gateway.stop()
            if keep_log is not None:
                shutil.copyfile(gateway.log_path, keep_log)
        errors = gateway.error_lines()
        report["gateway_exit"] = {"code": exit_code, "seconds_after_sigterm": round(exit_s, 2)}
        report["error_log_lines"] = len(errors)
        report["error_log_examples"] = sorted(Counter(errors).items(), key=lambda kv: -kv[1])[:5]
        report["versions"] = {"python": platform.python_version(), "aiohttp": aiohttp.__version__,
                              "google-adk": _version("google-adk")}
        return report


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = plan_from_args(args)
    except ValueError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    problem = check_capacity(plan)
    if problem is not None:
        print(f"soak: cannot run: {problem}", file=sys.stderr)
        return 2
    report = asyncio.run(run_soak(plan, args.gateway_log))
    checks = verdicts(report)
    report["bounds"] = [{"bound": name, "kept": kept, "measured": measured} for name, kept, measured in checks]
    report["passed"] = all(kept is not False for _, kept, _ in checks)
    print(render(report, checks), flush=True)
    if report["error_log_examples"]:
        print(f"gateway error log lines (most frequent): {report['error_log_examples']}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
