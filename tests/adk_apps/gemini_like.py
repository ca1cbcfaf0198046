"""An offline model that streams through ADK exactly like ADK's own `Gemini` class (no network, no key).

`GeminiLike` builds raw `types.GenerateContentResponse` chunks and feeds them to ADK's own
`StreamingResponseAggregator`, as `google.adk.models.google_llm.Gemini.generate_content_async(stream=True)`
does: every chunk comes out `partial=True`; the last streamed chunk carries `usage_metadata`, `finish_reason`
and any grounding; then `aggregator.close()` is yielded as the `partial=False` aggregate (all parts, the last
chunk's usage, the grounding, `model_version`). Function calls are one streamed chunk after the text.

What it answers comes from a script, `script(llm_request) -> Turn`, one per app (see each app's `script.py`).
The helpers below read what a script needs from the request: the agent's name (ADK puts it in
`config.labels['adk_agent_name']`), the last user text, and the function responses the call answers.

Use it as an instance, the way ADK samples pass `LiteLlm(...)`:

    root_agent = Agent(name="x", model=GeminiLike(script=script), tools=[...])

Its `model` is "gemini-2.5-flash" by default, so ADK's built-in tools that check for a Gemini model name
(`google_search`: `is_gemini_model`, i.e. the name starts with "gemini-") accept it.

By name: the class is registered with ADK's `LLMRegistry` for `offline/gemini-.*` (e.g.
`model="offline/gemini-2.5-flash"`, once this module is imported), answering with `echo_script`. A
`gemini-like-.*` pattern would never be reached: ADK registers Gemini's `gemini-.*` first and the registry
takes the first pattern that matches. `GeminiLike:gemini-2.5-flash` (ADK's "Class:model" form) works too.

This file sits in the agents folder; ADK's `AgentLoader` puts that folder on `sys.path` before importing an
app, so the apps import it as the top-level module `gemini_like`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from google.adk.models import BaseLlm, LlmCapabilities, LLMRegistry
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.utils.streaming_utils import StreamingResponseAggregator
from google.genai import types

MODEL = "gemini-2.5-flash"
MODEL_VERSION = "gemini-2.5-flash-offline-001"
PROMPT_TOKENS = 11


@dataclass
class Turn:
    """What the model answers for one call."""

    text_chunks: list[str] = field(default_factory=list)
    """Streamed one chunk each, in order."""
    function_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(name, args): streamed together as one more chunk after the text."""
    grounding: types.GroundingMetadata | None = None
    """Put on the last streamed chunk (as Gemini does), so also on the aggregate."""
    usage_every_chunk: bool = False
    """Usage on every chunk (the Gemini API does this), not only on the last one."""
    prompt_tokens: int = PROMPT_TOKENS


Script = Callable[[LlmRequest], Turn]


def say(*chunks: str, grounding: types.GroundingMetadata | None = None) -> Turn:
    """A text answer streamed in these chunks."""
    return Turn(text_chunks=list(chunks), grounding=grounding)


def call(name: str, text: str = "", /, **args: Any) -> Turn:
    """A function call, after an optional text chunk."""
    return Turn(text_chunks=[text] if text else [], function_calls=[(name, args)])


# --- reading the request -------------------------------------------------------------------------------------


def agent_name_of(llm_request: LlmRequest) -> str:
    """The name of the agent the call is for (ADK labels every request with it)."""
    labels = (llm_request.config.labels or {}) if llm_request.config else {}
    return labels.get("adk_agent_name", "")


def last_user_text(llm_request: LlmRequest) -> str:
    """The user's last text. Skips what ADK adds as user text when other agents spoke before this one (a
    content opening with "For context: ...", then "[agent] said: ..." parts)."""
    for content in reversed(llm_request.contents or []):
        texts = [p.text for p in content.parts or [] if p.text]
        if content.role != "user" or not texts or texts[0].startswith("For context:"):
            continue
        return texts[-1]
    return ""


