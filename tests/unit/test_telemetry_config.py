"""Which ADK telemetry settings a run asks for: ADK's defaults whenever something records spans."""

from __future__ import annotations

import pytest
from google.adk.telemetry import ContentCapturingMode
from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider

from adk_gateway.agents import adk
from adk_gateway.agents.demo import build_demo_agent
from adk_gateway.agents.memory_store import MemorySessionService


def test_untraced_process_asks_for_the_stable_conventions_without_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    config = adk.telemetry_config()
    assert config is not None
    assert not config.should_use_experimental_genai_semconv
    assert config.resolved_content_capturing_mode is ContentCapturingMode.NO_CONTENT


def test_an_installed_tracer_provider_gets_adks_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    monkeypatch.setattr(trace, "get_tracer_provider", NoOpTracerProvider)
    assert adk.telemetry_config() is None


def test_an_operators_semconv_choice_is_left_to_adk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert adk.telemetry_config() is None


def test_runs_carry_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    host = adk.AgentHost(build_demo_agent("scripted"), MemorySessionService(), max_llm_calls=25)
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert host.run_config().telemetry is not None
    monkeypatch.setattr(trace, "get_tracer_provider", NoOpTracerProvider)
    assert host.run_config().telemetry is None
