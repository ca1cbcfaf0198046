"""What ADK keeps of a model call while it streams: the two responses its telemetry reads, not all.

How it works
------------
ADK opens an `InferenceScope` (`google.adk.telemetry._instrumentation`) around each model call and
appends every response of the call to it, the streamed partials included, until the call ends.
At the end it reads two things from that list (`record_inference_telemetry`): the newest
response that reports token usage (`TokenUsage.from_llm_responses`; each report is cumulative,
so the newest is the whole figure) and the last response (`responses[-1].model_version`, for the
duration and token metrics). Nothing else of the gateway reads the list; ADK's own web UI does
(`telemetry._web_ui`, to rebuild a call's content for its log panel), and the gateway never runs
that UI.

Keeping every partial holds each streamed chunk (a pydantic `LlmResponse` with its content and
part) until the call ends: memory that grows with the answer's length and the number of streams
(measured in docs/perf/memory-per-connection.md). `keep_call_summary()` makes ADK's scopes
`LeanInferenceScope`s, which keep those two responses and let the others go as soon as ADK has
handed them on: the list holds the last response, preceded by the newest earlier one that reports
usage when the last does not. ADK's telemetry (spans, metrics, usage) is unchanged.

While nothing records them (no tracer provider records the call's span and no OpenTelemetry
logger provider is installed), the scope also skips ADK's per-response tracing
(`tracing.trace_inference_result`): it sets attributes on a span that records nothing and emits
a log record (its body a serialisation of the response) that nobody receives, about a tenth of
the process's time per streamed chunk. The span is still ended at the response that reports why
generation stopped, as ADK ends it.

ADK names the class at call time (`InferenceScope(...)` inside `record_inference_telemetry`), so
replacing the module's attribute is enough. It is done once per process, and only when the
scope still looks as described above (its `span`, `_llm_responses`, `_inference_span_ended` and
`record_llm_response`, and the span's `_exit_stack`); otherwise ADK is left as it is and a
warning says so. `tests/unit/test_inference_scope.py` runs a streamed call
through ADK and fails when ADK's class no longer takes the replacement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from google.adk.telemetry import _instrumentation, tracing
from google.adk.telemetry._finish_reason import is_reported_finish_reason
from opentelemetry import _logs, trace
from opentelemetry._logs._internal import ProxyLoggerProvider

if TYPE_CHECKING:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.models.llm_response import LlmResponse
    from opentelemetry.trace import Span

__all__ = ["LeanInferenceScope", "keep_call_summary"]

log = structlog.get_logger("adk_gateway.agents.inference_scope")

_AdkInferenceScope = _instrumentation.InferenceScope


class LeanInferenceScope(_AdkInferenceScope):
    """ADK's scope of one model call, keeping only the responses read at the call's end."""

    def record_llm_response(self, invocation_context: InvocationContext, response: LlmResponse) -> None:
        if self._inference_span_ended or _recorded(self.span):
            super().record_llm_response(invocation_context, response)
        else:
            # ADK's own steps, without `trace_inference_result` (it would record nothing).
            self._llm_responses.append(response)
            span = self.span
            if (
                is_reported_finish_reason(response.finish_reason)
                and isinstance(span, tracing.GenerateContentSpan)
                and (exit_stack := span._exit_stack) is not None
            ):
                exit_stack.close()
                self._inference_span_ended = True
        kept = self._llm_responses
        if len(kept) < 3 and (len(kept) < 2 or kept[0].usage_metadata):
            return
        # `kept` was [usage?, previous] before this append: the newest earlier response that
        # reports usage is the previous one if it does, else the one kept for that.
        previous = kept[-2]
        earlier = previous if previous.usage_metadata else (kept[-3] if len(kept) == 3 else None)
        kept[:] = [response] if earlier is None else [earlier, response]


def _recorded(span: tracing.GenerateContentSpan | Span | None) -> bool:
    """Whether ADK's tracing of a response would reach anyone: a span that records, or a logger
    provider (the global one is still the API's proxy until a program installs one)."""
    inner = span.span if isinstance(span, tracing.GenerateContentSpan) else span
    if inner is None:
        return False  # ADK's tracing returns at once for a call without a span
    return inner.is_recording() or not isinstance(_logs.get_logger_provider(), ProxyLoggerProvider)


def keep_call_summary() -> bool:
    """Makes ADK's model-call scopes `LeanInferenceScope`s (idempotent); False if ADK's changed."""
    current = _instrumentation.InferenceScope
    if current is LeanInferenceScope:
        return True
    fields = getattr(current, "__dataclass_fields__", {})
    if (
        current is not _AdkInferenceScope
        or not {"_llm_responses", "_inference_span_ended", "span"} <= fields.keys()
        or not callable(getattr(current, "record_llm_response", None))
        or not hasattr(tracing.GenerateContentSpan(trace.INVALID_SPAN), "_exit_stack")
    ):
        log.warning("adk_inference_scope_unchanged", reason="ADK's InferenceScope is not the one this gateway knows")
        return False
    _instrumentation.InferenceScope = LeanInferenceScope  # type: ignore[misc]
    return True
