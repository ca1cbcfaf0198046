"""The offline `scripted` model: a deterministic ADK `BaseLlm` driven by the user's text.

How it works: every call looks at the request's contents. The *last user message* is the last
content with role ``user`` that carries text (function responses also travel as role ``user`` but
carry no text). Its text selects a script (see CONTRACT.md, "The scripted model"). Everything after
that message is the turn so far: the model's own function calls and the responses it received.

- ``/tool`` lines (separated into steps by ``/then``) are replayed one step per model call; once
  every step has been called and answered, the model ends the turn with one line per call,
  ``NAME -> <response as compact JSON with sorted keys>``.
- Text is streamed as real partial responses (``partial=True``), one per word or token, and then
  one aggregated final response, as ADK's streaming contract asks.
- Latency (for load tests of frontends and proxies): a message's ``/latency`` prefix, else the
  process-wide `configure_latency` (the gateway's ``--scripted-*`` settings), delays the first
  output of every model call (time to first token) and spaces text tokens (tokens per second).
  Without either, nothing waits.

The model holds no state between calls (one instance serves every session), so the script is
derived again from the request each time.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

from google.adk.models import BaseLlm, LLMRegistry
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from adk_gateway.agents.script import Latency, Plan, ScriptError, plan_for_text, tiny_png, usage, words
from adk_gateway.agents.scripted_live import ScriptedLiveConnection

__all__ = ["ScriptedLlm", "configure_latency"]

# The waits of the latency settings; a test replaces it to see the delays without waiting them.
_sleep = asyncio.sleep


def configure_latency(latency: Latency, seed: int | None = None) -> None:
    """Sets the process-wide latency of every scripted model (a message's `/latency` overrides
    it) and seeds the generator its drawn values come from (None: a fresh seed)."""
    ScriptedLlm.default_latency = latency
    ScriptedLlm.rng = random.Random(seed)


def _has_text(content: types.Content) -> bool:
    return any(part.text is not None and not part.thought for part in content.parts or ())


def _split_turn(contents: list[types.Content]) -> tuple[str, list[types.Content]]:
    """Returns the last user message's text and the contents after it."""
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        if content.role == "user" and _has_text(content):
            text = "".join(p.text or "" for p in content.parts or () if p.text and not p.thought)
            return text, contents[index + 1 :]
    return "", contents


def _calls_and_responses(
    turn: list[types.Content],
) -> tuple[int, list[types.FunctionCall], list[dict[str, Any]]]:
    """Counts the model's tool-calling steps and pairs each call with its last response.

    ADK strips its own call ids before contents reach a model, so responses are paired with the
    calls of the step before them by name and position; a later response for the same call (a real
    result after a confirmation placeholder) replaces the earlier one.
    """
    steps = 0
    calls: list[types.FunctionCall] = []
    responses: list[dict[str, Any]] = []
    step_start = 0
    for content in turn:
        step_calls = [
            p.function_call
            for p in content.parts or ()
            if p.function_call and not (p.function_call.name or "").startswith("adk_")
        ]
        if content.role == "model" and step_calls:
            steps += 1
            step_start = len(calls)
            calls.extend(step_calls)
            responses.extend({} for _ in step_calls)
            continue
        seen: dict[str, int] = {}
        for part in content.parts or ():
            response = part.function_response
            if response is None or (response.name or "").startswith("adk_"):
                continue
            nth = seen.get(response.name or "", 0)
            seen[response.name or ""] = nth + 1
            same_name = [i for i in range(step_start, len(calls)) if calls[i].name == response.name]
            if nth < len(same_name):
                responses[same_name[nth]] = dict(response.response or {})
    return steps, calls, responses


def _summary(calls: list[types.FunctionCall], responses: list[dict[str, Any]]) -> str:
    lines = []
    for call, response in zip(calls, responses, strict=True):
        lines.append(f"{call.name} -> {json.dumps(response, sort_keys=True, separators=(',', ':'))}")
    return "\n".join(lines)


class ScriptedLlm(BaseLlm):
    """Deterministic offline model; see the module docstring and CONTRACT.md."""

    model: str = "scripted"
    live_audio_rate: ClassVar[int] = 24000
    default_latency: ClassVar[Latency] = Latency()
    rng: ClassVar[random.Random] = random.Random()

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"scripted", r"scripted-.*"]

    @property
    def capabilities(self) -> Any:
        from google.adk.models._capabilities import LlmCapabilities

        return LlmCapabilities(output_schema_and_tools=True)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        text, turn = _split_turn(list(llm_request.contents or []))
        try:
            plan = plan_for_text(text, frozenset(llm_request.tools_dict))
        except ScriptError as exc:
            yield LlmResponse(error_code="SCRIPT_ERROR", error_message=str(exc), turn_complete=True)
            return
        if plan.error is not None:
            yield LlmResponse(error_code="MODEL_ERROR", error_message=plan.error, turn_complete=True)
            return

        latency = plan.latency or self.default_latency
        # Time to first token: before whatever this call answers (text, a thought, tool calls).
        if latency.ttft_ms and (first := latency.first_token_s(self.rng)):
            await _sleep(first)

        steps_done, calls, responses = _calls_and_responses(turn)
        if plan.steps and steps_done < len(plan.steps):
            function_calls = [
                types.Part(function_call=types.FunctionCall(name=call.name, args=call.args))
                for call in plan.steps[steps_done]
            ]
            yield LlmResponse(
                content=types.Content(role="model", parts=function_calls),
                partial=False,
                turn_complete=True,
                finish_reason=types.FinishReason.STOP,
                usage_metadata=usage(text, ""),
            )
            return

        deltas = plan.deltas if not plan.steps else words(_summary(calls, responses))
        final_parts: list[types.Part] = []
        if plan.thought is not None:
            if stream:
                for piece in words(plan.thought) or ("",):
                    yield self._partial(types.Part(text=piece, thought=True))
            final_parts.append(types.Part(text=plan.thought, thought=True))
        if plan.image:
            final_parts.append(
                types.Part(inline_data=types.Blob(mime_type="image/png", data=tiny_png()))
            )
        if stream:
            for index, delta in enumerate(deltas):
                gap = self._gap(plan, latency, index)
                if gap:
                    await _sleep(gap)
                yield self._partial(types.Part(text=delta))
        elif latency.tokens_per_s and (rest := sum(self._gap(plan, latency, i) for i in range(len(deltas)))):
            await _sleep(rest)  # one response, when a streamed answer would have ended
        answer = "".join(deltas)
        if answer or not final_parts:
            final_parts.append(types.Part(text=answer))
        yield LlmResponse(
            content=types.Content(role="model", parts=final_parts),
            partial=False,
            turn_complete=True,
            finish_reason=types.FinishReason.STOP,
            usage_metadata=usage(text, answer),
        )

    def _gap(self, plan: Plan, latency: Latency, index: int) -> float:
        """Seconds before text token `index`: with a token rate, a gap drawn from it (the first
        token comes with the time to first token); else `/stream`'s MS before every token."""
        if latency.tokens_per_s:
            return latency.token_gap_s(self.rng) if index else 0.0
        return plan.delay_s

    @staticmethod
    def _partial(part: types.Part) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=[part]), partial=True)

    def connect(self, llm_request: LlmRequest) -> Any:
        """Opens a scripted live (audio) connection; see `adk_gateway.agents.scripted_live`."""
        return ScriptedLiveConnection.open(llm_request)


LLMRegistry.register(ScriptedLlm)
