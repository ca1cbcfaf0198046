"""The transport contract suite's fixture: every scenario runs over SSE, the WebSocket and memory.

`make_gateway(settings, host=...)` starts a gateway (the demo agent on the scripted model unless a
host is given) and returns the driver (`drivers.Gateway`) of this test's transport: SSE and
WebSocket on a real socket (pytest-aiohttp, with `handler_cancellation` as `python -m adk_gateway`
runs), memory on the same services with no socket at all (`adk_gateway.transports.memory.MemoryClient`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from adk_gateway.agents.adk import AgentHost
from adk_gateway.app import build_services, make_app
from adk_gateway.config import Settings
from adk_gateway.keys import REGISTRY
from tests.integration.support import settings as test_settings

from .drivers import Gateway, MemoryGateway, SSEGateway, WebSocketGateway

MakeGateway = Callable[..., Awaitable[Gateway]]

TRANSPORTS = ("sse", "ws", "memory")


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def make_gateway(transport: str, aiohttp_client: Any) -> AsyncIterator[MakeGateway]:
    closers: list[Callable[[], Awaitable[None]]] = []

    async def start(settings: Settings | None = None, *, host: AgentHost | None = None) -> Gateway:
        settings = settings or test_settings()
        if transport == "memory":
            services = build_services(settings, host=host)
            closers.append(services.aclose)
            return MemoryGateway(services)
        app = make_app(settings, host=host)
        client = await aiohttp_client(TestServer(app, handler_cancellation=True))
        if transport == "sse":
            return SSEGateway(client, app[REGISTRY])
        gateway = WebSocketGateway(client, app[REGISTRY])
        closers.append(gateway.aclose)
        return gateway

    yield start
    for close in reversed(closers):
        await close()
