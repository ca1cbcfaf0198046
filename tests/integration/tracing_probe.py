"""Runs one traced chat against an in-process gateway and prints the finished spans as JSON lines.

A process sets its tracer provider once, and ADK's tracers bind to the first one they see, so the
tracing test runs this in a subprocess: `python -m tests.integration.tracing_probe sse|ws`. The
provider is the SDK's with an in-memory exporter, installed before the app is made (as a program
embedding the gateway installs its own).
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
MESSAGES = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": WEATHER}]}]


async def chat(client: TestClient[Any, Any], transport: str) -> str:
    if transport == "sse":
        response = await client.post("/api/chat?access_token=secret-in-query", headers={"traceparent": TRACEPARENT},
                                     json={"id": "chat-traced", "messages": MESSAGES})
        text = await response.text()
        return "end" if response.status == 200 and "[DONE]" in text else f"status {response.status}"
    async with client.ws_connect("/api/chat/ws?access_token=secret-in-query") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "headers": {"traceparent": TRACEPARENT},
                            "id": "chat-traced-ws", "messages": MESSAGES})
        while True:
            frame = await ws.receive_json(timeout=30)
            if frame["type"] in ("end", "error"):
                return str(frame["type"])


async def main(transport: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    from gateway.app import make_app
    from tests.integration.conftest import test_settings

    async with TestClient(TestServer(make_app(test_settings()))) as client:
        outcome = await chat(client, transport)
    print(json.dumps({"outcome": outcome}))
    for span in exporter.get_finished_spans():
        assert span.context is not None
        print(json.dumps({
            "name": span.name,
            "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
            "attributes": {key: str(value) for key, value in (span.attributes or {}).items()},
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