def last_function_responses(llm_request: LlmRequest) -> list[types.FunctionResponse]:
    """The function responses this call answers (those in the last content), else none."""
    if not llm_request.contents:
        return []
    return [p.function_response for p in llm_request.contents[-1].parts or [] if p.function_response]


def last_function_call(llm_request: LlmRequest, name: str) -> types.FunctionCall | None:
    """The last call of this function the model made in the request's history."""
    for content in reversed(llm_request.contents or []):
        for part in reversed(content.parts or []):
            if part.function_call and part.function_call.name == name:
                return part.function_call
    return None


def echo_script(llm_request: LlmRequest) -> Turn:
    """The answer of a model made by name: echoes the user's last text."""
    return say("You said: ", last_user_text(llm_request) or "nothing", ".")


# --- the model -----------------------------------------------------------------------------------------------


class GeminiLike(BaseLlm):
    """Offline model that streams like Gemini through ADK; `script` decides each answer."""

    model: str = MODEL
    version: str = MODEL_VERSION
    """The responses' `model_version`."""
    script: Any = None
    """`Script`; `echo_script` when None."""
    chunk_delay_s: float = 0.0
    """Pause between streamed chunks."""
    calls: list[LlmRequest] | None = None
    """When a list: gets a copy of every request (contents, config with tools and labels, model)."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"offline/gemini-.*"]

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=True)

    def _chunks(self, turn: Turn) -> list[types.GenerateContentResponse]:
        parts_per_chunk = [[types.Part(text=text)] for text in turn.text_chunks]
        if turn.function_calls:
            parts_per_chunk.append(
                [types.Part(function_call=types.FunctionCall(name=n, args=a)) for n, a in turn.function_calls]
            )
        if not parts_per_chunk:
            parts_per_chunk = [[types.Part(text="")]]
        chunks = []
        for i, parts in enumerate(parts_per_chunk):
            last = i == len(parts_per_chunk) - 1
            usage = None
            if last or turn.usage_every_chunk:
                usage = types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=turn.prompt_tokens,
                    candidates_token_count=i + 1,
                    total_token_count=turn.prompt_tokens + i + 1,
                )
            chunks.append(
                types.GenerateContentResponse(
                    candidates=[
                        types.Candidate(
                            content=types.Content(role="model", parts=parts),
                            finish_reason=types.FinishReason.STOP if last else None,
                            grounding_metadata=turn.grounding if last else None,
                        )
                    ],
                    usage_metadata=usage,
                    model_version=self.version,
                )
            )
        return chunks

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn: Turn = (self.script or echo_script)(llm_request)
        if self.calls is not None:
            self.calls.append(llm_request.model_copy(deep=True))
        chunks = self._chunks(turn)
        if not stream:  # as Gemini without streaming: one response with every part
            parts: list[types.Part] = []
            for chunk in chunks:
                for part in chunk.candidates[0].content.parts:  # type: ignore[index,union-attr]
                    if part.text is not None and parts and parts[-1].text is not None:
                        parts[-1] = types.Part(text=parts[-1].text + part.text)
                    else:
                        parts.append(part)
            merged = chunks[-1].model_copy(deep=True)
            merged.candidates[0].content = types.Content(role="model", parts=parts)  # type: ignore[index]
            yield LlmResponse.create(merged)
            return
        # The code path of google_llm.Gemini.generate_content_async(stream=True).
        aggregator = StreamingResponseAggregator()
        last_usage = None
        for i, chunk in enumerate(chunks):
            if i and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            if chunk.usage_metadata:
                last_usage = chunk.usage_metadata
            async with aclosing(aggregator.process_response(chunk)) as responses:
                async for response in responses:
                    yield response  # partial=True
            await asyncio.sleep(0)
        final = aggregator.close()
        if final is not None:
            if last_usage:
                final.usage_metadata = last_usage
            yield final  # partial=False: every part, the usage, the grounding


LLMRegistry.register(GeminiLike)
