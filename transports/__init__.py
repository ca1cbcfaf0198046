"""Transports: how chunks reach clients (SSE, WebSocket, in-memory)."""

from transports.base import Transport, deliver
from transports.memory import MemoryClient, MemoryResponse, MemoryTransport

__all__ = ["MemoryClient", "MemoryResponse", "MemoryTransport", "Transport", "deliver"]
