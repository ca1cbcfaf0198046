"""A bounded load generator for AI SDK chat endpoints.

Speaks what a Vercel AI SDK frontend speaks:

- ``sse``: ``POST {url}/api/chat`` with the body of ``DefaultChatTransport`` and reads the UI
  message stream (``data: <chunk JSON>`` events, ended by ``data: [DONE]``);
- ``ws``: the frame protocol of ``ai`` 7's ``WebSocketChatTransport`` on ``{url}/api/chat/ws``
  (client ``send``; server ``start``, ``chunk{requestId, sequence, chunk}``, ``end``, ``error``);
- ``adk``: Google ADK's own ``adk api_server`` (``POST /apps/{app}/users/{user}/sessions``, then
  ``POST /run_sse``), to compare a gateway with the server it wraps.

Per request it measures the time to the first chunk (TTFC), to the first text delta (TTFT), to the
``finish`` chunk, and to the end of the response, plus bytes, chunks and text deltas. It prints a
JSON summary (req/s, tokens/s, p50/p95/p99, error counts) and can write it to a file.

It always stops by itself: after ``--requests`` requests or ``--duration`` seconds, whichever
comes first; each request also has a ``--timeout``. Only loopback targets are allowed unless
``--allow-remote`` is given, so that a typo cannot point a load test at someone else's server.

A gateway started with ``--auth jwt`` or ``--auth api-keys`` needs ``--token`` (a JWT or an API
key): it goes out as ``Authorization: Bearer <token>`` on every HTTP request and as
``?access_token=<token>`` on the WebSocket URL, as a browser sends it, and never appears in the
output. ``--user`` (an ``x-user-id`` header) only names the user of a gateway with ``--auth none``.

    python -m tests.bench.loadgen --url http://127.0.0.1:8080 --transport sse \\
        --concurrency 10 --requests 500 --prompt '/stream 20 0'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

__all__ = [
    "LoadConfig",
    "Sample",
    "TargetRefused",
    "check_target",
    "main",
    "open_sse_stream",
    "percentiles",
    "run_load",
    "summarize",
    "user_message",
]

Transport = Literal["sse", "ws", "adk"]
ChatMode = Literal["fresh", "reused"]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})
SSE_PATH = "/api/chat"
WS_PATH = "/api/chat/ws"
TOKEN_PARAM = "access_token"
_CREDENTIAL = re.compile(r"(access_token=)[^&\s\"']+|(Bearer\s+)[^\s\"',]+", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` without credentials: error details quote URLs (the WebSocket's carries the token)."""
    return _CREDENTIAL.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", text)


class TargetRefused(ValueError):
    """The URL points at a host that is not loopback and --allow-remote was not given."""


