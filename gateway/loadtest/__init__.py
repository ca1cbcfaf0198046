"""`adk-gateway loadtest`: a bounded load generator for AI SDK chat endpoints.

It is a client: it speaks what a Vercel AI SDK frontend speaks (the SSE UI message stream, the
`ai` 7 WebSocket frame protocol and its live audio extension) and imports nothing of the server.
It always stops by itself, after `--requests` requests or `--duration` seconds, and refuses targets
that are not loopback unless `--allow-remote` is given.

    adk-gateway loadtest --url http://127.0.0.1:8080 --transport sse -c 10 -n 500 --scenario stream

Modules: `config` (what to run, the target check), `clients` (the protocols, one simulated user),
`scenarios` (what one request does), `runner` (fixed concurrency and fixed arrival rate),
`stats` (the histogram), `report` (JSON summary, table, progress bar), `cli` (the flags).
"""

from adk_gateway.loadtest.clients import (
    Client,
    Sample,
    SSEParser,
    adk_request,
    assistant_message,
    close_socket,
    open_sse_stream,
    sse_request,
    user_message,
    ws_request,
)
from adk_gateway.loadtest.config import SSE_PATH, WS_PATH, LoadConfig, TargetRefused, check_target, redact
from adk_gateway.loadtest.report import summarize
from adk_gateway.loadtest.runner import run_load
from adk_gateway.loadtest.scenarios import chat_turn
from adk_gateway.loadtest.stats import Histogram, percentiles

__all__ = [
    "SSE_PATH",
    "WS_PATH",
    "Client",
    "Histogram",
    "LoadConfig",
    "SSEParser",
    "Sample",
    "TargetRefused",
    "adk_request",
    "assistant_message",
    "chat_turn",
    "check_target",
    "close_socket",
    "open_sse_stream",
    "percentiles",
    "redact",
    "run_load",
    "sse_request",
    "summarize",
    "user_message",
    "ws_request",
]
