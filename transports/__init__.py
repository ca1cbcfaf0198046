"""Transports: how chunks reach clients (SSE, WebSocket, in-memory)."""

from adk_gateway.transports.base import Transport, deliver
from adk_gateway.transports.memory import MemoryClient, MemoryResponse, MemoryTransport

__all__ = ["MemoryClient", "MemoryResponse", "MemoryTransport", "Transport", "deliver"]
