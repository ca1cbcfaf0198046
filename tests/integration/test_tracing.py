"""Tracing: with a tracer provider installed, a request's `traceparent` becomes the parent of the
request's span and of every span of its run (ADK's invocation, agent, model call and tool): over
SSE (the HTTP header) and over the WebSocket (the `send` frame's headers). The query string
(`?access_token=`) never reaches a span.

Each case runs `tests/integration/tracing_probe.py` in a subprocess (an in-memory span exporter on
the SDK's provider, an in-process gateway), because a process sets its tracer provider once."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.gateway_process import ROOT
from tests.integration.tracing_probe import PARENT_ID, TRACE_ID
from transports.door import CORS_ALLOW_HEADERS


def probe(transport: str) -> tuple[str, list[dict[str, Any]]]:
    result = subprocess.run([sys.executable, "-m", "tests.integration.tracing_probe", transport], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=True)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return lines[0]["outcome"], lines[1:]


@pytest.mark.parametrize(("transport", "request_span"), [("sse", "POST /api/chat"), ("ws", "chat send")])
def test_a_request_and_its_run_join_the_clients_trace(transport: str, request_span: str) -> None:
    outcome, spans = probe(transport)
    assert outcome == "end"

    in_trace = [span for span in spans if span["trace_id"] == TRACE_ID]
    names = {span["name"] for span in in_trace}
    [request] = [span for span in in_trace if span["name"] == request_span]
    assert request["parent_id"] == PARENT_ID
    # The run: ADK's invocation span ("invoke_workflow" for an app's root, "invocation" before ADK 2).
    assert any(name.startswith(("invoke_workflow", "invocation")) for name in names)
    assert any(name.startswith("invoke_agent") for name in names)
    assert any(name.startswith(("generate_content", "call_llm")) for name in names)
    assert "execute_tool get_weather" in names
    # Every span of the run descends from the request's span.
    by_id = {span["span_id"]: span for span in in_trace}
    for span in in_trace:
        ancestor = span
        while ancestor["span_id"] != request["span_id"] and ancestor["parent_id"] in by_id:
            ancestor = by_id[ancestor["parent_id"]]
        assert ancestor["span_id"] == request["span_id"], span["name"]
    assert "secret-in-query" not in json.dumps(spans)


def test_cors_lets_a_page_send_the_trace_headers() -> None:
    assert {"traceparent", "tracestate"} <= {h.strip() for h in CORS_ALLOW_HEADERS.split(",")}
