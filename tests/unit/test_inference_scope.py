"""ADK's model-call scope keeps the two responses its telemetry reads, not every streamed chunk."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.telemetry import _instrumentation, tracing
from google.adk.telemetry._token_usage import TokenUsage
from google.genai import types
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import _logs
from opentelemetry._logs import NoOpLoggerProvider

from adk_gateway.agents import adk
from adk_gateway.agents.demo import build_demo_agent
from adk_gateway.agents.inference_scope import LeanInferenceScope, keep_call_summary
from adk_gateway.agents.memory_store import MemorySessionService


def _response(index: int, usage: bool, finish: bool = False) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=f"w{index} ")]),
        partial=not finish,
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=3, candidates_token_count=index + 1
        ) if usage else None,
        finish_reason=types.FinishReason.STOP if finish else None,
    )


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_the_scope_keeps_the_last_response_and_the_newest_usage(usages: list[bool]) -> None:
    responses = [_response(i, usage) for i, usage in enumerate(usages)]
    scope = LeanInferenceScope(llm_request=LlmRequest(), user_id="u")
    for response in responses:
        scope.record_llm_response(None, response)  # type: ignore[arg-type]
        assert 1 <= len(scope.llm_responses) <= 2
        assert scope.llm_responses[-1] is response
    # What ADK reads at the end of the call is what it would have read from every response.
    assert TokenUsage.from_llm_responses(scope.llm_responses) == TokenUsage.from_llm_responses(responses)
    if len(scope.llm_responses) == 2:
        assert scope.llm_responses[0].usage_metadata


def test_keep_call_summary_replaces_adks_scope_once() -> None:
    assert keep_call_summary()
    assert _instrumentation.InferenceScope is LeanInferenceScope
    assert keep_call_summary()
    assert _instrumentation.InferenceScope is LeanInferenceScope


async def test_a_streamed_call_through_adk_holds_at_most_two_responses(monkeypatch: pytest.MonkeyPatch) -> None:
    host = adk.AgentHost(build_demo_agent("scripted"), MemorySessionService(), max_llm_calls=25)
    held: list[int] = []
    recorded = LeanInferenceScope.record_llm_response

    def record(self: LeanInferenceScope, invocation_context: Any, response: LlmResponse) -> None:
        recorded(self, invocation_context, response)
        held.append(len(self.llm_responses))

    monkeypatch.setattr(LeanInferenceScope, "record_llm_response", record)
    session = await host.session_service.create_session(app_name=host.app_name, user_id="u",
                                                        session_id=uuid.uuid4().hex)
    message = types.Content(role="user", parts=[types.Part(text="/stream 40 0")])
    texts = []
    async for event in host.runner.run_async(
        user_id="u", session_id=session.id, new_message=message,
        run_config=RunConfig(streaming_mode=StreamingMode.SSE),
    ):
        if event.partial and event.content and event.content.parts and event.content.parts[0].text:
            texts.append(event.content.parts[0].text)
    assert len(texts) == 40  # every chunk still reached the caller
    assert len(held) == 41  # ADK recorded each partial and the final response in our scope
    assert max(held) <= 2


async def _streamed_call(host: adk.AgentHost, text: str) -> list[LeanInferenceScope]:
    """Runs one answer through ADK; returns the model-call scopes that recorded it."""
    scopes: list[LeanInferenceScope] = []
    recorded = LeanInferenceScope.record_llm_response

    def record(self: LeanInferenceScope, invocation_context: Any, response: LlmResponse) -> None:
        if self not in scopes:
            scopes.append(self)
        recorded(self, invocation_context, response)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LeanInferenceScope, "record_llm_response", record)
        session = await host.session_service.create_session(app_name=host.app_name, user_id="u",
                                                            session_id=uuid.uuid4().hex)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in host.runner.run_async(user_id="u", session_id=session.id, new_message=message,
                                             run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
            pass
    return scopes


async def test_untraced_calls_skip_adks_per_response_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    host = adk.AgentHost(build_demo_agent("scripted"), MemorySessionService(), max_llm_calls=25)
    traced: list[LlmResponse] = []
    monkeypatch.setattr(tracing, "trace_inference_result", lambda _ctx, _span, response: traced.append(response))
    scopes = await _streamed_call(host, "/stream 10 0")
    assert scopes and traced == []
    # The span is still ended at the response that says why generation stopped, as ADK does it.
    assert all(scope._inference_span_ended for scope in scopes)


async def test_a_logger_provider_gets_adks_tracing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    host = adk.AgentHost(build_demo_agent("scripted"), MemorySessionService(), max_llm_calls=25)
    traced: list[LlmResponse] = []
    monkeypatch.setattr(tracing, "trace_inference_result", lambda _ctx, _span, response: traced.append(response))
    monkeypatch.setattr(_logs, "get_logger_provider", NoOpLoggerProvider)
    scopes = await _streamed_call(host, "/stream 10 0")
    assert scopes
    # Every response up to the one that ends the call (the span ends there; ADK stops tracing).
    assert len(traced) == 11
