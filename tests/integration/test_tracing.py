"""Tracing: with a tracer provider installed, a request's `traceparent` becomes the parent of the
request's span, of its run's span (`chat run`, `live session`: the chat and how the run ended) and
of every span of the run (ADK's invocation, agent, model call and tool): over SSE (the HTTP
header) and over the WebSocket (the `send` or `live-start` frame's headers). The query string
(`?access_token=`) never reaches a span.

Each case runs `tests/integration/tracing_probe.py` in a subprocess (an in-memory span exporter on
the SDK's provider, an in-process gateway), because a process sets its tracer provider once."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from adk_gateway.transports.admission import CORS_ALLOW_HEADERS
from tests.gateway_process import ROOT
from tests.integration.tracing_probe import PARENT_ID, TRACE_ID


def probe(transport: str, text: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    command = [sys.executable, "-m", "tests.integration.tracing_probe", transport, *([text] if text else [])]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return lines[0]["outcome"], lines[1:]


def descends_from(span: dict[str, Any], ancestor: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> bool:
    while span["span_id"] != ancestor["span_id"] and span["parent_id"] in by_id:
        span = by_id[span["parent_id"]]
    return span["span_id"] == ancestor["span_id"]


@pytest.mark.parametrize(("transport", "request_span", "run_span"),
                         [("sse", "POST /api/chat", "chat run"), ("ws", "chat send", "chat run"),
                          ("live", "chat live-start", "live session")])
def test_a_request_and_its_run_join_the_clients_trace(transport: str, request_span: str, run_span: str) -> None:
    outcome, spans = probe(transport)
    assert outcome == "end"

    in_trace = [span for span in spans if span["trace_id"] == TRACE_ID]
    names = {span["name"] for span in in_trace}
    [request] = [span for span in in_trace if span["name"] == request_span]
    assert request["parent_id"] == PARENT_ID
    # The run's own span, under the request's, says which chat and how the run ended.
    [run] = [span for span in in_trace if span["name"] == run_span]
    assert run["parent_id"] == request["span_id"]
    assert run["attributes"]["gateway.chat_id"].startswith("chat-traced")
    assert run["attributes"]["gateway.run.outcome"] == "ok"
    assert run["status"] == "UNSET"
    # ADK's spans of the run: the invocation ("invoke_workflow" for an app's root, "invocation"
    # before ADK 2; a live invocation has none), the agent, the model call, the tool.
    if transport != "live":
        assert any(name.startswith(("invoke_workflow", "invocation")) for name in names)
        assert any(name.startswith(("generate_content", "call_llm")) for name in names)
    assert any(name.startswith("invoke_agent") for name in names)
    assert "execute_tool get_weather" in names
    # Every span of the trace but the request's descends from the run's.
    by_id = {span["span_id"]: span for span in in_trace}
    for span in in_trace:
        if span is not request:
            assert descends_from(span, run, by_id), span["name"]
    assert "secret-in-query" not in json.dumps(spans)


def test_a_failed_run_ends_its_span_with_an_error() -> None:
    outcome, spans = probe("sse", "/error the model is down")
    assert outcome == "end"
    [run] = [span for span in spans if span["name"] == "chat run"]
    assert run["attributes"]["gateway.run.outcome"] == "model_error"
    assert run["status"] == "ERROR"


def test_cors_lets_a_page_send_the_trace_headers() -> None:
    assert {"traceparent", "tracestate"} <= {h.strip() for h in CORS_ALLOW_HEADERS.split(",")}
