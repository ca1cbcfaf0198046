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
request, so each `send` and `live-start` frame gets its own span (`frame_span`), parented by the
frame's own `traceparent` header (ai 7's `WebSocketChatTransport` sends the transport's `headers`
in the frame).
A run is a task started inside that span, so it inherits it. The run opens a span of its own
(`run_span`: `chat run` for a chat's turn, `live session` for a live session, started by its
`live-start` frame's span) with the chat's id, current in the run's task for the run's whole life:
ADK's spans of the run (invocation, agent, model call, tool) are its children, under the client's
trace id, and the run's span ends when the run does, with how it ended (`gateway.run.outcome`; an
error status when it failed). Over a socket that matters: the frame's span ends once the run has
started, the run's goes on until its last chunk.

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
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

__all__ = ["RunSpan", "configure_tracing", "frame_span", "run_span", "server_spans", "tracing_enabled"]

_tracer = trace.get_tracer("adk_gateway")


def configure_tracing(install_provider: Callable[[], None]) -> bool:
    """Installs a tracer provider with an OTLP exporter (`install_provider`: ADK's own setup,
    `adk_gateway.agents.adk.install_tracer_provider`) when the environment names one; returns whether tracing
    is on."""
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        install_provider()
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


# How a run may end without having failed: answered, stopped (by its client, a disconnect or
# shutdown), or cut at the turn's model-call cap (the answer ends with `length`).
_NOT_FAILED: frozenset[str] = frozenset({"ok", "stopped", "limit"})


class RunSpan:
    """The span of one run, current in the run's task from its start to `end` (see the module
    docstring). Made and ended by the run's own task: the context it attaches is that task's."""

    __slots__ = ("_span", "_token")

    def __init__(self, name: str, attributes: Mapping[str, str]) -> None:
        self._span = _tracer.start_span(name, attributes=attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def end(self, outcome: str) -> None:
        """Ends the span with the run's outcome, the `outcome` label its metrics count it under
        (`adk_gateway_runs_finished`, `adk_gateway_live_sessions_finished`)."""
        self._span.set_attribute("gateway.run.outcome", outcome)
        if outcome not in _NOT_FAILED:
            self._span.set_status(trace.StatusCode.ERROR, outcome)
        otel_context.detach(self._token)
        self._span.end()


def run_span(name: str, chat_id: str, **attributes: str) -> RunSpan | None:
    """A run's span, current in the calling task until its `end`; None without a tracer provider
    (a run then costs this one check)."""
    if not tracing_enabled():
        return None
    return RunSpan(name, {"gateway.chat_id": chat_id, **attributes})
