"""Fixtures for the integration tests: a gateway app on a real socket (pytest-aiohttp)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.agents.adk import AgentHost
from adk_gateway.app import make_app
from adk_gateway.config import Settings

from .support import settings as test_settings

StartGateway = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
def gateway(aiohttp_client: Any) -> StartGateway:
    """Starts a gateway (scripted model unless a host is given) and returns a client for it.

    aiohttp's TestServer runs with `handler_cancellation=True`, as `python -m adk_gateway` does, so a
    client that goes away cancels its handler.
    """

    async def start(settings: Settings | None = None, *, host: AgentHost | None = None) -> TestClient[Any, Any]:
        app = make_app(settings or test_settings(), host=host)
        client: TestClient[Any, Any] = await aiohttp_client(TestServer(app, handler_cancellation=True))
        return client

    return start
