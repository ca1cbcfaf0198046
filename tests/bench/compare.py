"""Side by side on the same scripted demo agent: ADK's bare `Runner`, `adk api_server` and the gateway.

Every comparison sends the same prompt, `/echo one two three` (3 text deltas), to one of:

- `runner`: ADK's `Runner` in this process with `build_demo_agent("scripted")`, ADK's
  `InMemorySessionService`, and the run config of the gateway's runs (`StreamingMode.SSE`, the
  gateway's telemetry setting): the floor, with no HTTP, no client and no conversion. For the long
  chat, `runner-memory` is the same `Runner` on our store (`adk_gateway.agents.memory_store.MemorySessionService`,
  the gateway's `memory://`), which separates what the store costs from what the gateway adds.
- `api_server`: ADK's own FastAPI server (`adk api_server`, started by `tests.bench.run`), over
  HTTP: `POST /apps/{app}/users/{user}/sessions`, then `POST /run_sse` with `streaming: true`.
- `sse` and `ws`: the gateway's `POST /api/chat` and `GET /api/chat/ws`. The client posts the
  whole history (user and assistant messages) every turn, as `useChat` does.
- `sse-last` and `ws-last` (the long chat only): the same, but each turn sends only the new
  message (the AI SDK's persistence pattern, `prepareSendMessagesRequest`): a body `{"id",
  "message", "trigger"}`, or a `send` frame with `messages: [last]` and `body: {"message": last}`;
  the gateway runs the turn on the history it holds.

How a load runs (`drive`): N clients in this process, each a closed loop (send a turn, read the
whole answer, send the next). Turns are counted across the clients; the load stops at its count
or at its deadline, whichever comes first, and each turn has its own timeout. Chats:

- `fresh`: a new chat every turn; for ADK the session is created inside the turn (create + run);
- `run-only` (`api_server` only): sessions created before the load, untimed, one per turn;
- `reused`: each client keeps its chat (session) for `chat_turns` turns, then starts another.

A turn's time runs from the moment the client starts it (before the session creation, when there
is one) to the end of the answer (`[DONE]` and EOF, the `end` frame, the runner's last event);
its time to first text, to the first text delta (the first partial event with text for ADK).

`Comparison` runs the table (each row at 1 and at 16 clients, rows alternated in order between
rounds so that drift in the machine's speed spreads over every row, with a bar chart of its turns/s:
`throughput_chart`), the gateway's added time to first text, and the long chat (per-turn time over
200-turn chats, by tenth, with a chart; the gateway's chat both with the whole history
posted and with only the last message). The last two compare single turns at 1 client, so they
run the servers in lock step (`lockstep`), a short block of turns each: turns k to k + b - 1 of
each server, one after the other, before any goes further. A VM's speed can drift by half within
minutes; in lock step the drift falls on every server alike, and what the gateway adds is taken
turn by turn against the bare Runner's turn of the same number.
`churn` drives a gateway through many fresh chats while sampling its RSS. Nothing here asserts
timings; it measures and formats.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.genai import types

from adk_gateway.agents.adk import telemetry_config
from adk_gateway.agents.demo import build_demo_agent
from adk_gateway.agents.memory_store import MemorySessionService
from adk_gateway.loadtest import (
    SSE_PATH,
    WS_PATH,
    Sample,
    adk_request,
    assistant_message,
    close_socket,
    percentiles,
    sse_request,
    user_message,
    ws_request,
)

__all__ = ["GATEWAY_SERVERS", "LONG_SERVERS", "PROMPT", "Comparison", "GatewayClient", "Load", "Sizes", "Targets",
           "churn", "drive", "throughput_chart"]

PROMPT = "/echo one two three"
TURN_TIMEOUT_S = 60.0
CHART_NAME = "turn-time-by-tenth.png"
THROUGHPUT_CHART_NAME = "throughput-vs-adk.png"

# The table's rows, in the order of the first round: (server, chats).
TABLE_ROWS: tuple[tuple[str, str], ...] = (
    ("runner", "fresh"),
    ("runner", "reused"),
    ("api_server", "fresh"),
    ("api_server", "run-only"),
    ("api_server", "reused"),
    ("sse", "fresh"),
    ("sse", "reused"),
    ("ws", "fresh"),
    ("ws", "reused"),
)
LONG_SERVERS = ("runner", "runner-memory", "api_server", "sse", "ws", "sse-last", "ws-last")
# The gateway's clients by server name: (transport, only the last message posted).
GATEWAY_SERVERS = {"sse": ("sse", False), "ws": ("ws", False), "sse-last": ("sse", True), "ws-last": ("ws", True)}

SERVER_LABELS = {
    "runner": "ADK `Runner`, in process",
    "runner-memory": "ADK `Runner` on our store",
    "api_server": "`adk api_server`",
    "sse": "gateway, SSE",
    "ws": "gateway, WebSocket",
    "sse-last": "gateway, SSE, last message only",
    "ws-last": "gateway, WebSocket, last message only",
}
CHAT_LABELS = {
    ("runner", "fresh"): "fresh session (create + run)",
    ("runner", "reused"): "reused session",
    ("api_server", "fresh"): "create + run",
    ("api_server", "run-only"): "run only (session made beforehand)",
    ("api_server", "reused"): "reused session",
    ("sse", "fresh"): "fresh chat",
    ("sse", "reused"): "reused chat, whole history posted",
    ("ws", "fresh"): "fresh chat",
    ("ws", "reused"): "reused chat, whole history posted",
}
# Short names for the long chat's table and chart.
LONG_LABELS = {
    "runner": "Runner (ADK store)",
    "runner-memory": "Runner (our store)",
    "api_server": "adk api_server",
    "sse": "gateway SSE",
    "ws": "gateway WebSocket",
    "sse-last": "gateway SSE last message",
    "ws-last": "gateway WebSocket last message",
}
# The throughput chart's bars, in this order within each group (clients, chats).
THROUGHPUT_SERVERS = ("api_server", "runner", "sse", "ws")
THROUGHPUT_MODES = ("fresh", "reused")
THROUGHPUT_LABELS = {
    "api_server": "adk api_server",
    "runner": "bare ADK Runner (in process)",
    "sse": "gateway SSE",
    "ws": "gateway WebSocket",
}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- clients: one simulated user each ------------------------------------------------------


class Client(Protocol):
    async def turn(self, sample: Sample, new_chat: bool) -> None: ...

    async def close(self) -> None: ...


def run_config() -> RunConfig:
    """The run config of the gateway's runs (`adk_gateway.agents.adk.AgentHost.run_config`), so that the
    difference between the bare Runner and the gateway is the gateway's own work."""
    return RunConfig(streaming_mode=StreamingMode.SSE, telemetry=telemetry_config())