def check_target(url: str, allow_remote: bool = False) -> None:
    """Refuses anything but http(s)/ws(s) URLs on a loopback host, unless `allow_remote`.

    The host is checked by name or literal address only; no DNS lookup is made.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https", "ws", "wss"}:
        raise TargetRefused(f"unsupported URL scheme {parts.scheme!r} (use http:// or https://)")
    host = (parts.hostname or "").lower()
    if not host:
        raise TargetRefused(f"no host in URL {url!r}")
    if allow_remote:
        return
    if host in LOOPBACK_NAMES:
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise TargetRefused(
        f"refusing to load-test {host!r}: only loopback hosts (localhost, 127.0.0.0/8, ::1) are allowed "
        "by default; pass --allow-remote if you own that server"
    )


# --- requests ------------------------------------------------------------------------------


def user_message(text: str, message_id: str | None = None) -> dict[str, Any]:
    """A UI message from the user, as `useChat` posts it."""
    return {"id": message_id or f"u-{uuid.uuid4().hex[:16]}", "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant_message(message_id: str | None, text: str) -> dict[str, Any]:
    return {
        "id": message_id or f"a-{uuid.uuid4().hex[:16]}",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": text, "state": "done"}],
    }


@dataclass(slots=True)
class Sample:
    """One request. Times are seconds from the moment the request was sent."""

    index: int
    chat_id: str
    ok: bool = False
    error: str | None = None  # a short kind: http_409, timeout, connect, error_chunk, no_finish, ...
    detail: str | None = None
    status: int | None = None
    ttfc: float | None = None  # first UI message chunk (for adk: first event)
    ttft: float | None = None  # first text delta
    finish: float | None = None  # the `finish` chunk (for adk: the final, non-partial model event)
    total: float | None = None  # end of the response ([DONE] and EOF; the `end` frame)
    setup: float = 0.0  # part of `total` spent before the chat request (adk: session creation; ws: connect)
    bytes: int = 0
    chunks: int = 0
    text_deltas: int = 0
    finish_reason: str | None = None
    aborted: bool = False  # the client disconnected on purpose (--abort-after)
    unfinished: bool = False  # still running when the --duration deadline hit
    message_id: str | None = None
    text: str = ""


class _Tracker:
    """Follows the chunks of one response and fills its sample."""

    def __init__(self, sample: Sample, started: float, abort_after: int | None) -> None:
        self.sample = sample
        self.started = started
        self.abort_after = abort_after
        self.text_parts: list[str] = []
        self.done = False  # [DONE] or `end` seen

    def chunk(self, chunk: Any) -> bool:
        """Records one UI message chunk; True when the client should disconnect now."""
        now = time.perf_counter() - self.started
        s = self.sample
        s.chunks += 1
        if s.ttfc is None:
            s.ttfc = now
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if kind == "text-delta":
            s.text_deltas += 1
            if s.ttft is None:
                s.ttft = now
            self.text_parts.append(str(chunk.get("delta", "")))
        elif kind == "start" and isinstance(chunk.get("messageId"), str):
            s.message_id = chunk["messageId"]
        elif kind == "finish":
            s.finish = now
            s.finish_reason = chunk.get("finishReason")
        elif kind == "error" and s.error is None:
            s.error, s.detail = "error_chunk", str(chunk.get("errorText", ""))[:200]
        return self.abort_after is not None and s.chunks >= self.abort_after

    def end(self) -> None:
        s = self.sample
        s.total = time.perf_counter() - self.started
        s.text = "".join(self.text_parts)
        if s.aborted:
            s.ok = s.error is None
            return
        if s.error is None and s.finish is None:
            s.error = "no_finish" if self.done else "truncated"
        if s.error is None and s.finish_reason == "error":
            s.error = "finish_error"
        s.ok = s.error is None


class SSEParser:
    """Incremental `text/event-stream` parser: feed bytes, get each event's data."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, data: bytes) -> Iterator[str]:
        self._buffer += data
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                return
            line = self._buffer[:newline].rstrip(b"\r")
            self._buffer = self._buffer[newline + 1 :]
            if not line:
                if self._data:
                    event = b"\n".join(self._data).decode("utf-8", errors="replace")
                    self._data = []
                    yield event
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            # comments (": keep-alive") and other fields (event:, id:, retry:) are ignored


async def sse_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    sample: Sample,
    abort_after: int | None = None,
) -> None:
    """POSTs one chat request and reads its UI message stream into `sample`."""
    started = time.perf_counter()
    tracker = _Tracker(sample, started, abort_after)
    try:
        async with session.post(url, json=body, headers=headers) as response:
            sample.status = response.status
            if response.status != 200:
                raw = await response.read()
                sample.bytes += len(raw)
                sample.error, sample.detail = f"http_{response.status}", raw[:200].decode("utf-8", "replace")
                return
            parser = SSEParser()
            async for data in response.content.iter_any():
                sample.bytes += len(data)
                for event in parser.feed(data):
                    if event == "[DONE]":
                        tracker.done = True
                        continue
                    try:
                        chunk = json.loads(event)
                    except json.JSONDecodeError:
                        sample.error, sample.detail = "bad_json", event[:200]
                        continue
                    if tracker.chunk(chunk):
                        sample.aborted = True
                        response.close()  # drop the connection mid-stream, as a closed tab does
                        return
    finally:
        tracker.end()


