"""One small driver per transport, so that each contract scenario is written once.

A `Gateway` is one gateway under test reached over one transport: `open()` starts a request (a
POST, a `send` frame, `MemoryClient.post`) and returns its `Stream`, `resume()` follows a chat's
active stream from a second client, `exchange()` is a whole request and its `Reply` (what a
`Conversation` posts its continuations through). A `Stream` is one response being read: chunks
one at a time, `stop()` (the stop endpoint, an `abort` frame, `MemoryClient.stop`) and
`disconnect()` (the client goes away).

Each driver checks its transport's own framing as it reads, so the scenarios only compare chunks:
SSE ends with `[DONE]`; a WebSocket response opens with `start`, numbers its chunks 0, 1, 2… and
ends with `end`; a memory response ends with its transport closed. Keep-alives are counted in the
transport's own form: SSE comments, WebSocket pings (answered by the driver), memory keep-alives.
"""

from __future__ import annotations

import abc
import asyncio
import json
import uuid
from typing import Any

import aiohttp
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient

from adk_gateway.app import Services
from adk_gateway.services.registry import Registry
from adk_gateway.transports.memory import MemoryClient, MemoryResponse
from tests.integration.support import WAIT_S, ChunkReader, Json, LiveStream, Reply, chat_body

__all__ = ["Gateway", "MemoryGateway", "SSEGateway", "Stream", "WebSocketGateway"]


class Stream(ChunkReader, abc.ABC):
    """One response being read (`until`, `take` and `rest` come with `ChunkReader`)."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.reply = Reply(status=200, headers={})

    @property
    def chunks(self) -> list[Json]:
        return self.reply.chunks

    @property
    @abc.abstractmethod
    def keepalives(self) -> int:
        """Keep-alives seen so far, in the transport's own form."""

    @abc.abstractmethod
    async def next(self) -> Json | None:
        """The next chunk; None at the end of the response (after its framing was checked)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Asks the gateway to stop this response's run, as its client does."""

    @abc.abstractmethod
    async def disconnect(self) -> None:
        """The client goes away without a word."""



class Gateway(abc.ABC):
    """One gateway under test, reached over one transport."""

    name: str

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @abc.abstractmethod
    async def open(self, chat_id: str, messages: list[Json], *, headers: dict[str, str] | None = None,
                   **extra: Any) -> Stream:
        """Starts a request for the chat with these messages (more body fields in `extra`)."""

    @abc.abstractmethod
    async def resume(self, chat_id: str, *, headers: dict[str, str] | None = None) -> Stream | None:
        """A second client follows the chat's active stream; None: nothing to follow."""

    async def exchange(self, body: Json, headers: dict[str, str]) -> Reply:
        """A whole request (a chat request body) and its answer."""
        extra = {k: v for k, v in body.items() if k not in ("id", "messages")}
        stream = await self.open(body["id"], body["messages"], headers=headers, **extra)
        if stream.reply.status != 200:  # refused before any chunk
            return stream.reply
        return await stream.rest()


# --- SSE ---------------------------------------------------------------------------------------


class SSEStream(Stream):
    def __init__(self, client: TestClient[Any, Any], chat_id: str, live: LiveStream,
                 headers: dict[str, str]) -> None:
        super().__init__(chat_id)
        self.client = client
        self.live = live
        self.headers = headers
        self.reply = live.reply

    @property
    def keepalives(self) -> int:
        return self.reply.comments.count("keep-alive")

    async def next(self) -> Json | None:
        chunk = await self.live.next()
        if chunk is None:
            assert self.reply.done, f"an SSE stream ended without [DONE]: {self.reply.types}"
        return chunk

    async def stop(self) -> None:
        async with self.client.post(f"/api/chat/{self.chat_id}/stop", json={}, headers=self.headers) as response:
            assert response.status == 200
            assert await response.json() == {"stopped": True}

    async def disconnect(self) -> None:
        self.live.close()


class SSEGateway(Gateway):
    name = "sse"

    def __init__(self, client: TestClient[Any, Any], registry: Registry) -> None:
        super().__init__(registry)
        self.client = client

    async def open(self, chat_id: str, messages: list[Json], *, headers: dict[str, str] | None = None,
                   **extra: Any) -> Stream:
        headers = dict(headers or {})
        live = await LiveStream.open(self.client, chat_body(chat_id, messages, **extra), headers=headers)
        if live.response.status != 200:
            text = await live.response.text()
            live.reply.body = json.loads(text) if text else None
            live.reply.status = live.response.status
        return SSEStream(self.client, chat_id, live, headers)

    async def resume(self, chat_id: str, *, headers: dict[str, str] | None = None) -> Stream | None:
        headers = dict(headers or {})
        live = await LiveStream.open(self.client, {}, method="GET", path=f"/api/chat/{chat_id}/stream",
                                     headers=headers)
        if live.response.status == 204:
            live.close()
            return None
        assert live.response.status == 200, live.response.status
        return SSEStream(self.client, chat_id, live, headers)


# --- WebSocket ---------------------------------------------------------------------------------