class RunnerClient:
    """A turn on an ADK `Runner` in this process: `run_async` read to its last event."""

    def __init__(self, runner: Runner, service: BaseSessionService, user: str, prompt: str = PROMPT) -> None:
        self.runner = runner
        self.service = service
        self.user = user
        self.prompt = prompt
        self.session_id: str | None = None

    async def turn(self, sample: Sample, new_chat: bool) -> None:
        started = time.perf_counter()
        try:
            if new_chat or self.session_id is None:
                session = await self.service.create_session(app_name=self.runner.app_name, user_id=self.user)
                self.session_id = session.id
                sample.setup = time.perf_counter() - started
            sample.chat_id = self.session_id
            message = types.Content(role="user", parts=[types.Part(text=self.prompt)])
            stream = self.runner.run_async(user_id=self.user, session_id=self.session_id, new_message=message,
                                           run_config=run_config())
            async with aclosing(stream) as events:
                async for event in events:
                    now = time.perf_counter() - started
                    sample.chunks += 1
                    if sample.ttfc is None:
                        sample.ttfc = now
                    if event.error_code and sample.error is None:
                        sample.error, sample.detail = "error_event", f"{event.error_code}: {event.error_message}"
                    parts = event.content.parts if event.content and event.content.parts else []
                    texts = [p.text for p in parts if p.text]
                    if event.partial:
                        sample.text_deltas += len(texts)
                        if texts and sample.ttft is None:
                            sample.ttft = now
                    elif texts:
                        sample.finish = now
                        sample.text = "".join(texts)
        finally:
            sample.total = time.perf_counter() - started
            if sample.error is None and sample.finish is None:
                sample.error = "no_finish"
            sample.ok = sample.error is None

    async def close(self) -> None:
        return None


class ApiServerClient:
    """A turn on `adk api_server`: a session POST when the chat is new (unless `presets`, a pool of
    sessions made before the load, has one), then `/run_sse`."""

    def __init__(self, http: aiohttp.ClientSession, url: str, app: str, user: str,
                 presets: list[str] | None = None, prompt: str = PROMPT) -> None:
        self.http = http
        self.url = url
        self.app = app
        self.user = user
        self.presets = presets
        self.prompt = prompt
        self.session_id: str | None = None

    async def turn(self, sample: Sample, new_chat: bool) -> None:
        if new_chat:
            self.session_id = self.presets.pop() if self.presets else None
        sample.chat_id = self.session_id or ""
        self.session_id = await adk_request(self.http, self.url, self.app, self.user, self.session_id,
                                            self.prompt, sample)

    async def close(self) -> None:
        return None


