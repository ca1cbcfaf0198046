"""Tracing: OpenTelemetry spans for requests and runs, exported only when an exporter is set.

How it works
------------
`configure_tracing()` runs at start (`adk-gateway`): when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, ADK's own provider setup (`maybe_set_otel_providers`,
as `adk web` and `adk api_server` use it) installs a tracer provider with an OTLP exporter; else
nothing is installed, and tracing costs nothing (the API's no-op tracer; the middleware below is
not even added). An embedding program may install its own provider before `make_app` instead.

With a provider, `server_spans` (a middleware) opens one server span per HTTP request whose parent
is the request's `traceparent` (W3C trace context, CORS allows the header). A WebSocket is one long
request, so each `send` frame gets its own span (`frame_span`), parented by the frame's own
`traceparent` header (ai 7's `WebSocketChatTransport` sends the transport's `headers` in the frame).
A run is a task started inside that span, so it inherits it: ADK's spans of the run (invocation,
agent, model call, tool) are its children, under the client's trace id.

The URL's query string never reaches a span (it may carry `?access_token=`): spans carry the route
and the path only. Our own middleware rather than OpenTelemetry's aiohttp instrumentation for that
reason: the instrumentation records the query, redacting only a fixed list of cloud-signature
parameters.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

from aiohttp import web
from opentelemetry import propagate, trace

__all__ = ["configure_tracing", "frame_span", "server_spans", "tracing_enabled"]

_tracer = trace.get_tracer("adk_gateway")


def configure_tracing() -> bool:
    """Installs ADK's tracer provider with an OTLP exporter when the environment names one;
    returns whether tracing is on."""
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from google.adk.telemetry.setup import maybe_set_otel_providers

        maybe_set_otel_providers()
    return tracing_enabled()


def tracing_enabled() -> bool:
    """Whether a tracer provider is installed (by us, ADK or the program embedding the app)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _route(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else request.path


@web.middleware
async def server_spans(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One server span per request, child of the request's `traceparent`."""
    route = _route(request)
    with _tracer.start_as_current_span(
        f"{request.method} {route}",
        context=propagate.extract(request.headers),
        kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": request.method, "http.route": route, "url.path": request.path},
    ) as span:
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(trace.StatusCode.ERROR)
        return response


@contextmanager
def frame_span(name: str, headers: Mapping[str, str], **attributes: str) -> Iterator[None]:
    """A span for one WebSocket frame (a `send`), parented by the frame's `traceparent` header;
    a no-op without a tracer provider."""
    if not tracing_enabled():
        yield
        return
    with _tracer.start_as_current_span(
        name, context=propagate.extract(headers), kind=trace.SpanKind.SERVER, attributes=attributes
    ):
        yield
