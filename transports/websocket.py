"""WebSocket transport (placeholder until the frame protocol lands)."""

from __future__ import annotations

from aiohttp import web


async def chat_socket(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotImplemented()