async def ws_request(
    ws: aiohttp.ClientWebSocketResponse,
    frame: dict[str, Any],
    sample: Sample,
    abort_after: int | None = None,
    started: float | None = None,
) -> None:
    """Sends one `send` frame on an open socket and reads its frames until `end` or `error`."""
    started = time.perf_counter() if started is None else started
    tracker = _Tracker(sample, started, abort_after)
    request_id = frame["requestId"]
    try:
        await ws.send_str(json.dumps(frame, separators=(",", ":")))
        while True:
            message = await ws.receive()
            if message.type is not aiohttp.WSMsgType.TEXT:
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                    sample.error, sample.detail = "ws_closed", f"close code {ws.close_code}"
                elif message.type is aiohttp.WSMsgType.ERROR:
                    sample.error, sample.detail = "ws_error", repr(ws.exception())[:200]
                else:
                    continue
                return
            sample.bytes += len(message.data.encode("utf-8"))
            try:
                data = json.loads(message.data)
            except json.JSONDecodeError:
                sample.error, sample.detail = "bad_json", message.data[:200]
                continue
            if data.get("requestId") not in (request_id, None):
                continue
            kind = data.get("type")
            if kind == "chunk":
                if tracker.chunk(data.get("chunk")):
                    sample.aborted = True
                    await ws.close()
                    return
            elif kind == "end":
                tracker.done = True
                return
            elif kind == "error":
                sample.error = f"ws_error_{data.get('code') or 'frame'}"
                sample.detail = str(data.get("errorText", ""))[:200]
                return
            elif kind == "no-active":
                sample.error = "ws_no_active"
                return
    finally:
        tracker.end()


async def adk_request(
    session: aiohttp.ClientSession,
    base: str,
    app: str,
    user_id: str,
    session_id: str | None,
    text: str,
    sample: Sample,
) -> str | None:
    """One turn against ADK's api_server: create a session when `session_id` is None (timed as part
    of the request), then `POST /run_sse` with `streaming: true`. Returns the session id."""
    started = time.perf_counter()
    final_texts: list[str] = []
    try:
        if session_id is None:
            async with session.post(f"{base}/apps/{app}/users/{user_id}/sessions", json={}) as response:
                raw = await response.read()
                sample.bytes += len(raw)
                if response.status != 200:
                    sample.status = response.status
                    sample.error, sample.detail = f"http_{response.status}", raw[:200].decode("utf-8", "replace")
                    return None
                session_id = str(json.loads(raw)["id"])
            sample.setup = time.perf_counter() - started
        body = {
            "app_name": app,
            "user_id": user_id,
            "session_id": session_id,
            "new_message": {"role": "user", "parts": [{"text": text}]},
            "streaming": True,
        }
        async with session.post(f"{base}/run_sse", json=body) as response:
            sample.status = response.status
            if response.status != 200:
                raw = await response.read()
                sample.bytes += len(raw)
                sample.error, sample.detail = f"http_{response.status}", raw[:200].decode("utf-8", "replace")
                return session_id
            parser = SSEParser()
            async for data in response.content.iter_any():
                sample.bytes += len(data)
                for event_text in parser.feed(data):
                    now = time.perf_counter() - started
                    try:
                        event = json.loads(event_text)
                    except json.JSONDecodeError:
                        sample.error, sample.detail = "bad_json", event_text[:200]
                        continue
                    sample.chunks += 1
                    if sample.ttfc is None:
                        sample.ttfc = now
                    if "error" in event and sample.error is None:
                        sample.error, sample.detail = "error_event", str(event["error"])[:200]
                    parts = (event.get("content") or {}).get("parts") or []
                    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
                    if event.get("partial"):
                        sample.text_deltas += len(texts)
                        if texts and sample.ttft is None:
                            sample.ttft = now
                    elif texts:
                        sample.finish = now
                        final_texts = texts
        return session_id
    finally:
        sample.total = time.perf_counter() - started
        sample.text = "".join(final_texts)
        if sample.error is None and sample.finish is None:
            sample.error = "no_finish"
        sample.ok = sample.error is None


async def open_sse_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    until_chunks: int = 1,
    timeout_s: float = 30.0,
) -> aiohttp.ClientResponse:
    """Opens a chat stream and reads until `until_chunks` chunks arrived; returns the open response
    (the caller holds it, then closes it to disconnect). Raises on a non-200 status or a timeout."""
    response: aiohttp.ClientResponse | None = None
    try:
        async with asyncio.timeout(timeout_s):
            response = await session.post(url, json=body, headers=headers or {})
            if response.status != 200:
                text = await response.text()
                raise RuntimeError(f"HTTP {response.status}: {text[:200]}")
            parser = SSEParser()
            seen = 0
            while seen < until_chunks:
                data = await response.content.readany()
                if not data:
                    raise RuntimeError("the stream ended before it was held")
                seen += sum(1 for event in parser.feed(data) if event != "[DONE]")
            return response
    except BaseException:
        if response is not None:
            response.close()  # never leave a half-read stream (and its server-side run) behind
        raise


