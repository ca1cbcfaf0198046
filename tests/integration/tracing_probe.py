"""Runs one traced chat against an in-process gateway and prints the finished spans as JSON lines.

A process sets its tracer provider once, and ADK's tracers bind to the first one they see, so the
tracing test runs this in a subprocess: `python -m tests.integration.tracing_probe sse|ws|live [TEXT]`
(TEXT: the user's message, by default a weather tool call). The provider is the SDK's with an
in-memory exporter, installed before the app is made (as a program embedding the gateway installs
its own).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
WEATHER = '/tool get_weather {"location": "Paris"}'


async def chat(client: TestClient[Any, Any], transport: str, text: str) -> str:
    messages = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]
    if transport == "sse":
        response = await client.post("/api/chat?access_token=secret-in-query", headers={"traceparent": TRACEPARENT},
                                     json={"id": "chat-traced", "messages": messages})
        answer = await response.text()
        return "end" if response.status == 200 and "[DONE]" in answer else f"status {response.status}"
    async with client.ws_connect("/api/chat/ws?access_token=secret-in-query") as ws:
        if transport == "live":
            await ws.send_json({"type": "live-start", "requestId": "l1", "headers": {"traceparent": TRACEPARENT},
                                "id": "chat-traced-live"})
            await ws.send_json({"type": "live-text", "requestId": "l1", "text": text})
        else:
            await ws.send_json({"type": "send", "requestId": "r1", "headers": {"traceparent": TRACEPARENT},
                                "id": "chat-traced-ws", "messages": messages})
        while True:
            frame = await ws.receive_json(timeout=30)
            if transport == "live" and frame["type"] == "chunk" and frame["chunk"]["type"] == "finish":
                await ws.send_json({"type": "live-stop", "requestId": "l1"})
            elif frame["type"] in ("end", "error"):
                return str(frame["type"])


async def main(transport: str, text: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    from adk_gateway.app import make_app
    from tests.integration.conftest import test_settings

    async with TestClient(TestServer(make_app(test_settings()))) as client:
        outcome = await chat(client, transport, text)
    print(json.dumps({"outcome": outcome}))
    for span in exporter.get_finished_spans():
        assert span.context is not None
        print(json.dumps({
            "name": span.name,
            "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
            "attributes": {key: str(value) for key, value in (span.attributes or {}).items()},
            "status": span.status.status_code.name,
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else WEATHER))