class GatewayClient:
    """A turn on the gateway, as `useChat` sends it: the chat's whole history plus the new user
    message, over SSE or over one WebSocket per client (a browser tab's). With `last_message`, as
    `useChat` sends it with the persistence pattern's `prepareSendMessagesRequest`: only the new
    message (`{"id", "message", "trigger"}`; over the WebSocket, `messages: [last]` and
    `body: {"message": last}`), the gateway holding the history. Either way the client keeps the
    history it would show (`history`)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, transport: str, prompt: str = PROMPT,
                 last_message: bool = False) -> None:
        self.http = http
        self.url = url
        self.transport = transport
        self.prompt = prompt
        self.last_message = last_message
        self.chat_id = ""
        self.history: list[dict[str, Any]] = []
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def turn(self, sample: Sample, new_chat: bool) -> None:
        if new_chat or not self.chat_id:
            self.chat_id, self.history = f"bench-{uuid.uuid4().hex[:20]}", []
        sample.chat_id = self.chat_id
        new = user_message(self.prompt)
        messages = [*self.history, new]
        if self.transport == "sse":
            body: dict[str, Any] = {"id": self.chat_id, "trigger": "submit-message"}
            body.update({"message": new} if self.last_message else {"messages": messages})
            await sse_request(self.http, self.url + SSE_PATH, body, {}, sample)
        else:
            if self.ws is None or self.ws.closed:
                self.ws = await self.http.ws_connect(self.url.replace("http://", "ws://", 1) + WS_PATH,
                                                     autoping=True, max_msg_size=0)
            frame = {"type": "send", "requestId": f"r-{uuid.uuid4().hex[:16]}", "id": self.chat_id,
                     "trigger": "submit-message", "messages": [new] if self.last_message else messages,
                     "headers": {}, "body": {"message": new} if self.last_message else {}}
            await ws_request(self.ws, frame, sample)
        if sample.ok:
            self.history = [*messages, assistant_message(sample.message_id, sample.text)]

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        await close_socket(ws)


# --- the load loop -------------------------------------------------------------------------


@dataclass
class Load:
    """One measured load: every turn, the wall time, the server's CPU time, the chats it started."""

    server: str
    chats_mode: str
    clients: int
    samples: list[Sample] = field(default_factory=list)
    elapsed_s: float = 0.0
    cpu_s: float | None = None
    chats: int = 0
    stopped_by: list[str] = field(default_factory=list)

    def merge(self, other: Load) -> None:
        """Adds another round of the same load (its turns, time and CPU)."""
        self.samples += other.samples
        self.elapsed_s += other.elapsed_s
        self.cpu_s = None if self.cpu_s is None or other.cpu_s is None else self.cpu_s + other.cpu_s
        self.chats += other.chats
        self.stopped_by += other.stopped_by

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    @property
    def failed(self) -> int:
        return sum(1 for s in self.samples if not s.ok)

    @property
    def turns_per_s(self) -> float | None:
        return len(self.ok) / self.elapsed_s if self.elapsed_s > 0 and self.ok else None

    def ms(self, what: str, point: str) -> float | None:
        """A percentile (`p50`, `p99`, `mean`) of `total` or `ttft` over the answered turns, in ms."""
        values = [getattr(s, what) for s in self.ok if getattr(s, what) is not None]
        value = percentiles(values, (50, 99)).get(point)
        return None if value is None else value * 1000

    @property
    def cpu_ms_per_turn(self) -> float | None:
        return self.cpu_s * 1000 / len(self.ok) if self.cpu_s is not None and self.ok else None

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.samples:
            if not s.ok:
                counts[s.error or "unfinished"] = counts.get(s.error or "unfinished", 0) + 1
        return counts

    def as_json(self) -> dict[str, Any]:
        return {
            "server": self.server, "chats_mode": self.chats_mode, "clients": self.clients,
            "turns_ok": len(self.ok), "turns_failed": self.failed, "errors": self.errors(),
            "elapsed_s": round(self.elapsed_s, 3), "turns_per_s": _round(self.turns_per_s, 2),
            "turn_ms": {p: _round(self.ms("total", p), 2) for p in ("p50", "p99", "mean")},
            "first_text_ms": {p: _round(self.ms("ttft", p), 2) for p in ("p50", "p99", "mean")},
            "server_cpu_ms_per_turn": _round(self.cpu_ms_per_turn, 2), "chats": self.chats,
            "stopped_by": self.stopped_by,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


async def one_turn(client: Client, sample: Sample, load: Load, in_chat: int, chat_turns: int,
                   timeout_s: float = TURN_TIMEOUT_S) -> int:
    """One turn of `client` into `sample` (appended to `load`), in a new chat when the client has
    none yet (`in_chat` is its turns in the current chat, 0 for none) or has run `chat_turns` in
    it. Returns the client's turns in its chat after this one: 0 after a failed turn, so that the
    next starts a new chat. A failure is recorded in the sample (and the client's connection
    closed); a cancellation marks it unfinished and propagates."""
    load.samples.append(sample)
    new_chat = in_chat == 0 or in_chat >= chat_turns
    if new_chat:
        in_chat = 0
        load.chats += 1
    try:
        async with asyncio.timeout(timeout_s):
            await client.turn(sample, new_chat)
    except asyncio.CancelledError:
        sample.ok, sample.unfinished = False, True
        raise
    except Exception as exc:
        sample.ok = False
        sample.error = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        sample.detail = str(exc)[:200]
        await client.close()
    return in_chat + 1 if sample.ok else 0


async def drive(clients: Sequence[Client], turns: int, chat_turns: int, duration_s: float,
                timeout_s: float = TURN_TIMEOUT_S, cpu: Callable[[], float] | None = None,
                load: Load | None = None) -> Load:
    """Runs `turns` turns over `clients` (closed loops), each client starting a new chat every
    `chat_turns` turns and after a failed turn. Stops at the count or after `duration_s`; turns cut
    by the deadline count as failed ("unfinished"). Fills and returns `load`."""
    load = load or Load("", "", len(clients))
    issued = 0
    started = time.perf_counter()
    deadline = started + duration_s
    cpu_before = cpu() if cpu else None

    async def work(client: Client) -> None:
        nonlocal issued
        in_chat = 0
        while issued < turns and time.perf_counter() < deadline:
            sample = Sample(index=issued, chat_id="")
            issued += 1
            in_chat = await one_turn(client, sample, load, in_chat, chat_turns, timeout_s)

    tasks = [asyncio.create_task(work(c)) for c in clients]
    try:
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        load.stopped_by.append("duration" if pending or issued < turns else "turns")
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        load.elapsed_s += time.perf_counter() - started
        if cpu is not None and cpu_before is not None:
            load.cpu_s = (load.cpu_s or 0.0) + cpu() - cpu_before
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return load


async def lockstep(clients: Mapping[str, Client], loads: Mapping[str, Load], turns: int, chat_turns: int,
                   cpu: Mapping[str, Callable[[], float] | None], *, block: int = 1, shift: int = 0,
                   timeout_s: float = TURN_TIMEOUT_S) -> None:
    """Runs `turns` turns on each of `clients` (one per server, by name) in lock step, `block`
    turns at a time: turns k to k + block - 1 on every server, one server after the other, before
    any server goes further, in an order that moves on by one place every block (`shift` moves
    the first). Each client starts a new chat every `chat_turns` turns and after a failed turn.

    Turn k of every server meets the machine as it is at that moment, so a drift in its speed
    (which on a shared VM can be 1.5x within minutes) falls on every server alike instead of on
    whichever ran last. Blocks of consecutive turns keep each server's own loop warm, as in a
    closed loop: one turn at a time, each server starts every turn with caches the others have
    filled, which slows the in-process Runner's short turns the most (about 2x at 1 client).

    Fills `loads`: the samples, the summed turn times as `elapsed_s`, and the CPU read around each
    turn (a server's work after the end of its answer is left out)."""
    names = list(clients)
    in_chat = dict.fromkeys(names, 0)
    try:
        for index, first in enumerate(range(0, turns, block)):
            start = (index + shift) % len(names)
            for name, k in ((n, k) for n in names[start:] + names[:start]
                            for k in range(first, min(first + block, turns))):
                load = loads[name]
                read = cpu.get(name)
                cpu_before = read() if read is not None else None
                began = time.perf_counter()
                in_chat[name] = await one_turn(clients[name], Sample(index=k, chat_id=""), load, in_chat[name],
                                               chat_turns, timeout_s)
                load.elapsed_s += time.perf_counter() - began
                if read is not None and cpu_before is not None:
                    load.cpu_s = (load.cpu_s or 0.0) + read() - cpu_before
        for load in loads.values():
            load.stopped_by.append("turns")
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)


