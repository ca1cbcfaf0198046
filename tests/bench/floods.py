"""The `flood` part of `make bench` (tests.bench.run): what a chat that never waits costs the others.

The scripted model at `/stream N 0` answers N text deltas without ever waiting. The integration
tests (tests/integration/test_floods.py) count the turns the gateway gives its event loop during
such work; this module times, from outside a real gateway process, what a client sees:

1. `flood`: a `/stream 50000 0` chat read at full speed, over SSE (`POST /api/chat`) or the
   WebSocket (`GET /api/chat/ws`, one `send` frame). Beside it, a `GET /healthz` and a fresh chat's
   `/echo hi` turn are each sent every 100 ms (open loop: a probe goes out on time even while
   earlier ones wait) and timed from their send to their last byte. Also: the flood's duration,
   the deltas it received (whole: 50,000, then `[DONE]` or `end`, no `error`), and the process's
   peak RSS growth (VmHWM reset through /proc/PID/clear_refs after a warm-up turn, less VmRSS then).
2. `stopped_reader`: a client that reads the first line of a `/stream 100000 0` answer and then
   nothing: time from its last read to the gateway's `slow_reader_cut` log line (its timestamp),
   and the peak RSS growth meanwhile.
3. The flood of 1 over SSE on a gateway started with PYTHONASYNCIODEBUG=1, whose event loops log
   `Executing <handle> took N seconds` for every callback over SLOW_CALLBACK_S (the gateway has no
   setting for the threshold: `slow_callback_command` starts it through a launcher that sets it on
   every loop it creates); `slow_callbacks` counts those lines from the log.
4. `history_stalls`: with 50 `/stream 100000 100` streams running (each read), `/healthz` sent every
   10 ms; the longest answer in each kind of window: the 50 streams alone, a 10,000-message body
   with `regenerate-message` refused with 413 (`--max-history-messages 500`), a 500-message one
   imported and answered (each posted 3 times, alternating). A healthz answer's time there bounds
   the longest the loop was held, plus a round trip.

Every wait is capped: a probe at CAP_S (it then counts as CAP_S and is reported as capped), a flood
at FLOOD_DEADLINE_S, a cut at CUT_DEADLINE_S, so the part ends even on a gateway that holds its loop
for the whole flood. The clients share this process's loop: `LagMonitor` reports how late the
driver's own timers fired, which bounds how much of a probe's time is the driver's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from adk_gateway.loadtest import percentiles
from tests.integration.support import long_history

CAP_S = 30.0  # the longest a probe is waited for; a probe that takes longer counts as CAP_S
FLOOD_DELTAS = 50_000
FLOOD_PROMPT = f"/stream {FLOOD_DELTAS} 0"
FLOOD_DEADLINE_S = 300.0
STOPPED_PROMPT = "/stream 100000 0"
CUT_DEADLINE_S = 120.0
SLOW_READER_GRACE_S = 10.0  # the gateway's default, passed explicitly
DRAIN_DEADLINE_S = 30.0
ECHO_PROMPT = "/echo hi"
ECHO_TEXT = "hi"
PROBE_EVERY_S = 0.1
STALL_PROBE_EVERY_S = 0.01
SLOW_CALLBACK_S = 0.05
WARM_PROMPT = "/stream 500 0"
BACKGROUND_STREAMS = 50
BACKGROUND_PROMPT = "/stream 100000 100"
HISTORY_CAP = 500  # --max-history-messages of the long-history gateway
HUGE_HISTORY = 10_000
QUIET_S = 3.0  # the background streams alone, before the long histories
HISTORY_REPEATS = 3  # each long history posted this many times per round, alternating
TAIL_S = 0.5  # probes after an answer still count towards its window
KiB = 1024

Json = dict[str, Any]


class GatewayProcess(Protocol):
    """What the measurements need of a started gateway (tests.bench.run's `Server`)."""

    @property
    def url(self) -> str: ...

    @property
    def pid(self) -> int: ...

    @property
    def log_file(self) -> Path: ...


# --- pure helpers ----------------------------------------------------------------------------


@dataclass
class Probe:
    """One timed request: sent at `at` (perf_counter), answered after `seconds` (at most the cap)."""

    at: float
    seconds: float
    ok: bool
    capped: bool = False


def capped_seconds(started: float, ended: float, cap_s: float) -> tuple[float, bool]:
    """The time from `started` to `ended`, at most `cap_s`, and whether the cap applied."""
    elapsed = max(0.0, ended - started)
    return (cap_s, True) if elapsed >= cap_s else (elapsed, False)


def latency_summary(probes: Sequence[Probe], windows: Sequence[tuple[float, float]] | None = None) -> Json:
    """p50, p99 and max in ms of the probes sent within any of the windows [start, end] (all when
    None), with how many were sent, failed (no 200 or a wrong answer, capped ones included) and capped."""
    chosen = [p for p in probes if windows is None or any(start <= p.at <= end for start, end in windows)]
    stats = percentiles([p.seconds for p in chosen], (50, 99))
    summary: Json = {"n": len(chosen), "failed": sum(not p.ok for p in chosen), "capped": sum(p.capped for p in chosen)}
    for key in ("p50", "p99", "max"):
        value = stats[key]
        summary[key] = None if value is None else round(value * 1000, 1)
    return summary


@dataclass
class Tally:
    """What a client read of a streamed answer: text deltas, text, `error` chunks, the end."""

    deltas: int = 0
    text: list[str] = field(default_factory=list)
    errors: list[Json] = field(default_factory=list)
    done: bool = False
    keep_text: bool = False

    def chunk(self, chunk: Json) -> None:
        kind = chunk.get("type")
        if kind == "text-delta":
            self.deltas += 1
            if self.keep_text:
                self.text.append(str(chunk.get("delta", "")))
        elif kind == "error":
            self.errors.append(chunk)

    def sse_line(self, line: bytes) -> None:
        """One line of an SSE body (`data: <json>`, `data: [DONE]`, comments and blank lines)."""
        if not line.startswith(b"data: "):
            return
        data = line[6:].strip()
        if data == b"[DONE]":
            self.done = True
        else:
            self.chunk(json.loads(data))

    def frame(self, frame: Json) -> bool:
        """One WebSocket frame of the request; True once the request has ended (`end` or `error`)."""
        kind = frame.get("type")
        if kind == "chunk":
            self.chunk(frame.get("chunk", {}))
        elif kind == "end":
            self.done = True
            return True
        elif kind == "error":
            self.errors.append(frame)
            return True
        return False

    @property
    def whole(self) -> bool:
        return self.done and not self.errors

    def figures(self) -> Json:
        return {"deltas": self.deltas, "done": self.done, "errors": len(self.errors),
                "first_error": self.errors[0] if self.errors else None}


SLOW_CALLBACK = re.compile(r"Executing (.*?) took (\d+(?:\.\d+)?) seconds")


def slow_callbacks(lines: Iterable[str], threshold_s: float = SLOW_CALLBACK_S) -> Json:
    """asyncio's debug-mode lines `Executing <handle> took N seconds` (JSON log lines or plain):
    how many took over `threshold_s`, the longest (seconds) and what it was (the handle, shortened)."""
    durations: list[tuple[float, str]] = []
    for line in lines:
        match = SLOW_CALLBACK.search(line)
        if match and float(match.group(2)) > threshold_s:
            durations.append((float(match.group(2)), match.group(1)))
    longest = max(durations, default=None)
    return {"threshold_s": threshold_s, "count": len(durations),
            "longest_s": longest[0] if longest else None,
            "longest_what": shorten_handle(longest[1]) if longest else None,
            "total_s": round(sum(d for d, _ in durations), 3)}


def shorten_handle(text: str, width: int = 140) -> str:
    """A handle's repr without its addresses and source locations, at most `width` characters."""
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    text = re.sub(r" created at [^\s>]+", "", text)
    text = re.sub(r"/\S*/(\S+\.py:\d+)", r"\1", text)  # a source location: the file's name and line
    return text if len(text) <= width else text[: width - 1] + "…"


def log_time(line: str) -> float | None:
    """The Unix time of a JSON log line's `timestamp` (ISO 8601), or None."""
    try:
        stamp = json.loads(line).get("timestamp")
        return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    except (ValueError, AttributeError):
        return None


def user_message(text: str, message_id: str | None = None) -> Json:
    return {"id": message_id or f"u-{uuid.uuid4().hex[:12]}", "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_body(chat_id: str, messages: list[Json], trigger: str = "submit-message") -> Json:
    return {"id": chat_id, "messages": messages, "trigger": trigger}


def new_chat(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def slow_callback_command(
    python: str, threshold_s: float = SLOW_CALLBACK_S, module: str = "adk_gateway",
) -> list[str]:
    """`python -m adk_gateway`, but every event loop it creates logs callbacks over `threshold_s` (asyncio
    sets `slow_callback_duration` to 0.1 s in each loop's constructor; only with PYTHONASYNCIODEBUG=1
    or a loop in debug mode are they logged). The gateway's arguments follow."""
    code = (
        "import asyncio.base_events as base, runpy, sys\n"
        "_init = base.BaseEventLoop.__init__\n"
        "def _init_slow(self, *args, **kwargs):\n"
        "    _init(self, *args, **kwargs)\n"
        f"    self.slow_callback_duration = {float(threshold_s)!r}\n"
        "base.BaseEventLoop.__init__ = _init_slow\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return [python, "-c", code]


# --- /proc -----------------------------------------------------------------------------------


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def reset_peak(pid: int) -> int:
    """Resets the process's peak resident set (VmHWM) to its current one; returns VmRSS (KiB)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_kib(pid, "VmRSS")


def peak_growth_mib(pid: int, base_kib: int) -> float:
    return round((status_kib(pid, "VmHWM") - base_kib) / KiB, 1)


def log_lines_from(path: Path, offset: int) -> list[str]:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode("utf-8", "replace").splitlines()


# --- clients ---------------------------------------------------------------------------------


async def read_sse(response: aiohttp.ClientResponse, tally: Tally) -> Tally:
    async for line in response.content:
        tally.sse_line(line)
    return tally


async def sse_turn(http: aiohttp.ClientSession, url: str, text: str, chat_id: str | None = None,
                   keep_text: bool = False) -> tuple[int, Tally]:
    tally = Tally(keep_text=keep_text)
    async with http.post(f"{url}/api/chat", json=chat_body(chat_id or new_chat("bench"), [user_message(text)])) as r:
        if r.status == 200:
            await read_sse(r, tally)
        else:
            await r.read()
        return r.status, tally


async def ws_turn(http: aiohttp.ClientSession, url: str, text: str, chat_id: str | None = None) -> Tally:
    tally = Tally()
    ws_url = url.replace("http://", "ws://", 1) + "/api/chat/ws"
    async with http.ws_connect(ws_url, max_msg_size=0) as ws:
        await ws.send_str(json.dumps({
            "type": "send", "requestId": "r1", "id": chat_id or new_chat("bench-ws"), "trigger": "submit-message",
            "messages": [user_message(text, "m1")], "headers": {}, "body": {},
        }))
        while True:
            message = await ws.receive()
            if message.type is not aiohttp.WSMsgType.TEXT:
                tally.errors.append({"type": "socket", "message": str(message.type)})
                break
            if tally.frame(json.loads(message.data)):
                break
    return tally


class Prober:
    """Sends `probe()` every `every_s` (open loop: the next goes out on time whatever the earlier
    ones are doing), each timed and capped at `cap_s`. When this driver's own loop falls behind by
    more than a slot, the missed slots are skipped rather than sent at once."""

    def __init__(self, probe: Callable[[], Awaitable[bool]], every_s: float, cap_s: float = CAP_S) -> None:
        self.probe = probe
        self.every_s = every_s
        self.cap_s = cap_s
        self.probes: list[Probe] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def _one(self) -> None:
        started = time.perf_counter()
        ok, timed_out = False, False
        try:
            async with asyncio.timeout(self.cap_s):
                ok = await self.probe()
        except TimeoutError:
            timed_out = True
        except (aiohttp.ClientError, OSError, ValueError):
            ok = False
        seconds, capped = capped_seconds(started, time.perf_counter(), self.cap_s)
        if timed_out:
            seconds, capped = self.cap_s, True
        self.probes.append(Probe(started, seconds, ok and not capped, capped))

    async def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            task = asyncio.create_task(self._one())
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            next_at += self.every_s
            now = time.perf_counter()
            if next_at < now - self.every_s:
                next_at = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - now))

    def start(self) -> Prober:
        self._task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> list[Probe]:
        """Sends no more probes and waits for those in flight (each ends by its cap)."""
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        self.probes.sort(key=lambda p: p.at)
        return self.probes


class LagMonitor:
    """How late this driver's own 10 ms timers fire: a bound on what the driver adds to a probe."""

    def __init__(self, every_s: float = 0.01) -> None:
        self.every_s = every_s
        self.max_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.every_s)
            self.max_s = max(self.max_s, time.perf_counter() - before - self.every_s)

    def __enter__(self) -> LagMonitor:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def max_ms(self) -> float:
        return round(self.max_s * 1000, 1)


def client_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=None))


def healthz_probe(http: aiohttp.ClientSession, url: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        async with http.get(f"{url}/healthz") as response:
            await response.read()
            return response.status == 200

    return probe


def echo_probe(http: aiohttp.ClientSession, url: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        status, tally = await sse_turn(http, url, ECHO_PROMPT, new_chat("echo"), keep_text=True)
        return status == 200 and tally.whole and "".join(tally.text) == ECHO_TEXT

    return probe


# --- the measurements ------------------------------------------------------------------------


async def flood(server: GatewayProcess, transport: str, probe: bool = True) -> Json:
    """A `/stream 50000 0` chat read at full speed over `transport` ("sse" or "ws"), with /healthz and
    `/echo hi` sent every 100 ms beside it (unless not `probe`); see the module docstring."""
    url, pid = server.url, server.pid
    async with client_session() as http:
        if transport == "ws":
            warm = await ws_turn(http, url, WARM_PROMPT)
        else:
            warm = (await sse_turn(http, url, WARM_PROMPT))[1]
        await asyncio.sleep(0.5)
        log_offset = server.log_file.stat().st_size
        base_kib = reset_peak(pid)
        probers = [Prober(healthz_probe(http, url), PROBE_EVERY_S), Prober(echo_probe(http, url), PROBE_EVERY_S)]
        status: int | None = None  # of the SSE answer (a WebSocket request has none)
        tally = Tally()
        timed_out = False
        with LagMonitor() as lag:
            if probe:
                for prober in probers:
                    prober.start()
            started = time.perf_counter()
            try:
                async with asyncio.timeout(FLOOD_DEADLINE_S):
                    if transport == "ws":
                        tally = await ws_turn(http, url, FLOOD_PROMPT, new_chat("flood-ws"))
                    else:
                        async with http.post(f"{url}/api/chat",
                                             json=chat_body(new_chat("flood"), [user_message(FLOOD_PROMPT)])) as r:
                            status = r.status
                            await read_sse(r, tally)
            except TimeoutError:
                timed_out = True
            elapsed = time.perf_counter() - started
            healthz, echo = [await prober.stop() for prober in probers] if probe else ([], [])
        growth = peak_growth_mib(pid, base_kib)
        callbacks = slow_callbacks(log_lines_from(server.log_file, log_offset))
    return {
        "transport": transport, "status": status, "warm_deltas": warm.deltas, **tally.figures(),
        "whole": tally.whole and tally.deltas == FLOOD_DELTAS, "timed_out": timed_out,
        "seconds": round(elapsed, 2), "rss_base_mib": round(base_kib / KiB, 1), "rss_growth_mib": growth,
        "healthz_ms": latency_summary(healthz), "echo_ms": latency_summary(echo),
        "driver_lag_max_ms": lag.max_ms, "slow_callbacks": callbacks,
    }


async def stopped_reader(server: GatewayProcess) -> Json:
    """A `/stream 100000 0` answer of which the client reads one line and then nothing, until the
    gateway logs `slow_reader_cut` (at most CUT_DEADLINE_S); then it reads what is left."""
    url, pid = server.url, server.pid
    async with client_session() as http:
        await sse_turn(http, url, WARM_PROMPT)
        await asyncio.sleep(0.5)
        log_offset = server.log_file.stat().st_size
        base_kib = reset_peak(pid)
        tally = Tally()
        cut: Json | None = None
        started = time.perf_counter()
        async with http.post(f"{url}/api/chat",
                             json=chat_body(new_chat("stopped"), [user_message(STOPPED_PROMPT)])) as response:
            status = response.status
            tally.sse_line(await response.content.readline())
            stopped_wall, stopped = time.time(), time.perf_counter()
            while time.perf_counter() - stopped < CUT_DEADLINE_S:
                lines = [line for line in log_lines_from(server.log_file, log_offset) if "slow_reader_cut" in line]
                if lines:
                    seen = time.perf_counter() - stopped
                    at = log_time(lines[0])
                    with contextlib.suppress(ValueError):
                        cut = json.loads(lines[0])
                    cut = {"reason": (cut or {}).get("reason"), "pending_bytes": (cut or {}).get("pending_bytes"),
                           "seconds": round(at - stopped_wall, 2) if at is not None else round(seen, 2),
                           "seen_s": round(seen, 2)}
                    break
                await asyncio.sleep(0.05)
            peak_before_drain = peak_growth_mib(pid, base_kib)
            drained = False
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with asyncio.timeout(DRAIN_DEADLINE_S):
                    await read_sse(response, tally)
                    drained = True
        growth = peak_growth_mib(pid, base_kib)
    return {"status": status, "cut": cut, "cut_deadline_s": CUT_DEADLINE_S, **tally.figures(),
            "error_texts": [e.get("errorText") for e in tally.errors], "drained": drained,
            "seconds_to_first_line": round(stopped - started, 3), "rss_base_mib": round(base_kib / KiB, 1),
            "rss_growth_at_cut_mib": peak_before_drain, "rss_growth_mib": growth}


async def history_stalls(server: GatewayProcess) -> Json:
    """/healthz every 10 ms while 50 slow streams run, in three kinds of window: the streams alone,
    a 10,000-message `regenerate-message` body refused (413), a 500-message one imported and
    answered; the two requests alternate, HISTORY_REPEATS times each, each in a new chat."""
    url = server.url
    bodies = [(kind, expect, json.dumps(chat_body(new_chat(kind), long_history(count), "regenerate-message")).encode())
              for _ in range(HISTORY_REPEATS)
              for kind, expect, count in (("refused_413", 413, HUGE_HISTORY), ("imported", 200, HISTORY_CAP))]
    headers = {"Content-Type": "application/json"}
    result: Json = {"streams": BACKGROUND_STREAMS, "repeats": HISTORY_REPEATS,
                    "body_bytes": {kind: len(body) for kind, _, body in bodies}}
    async with client_session() as http:
        await sse_turn(http, url, WARM_PROMPT)
        opened: list[aiohttp.ClientResponse] = []
        counts = [0] * BACKGROUND_STREAMS
        first = [asyncio.Event() for _ in range(BACKGROUND_STREAMS)]

        async def read(index: int, response: aiohttp.ClientResponse) -> None:
            with contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
                async for line in response.content:
                    if line.startswith(b"data: "):
                        counts[index] += 1
                        if counts[index] >= 2:
                            first[index].set()

        readers: list[asyncio.Task[None]] = []
        try:
            for index in range(BACKGROUND_STREAMS):
                response = await http.post(f"{url}/api/chat",
                                            json=chat_body(new_chat(f"bg{index}"), [user_message(BACKGROUND_PROMPT)]))
                opened.append(response)
                readers.append(asyncio.create_task(read(index, response)))
            async with asyncio.timeout(CAP_S):
                await asyncio.gather(*(event.wait() for event in first))
            result["streams_open"] = sum(r.status == 200 for r in opened)
            prober = Prober(healthz_probe(http, url), STALL_PROBE_EVERY_S).start()
            windows: dict[str, list[tuple[float, float]]] = {}
            with LagMonitor() as lag:
                quiet = time.perf_counter()
                await asyncio.sleep(QUIET_S)
                windows["streams_only"] = [(quiet, time.perf_counter())]
                for kind, expect, body in bodies:
                    figures = result.setdefault(kind, {"expected": expect, "statuses": [], "error_codes": [],
                                                       "texts": [], "answered_ms": [], "stream_chunks_meanwhile": 0})
                    before = sum(counts)
                    started = time.perf_counter()
                    tally = Tally(keep_text=True)
                    status, error = None, None
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with asyncio.timeout(CAP_S * 2), http.post(f"{url}/api/chat", data=body,
                                                                        headers=headers) as r:
                            status = r.status
                            if r.status == 200:
                                await read_sse(r, tally)
                            else:
                                error = (await r.json(content_type=None)).get("error", {}).get("code")
                    answered = time.perf_counter() - started
                    await asyncio.sleep(TAIL_S)
                    windows.setdefault(kind, []).append((started, time.perf_counter()))
                    figures["statuses"].append(status)
                    figures["error_codes"].append(error)
                    figures["texts"].append("".join(tally.text) if status == 200 else None)
                    figures["answered_ms"].append(round(answered * 1000, 1))
                    figures["stream_chunks_meanwhile"] += sum(counts) - before
            probes = await prober.stop()
            for kind, spans in windows.items():
                result.setdefault(kind, {})["healthz_ms"] = latency_summary(probes, spans)
            result["driver_lag_max_ms"] = lag.max_ms
        finally:
            for response in opened:
                response.close()
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    return result


# --- report ----------------------------------------------------------------------------------


def spread(values: Iterable[float | None], digits: int = 1) -> str:
    """`median (min to max)` of the values given (None skipped), one value as is, none as `—`."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return "—"
    if len(present) == 1:
        return f"{present[0]:,.{digits}f}"
    return f"{statistics.median(present):,.{digits}f} ({present[0]:,.{digits}f} to {present[-1]:,.{digits}f})"


def _ms(summary: Json) -> str:
    """`p50 / p99 / max` of a latency summary, and how many probes were capped or failed."""
    text = " / ".join("—" if summary.get(k) is None else f"{summary[k]:,.1f}" for k in ("p50", "p99", "max"))
    notes = [f"n={summary.get('n', 0)}"]
    if summary.get("capped"):
        notes.append(f"{summary['capped']} capped at {CAP_S:.0f} s")
    if summary.get("failed", 0) - summary.get("capped", 0) > 0:
        notes.append(f"{summary['failed'] - summary.get('capped', 0)} failed")
    return f"{text} ({', '.join(notes)})"


def _end(result: Json) -> str:
    end = "[DONE]/end" if result.get("done") else "no end"
    errors = f", {result['errors']} error" if result.get("errors") else ""
    timed_out = f", stopped at {FLOOD_DEADLINE_S:.0f} s" if result.get("timed_out") else ""
    return f"{result.get('deltas', 0):,}, {end}{errors}{timed_out}"


def one_line(kind: str, result: Json) -> str:
    """A measurement in a line, for the runner's progress log."""
    if kind.startswith("flood") or kind == "debug":
        cb = result.get("slow_callbacks", {})
        return (f"{result['seconds']} s, deltas {_end(result)}, healthz {_ms(result['healthz_ms'])} ms, "
                f"echo {_ms(result['echo_ms'])} ms, RSS +{result['rss_growth_mib']} MiB, "
                f"callbacks > {cb.get('threshold_s')} s: {cb.get('count')} (longest {cb.get('longest_s')} s), "
                f"driver lag max {result['driver_lag_max_ms']} ms")
    if kind == "stopped":
        cut = result.get("cut") or {}
        return (f"cut after {cut.get('seconds')} s ({cut.get('reason')}), deltas read {result['deltas']:,}, "
                f"RSS +{result['rss_growth_at_cut_mib']} MiB at the cut, +{result['rss_growth_mib']} MiB after")
    windows = ("streams_only", "refused_413", "imported")
    return "; ".join(f"{w}: {_requests(result.get(w, {}))}healthz max "
                     f"{result.get(w, {}).get('healthz_ms', {}).get('max')} ms" for w in windows)


def _requests(figures: Json) -> str:
    """The long-history requests of a window: statuses (error codes or answers), times to answer."""
    if not figures.get("statuses"):
        return ""
    outcomes = sorted({f"{status} {code or ''}{text or ''}".strip() for status, code, text
                       in zip(figures["statuses"], figures["error_codes"], figures["texts"], strict=True)})
    answered = ", ".join(f"{ms:,.0f}" for ms in figures["answered_ms"])
    return f"{' / '.join(outcomes)} x{len(figures['statuses'])} in {answered} ms, "


def histories_as_expected(result: Json) -> bool:
    """Every long history of a `history_stalls` round answered as it should: the 10,000-message ones
    413 `history_too_long`, the 500-message ones 200 with the text "the end"."""
    refused, imported = result.get("refused_413", {}), result.get("imported", {})
    return (bool(refused.get("statuses")) and all(s == 413 for s in refused["statuses"])
            and all(code == "history_too_long" for code in refused["error_codes"])
            and bool(imported.get("statuses")) and all(s == 200 for s in imported["statuses"])
            and all(text == "the end" for text in imported["texts"]))


def _figure(results: Sequence[Json], get: Callable[[Json], float | None], digits: int = 1) -> str:
    return spread((get(r) for r in results), digits)


def _capped_note(results: Sequence[Json], key: str) -> str:
    capped = sum(r.get(key, {}).get("capped", 0) for r in results)
    return f" ({capped} probes capped at {CAP_S:.0f} s)" if capped else ""


def _longest_callback(debug: Sequence[Json]) -> str:
    """The longest callback over the debug runs' threshold (median and range over the runs that had
    one), or that none had one."""
    longest = [r["slow_callbacks"]["longest_s"] * 1000 for r in debug if r["slow_callbacks"]["longest_s"] is not None]
    none = len(debug) - len(longest)
    if not longest:
        return f"none over {SLOW_CALLBACK_S * 1000:.0f} ms"
    return spread(longest, 0) + (f" ({none} run{'s' if none > 1 else ''} with none over "
                                 f"{SLOW_CALLBACK_S * 1000:.0f} ms)" if none else "")


def _latency_rows(runs: Sequence[Json], label: str, key: str, target: str) -> list[tuple[str, str, str]]:
    return [(f"{label} {p} ms", target if p == "p99" else "",
             spread(r[key][p] for r in runs) + (_capped_note(runs, key) if p == "max" else ""))
            for p in ("p50", "p99", "max")]


def summary_rows(results: dict[str, list[Json]]) -> list[tuple[str, str, str]]:
    """(figure, target, `median (min to max)` over the rounds) for the summary table."""
    rows: list[tuple[str, str, str]] = []
    for kind, label in (("flood-sse", "SSE"), ("flood-ws", "WebSocket")):
        runs = results.get(kind, [])
        if not runs:
            continue
        whole = sum(bool(r.get("whole")) for r in runs)
        rows += [
            (f"{label} flood: seconds for `{FLOOD_PROMPT}`", "", _figure(runs, lambda r: r["seconds"], 2)),
            (f"{label} flood: whole ({FLOOD_DELTAS:,} deltas, end, no error)", "every run", f"{whole} of {len(runs)}"),
            *_latency_rows(runs, f"{label} flood: `/healthz`", "healthz_ms", "p99 ≤ 100"),
            *_latency_rows(runs, f"{label} flood: `{ECHO_PROMPT}` turn", "echo_ms", "p99 ≤ 250"),
            (f"{label} flood: peak RSS growth MiB", "≤ 64", _figure(runs, lambda r: r["rss_growth_mib"])),
        ]
    stopped = results.get("stopped", [])
    if stopped:
        not_cut = sum(r.get("cut") is None for r in stopped)
        rows += [
            (f"reader stops (`{STOPPED_PROMPT}`): seconds until cut", f"grace {SLOW_READER_GRACE_S:g} s",
             _figure(stopped, lambda r: (r.get("cut") or {}).get("seconds"), 2)
             + (f" ({not_cut} not cut within {CUT_DEADLINE_S:.0f} s)" if not_cut else "")),
            ("reader stops: peak RSS growth MiB", "≤ 48", _figure(stopped, lambda r: r["rss_growth_mib"])),
        ]
    debug = results.get("debug", [])
    if debug:
        rows += [
            (f"PYTHONASYNCIODEBUG=1, SSE flood: callbacks over {SLOW_CALLBACK_S * 1000:.0f} ms", "",
             _figure(debug, lambda r: r["slow_callbacks"]["count"], 0)),
            ("PYTHONASYNCIODEBUG=1, SSE flood: longest callback ms", "", _longest_callback(debug)),
        ]
    history = results.get("history", [])
    if history:
        expected = sum(histories_as_expected(r) for r in history)
        rows.append((f"long histories beside {BACKGROUND_STREAMS} streams: every one answered as expected "
                     f"(413 `history_too_long`; 200 \"the end\")", "every run", f"{expected} of {len(history)}"))
        for window, label in (("streams_only", f"{BACKGROUND_STREAMS} streams alone"),
                              ("refused_413", f"{HUGE_HISTORY:,} messages refused (413)"),
                              ("imported", f"{HISTORY_CAP} messages imported and answered")):
            rows.append((f"{label}: longest `/healthz` ms (every {STALL_PROBE_EVERY_S * 1000:.0f} ms)", "",
                         spread(r.get(window, {}).get("healthz_ms", {}).get("max") for r in history)))
    return rows


def markdown(results: dict[str, list[Json]]) -> str:
    """The part's section: a summary over the rounds, then every round's figures."""
    rounds = max((len(v) for v in results.values()), default=0)
    out = [
        f"### Floods: a chat that never waits (`{FLOOD_PROMPT}`)",
        "",
        f"{rounds} round{'s' if rounds != 1 else ''}, each measurement on a new gateway process. Probes are sent "
        f"on a fixed schedule whatever the earlier ones are doing, timed from send to last byte, each waited for at "
        f"most {CAP_S:.0f} s (then counted as {CAP_S:.0f} s). Figures: median (min to max) over the rounds.",
        "",
        "| figure | target | median (min to max) |",
        "|---|---|---|",
        *(f"| {figure} | {target} | {value} |" for figure, target, value in summary_rows(results)),
        "",
    ]
    runs = [(kind, r) for kind in ("flood-sse", "flood-ws", "debug") for r in results.get(kind, [])]
    if runs:
        out += [
            "| run | round | flood s | deltas, end | `/healthz` p50 / p99 / max ms | `/echo hi` p50 / p99 / max ms "
            "| RSS growth MiB | callbacks > 50 ms (longest ms) | driver lag max ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        names = {"flood-sse": "SSE", "flood-ws": "WebSocket", "debug": "SSE, PYTHONASYNCIODEBUG=1"}
        for kind, r in runs:
            cb = r.get("slow_callbacks", {})
            longest = "" if cb.get("longest_s") is None else f" ({cb['longest_s'] * 1000:,.0f})"
            out.append(f"| {names[kind]} | {r['round']} | {r['seconds']:,.2f} | {_end(r)} | {_ms(r['healthz_ms'])} "
                       f"| {_ms(r['echo_ms'])} | {r['rss_growth_mib']:,.1f} | {cb.get('count', 0)}{longest} "
                       f"| {r['driver_lag_max_ms']:,.1f} |")
        longest_cb = max((r for _, r in runs if r.get("slow_callbacks", {}).get("longest_s")),
                         key=lambda r: r["slow_callbacks"]["longest_s"], default=None)
        if longest_cb is not None:
            out += ["", f"Longest callback: `{longest_cb['slow_callbacks']['longest_what']}`."]
        out.append("")
    stopped = results.get("stopped", [])
    if stopped:
        out += [
            f"A reader that stops after the first line of `{STOPPED_PROMPT}` (`--slow-reader-grace-s "
            f"{SLOW_READER_GRACE_S:g}`): seconds from its last read to the `slow_reader_cut` log line.",
            "",
            "| round | cut after s | reason | deltas read in all | end | RSS growth MiB at the cut / after |",
            "|---|---|---|---|---|---|",
        ]
        for r in stopped:
            cut = r.get("cut") or {}
            after = "not cut" if not cut else f"{cut['seconds']:,.2f}"
            end = ("[DONE] after an error chunk" if r["done"] and r["errors"] else "[DONE]" if r["done"]
                   else "cut (no [DONE])")
            out.append(f"| {r['round']} | {after} | {cut.get('reason', '—')} | {r['deltas']:,} | {end} "
                       f"| {r['rss_growth_at_cut_mib']:,.1f} / {r['rss_growth_mib']:,.1f} |")
        out.append("")
    history = results.get("history", [])
    if history:
        out += [
            f"`/healthz` every {STALL_PROBE_EVERY_S * 1000:.0f} ms while {BACKGROUND_STREAMS} `{BACKGROUND_PROMPT}` "
            f"streams run (`--max-history-messages {HISTORY_CAP}`); each long history is posted {HISTORY_REPEATS} "
            f"times (alternating, a new chat each), its window from the request to {TAIL_S:g} s after its answer; "
            "healthz p99 / max ms over a kind's windows.",
            "",
            f"| round | streams alone ({QUIET_S:g} s) | {HUGE_HISTORY:,} messages, `regenerate-message` | healthz "
            f"| {HISTORY_CAP} messages, `regenerate-message` | healthz | driver lag max ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in history:
            def ms(w: str, r: Json = r) -> str:
                h = r.get(w, {}).get("healthz_ms", {})
                return f"{h.get('p99', '—')} / {h.get('max', '—')} (n={h.get('n', 0)})"
            out.append(f"| {r['round']} | {ms('streams_only')} | {_requests(r.get('refused_413', {})).rstrip(', ')} "
                       f"| {ms('refused_413')} | {_requests(r.get('imported', {})).rstrip(', ')} | {ms('imported')} "
                       f"| {r.get('driver_lag_max_ms')} |")
        out.append("")
    return "\n".join(out)
