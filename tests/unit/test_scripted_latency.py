"""The scripted model's latency: the `/latency` command, the process-wide setting, and the waits
the model asks for (recorded, not waited)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from google.adk.models.llm_request import LlmRequest
from google.genai import types

import adk_gateway.agents.scripted
from adk_gateway.__main__ import configure_scripted_model
from adk_gateway.agents.script import Latency, Plan, ScriptError, parse_latency, plan_for_text
from adk_gateway.agents.scripted import ScriptedLlm, configure_latency
from adk_gateway.config import load_settings


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The model's waits, in seconds, in order; the process-wide latency is restored afterwards."""
    recorded: list[float] = []

    async def sleep(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(adk_gateway.agents.scripted, "_sleep", sleep)
    default, rng = ScriptedLlm.default_latency, ScriptedLlm.rng
    yield recorded
    ScriptedLlm.default_latency, ScriptedLlm.rng = default, rng


async def answer(text: str, *, stream: bool = True) -> list[str]:
    request = LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text=text)])])
    texts = []
    async for response in ScriptedLlm().generate_content_async(request, stream=stream):
        if response.partial and response.content and response.content.parts:
            texts.extend(p.text or "" for p in response.content.parts)
        if response.error_code:
            texts.append(f"error: {response.error_message}")
    return texts


# --- the command ----------------------------------------------------------------------------------


def test_latency_prefixes_any_message() -> None:
    plan = plan_for_text("/latency ttft=200 tps=50 /stream 3")
    assert plan == Plan(deltas=("tok0 ", "tok1 ", "tok2 "), latency=Latency(ttft_ms=200, tokens_per_s=50))
    assert plan_for_text("/latency dist=exp tps=5 jitter=0.1 hello").latency == Latency(
        tokens_per_s=5, dist="exp", jitter=0.1)
    assert plan_for_text("/latency tps=5 hello").deltas == ("You ", "said: ", "hello")
    tool = plan_for_text('/latency ttft=10 /tool get_weather {"location": "Oslo"}\n/then\n/tool get_location {}')
    assert len(tool.steps) == 2 and tool.latency == Latency(ttft_ms=10)


def test_other_commands_have_no_latency_of_their_own() -> None:
    assert plan_for_text("/stream 3 10").latency is None
    assert plan_for_text("/echo a").latency is None


@pytest.mark.parametrize(("text", "message"), [
    ("ttft=x /echo a", "not a number"),
    ("speed=1 /echo a", "unknown setting 'speed'"),
    ("ttft=5", "then the message"),
    ("dist=zipf /echo a", "dist must be one of"),
    ("tps=-1 /echo a", "tokens per second"),
    ("ttft=99999999 /echo a", "ttft must be"),
    ("jitter=11 /echo a", "jitter"),
])
def test_bad_settings_are_script_errors(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_latency(text)


async def test_a_bad_latency_command_fails_the_model_call(waits: list[float]) -> None:
    assert await answer("/latency tps=fast /echo a") == [
        "error: /latency takes KEY=VALUE settings (ttft, tps, dist, jitter), then the message; "
        "tps='fast' is not a number"]
    assert waits == []


# --- the waits ------------------------------------------------------------------------------------


async def test_ttft_then_a_gap_per_token(waits: list[float]) -> None:
    assert await answer("/latency ttft=200 tps=50 /stream 3") == ["tok0 ", "tok1 ", "tok2 "]
    assert waits == pytest.approx([0.2, 0.02, 0.02])


async def test_without_streaming_one_wait_for_the_whole_answer(waits: list[float]) -> None:
    await answer("/latency ttft=100 tps=10 /echo a b c", stream=False)
    assert waits == pytest.approx([0.1, 0.2])  # three tokens: two gaps after the first


async def test_a_tool_call_waits_for_its_first_token_too(waits: list[float]) -> None:
    await answer("/latency ttft=30 /tool get_location {}")
    assert waits == pytest.approx([0.03])


async def test_stream_ms_is_kept_without_a_rate(waits: list[float]) -> None:
    await answer("/stream 3 10")
    assert waits == pytest.approx([0.01, 0.01, 0.01])
    waits.clear()
    await answer("/latency tps=100 /stream 3 10")  # a rate replaces /stream's MS
    assert waits == pytest.approx([0.01, 0.01])


async def test_no_latency_waits_for_nothing(waits: list[float]) -> None:
    await answer("/echo a b c")
    await answer("/stream 5")
    assert waits == []


async def test_the_process_wide_latency_and_the_command_over_it(waits: list[float]) -> None:
    configure_latency(Latency(ttft_ms=50, tokens_per_s=20))
    await answer("/echo a b")
    assert waits == pytest.approx([0.05, 0.05])
    waits.clear()
    await answer("/latency ttft=1 /echo a b")  # the command's settings replace the default wholly
    assert waits == pytest.approx([0.001])


async def test_drawn_latencies_follow_the_seed(waits: list[float]) -> None:
    configure_latency(Latency(ttft_ms=100, tokens_per_s=10, dist="exp"), seed=7)
    await answer("/stream 4")
    first = list(waits)
    reference = random.Random(7)
    assert first == pytest.approx([reference.expovariate(10), *(reference.expovariate(10) for _ in range(3))])

    waits.clear()
    configure_latency(Latency(ttft_ms=100, tokens_per_s=10, dist="exp"), seed=7)
    await answer("/stream 4")
    assert waits == first


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_drawn_values_stay_near_their_mean_and_never_below_zero(dist: str) -> None:
    latency = Latency(ttft_ms=100, dist=dist, jitter=0.5)  # type: ignore[arg-type]
    rng = random.Random(1)
    draws = [latency.first_token_s(rng) for _ in range(2000)]
    assert min(draws) >= 0
    assert sum(draws) / len(draws) == pytest.approx(0.1, rel=0.05)
    if dist == "uniform":
        assert min(draws) >= 0.05 and max(draws) <= 0.15


def test_the_gateway_settings_reach_the_model(waits: list[float]) -> None:
    settings = load_settings(["--scripted-ttft-ms", "150", "--scripted-tokens-per-s", "20",
                              "--scripted-latency-dist", "uniform", "--scripted-latency-jitter", "0.2",
                              "--scripted-seed", "3"], env={})
    configure_scripted_model(settings)
    assert ScriptedLlm.default_latency == Latency(ttft_ms=150, tokens_per_s=20, dist="uniform", jitter=0.2)
    assert ScriptedLlm.rng.random() == random.Random(3).random()

    configure_scripted_model(load_settings([], env={}))
    assert not ScriptedLlm.default_latency.active