def paired(turns: Sequence[float | None], base: Sequence[float | None]) -> list[float]:
    """Turn-by-turn differences `turns[k] - base[k]` where both were answered."""
    return [d for d in paired_by_turn(turns, base) if d is not None]


def paired_by_turn(turns: Sequence[float | None], base: Sequence[float | None]) -> list[float | None]:
    """`turns[k] - base[k]` for each k, None where either was not answered."""
    return [None if t is None or b is None else t - b for t, b in zip(turns, base, strict=False)]


# --- the comparison ------------------------------------------------------------------------


@dataclass
class Targets:
    """Where the out-of-process servers are, and how to read their CPU time (seconds)."""

    gateway_url: str
    gateway_cpu: Callable[[], float]
    api_url: str | None = None
    api_app: str = ""
    api_cpu: Callable[[], float] | None = None


@dataclass
class Sizes:
    """How much each part of the comparison runs; `Comparison` takes it from the bench's plan."""

    turns: dict[int, int]  # clients -> turns per row and round
    chat_turns: int  # turns of a reused chat in the table
    rounds: int
    long_turns: int  # turns of the long chat
    long_rounds: int
    first_text_turns: int = 0  # turns per server and chats of the first-text comparison (0: none)
    duration_s: float = 120.0  # bound of each load
    long_servers: tuple[str, ...] = LONG_SERVERS  # the servers of the long chat (none: no long chat)

    @property
    def long_block(self) -> int:
        """Turns of the long chat each server runs at a time in lock step: a quarter of a tenth (5 of
        200), short enough that the machine cannot drift within the servers' turn, long enough that
        each runs warm. The blocks line up, so a block's first (colder) turn pairs with another's."""
        return max(1, self.long_turns // 40)


class Comparison:
    """The side-by-side table, the gateway's added time to first text, and the long chat."""

    def __init__(self, targets: Targets, sizes: Sizes, http: aiohttp.ClientSession) -> None:
        self.targets = targets
        self.sizes = sizes
        self.http = http
        agent = build_demo_agent("scripted")
        # One Runner per store, as a server holds one for its life.
        self.runners: dict[str, tuple[Runner, BaseSessionService]] = {}
        for name, service in (("runner", InMemorySessionService()), ("runner-memory", MemorySessionService())):
            self.runners[name] = (Runner(app_name=agent.name, agent=agent, session_service=service), service)
        self.loads: dict[tuple[str, str, int], Load] = {}
        self.long: dict[str, list[list[float | None]]] = {}  # server -> per round, each turn's seconds
        self.long_loads: dict[str, Load] = {}
        # (server, chats) -> the first-text comparison's turns, run in lock step at 1 client
        self.first_text: dict[tuple[str, str], Load] = {}
        self.gateway_chats = 0  # chats the gateway was asked to start, warm-up included

    @property
    def with_api(self) -> bool:
        return self.targets.api_url is not None

    def servers(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if n != "api_server" or self.with_api]

    async def _presets(self, count: int, user: str) -> list[str]:
        """Sessions on the api_server for a run-only load, made before it (bounded concurrency)."""
        gate = asyncio.Semaphore(16)
        url = f"{self.targets.api_url}/apps/{self.targets.api_app}/users/{user}/sessions"

        async def one() -> str:
            async with gate, self.http.post(url, json={}) as response:
                response.raise_for_status()
                return str((await response.json())["id"])

        return list(await asyncio.gather(*(one() for _ in range(count))))

    async def clients(self, server: str, mode: str, clients: int,
                      turns: int) -> tuple[list[Client], Callable[[], float] | None]:
        """`clients` new clients of `server` for `turns` turns of `mode` chats, and how to read the
        server's CPU time."""
        if server in self.runners:
            runner, service = self.runners[server]
            # This process does nothing else while a Runner's turn runs: its CPU time is the Runner's.
            return [RunnerClient(runner, service, f"bench-user-{n}") for n in range(clients)], time.process_time
        if server == "api_server":
            assert self.targets.api_url is not None
            user = "bench-user"
            presets = await self._presets(turns, user) if mode == "run-only" else None
            return [ApiServerClient(self.http, self.targets.api_url, self.targets.api_app, user, presets)
                    for _ in range(clients)], self.targets.api_cpu
        transport, last_message = GATEWAY_SERVERS[server]
        return ([GatewayClient(self.http, self.targets.gateway_url, transport, last_message=last_message)
                 for _ in range(clients)], self.targets.gateway_cpu)

    async def measure(self, server: str, mode: str, clients: int, turns: int, chat_turns: int) -> Load:
        """One load of `turns` turns on `server` with `clients` clients."""
        made, cpu = await self.clients(server, mode, clients, turns)
        load = await drive(made, turns, 1 if mode in ("fresh", "run-only") else chat_turns,
                           self.sizes.duration_s, cpu=cpu, load=Load(server, mode, clients))
        self._finished(load)
        return load

    def _finished(self, load: Load, how: str = "") -> None:
        """Counts the chats a finished load started on the gateway, and logs its line."""
        if load.server in GATEWAY_SERVERS:
            self.gateway_chats += load.chats
        log(f"  {load.server} {load.chats_mode} x{load.clients}{how}: {len(load.ok)} ok / {load.failed} failed, "
            f"{_fmt(load.turns_per_s)} turns/s, p50 {_fmt(load.ms('total', 'p50'))} ms, "
            f"first text p50 {_fmt(load.ms('ttft', 'p50'))} ms")

    async def warm(self) -> None:
        """A few turns on every server (ADK builds the agent's model and tools on the first run)."""
        for server in self.servers(("runner", "runner-memory", "api_server", "sse", "ws")):
            for mode in ("fresh", "reused"):
                await self.measure(server, mode, 2, 10, 5)

    async def run_table(self) -> None:
        rows = [r for r in TABLE_ROWS if r[0] != "api_server" or self.with_api]
        for clients, turns in self.sizes.turns.items():
            for round_ in range(self.sizes.rounds):
                for server, mode in rows if round_ % 2 == 0 else reversed(rows):
                    load = await self.measure(server, mode, clients, turns, self.sizes.chat_turns)
                    key = (server, mode, clients)
                    if key in self.loads:
                        self.loads[key].merge(load)
                    else:
                        self.loads[key] = load

    async def run_lockstep(self, servers: Sequence[str], mode: str, turns: int, chat_turns: int, block: int,
                           shift: int = 0) -> dict[str, Load]:
        """One client per server, `turns` turns each, in lock step, `block` turns at a time (`lockstep`)."""
        clients: dict[str, Client] = {}
        cpu: dict[str, Callable[[], float] | None] = {}
        for server in servers:
            made, cpu[server] = await self.clients(server, mode, 1, turns)
            clients[server] = made[0]
        loads = {server: Load(server, mode, 1) for server in servers}
        await lockstep(clients, loads, turns, chat_turns, cpu, block=block, shift=shift)
        for load in loads.values():
            self._finished(load, f" (lock step, {block} turns a block)")
        return loads

    async def run_first_text(self) -> None:
        """The bare Runner and the gateway's two transports at 1 client, in lock step, fresh and
        reused chats: what the gateway adds to the time to first text, turn beside turn."""
        if self.sizes.first_text_turns <= 0:
            return
        for mode in ("fresh", "reused"):
            chat_turns = 1 if mode == "fresh" else self.sizes.chat_turns
            loads = await self.run_lockstep(("runner", "sse", "ws"), mode, self.sizes.first_text_turns, chat_turns,
                                            block=self.sizes.chat_turns)
            for server, load in loads.items():
                self.first_text[(server, mode)] = load

    async def run_long(self) -> None:
        """One chat of `long_turns` turns per server and round, the servers in lock step."""
        n = self.sizes.long_turns
        servers = self.servers([s for s in LONG_SERVERS if s in self.sizes.long_servers])
        if n <= 0 or not servers:
            return
        for round_ in range(self.sizes.long_rounds):
            loads = await self.run_lockstep(servers, "reused", n, n, block=self.sizes.long_block, shift=round_)
            for server, load in loads.items():
                self.long.setdefault(server, []).append([s.total if s.ok else None for s in load.samples])
                if server in self.long_loads:
                    self.long_loads[server].merge(load)
                else:
                    self.long_loads[server] = load

    async def run(self) -> None:
        log("side by side: warm-up")
        await self.warm()
        if self.sizes.turns:
            log("side by side: the table")
            await self.run_table()
        if self.sizes.first_text_turns > 0:
            log("side by side: time to first text, in lock step")
            await self.run_first_text()
        if self.sizes.long_turns > 0 and self.sizes.long_servers:
            sizes = self.sizes
            log(f"side by side: {sizes.long_rounds} chats of {sizes.long_turns} turns per server, in lock step")
            await self.run_long()

    # --- figures ---------------------------------------------------------------------------

    def tenths(self) -> dict[str, list[dict[str, float | None]]]:
        """Per server, for each tenth of the long chat (turns 1-20, 21-40, ...): mean and median ms
        over the answered turns of that tenth, every round together."""
        n = self.sizes.long_turns
        bounds = [(k * n // 10, (k + 1) * n // 10) for k in range(10)]
        result: dict[str, list[dict[str, float | None]]] = {}
        for server, rounds in self.long.items():
            result[server] = []
            for low, high in bounds:
                values = [t * 1000 for turns in rounds for t in turns[low:high] if t is not None]
                result[server].append({
                    "first_turn": low + 1, "last_turn": high,
                    "mean_ms": statistics.fmean(values) if values else None,
                    "median_ms": statistics.median(values) if values else None,
                })
        return result

    def added_pairs(self) -> list[tuple[str, str]]:
        """(gateway server, bare Runner) pairs of the long chat that both ran: the whole history
        posted (`sse`, `ws`), then only the last message (`sse-last`, `ws-last`)."""
        return [(t, b) for t in GATEWAY_SERVERS if t in self.long
                for b in ("runner", "runner-memory") if b in self.long]

    def _differences(self, server: str, base: str) -> list[list[float | None]]:
        """Per round of the long chat, each turn of `server` less `base`'s turn of the same number
        (the two ran one beside the other), in ms; None where either failed."""
        return [[None if d is None else d * 1000 for d in paired_by_turn(turns, base_turns)]
                for turns, base_turns in zip(self.long.get(server, []), self.long.get(base, []), strict=False)]

    def added_by_tenth(self, server: str, base: str) -> list[dict[str, float | None]]:
        """For each tenth of the long chat: the mean and median of the turn-by-turn differences
        of `server` over `base` (`_differences`), in ms."""
        n = self.sizes.long_turns
        rounds = self._differences(server, base)
        rows = []
        for k in range(10):
            low, high = k * n // 10, (k + 1) * n // 10
            values = [d for r in rounds for d in r[low:high] if d is not None]
            rows.append({"first_turn": low + 1, "last_turn": high,
                         "mean_ms": statistics.fmean(values) if values else None,
                         "median_ms": statistics.median(values) if values else None})
        return rows

    def added_growth(self, server: str, base: str) -> float | None:
        """How much more `server` adds over `base` in the long chat's last tenth than in its first:
        the difference of the two tenths' medians of the turn-by-turn differences, in ms."""
        tenths = self.added_by_tenth(server, base)
        first, last = tenths[0]["median_ms"], tenths[-1]["median_ms"]
        return None if first is None or last is None else last - first

    def added_trend(self, server: str, base: str) -> float | None:
        """The same growth from every turn rather than two tenths: a Theil-Sen line (the median of
        the slopes between every two turns, which single slow turns do not tilt) through each
        turn's median difference over the rounds, from the chat's first turn to its last, in ms."""
        rounds = self._differences(server, base)
        points = [(k, statistics.median(values)) for k in range(self.sizes.long_turns)
                  if (values := [d for r in rounds if k < len(r) and (d := r[k]) is not None])]
        slopes = [(y2 - y1) / (k2 - k1) for i, (k1, y1) in enumerate(points) for k2, y2 in points[i + 1:]]
        return statistics.median(slopes) * (self.sizes.long_turns - 1) if slopes else None

    def throughput(self) -> dict[tuple[str, str, int], float | None]:
        """The table's turns/s of the servers and chats of the throughput chart, by
        (server, chats, clients); None for a load with no answered turn."""
        return {key: load.turns_per_s for key, load in self.loads.items()
                if key[0] in THROUGHPUT_SERVERS and key[1] in THROUGHPUT_MODES}

    def chart(self, directory: Path) -> Path | None:
        """The long chat's median ms per turn by tenth, one line per server, as a PNG in `directory`;
        returns its path. When the table ran, also draws its throughput (`throughput_chart`) into
        `directory` / THROUGHPUT_CHART_NAME.

        Medians, not means: one turn that waits on something else on the machine (a collection in
        another process, a neighbour's burst) can triple a tenth's mean and hide the trend; the
        table has both."""
        rates = self.throughput()
        if rates:
            log(f"chart written to {throughput_chart(rates, directory / THROUGHPUT_CHART_NAME)}")
        tenths = self.tenths()
        if not tenths:
            return None
        plt = _pyplot()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / CHART_NAME
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
        labels = [f"{t['first_turn']}-{t['last_turn']}" for t in next(iter(tenths.values()))]
        for number, server in enumerate(LONG_SERVERS):
            if server in tenths:
                ys = [t["median_ms"] for t in tenths[server]]
                # One colour per server whichever are drawn; the last-message chats dashed.
                ax.plot(range(1, 11), [float("nan") if y is None else y for y in ys], marker="o",
                        label=LONG_LABELS[server], color=f"C{number}",
                        linestyle="--" if GATEWAY_SERVERS.get(server, ("", False))[1] else "-")
        ax.set_xticks(range(1, 11), labels, rotation=30)
        ax.set_xlabel("turns of the chat (tenths)")
        ax.set_ylabel("ms per turn (median of the tenth)")
        posted = " or ".join(what for what, drawn in (
            ("whole history", any(s in tenths for s, (_, last) in GATEWAY_SERVERS.items() if not last)),
            ("last message", any(s in tenths for s, (_, last) in GATEWAY_SERVERS.items() if last))) if drawn)
        ax.set_title(f"Per-turn time over a {self.sizes.long_turns}-turn chat, 1 client, `{PROMPT}`"
                     + (f", {posted} posted" if posted else ""), fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path

    def _baseline(self, server: str, mode: str, clients: int) -> Load | None:
        category = "reused" if mode == "reused" else "fresh"
        return self.loads.get((server, category, clients))

    def markdown_table(self) -> str:
        lines = [
            "| server | chats | clients | turns ok / failed | turns/s | ÷ bare Runner | ÷ api_server "
            "| turn p50 / p99 ms | first text p50 / p99 ms | server CPU ms / turn |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for (server, mode, clients), load in sorted(
            self.loads.items(), key=lambda kv: (kv[0][2], TABLE_ROWS.index(kv[0][:2]))
        ):
            errors = load.errors()
            failed = f"{load.failed}" + (" (" + ", ".join(f"{k}: {v}" for k, v in errors.items()) + ")"
                                         if errors else "")
            lines.append(
                f"| {SERVER_LABELS[server]} | {CHAT_LABELS[(server, mode)]} | {clients} | {len(load.ok):,} / {failed} "
                f"| {_fmt(load.turns_per_s)} | {_ratio(load, self._baseline('runner', mode, clients))} "
                f"| {_ratio(load, self._baseline('api_server', mode, clients))} "
                f"| {_fmt(load.ms('total', 'p50'))} / {_fmt(load.ms('total', 'p99'))} "
                f"| {_fmt(load.ms('ttft', 'p50'))} / {_fmt(load.ms('ttft', 'p99'))} "
                f"| {_fmt(load.cpu_ms_per_turn, 2)} |"
            )
        return "\n".join(lines)

    def added_first_text(self) -> list[dict[str, Any]]:
        """At 1 client: the gateway's time to first text minus the bare Runner's, at p50 and p99.
        From the lock-step comparison when it ran (`run_first_text`), with the percentiles of the
        turn-by-turn differences beside the differences of percentiles; else from the table's rows
        at 1 client (differences of percentiles only: those turns are not paired)."""
        rows = []
        for transport in ("sse", "ws"):
            for mode in ("fresh", "reused"):
                if self.first_text:
                    runner, gateway = self.first_text.get(("runner", mode)), self.first_text.get((transport, mode))
                else:
                    runner, gateway = self.loads.get(("runner", mode, 1)), self.loads.get((transport, mode, 1))
                if runner is None or gateway is None:
                    continue
                row: dict[str, Any] = {"transport": transport, "chats": mode, "turns": len(gateway.ok)}
                pairs = paired([s.ttft if s.ok else None for s in gateway.samples],
                               [s.ttft if s.ok else None for s in runner.samples]) if self.first_text else []
                by_pair = percentiles(pairs, (50, 99))
                for p in ("p50", "p99"):
                    r, g = runner.ms("ttft", p), gateway.ms("ttft", p)
                    row[f"runner_{p}_ms"], row[f"gateway_{p}_ms"] = _round(r, 2), _round(g, 2)
                    row[f"added_{p}_ms"] = None if r is None or g is None else round(g - r, 2)
                    value = by_pair.get(p)
                    row[f"paired_{p}_ms"] = None if value is None else round(value * 1000, 2)
                rows.append(row)
        return rows

    def markdown_first_text(self) -> str:
        lines = [
            "| gateway | chats | turns | bare Runner first text p50 / p99 ms | gateway first text p50 / p99 ms "
            "| added p50 / p99 ms | turn-by-turn differences p50 / p99 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in self.added_first_text():
            lines.append(
                f"| {SERVER_LABELS[row['transport']]} | {CHAT_LABELS[(row['transport'], row['chats'])]} "
                f"| {row['turns']:,} "
                f"| {_fmt(row['runner_p50_ms'], 2)} / {_fmt(row['runner_p99_ms'], 2)} "
                f"| {_fmt(row['gateway_p50_ms'], 2)} / {_fmt(row['gateway_p99_ms'], 2)} "
                f"| **{_fmt(row['added_p50_ms'], 2)} / {_fmt(row['added_p99_ms'], 2)}** "
                f"| {_fmt(row['paired_p50_ms'], 2)} / {_fmt(row['paired_p99_ms'], 2)} |"
            )
        return "\n".join(lines)

    def markdown_long(self) -> str:
        tenths = self.tenths()
        servers = [s for s in LONG_SERVERS if s in tenths]
        if not servers:
            return "No long chat was run."
        head = " | ".join(f"{LONG_LABELS[s]} mean / median" for s in servers)
        extra = self.added_pairs()
        added = {pair: self.added_by_tenth(*pair) for pair in extra}
        extra_head = "".join(f" | {LONG_LABELS[t]} over {LONG_LABELS[b]} mean / median" for t, b in extra)
        lines = [f"| turns | {head}{extra_head} |", "|---" * (1 + len(servers) + len(extra)) + "|"]
        for k in range(10):
            first = tenths[servers[0]][k]
            cells = [f"{_fmt(tenths[s][k]['mean_ms'])} / {_fmt(tenths[s][k]['median_ms'])}" for s in servers]
            cells += [f"{_signed(added[pair][k]['mean_ms'])} / {_signed(added[pair][k]['median_ms'])}"
                      for pair in extra]
            lines.append(f"| {first['first_turn']}-{first['last_turn']} | " + " | ".join(cells) + " |")
        growth = [f"{LONG_LABELS[t]} over {LONG_LABELS[b]} **{_signed(self.added_growth(t, b))}** "
                  f"({_signed(self.added_trend(t, b))})" for t, b in extra]
        lines += ["", "Added time, last tenth less first (medians of the turn-by-turn differences), and in "
                  "brackets the same from a line through every turn's difference (Theil-Sen, first turn to "
                  "last): " + "; ".join(growth) + " ms."]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "prompt": PROMPT,
            "sizes": {"turns": self.sizes.turns, "chat_turns": self.sizes.chat_turns, "rounds": self.sizes.rounds,
                      "long_turns": self.sizes.long_turns, "long_rounds": self.sizes.long_rounds,
                      "first_text_turns": self.sizes.first_text_turns,
                      "long_servers": [s for s in LONG_SERVERS if s in self.long]},
            "table": [load.as_json() for load in self.loads.values()],
            "added_first_text_1_client": self.added_first_text(),
            "long_chat": {"by_tenth": self.tenths(),
                          "added_by_tenth": {f"{t}-over-{b}": self.added_by_tenth(t, b)
                                             for t, b in self.added_pairs()},
                          "added_growth_ms": {f"{t}-over-{b}": {"tenths": _round(self.added_growth(t, b), 2),
                                                                "trend": _round(self.added_trend(t, b), 2)}
                                              for t, b in self.added_pairs()},
                          "loads": {s: load.as_json() for s, load in self.long_loads.items()},
                          "turn_ms": {s: [[_round(t * 1000 if t is not None else None, 2) for t in turns]
                                          for turns in rounds] for s, rounds in self.long.items()}},
        }


def _pyplot() -> Any:
    """matplotlib's pyplot (the `bench` extra) on the Agg backend: no display, files only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_chart(rates: Mapping[tuple[str, str, int], float | None], path: Path) -> Path:
    """Grouped bars of turns answered per second, one group per (clients, chats) and one bar per
    server of THROUGHPUT_SERVERS, written as a PNG to `path` (its folder is made); returns `path`.

    `rates` maps (server, chats, clients) to turns/s, chats being "fresh" or "reused" (a turn is one
    chat request, plus the session's creation in ADK's fresh turns). A missing or None rate leaves
    its bar out, marked "—"; keys of other servers or chats are ignored. No I/O but the file."""
    clients = sorted({c for (server, mode, c) in rates if server in THROUGHPUT_SERVERS and mode in THROUGHPUT_MODES})
    groups = [(c, mode) for c in clients for mode in THROUGHPUT_MODES]
    servers = [s for s in THROUGHPUT_SERVERS if any(rates.get((s, mode, c)) is not None for c, mode in groups)]
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    width = 0.8 / max(len(servers), 1)
    for k, server in enumerate(servers):
        values = [rates.get((server, mode, c)) for c, mode in groups]
        xs = [g - 0.4 + width * (k + 0.5) for g in range(len(groups))]
        # One colour per server whichever are drawn, so that charts of different runs compare.
        bars = ax.bar(xs, [0.0 if v is None else v for v in values], width, label=THROUGHPUT_LABELS[server],
                      color=f"C{THROUGHPUT_SERVERS.index(server)}")
        ax.bar_label(bars, labels=["—" if v is None else f"{v:,.0f}" for v in values], fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)),
                  [f"{c} client{'s' if c != 1 else ''}\n{mode} chats" for c, mode in groups])
    ax.set_ylabel("requests/s (turns answered per second)")
    ax.set_title(f"Throughput on the scripted demo agent, `{PROMPT}`: ADK and the gateway", fontsize=10)
    top = max((v for s in servers for c, mode in groups if (v := rates.get((s, mode, c))) is not None), default=0.0)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1.0)  # room above the bars for their labels and the legend
    ax.grid(axis="y", alpha=0.3)
    if servers:
        ax.legend(fontsize=8, loc="upper center", ncols=len(servers))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ratio(load: Load, base: Load | None) -> str:
    if base is None or load.turns_per_s is None or not base.turns_per_s:
        return "—"
    return f"{load.turns_per_s / base.turns_per_s:.2f}x"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+,.1f}"


# --- many turns, with the RSS sampled ------------------------------------------------------


async def churn(url: str, rss_mib: Callable[[], float], *, total: int, warmup: int, every: int,
                sse_clients: int, ws_clients: int, duration_s: float,
                between: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
    """Fresh chats on the gateway at `url` from SSE and WebSocket clients together, in segments of
    `every` turns (split between the two in proportion to their clients). RSS is read after the
    `warmup` turns and after each segment, while no run is active; stops at `total` turns or after
    `duration_s`. `between` runs after each segment (e.g. to read /metrics)."""
    deadline = time.perf_counter() + duration_s
    samples: list[dict[str, Any]] = []
    done = ok = 0
    errors: dict[str, int] = {}
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
        while done < total and time.perf_counter() < deadline:
            segment = min(warmup if done == 0 else every, total - done)
            sse_turns = segment * sse_clients // (sse_clients + ws_clients)
            remaining = deadline - time.perf_counter()
            loads = await asyncio.gather(*(
                drive([GatewayClient(http, url, transport) for _ in range(clients)], turns, 1, remaining)
                for transport, clients, turns in (("sse", sse_clients, sse_turns),
                                                  ("ws", ws_clients, segment - sse_turns))
                if clients and turns
            ))
            for load in loads:
                done += len(load.samples)
                ok += len(load.ok)
                for kind, count in load.errors().items():
                    errors[kind] = errors.get(kind, 0) + count
            if between is not None:
                await between()
            samples.append({"turns": done, "rss_mib": round(rss_mib(), 1),
                            "elapsed_s": round(time.perf_counter() - started, 1)})
            log(f"  {done:,} turns: RSS {samples[-1]['rss_mib']} MiB")
    first, last = (samples[0], samples[-1]) if samples else (None, None)
    growth = (last["rss_mib"] - first["rss_mib"]) * 100 / first["rss_mib"] if first and last else None
    return {
        "turns": done, "ok": ok, "errors": errors, "elapsed_s": round(time.perf_counter() - started, 1),
        "sse_clients": sse_clients, "ws_clients": ws_clients, "warmup_turns": warmup, "every": every,
        "samples": samples, "rss_after_warmup_mib": first and first["rss_mib"],
        "rss_end_mib": last and last["rss_mib"], "growth_percent": _round(growth, 1),
        "stopped_by": "turns" if done >= total else "duration",
    }
