"""The steps of answering a chat request that do not depend on how its bytes travel.

`POST /api/chat` (adk_gateway.transports.sse) and the in-memory client (adk_gateway.transports.memory) take the same
steps, from here: read the body (`read_chat_request`: its size, JSON depth, history length, then
validation), tell the client's `ai` version (`client_major`, also used for WebSocket frames),
count and log a refusal (`refused`), answer with the run's log (`respond`), and stop a chat
(`stop_chat`). What differs — reading a socket, writing SSE events, who the caller is — stays in
each transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog
from pydantic import ValidationError

from adk_gateway.core import jsonparse
from adk_gateway.core.errors import BadRequest, GatewayError, HistoryTooLong, LimitReached, PayloadTooLarge, SlowReader
from adk_gateway.core.requests import ChatRequest, describe, message_count, validate_chat_request
from adk_gateway.services.streams import ChatKey, Follower
from adk_gateway.transports.base import SlowReaderGuard, Transport, deliver

if TYPE_CHECKING:
    from adk_gateway.config import Settings
    from adk_gateway.metrics import Metrics
    from adk_gateway.services.chat import ChatService

__all__ = ["client_major", "public_origin", "read_chat_request", "refused", "respond", "stop_chat"]

log = structlog.get_logger("adk_gateway.transports.chat_steps")


def client_major(headers: Mapping[str, str]) -> int:
    """The client's `ai` major version: 7 with `x-ai-sdk-major: 7`, else 6 (the v6 chunk set)."""
    raw = str(headers.get("x-ai-sdk-major", "6")).strip()
    return 7 if raw.startswith("7") else 6


def public_origin(scheme: str, host: str, settings: Settings) -> str:
    """The gateway's origin as its clients reach it, for the links it hands out: `--public-url`,
    else the request's own scheme and Host (behind a TLS proxy, set `--public-url`)."""
    return settings.public_url.rstrip("/") or f"{scheme}://{host}"


async def read_chat_request(raw: bytes | bytearray, settings: Settings) -> ChatRequest:
    """A POST body's `ChatRequest`: size (`--max-body-bytes`), JSON depth (`--max-json-depth`) and
    history length (`--max-history-messages`) are checked before anything is validated; a large
    body is checked and validated in slices that give the event loop back (`adk_gateway.core.jsonparse`).

    Raises:
        GatewayError: `PayloadTooLarge`, `BadRequest` (`invalid_json`, `invalid_body`), `HistoryTooLong`.
    """
    if len(raw) > settings.max_body_bytes:
        raise PayloadTooLarge()
    try:
        data = await jsonparse.loads_request_async(raw, max_depth=settings.max_json_depth)
    except jsonparse.JsonRejected as exc:
        raise BadRequest(exc.message, code="invalid_json", detail=exc.reason) from None
    if not isinstance(data, dict):
        raise BadRequest("The body must be a JSON object.", code="invalid_body")
    count = message_count(data)
    if count > settings.max_history_messages:
        raise HistoryTooLong(f"The chat history has {count} messages; at most "
                             f"{settings.max_history_messages} are accepted.")
    try:
        return await validate_chat_request(data)
    except ValidationError as exc:
        raise BadRequest(describe(exc), code="invalid_body") from None


def refused(metrics: Metrics, error: GatewayError) -> None:
    """Counts a request refused before its stream, and logs it (a cap's refusal was logged where
    it was decided)."""
    metrics.request_errors.labels(code=error.error_code).inc()
    if not isinstance(error, LimitReached):
        log.info("request_refused", code=error.error_code, status=error.status, detail=error.detail)


async def respond(follower: Follower, transport: Transport, *, keepalive_s: float | None,
                  guard: SlowReaderGuard) -> None:
    """Opens the response and delivers the follower's log into it until the log ends. A cut (counted
    and logged by the guard) or a client that left mid-write ends it quietly: leaving the
    connection then stops the run. The guard is closed on the way out."""
    try:
        await transport.open()
        await deliver(follower, transport, keepalive_s=keepalive_s, guard=guard)
    except SlowReader:
        pass
    except ConnectionError:
        pass
    finally:
        guard.close()


async def stop_chat(service: ChatService, key: ChatKey) -> dict[str, bool]:
    """Stops the chat's active run (`ChatService.stop`)."""
    return await service.stop(key)
