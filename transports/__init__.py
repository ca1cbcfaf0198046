"""Transports: how chunks reach clients (SSE, WebSocket, in-memory)."""

from transports.base import Transport, deliver
from transports.memory import MemoryTransport

__all__ = ["MemoryTransport", "Transport", "deliver"]