class WebSocketStream(Stream):
    """One request on a socket of its own (a second client is a second socket), closed once the
    response has ended."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, chat_id: str, request_id: str,
                 first_sequence: int = 0) -> None:
        super().__init__(chat_id)
        self.ws = ws
        self.request_id = request_id
        self.sequence = first_sequence  # the next chunk's number
        self.started = False
        self.ended = False
        self.no_active = False
        self.pings = 0

    @property
    def keepalives(self) -> int:
        return self.pings

    async def frame(self) -> Json | None:
        """The next text frame for this request, answering pings (the socket's keep-alives) on
        the way; None when the socket closed."""
        while True:
            message = await self.ws.receive()
            if message.type is WSMsgType.PING:
                self.pings += 1
                await self.ws.pong(message.data)
                continue
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None
            assert message.type is WSMsgType.TEXT, message
            frame: Json = json.loads(message.data)
            assert frame.get("requestId") == self.request_id, frame
            return frame

    async def first_frame(self) -> None:
        """Reads the request's first frame: `start`, or the `error` / `no-active` that answers it."""
        async with asyncio.timeout(WAIT_S):
            frame = await self.frame()
        assert frame is not None, "the socket closed before answering"
        assert frame["type"] in ("start", "no-active", "error"), f"a request's first frame was {frame}"
        self._take(frame)

    def _take(self, frame: Json) -> Json | None:
        """Books one frame; returns the chunk it carries, if any."""
        kind = frame["type"]
        if kind == "start":
            assert not self.started and not self.chunks, frame
            self.started = True
        elif kind == "chunk":
            assert self.started, "a chunk before `start`"
            assert frame["sequence"] == self.sequence, (frame["sequence"], self.sequence)
            self.sequence += 1
            chunk: Json = frame["chunk"]
            self.reply.chunks.append(chunk)
            return chunk
        elif kind == "end":
            self.ended = self.reply.done = True
        elif kind == "no-active":
            self.ended = self.no_active = True
        elif kind == "error":
            self.ended = True
            self.reply.status = 0
            self.reply.body = {"error": {"code": frame.get("code"), "message": frame["errorText"]}}
        else:
            raise AssertionError(f"unexpected frame {frame}")
        return None

    async def next(self) -> Json | None:
        async with asyncio.timeout(WAIT_S):
            while not self.ended:
                frame = await self.frame()
                assert frame is not None, f"the socket closed before `end`: {self.reply.types}"
                chunk = self._take(frame)
                if chunk is not None:
                    return chunk
            await self.ws.close()  # its one request has ended: the client goes, as after a page's answer
        return None

    async def stop(self) -> None:
        await self.ws.send_json({"type": "abort", "requestId": self.request_id})

    async def disconnect(self) -> None:
        await self.ws.close()


class WebSocketGateway(Gateway):
    name = "ws"

    def __init__(self, client: TestClient[Any, Any], registry: Registry) -> None:
        super().__init__(registry)
        self.client = client
        self.sockets: list[aiohttp.ClientWebSocketResponse] = []

    async def _socket(self) -> aiohttp.ClientWebSocketResponse:
        # Pings are answered by the reader (`WebSocketStream.frame`), which counts them.
        ws = await self.client.ws_connect("/api/chat/ws", autoping=False)
        self.sockets.append(ws)
        return ws

    async def open(self, chat_id: str, messages: list[Json], *, headers: dict[str, str] | None = None,
                   **extra: Any) -> Stream:
        ws = await self._socket()
        request_id = f"r-{uuid.uuid4().hex[:8]}"
        fields = {k: v for k, v in extra.items() if k in ("trigger", "messageId")}
        body = {k: v for k, v in extra.items() if k not in fields}
        await ws.send_json({"type": "send", "requestId": request_id, "id": chat_id, "messages": messages,
                            "trigger": "submit-message", **fields, "headers": dict(headers or {}), "body": body})
        stream = WebSocketStream(ws, chat_id, request_id)
        await stream.first_frame()
        return stream

    async def resume(self, chat_id: str, *, headers: dict[str, str] | None = None) -> Stream | None:
        ws = await self._socket()
        request_id = f"resume-{uuid.uuid4().hex[:8]}"
        await ws.send_json({"type": "resume", "requestId": request_id, "id": chat_id,
                            "headers": dict(headers or {}), "body": {}})
        stream = WebSocketStream(ws, chat_id, request_id)
        await stream.first_frame()
        if stream.no_active:
            await ws.close()
            return None
        return stream

    async def aclose(self) -> None:
        for ws in self.sockets:
            await ws.close()


# --- memory ------------------------------------------------------------------------------------


class MemoryStream(Stream):
    def __init__(self, client: MemoryClient, chat_id: str, response: MemoryResponse) -> None:
        super().__init__(chat_id)
        self.client = client
        self.response = response
        self.reply.status = response.status or 0
        if response.error is not None:
            self.reply.body = response.error.body()

    @property
    def keepalives(self) -> int:
        return self.response.transport.keepalives

    async def next(self) -> Json | None:
        async with asyncio.timeout(WAIT_S):
            chunk = await self.response.next()
        if chunk is None:
            self.reply.done = self.response.done
            assert self.reply.done or self.reply.status != 200, f"ended without closing: {self.reply.types}"
            return None
        self.reply.chunks.append(chunk)
        return chunk

    async def stop(self) -> None:
        assert await self.client.stop(self.chat_id) == {"stopped": True}

    async def disconnect(self) -> None:
        await self.response.disconnect()


class MemoryGateway(Gateway):
    name = "memory"

    def __init__(self, services: Services) -> None:
        super().__init__(services.registry)
        self.services = services
        self.client = MemoryClient(services.chat, services.settings)

    async def open(self, chat_id: str, messages: list[Json], *, headers: dict[str, str] | None = None,
                   **extra: Any) -> Stream:
        response = await self.client.post(chat_body(chat_id, messages, **extra), headers=headers)
        return MemoryStream(self.client, chat_id, response)

    async def resume(self, chat_id: str, *, headers: dict[str, str] | None = None) -> Stream | None:
        response = await self.client.resume(chat_id, headers=headers)
        if response.status == 204:
            return None
        return MemoryStream(self.client, chat_id, response)
