"""The SSE transport: `POST /api/chat`, `GET /api/chat/{chatId}/stream`, `POST /api/chat/{chatId}/stop`.

Disconnects: the app runs with aiohttp's `handler_cancellation`, so a client that goes away
cancels its handler at once; leaving `registry.connection()` then stops the run (unless runs
detach on disconnect) and waits for it, so no tool runs after the client is gone.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import structlog
from aiohttp import web
from pydantic import ValidationError

from gateway import encoding
from gateway.auth import AnonymousAuth
from gateway.chat import RequestContext
from gateway.errors import BadRequest, GatewayError, LimitReached, PayloadTooLarge
from gateway.keys import AUTH, IDENTITY, SERVICE, SETTINGS
from gateway.requests import ChatRequest
from transports.base import Transport, deliver

__all__ = ["SSETransport", "caller_of", "chat_post", "chat_resume", "chat_stop", "client_major"]

log = structlog.get_logger("transports.sse")


class SSETransport(Transport):
    def __init__(self, request: web.Request, major: int) -> None:
        self.request = request
        self.major = major
        self.response = web.StreamResponse(status=200, headers=encoding.SSE_HEADERS)

    async def open(self) -> None:
        if self.request.version >= (1, 1):
            self.response.headers["Connection"] = "keep-alive"
        await self.response.prepare(self.request)
        # Flush headers and a first byte at once, so proxies and clients see the stream open.
        await self.response.write(encoding.SSE_OPEN)

    async def send(self, sequence: int, chunk: dict[str, Any]) -> None:
        await self.response.write(encoding.sse_event(chunk))

    async def keepalive(self) -> None:
        await self.response.write(encoding.SSE_KEEPALIVE)

    async def close(self) -> None:
        await self.response.write(encoding.SSE_DONE)
        await self.response.write_eof()


def client_major(headers: Any) -> int:
    raw = str(headers.get("x-ai-sdk-major", "6")).strip()
    return 7 if raw.startswith("7") else 6


def caller_of(request: web.Request, body: dict[str, Any] | None = None) -> str:
    """The user a request acts as: the authenticated identity; with `--auth none`, who it claims
    to be (the user header, else a `userId` body field)."""
    auth = request.app[AUTH]
    if isinstance(auth, AnonymousAuth):
        return auth.claimed(request.headers, body).user_id
    return request[IDENTITY].user_id


def error_response(error: GatewayError) -> web.Response:
    return web.json_response(error.body(), status=error.status, headers=error.headers())


async def _read_body(request: web.Request, limit: int) -> ChatRequest:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge()
    raw = bytearray()
    async for piece in request.content.iter_chunked(64 * 1024):
        raw += piece
        if len(raw) > limit:
            raise PayloadTooLarge()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise BadRequest("The body must be a JSON object.", code="invalid_body")
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadRequest(f"Invalid request body at '{where}': {first['msg']}.", code="invalid_body") from None


async def chat_post(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    service = request.app[SERVICE]
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
    service.metrics.requests.labels(transport="sse").inc()
    with structlog.contextvars.bound_contextvars(request_id=request_id):
        async with service.registry.connection("sse") as conn:
            try:
                body = await _read_body(request, settings.max_body_bytes)
                ctx = RequestContext(
                    user_id=caller_of(request, body.model_extra),
                    request_id=request_id,
                    major=client_major(request.headers),
                )
                structlog.contextvars.bind_contextvars(chat_id=body.id)
                run = await service.start(body, ctx, conn)
            except GatewayError as exc:
                service.metrics.request_errors.labels(code=exc.error_code).inc()
                if not isinstance(exc, LimitReached):  # a cap's refusal was logged where it was decided
                    log.info("request_refused", code=exc.error_code, status=exc.status, detail=exc.detail)
                return error_response(exc)
            transport = SSETransport(request, ctx.major)
            await transport.open()
            await deliver(run.log, transport, keepalive_s=settings.keepalive_s)
            return transport.response


async def chat_resume(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    service = request.app[SERVICE]
    chat_id = request.match_info["chat_id"]
    user_id = caller_of(request)
    stream_log = await service.streams.lookup((user_id, chat_id))
    if stream_log is None:
        return web.Response(status=204)
    async with service.registry.connection("sse-resume"):
        transport = SSETransport(request, client_major(request.headers))
        await transport.open()
        await deliver(stream_log, transport, keepalive_s=settings.keepalive_s, replay=True)
        return transport.response


async def chat_stop(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    chat_id = request.match_info["chat_id"]
    user_id = caller_of(request)
    stopped = await service.registry.stop((user_id, chat_id))
    if stopped:
        log.info("chat_stop", chat_id=chat_id, stopped=True)
        return web.json_response({"stopped": True})
    # Not running here: the process running it (if any) hears it through the stream store.
    heard = await service.streams.broadcast_stop((user_id, chat_id))
    log.info("chat_stop", chat_id=chat_id, stopped=False, forwarded_to=heard)
    return web.json_response({"stopped": False, "forwarded": True} if heard else {"stopped": False})