# --- the load loop -------------------------------------------------------------------------


@dataclass(slots=True)
class LoadConfig:
    url: str = "http://127.0.0.1:8080"
    transport: Transport = "sse"
    concurrency: int = 1
    requests: int = 100
    duration_s: float = 60.0
    timeout_s: float = 30.0
    prompt: str = "/echo hello from the load generator"
    chat: ChatMode = "fresh"
    ws_connection: Literal["worker", "request"] = "worker"
    abort_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    token: str | None = None  # gateways with --auth jwt/api-keys: Bearer on HTTP, ?access_token= on ws
    adk_app: str = ""
    allow_remote: bool = False
    sse_path: str = SSE_PATH
    ws_path: str = WS_PATH

    def validate(self) -> None:
        check_target(self.url, self.allow_remote)
        if self.transport not in ("sse", "ws", "adk"):
            raise ValueError("transport must be sse, ws or adk")
        if self.chat not in ("fresh", "reused"):
            raise ValueError("chat must be fresh or reused")
        if self.concurrency < 1 or self.requests < 1:
            raise ValueError("concurrency and requests must be at least 1")
        if not (self.duration_s > 0 and self.timeout_s > 0):
            raise ValueError("duration and timeout must be positive")
        if self.abort_after is not None and self.abort_after < 1:
            raise ValueError("abort-after must be at least 1")
        if self.transport == "adk" and not self.adk_app:
            raise ValueError("--adk-app is needed with --transport adk")
        if self.token is not None:
            if self.transport == "adk":
                raise ValueError("--token is for the gateway's transports (sse, ws), not --transport adk")
            if not self.token or any(ch.isspace() for ch in self.token):
                raise ValueError("--token must be non-empty and without blanks")


class _Worker:
    """One simulated user: its own chat (when reused) and its own socket (ws)."""

    def __init__(self, number: int, cfg: LoadConfig, http: aiohttp.ClientSession) -> None:
        self.number = number
        self.cfg = cfg
        self.http = http
        self.chat_id = self._new_chat_id()
        self.history: list[dict[str, Any]] = []
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.adk_session: str | None = None
        self.user = cfg.user or ("bench-user" if cfg.transport != "adk" else f"bench-user-{number}")

    @staticmethod
    def _new_chat_id() -> str:
        return f"bench-{uuid.uuid4().hex[:20]}"

    def _headers(self) -> dict[str, str]:
        """Headers of every request: --header and --user. Also a WebSocket frame's `headers`, so
        they never carry the token (the socket's handshake does)."""
        headers = dict(self.cfg.headers)
        if self.cfg.user:
            headers.setdefault("x-user-id", self.cfg.user)
        return headers

    def _http_headers(self) -> dict[str, str]:
        """Headers of an HTTP request to the gateway: `_headers()` plus the bearer token."""
        headers = self._headers()
        if self.cfg.token is not None:
            headers["Authorization"] = f"Bearer {self.cfg.token}"
        return headers

    async def one(self, sample: Sample) -> None:
        cfg = self.cfg
        if cfg.chat == "fresh":
            self.chat_id, self.history, self.adk_session = self._new_chat_id(), [], None
        sample.chat_id = self.chat_id
        if cfg.transport == "adk":
            self.adk_session = await adk_request(
                self.http, cfg.url.rstrip("/"), cfg.adk_app, self.user, self.adk_session, cfg.prompt, sample
            )
            return
        message = user_message(cfg.prompt)
        messages = [*self.history, message]
        if cfg.transport == "sse":
            body = {"id": self.chat_id, "messages": messages, "trigger": "submit-message"}
            await sse_request(self.http, cfg.url.rstrip("/") + cfg.sse_path, body, self._http_headers(), sample,
                              cfg.abort_after)
        else:
            started = time.perf_counter()
            ws = await self._socket()
            if cfg.ws_connection == "request":
                sample.setup = time.perf_counter() - started
            frame = {
                "type": "send",
                "requestId": f"r-{uuid.uuid4().hex[:16]}",
                "id": self.chat_id,
                "trigger": "submit-message",
                "messages": messages,
                "headers": self._headers(),
                "body": {},
            }
            try:
                await ws_request(ws, frame, sample, cfg.abort_after,
                                 started=started if cfg.ws_connection == "request" else None)
            finally:
                if cfg.ws_connection == "request" or sample.aborted or sample.error in ("ws_closed", "ws_error"):
                    await self.close()
        if sample.ok and not sample.aborted:
            self.history = [*messages, assistant_message(sample.message_id, sample.text)]

    async def _socket(self) -> aiohttp.ClientWebSocketResponse:
        if self.ws is None or self.ws.closed:
            url = self.cfg.url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
            # As a browser does it: the token in the URL (the ai 7 transport's `params`), not a header.
            params = {TOKEN_PARAM: self.cfg.token} if self.cfg.token is not None else None
            self.ws = await self.http.ws_connect(url + self.cfg.ws_path, headers=self._headers(), params=params,
                                                 autoping=True, max_msg_size=0)
        return self.ws

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None and not ws.closed:
            # Bounded: a server that never answers the close handshake; the session's close drops it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await ws.close()


