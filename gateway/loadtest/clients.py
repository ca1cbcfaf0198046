"""The client side of the protocols, as an AI SDK frontend speaks them.

- ``sse``: ``POST {url}/api/chat`` with the body of ``DefaultChatTransport``; the answer is the UI
  message stream (``data: <chunk JSON>`` events, ended by ``data: [DONE]``);
- ``ws``: the frame protocol of ``ai`` 7's ``WebSocketChatTransport`` on ``{url}/api/chat/ws``
  (client ``send``; server ``start``, ``chunk{requestId, sequence, chunk}``, ``end``, ``error``),
  and its live (audio) extension;
- ``adk``: Google ADK's own ``adk api_server`` (``POST /apps/{app}/users/{user}/sessions``, then
  ``POST /run_sse``), to compare a gateway with the server it wraps.

Every request fills a `Sample`: times from the start of the request (or of the round trip, when
one turn takes several requests), bytes, chunks, and what went wrong as a short kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from adk_gateway.loadtest.config import TOKEN_PARAM, LoadConfig, redact

__all__ = [
    "Client",
    "SSEParser",
    "Sample",
    "Tracker",
    "adk_request",
    "answer_tools",
    "assistant_message",
    "classify",
    "close_socket",
    "fold_chunks",
    "open_sse_stream",
    "sse_request",
    "user_message",
    "ws_request",
]

Json = dict[str, Any]
# Request bodies are encoded with orjson: a client that posts a whole chat history every turn
# (as `useChat` does) would otherwise spend more on `json.dumps` than the server spends reading it.
JSON_HEADERS = {"Content-Type": "application/json"}


def user_message(text: str, message_id: str | None = None) -> Json:
    """A UI message from the user, as `useChat` posts it."""
    return {"id": message_id or f"u-{uuid.uuid4().hex[:16]}", "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant_message(message_id: str | None, text: str) -> Json:
    return {
        "id": message_id or f"a-{uuid.uuid4().hex[:16]}",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": text, "state": "done"}],
    }


@dataclass(slots=True)
class Sample:
    """One request (one turn, one live utterance, one held connection). Times are seconds from the
    moment it was sent."""

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
    dropped: bool = False  # --rate: arrived while --max-in-flight requests were running; never sent
    lag: float | None = None  # --rate: how late it was sent after its scheduled time
    posts: int = 0  # requests of the turn (a POST or a `send` frame each): more with approvals, tools
    approvals: int = 0  # approvals answered
    tool_outputs: int = 0  # browser tool outputs sent
    first_audio: float | None = None  # live: from the end of the utterance to the first audio out
    audio_ms_sent: int = 0
    audio_bytes: int = 0  # live: PCM received
    message_id: str | None = None
    text: str = ""


class Tracker:
    """Follows the chunks of one response and fills its sample."""

    def __init__(self, sample: Sample, started: float, abort_after: int | None,
                 keep: list[Json] | None = None) -> None:
        self.sample = sample
        self.started = started
        self.abort_after = abort_after
        self.keep = keep  # every chunk, for a client that folds them into a message
        self.text_parts: list[str] = []
        self.chunks = 0
        self.finished = False  # this response's `finish`
        self.done = False  # [DONE] or `end` seen

    def chunk(self, chunk: Any) -> bool:
        """Records one UI message chunk; True when the client should disconnect now."""
        now = time.perf_counter() - self.started
        s = self.sample
        s.chunks += 1
        self.chunks += 1
        if s.ttfc is None:
            s.ttfc = now
        if not isinstance(chunk, dict):
            return False
        if self.keep is not None:
            self.keep.append(chunk)
        kind = chunk.get("type")
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
            self.finished = True
        elif kind == "error" and s.error is None:
            s.error, s.detail = "error_chunk", str(chunk.get("errorText", ""))[:200]
        return self.abort_after is not None and self.chunks >= self.abort_after

    def end(self) -> None:
        s = self.sample
        s.total = time.perf_counter() - self.started
        s.text = "".join(self.text_parts)
        if s.aborted:
            s.ok = s.error is None
            return
        if s.error is None and not self.finished:
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
    body: Json,
    headers: dict[str, str],
    sample: Sample,
    *,
    abort_after: int | None = None,
    started: float | None = None,
    keep: list[Json] | None = None,
) -> None:
    """POSTs one chat request and reads its UI message stream into `sample`."""
    started = time.perf_counter() if started is None else started
    tracker = Tracker(sample, started, abort_after, keep)
    try:
        async with session.post(url, data=orjson.dumps(body), headers={**JSON_HEADERS, **headers}) as response:
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
                        chunk = orjson.loads(event)
                    except orjson.JSONDecodeError:
                        sample.error, sample.detail = "bad_json", event[:200]
                        continue
                    if tracker.chunk(chunk):
                        sample.aborted = True
                        response.close()  # drop the connection mid-stream, as a closed tab does
                        return
    finally:
        tracker.end()


async def close_socket(ws: aiohttp.ClientWebSocketResponse | None) -> None:
    """Closes a client's socket, if open, waiting at most 5 s: a server that never answers the
    close handshake does not hold the client (the session's close drops the connection)."""
    if ws is not None and not ws.closed:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await ws.close()


async def request_frames(
    ws: aiohttp.ClientWebSocketResponse, sample: Sample, request_id: str
) -> AsyncGenerator[Json, None]:
    """The decoded frames of one request on a socket that may carry others, until the socket ends
    (closed or failed: `sample` then says which). Binary frames and other requests' frames are
    skipped; a frame that is not JSON is recorded as `bad_json` and skipped. Every text frame's
    bytes count toward the sample."""
    while True:
        message = await ws.receive()
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
            sample.error, sample.detail = "ws_closed", f"close code {ws.close_code}"
            return
        if message.type is aiohttp.WSMsgType.ERROR:
            sample.error, sample.detail = "ws_error", repr(ws.exception())[:200]
            return
        if message.type is not aiohttp.WSMsgType.TEXT:
            continue
        sample.bytes += len(message.data.encode("utf-8"))
        try:
            frame = orjson.loads(message.data)
        except orjson.JSONDecodeError:
            sample.error, sample.detail = "bad_json", message.data[:200]
            continue
        if isinstance(frame, dict) and frame.get("requestId") in (request_id, None):
            yield frame


def request_over(frame: Json, tracker: Tracker) -> bool:
    """Whether `frame` ends its request: `end` (the answer is complete), or `error` and `no-active`
    (the sample records them as errors)."""
    kind = frame.get("type")
    if kind == "end":
        tracker.done = True
    elif kind == "error":
        tracker.sample.error = f"ws_error_{frame.get('code') or 'frame'}"
        tracker.sample.detail = str(frame.get("errorText", ""))[:200]
    elif kind == "no-active":
        tracker.sample.error = "ws_no_active"
    else:
        return False
    return True


async def ws_request(
    ws: aiohttp.ClientWebSocketResponse,
    frame: Json,
    sample: Sample,
    *,
    abort_after: int | None = None,
    started: float | None = None,
    keep: list[Json] | None = None,
) -> None:
    """Sends one `send` frame on an open socket and reads its frames until `end` or `error`."""
    started = time.perf_counter() if started is None else started
    tracker = Tracker(sample, started, abort_after, keep)
    try:
        await ws.send_str(orjson.dumps(frame).decode())
        async with contextlib.aclosing(request_frames(ws, sample, frame["requestId"])) as frames:
            async for data in frames:
                if data.get("type") == "chunk":
                    if tracker.chunk(data.get("chunk")):
                        sample.aborted = True
                        await ws.close()
                        return
                elif request_over(data, tracker):
                    return
    finally:
        tracker.end()


async def adk_request(  # noqa: PLR0917  (the benchmarks call it with every argument in place)
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
        async with session.post(f"{base}/run_sse", data=orjson.dumps(body), headers=JSON_HEADERS) as response:
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
                        event = orjson.loads(event_text)
                    except orjson.JSONDecodeError:
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
    body: Json,
    *,
    headers: dict[str, str] | None = None,
    until_chunks: int = 1,
    timeout_s: float = 30.0,
) -> aiohttp.ClientResponse:
    """Opens a chat stream and reads until `until_chunks` chunks arrived; returns the open response
    (the caller holds it, then closes it to disconnect). Raises on a non-200 status or a timeout."""
    response: aiohttp.ClientResponse | None = None
    try:
        async with asyncio.timeout(timeout_s):
            response = await session.post(url, data=orjson.dumps(body), headers={**JSON_HEADERS, **(headers or {})})
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


# --- the message a client keeps --------------------------------------------------------------


def _tool_name(part: Json) -> str | None:
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName"))
    kind = str(part.get("type", ""))
    return kind.removeprefix("tool-") if kind.startswith("tool-") else None


def fold_chunks(message: Json, chunks: list[Json]) -> None:
    """Folds a response's chunks into the assistant UI message, as the AI SDK's
    `processUIMessageStream` does, so that the next POST carries what a browser would post."""
    parts: list[Json] = message["parts"]
    active: dict[Any, Json] = {}

    def tool_part(call_id: Any) -> Json | None:
        for part in reversed(parts):
            if _tool_name(part) is not None and part.get("toolCallId") == call_id:
                return part
        return None

    for chunk in chunks:
        kind = chunk.get("type")
        if kind == "start":
            if isinstance(chunk.get("messageId"), str):
                message["id"] = chunk["messageId"]
        elif kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "finish-step":
            active.clear()
        elif kind in ("text-start", "reasoning-start"):
            active[chunk.get("id")] = {"type": str(kind).split("-")[0], "text": "", "state": "streaming"}
            parts.append(active[chunk.get("id")])
        elif kind in ("text-delta", "reasoning-delta", "text-end", "reasoning-end"):
            text = active.get(chunk.get("id"))
            if text is None:
                continue
            if kind.endswith("-delta"):
                text["text"] += str(chunk.get("delta", ""))
            else:
                text["state"] = "done"
        elif kind in ("tool-input-start", "tool-input-available"):
            tool = tool_part(chunk.get("toolCallId"))
            if tool is None:
                tool = {"type": f"tool-{chunk.get('toolName')}", "toolCallId": chunk.get("toolCallId")}
                parts.append(tool)
            if chunk.get("providerExecuted") is not None:
                tool["providerExecuted"] = chunk["providerExecuted"]
            if kind == "tool-input-start":
                tool["state"] = "input-streaming"
            else:
                tool.update(state="input-available", input=chunk.get("input"))
        elif kind in _TOOL_UPDATES:
            tool = tool_part(chunk.get("toolCallId"))
            if tool is not None:
                tool.update(_TOOL_UPDATES[kind](chunk))


_TOOL_UPDATES: dict[str, Callable[[Json], Json]] = {
    "tool-approval-request": lambda c: {"state": "approval-requested", "approval": {"id": c.get("approvalId")}},
    "tool-output-available": lambda c: {"state": "output-available", "output": c.get("output")},
    "tool-output-error": lambda c: {"state": "output-error", "errorText": c.get("errorText")},
    "tool-output-denied": lambda _c: {"state": "output-denied"},
}


def answer_tools(message: Json, output: Any) -> tuple[int, int]:
    """What a browser does when a response ends waiting (`finish{tool-calls}`): approve every
    approval request (`addToolApprovalResponse`) and give every browser tool call waiting for
    its result `output` (`addToolOutput`). Returns (approvals answered, outputs given)."""
    approvals = outputs = 0
    for part in message["parts"]:
        if _tool_name(part) is None:
            continue
        if part.get("state") == "approval-requested":
            part["state"] = "approval-responded"
            part["approval"] = {**part.get("approval", {}), "approved": True}
            approvals += 1
        elif part.get("state") == "input-available" and not part.get("providerExecuted"):
            part.update(state="output-available", output=output)
            outputs += 1
    return approvals, outputs


# --- one simulated user ----------------------------------------------------------------------


def classify(exc: BaseException) -> tuple[str, str]:
    """An exception as an error kind and a detail without credentials."""
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


class Client:
    """One simulated user: its own chat (when reused) and its own socket (ws)."""

    def __init__(self, number: int, cfg: LoadConfig, http: aiohttp.ClientSession) -> None:
        self.number = number
        self.cfg = cfg
        self.http = http
        self.base = cfg.url.rstrip("/")
        self.chat_id = self.new_chat_id()
        self.history: list[Json] = []
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.adk_session: str | None = None
        self.user = cfg.user or ("bench-user" if cfg.transport != "adk" else f"bench-user-{number}")

    @staticmethod
    def new_chat_id() -> str:
        return f"bench-{uuid.uuid4().hex[:20]}"

    def new_chat(self) -> None:
        self.chat_id, self.history, self.adk_session = self.new_chat_id(), [], None

    def headers(self) -> dict[str, str]:
        """Headers of every request: --header and --user. Also a WebSocket frame's `headers`, so
        they never carry the token (the socket's handshake does)."""
        headers = dict(self.cfg.headers)
        if self.cfg.user:
            headers.setdefault("x-user-id", self.cfg.user)
        return headers

    def http_headers(self) -> dict[str, str]:
        """Headers of an HTTP request to the gateway: `headers()` plus the bearer token."""
        headers = self.headers()
        if self.cfg.token is not None:
            headers["Authorization"] = f"Bearer {self.cfg.token}"
        return headers

    async def socket(self) -> aiohttp.ClientWebSocketResponse:
        """The client's WebSocket, opened when it has none."""
        if self.ws is None or self.ws.closed:
            url = self.base.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
            # As a browser does it: the token in the URL (the ai 7 transport's `params`), not a header.
            params = {TOKEN_PARAM: self.cfg.token} if self.cfg.token is not None else None
            self.ws = await self.http.ws_connect(url + self.cfg.ws_path, headers=self.headers(), params=params,
                                                 autoping=True, max_msg_size=0)
        return self.ws

    async def exchange(self, body: Json, sample: Sample, *, started: float, keep: list[Json] | None = None) -> None:
        """One chat request (`body` as `DefaultChatTransport` posts it) over the configured
        transport; its response goes into `sample` (and its chunks into `keep`)."""
        cfg = self.cfg
        sample.posts += 1
        if cfg.transport == "sse":
            await sse_request(self.http, self.base + cfg.sse_path, body, self.http_headers(), sample,
                              abort_after=cfg.abort_after, started=started, keep=keep)
            return
        opened = self.ws is None or self.ws.closed
        connecting = time.perf_counter()
        ws = await self.socket()
        if opened and cfg.ws_connection == "request":
            sample.setup += time.perf_counter() - connecting
        frame = {"type": "send", "requestId": f"r-{uuid.uuid4().hex[:16]}", **body, "headers": self.headers(),
                 "body": {}}
        try:
            await ws_request(ws, frame, sample, abort_after=cfg.abort_after, started=started, keep=keep)
        finally:
            if sample.aborted or sample.error in ("ws_closed", "ws_error"):
                await self.close()

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        await close_socket(ws)
