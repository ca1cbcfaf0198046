"""Every typed app key of the gateway."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from adk_gateway.agents.adk import AgentHost
    from adk_gateway.config import Settings
    from adk_gateway.metrics import Metrics
    from adk_gateway.services.artifacts import ArtifactLinks
    from adk_gateway.services.auth import Authenticator, Identity
    from adk_gateway.services.chat import ChatService
    from adk_gateway.services.registry import Registry
    from adk_gateway.services.signin import SignIns

__all__ = ["AUTH", "DRAINING", "HOST", "IDENTITY", "LINKS", "METRICS", "REGISTRY", "SERVICE", "SETTINGS",
           "SHUTDOWN_ERRORS", "SIGN_INS"]

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
HOST: web.AppKey[AgentHost] = web.AppKey("agent_host")
REGISTRY: web.AppKey[Registry] = web.AppKey("registry")
SERVICE: web.AppKey[ChatService] = web.AppKey("chat_service")
DRAINING: web.AppKey[asyncio.Event] = web.AppKey("draining")  # set at SIGTERM
# What failed while draining (on_shutdown), raised with the cleanup's own failures at the end.
SHUTDOWN_ERRORS: web.AppKey[list[Exception]] = web.AppKey("shutdown_errors")
AUTH: web.AppKey[Authenticator] = web.AppKey("authenticator")
IDENTITY: web.RequestKey[Identity] = web.RequestKey("identity")
LINKS: web.AppKey[ArtifactLinks] = web.AppKey("artifact_links")
SIGN_INS: web.AppKey[SignIns] = web.AppKey("sign_ins")