def _classify(exc: BaseException) -> tuple[str, str]:
    kind, detail = _classify_kind(exc)
    return kind, redact(detail)


def _classify_kind(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, TimeoutError):
        return "timeout", "no complete answer within --timeout"
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return "connect", str(exc)[:200]
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return f"ws_handshake_{exc.status}", str(exc)[:200]
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError | ConnectionResetError):
        return "disconnected", str(exc)[:200]
    if isinstance(exc, aiohttp.ClientError | OSError):
        return "client_error", f"{type(exc).__name__}: {exc}"[:200]
    return "exception", f"{type(exc).__name__}: {exc}"[:200]


async def run_load(cfg: LoadConfig, http: aiohttp.ClientSession | None = None) -> tuple[list[Sample], float, str]:
    """Runs the load. Returns the samples, the elapsed seconds and what stopped it
    ("requests" or "duration"). Never runs longer than `cfg.duration_s` (plus closing sockets)."""
    cfg.validate()
    own_session = http is None
    if http is None:
        connector = aiohttp.TCPConnector(limit=cfg.concurrency + 8, limit_per_host=0, force_close=False)
        http = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    samples: list[Sample] = []
    issued = 0
    started = time.perf_counter()
    deadline = started + cfg.duration_s
    workers = [_Worker(n, cfg, http) for n in range(cfg.concurrency)]

    async def work(worker: _Worker) -> None:
        nonlocal issued
        while issued < cfg.requests and time.perf_counter() < deadline:
            sample = Sample(index=issued, chat_id=worker.chat_id)
            issued += 1
            samples.append(sample)
            try:
                async with asyncio.timeout(cfg.timeout_s):
                    await worker.one(sample)
            except asyncio.CancelledError:
                sample.unfinished, sample.ok = True, False
                sample.error = None
                raise
            except Exception as exc:
                sample.ok = False
                sample.error, sample.detail = _classify(exc)
                await worker.close()

    tasks = [asyncio.create_task(work(w)) for w in workers]
    stopped_by = "requests"
    try:
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
        if pending:
            stopped_by = "duration"
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        elif issued < cfg.requests:
            stopped_by = "duration"
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
        if own_session:
            await http.close()
    return samples, elapsed, stopped_by


# --- the summary ---------------------------------------------------------------------------


def percentiles(values: Sequence[float], points: Sequence[float] = (50, 95, 99)) -> dict[str, float | None]:
    """p50/p95/p99 (linear interpolation between closest ranks), mean, min and max."""
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


def _ms(values: Sequence[float | None]) -> dict[str, float | None]:
    return {k: (None if v is None else round(v * 1000, 2)) for k, v in
            percentiles([v for v in values if v is not None]).items()}


