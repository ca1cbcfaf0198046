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

Keeping every partial costs about 2.5 KiB a streamed chunk (each is a pydantic `LlmResponse`
with its content and part), held until the call ends: a 2,000-chunk answer holds 5 MiB, and
2,000 streams of 30-token answers about 75 MiB. `keep_call_summary()` makes ADK's scopes
`LeanInferenceScope`s, which keep those two responses and let the others go as soon as ADK has
handed them on: the list holds the last response, preceded by the newest earlier one that reports
usage when the last does not. ADK's telemetry (spans, metrics, usage) is unchanged.

ADK names the class at call time (`InferenceScope(...)` inside `record_inference_telemetry`), so
replacing the module's attribute is enough. It is done once per process, and only when the
scope still looks as described above (`_llm_responses` and `record_llm_response`); otherwise ADK
is left as it is and a warning says so. `tests/unit/test_inference_scope.py` runs a streamed call
through ADK and fails when ADK's class no longer takes the replacement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from google.adk.telemetry import _instrumentation

if TYPE_CHECKING:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.models.llm_response import LlmResponse

__all__ = ["LeanInferenceScope", "keep_call_summary"]

log = structlog.get_logger("agents.inference_scope")

_AdkInferenceScope = _instrumentation.InferenceScope


class LeanInferenceScope(_AdkInferenceScope):
    """ADK's scope of one model call, keeping only the responses read at the call's end."""

    def record_llm_response(self, invocation_context: InvocationContext, response: LlmResponse) -> None:
        super().record_llm_response(invocation_context, response)
        kept = self._llm_responses
        if len(kept) < 3 and (len(kept) < 2 or kept[0].usage_metadata):
            return
        # `kept` was [usage?, previous] before this append: the newest earlier response that
        # reports usage is the previous one if it does, else the one kept for that.
        previous = kept[-2]
        earlier = previous if previous.usage_metadata else (kept[-3] if len(kept) == 3 else None)
        kept[:] = [response] if earlier is None else [earlier, response]


def keep_call_summary() -> bool:
    """Makes ADK's model-call scopes `LeanInferenceScope`s (idempotent); False if ADK's changed."""
    current = _instrumentation.InferenceScope
    if current is LeanInferenceScope:
        return True
    fields = getattr(current, "__dataclass_fields__", {})
    if current is not _AdkInferenceScope or "_llm_responses" not in fields or not callable(
        getattr(current, "record_llm_response", None)
    ):
        log.warning("adk_inference_scope_unchanged", reason="ADK's InferenceScope is not the one this gateway knows")
        return False
    _instrumentation.InferenceScope = LeanInferenceScope  # type: ignore[misc]
    return True