def summarize(samples: Sequence[Sample], elapsed: float, cfg: LoadConfig, stopped_by: str,
              include_samples: bool = False) -> dict[str, Any]:
    done = [s for s in samples if not s.unfinished]
    ok = [s for s in done if s.ok]
    complete = [s for s in ok if not s.aborted]
    failed = [s for s in done if not s.ok]
    config = {k: v for k, v in asdict(cfg).items() if k not in ("headers", "token")}
    config["token"] = "[redacted]" if cfg.token is not None else None
    summary: dict[str, Any] = {
        "target": cfg.url,
        "config": config,
        "stopped_by": stopped_by,
        "elapsed_s": round(elapsed, 3),
        "requests": {
            "sent": len(samples),
            "ok": len(complete),
            "aborted": sum(1 for s in done if s.aborted),
            "failed": len(failed),
            "unfinished": len(samples) - len(done),
        },
        "errors": dict(Counter(s.error or "unknown" for s in failed).most_common()),
        "req_per_s": round(len(complete) / elapsed, 2) if elapsed > 0 else None,
        "tokens_per_s": round(sum(s.text_deltas for s in complete) / elapsed, 1) if elapsed > 0 else None,
        "ttfc_ms": _ms([s.ttfc for s in complete]),
        "ttft_ms": _ms([s.ttft for s in complete]),
        "finish_ms": _ms([s.finish for s in complete]),
        "total_ms": _ms([s.total for s in complete]),
        **({"setup_ms": _ms([s.setup for s in complete])} if any(s.setup for s in complete) else {}),
        "bytes": {
            "total": sum(s.bytes for s in done),
            "per_ok_request": round(sum(s.bytes for s in complete) / len(complete), 1) if complete else None,
        },
        "chunks": {
            "total": sum(s.chunks for s in done),
            "per_ok_request": round(sum(s.chunks for s in complete) / len(complete), 2) if complete else None,
            "text_deltas_per_ok_request": (
                round(sum(s.text_deltas for s in complete) / len(complete), 2) if complete else None
            ),
        },
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


# --- command line --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.loadgen",
        description="Bounded load generator for AI SDK chat endpoints (SSE UI message stream, the ai 7 "
        "WebSocket frame protocol, or ADK api_server /run_sse). Prints a JSON summary.",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="Base URL of the server.")
    parser.add_argument("--transport", choices=("sse", "ws", "adk"), default="sse")
    parser.add_argument("--concurrency", "-c", type=int, default=1, help="Simultaneous clients.")
    parser.add_argument("--requests", "-n", type=int, default=100, help="Stop after this many requests.")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="Stop after this many seconds even if requests remain (in-flight ones are cut).")
    parser.add_argument("--timeout", type=float, default=30.0, help="Per-request limit in seconds.")
    parser.add_argument("--prompt", default="/echo hello from the load generator", help="User message text.")
    parser.add_argument("--chat", choices=("fresh", "reused"), default="fresh",
                        help="fresh: a new chat per request; reused: each client keeps one chat and posts its "
                        "growing history, as useChat does.")
    parser.add_argument("--ws-connection", choices=("worker", "request"), default="worker",
                        help="ws: one socket per client (like a browser tab), or a new socket per request.")
    parser.add_argument("--abort-after", type=int, default=None, metavar="K",
                        help="Disconnect after K chunks (tests stop/cleanup paths); such requests count as aborted.")
    parser.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="Extra request header (SSE) or frame header (ws); repeatable.")
    parser.add_argument("--user", default=None,
                        help="Send x-user-id with this value (names the user only on a gateway with --auth none).")
    parser.add_argument("--token", default=None,
                        help="Access token (a JWT or an API key) for a gateway with --auth jwt or api-keys: "
                        "'Authorization: Bearer TOKEN' on HTTP requests, '?access_token=TOKEN' on the WebSocket "
                        "URL. Not for --transport adk. Never printed.")
    parser.add_argument("--adk-app", default="", help="App name for --transport adk.")
    parser.add_argument("--sse-path", default=SSE_PATH)
    parser.add_argument("--ws-path", default=WS_PATH)
    parser.add_argument("--allow-remote", action="store_true", help="Allow a non-loopback target.")
    parser.add_argument("--out", type=Path, default=None, help="Also write the JSON summary to this file.")
    parser.add_argument("--samples", action="store_true", help="Include every request in the JSON.")
    return parser


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    headers: dict[str, str] = {}
    for raw in args.header:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header needs NAME:VALUE, got {raw!r}")
        headers[name.strip()] = value.strip()
    return LoadConfig(
        url=args.url, transport=args.transport, concurrency=args.concurrency, requests=args.requests,
        duration_s=args.duration, timeout_s=args.timeout, prompt=args.prompt, chat=args.chat,
        ws_connection=args.ws_connection, abort_after=args.abort_after, headers=headers, user=args.user,
        token=args.token, adk_app=args.adk_app, allow_remote=args.allow_remote, sse_path=args.sse_path,
        ws_path=args.ws_path,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        cfg.validate()
    except ValueError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    samples, elapsed, stopped_by = asyncio.run(run_load(cfg))
    summary = summarize(samples, elapsed, cfg, stopped_by, include_samples=args.samples)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if summary["requests"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
