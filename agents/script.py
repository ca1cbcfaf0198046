"""The scripted model's command language: the user's text -> a `Plan` (CONTRACT.md, "The scripted
model"). Shared by the model (`adk_gateway.agents.scripted`) and its live connection
(`adk_gateway.agents.scripted_live`); pure, no ADK calls.
"""

from __future__ import annotations

import json
import math
import random
import re
import struct
import zlib
from collections.abc import Container
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from google.genai import types

__all__ = [
    "MAX_STREAM_TOKENS",
    "Distribution",
    "Latency",
    "Plan",
    "ScriptError",
    "ToolCall",
    "parse_latency",
    "plan_for_text",
    "tiny_png",
    "usage",
    "words",
]

_WORD = re.compile(r"\S+\s*|\s+")
_SETTING = re.compile(r"([a-z]+)=(\S*)\s*")
MAX_STREAM_TOKENS = 100_000
MAX_LATENCY_MS = 3_600_000.0

Distribution = Literal["fixed", "uniform", "normal", "exp"]
DISTRIBUTIONS: tuple[str, ...] = get_args(Distribution)


@dataclass(frozen=True, slots=True)
class Latency:
    """How fast the model answers: the time to its first token and the rate of its text tokens.

    Values are fixed, or drawn per answer (`ttft_ms`) and per token (the gap `1 / tokens_per_s`)
    from a distribution with that mean: `uniform` (mean ± `jitter` x mean), `normal` (standard
    deviation `jitter` x mean) or `exp` (exponential: tokens arrive as a Poisson process). Draws
    below zero count as zero. All zero: no waiting at all.
    """

    ttft_ms: float = 0.0
    tokens_per_s: float = 0.0  # 0: text tokens come as fast as possible
    dist: Distribution = "fixed"
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ttft_ms) and 0 <= self.ttft_ms <= MAX_LATENCY_MS):
            raise ValueError(f"ttft must be 0..{MAX_LATENCY_MS:g} ms")
        if not (math.isfinite(self.tokens_per_s) and self.tokens_per_s >= 0):
            raise ValueError("tokens per second must be >= 0 (0: no pacing)")
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"dist must be one of {', '.join(DISTRIBUTIONS)}")
        if not (math.isfinite(self.jitter) and 0 <= self.jitter <= 10):
            raise ValueError("jitter must be 0..10")

    @property
    def active(self) -> bool:
        return self.ttft_ms > 0 or self.tokens_per_s > 0

    def first_token_s(self, rng: random.Random) -> float:
        """Seconds before the first output of an answer."""
        return self._draw(self.ttft_ms / 1000, rng)

    def token_gap_s(self, rng: random.Random) -> float:
        """Seconds between two text tokens (0 without a rate)."""
        return self._draw(1 / self.tokens_per_s, rng) if self.tokens_per_s > 0 else 0.0

    def _draw(self, mean: float, rng: random.Random) -> float:
        if mean <= 0 or self.dist == "fixed":
            return mean
        if self.dist == "uniform":
            value = rng.uniform(mean * (1 - self.jitter), mean * (1 + self.jitter))
        elif self.dist == "normal":
            value = rng.gauss(mean, mean * self.jitter)
        else:
            value = rng.expovariate(1 / mean)
        return max(0.0, value)


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    """What the model does for one user message."""

    deltas: tuple[str, ...] = ()
    delay_s: float = 0.0
    thought: str | None = None
    image: bool = False
    error: str | None = None
    steps: tuple[tuple[ToolCall, ...], ...] = field(default=())
    latency: Latency | None = None  # a `/latency` prefix; None: the model's process-wide setting


class ScriptError(ValueError):
    """The user's script could not be parsed (bad /tool JSON, bad /stream count, bad /latency)."""


def words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text))


def _parse_tool_lines(text: str) -> tuple[tuple[ToolCall, ...], ...]:
    steps: list[tuple[ToolCall, ...]] = []
    current: list[ToolCall] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "/then":
            if current:
                steps.append(tuple(current))
            current = []
            continue
        if not line.startswith("/tool"):
            raise ScriptError(f"expected a /tool or /then line, got {line[:40]!r}")
        rest = line[len("/tool") :].strip()
        name, _, raw_args = rest.partition(" ")
        if not name:
            raise ScriptError("/tool needs a tool name")
        try:
            args = json.loads(raw_args) if raw_args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ScriptError(f"/tool {name}: arguments are not JSON ({exc.msg})") from None
        if not isinstance(args, dict):
            raise ScriptError(f"/tool {name}: arguments must be a JSON object")
        current.append(ToolCall(name, args))
    if current:
        steps.append(tuple(current))
    return tuple(steps)


def _keyword_plan(text: str, tools: Container[str] | None) -> Plan:
    """The demo agent's keyword rules for free text, each only when the agent has its tool
    (`tools`: the names of the agent's tools; None: all of them): another agent's "weather in
    Paris" is echoed, not a call of a `get_weather` it does not have."""

    def has(name: str) -> bool:
        return tools is None or name in tools

    lowered = text.lower()
    if "weather" in lowered and has("get_weather"):
        match = re.search(r"\bin ([A-Za-z][\w .'-]*)", text)
        location = match.group(1).strip(" .?!") if match else "Tokyo"
        return Plan(steps=((ToolCall("get_weather", {"location": location}),),))
    if "pay" in lowered and has("process_payment"):
        amount_match = re.search(r"(\d+(?:\.\d+)?)", text)
        recipient_match = re.search(r"\bto ([A-Za-z][\w-]*)", text)
        amount = float(amount_match.group(1)) if amount_match else 10.0
        recipient = recipient_match.group(1) if recipient_match else "alice"
        args = {"amount": amount, "recipient": recipient}
        return Plan(steps=((ToolCall("process_payment", args),),))
    if ("music" in lowered or "bgm" in lowered) and has("change_bgm"):
        track_match = re.search(r"(\d+)", text)
        track = int(track_match.group(1)) if track_match else 1
        return Plan(steps=((ToolCall("change_bgm", {"track": track}),),))
    if ("location" in lowered or "where am i" in lowered) and has("get_location"):
        return Plan(steps=((ToolCall("get_location", {}),),))
    return Plan(deltas=words(f"You said: {text}"))


_LATENCY_NUMBERS = {"ttft": "ttft_ms", "tps": "tokens_per_s", "jitter": "jitter"}
_LATENCY_USAGE = "/latency takes KEY=VALUE settings (ttft, tps, dist, jitter), then the message"


def parse_latency(text: str) -> tuple[Latency, str]:
    """Splits the settings that follow `/latency` from the message after them.

    Raises:
        ScriptError: an unknown setting, a bad value, or no message after the settings.
    """
    values: dict[str, Any] = {}
    position = 0
    while match := _SETTING.match(text, position):
        key, raw = match.group(1), match.group(2)
        position = match.end()
        if key == "dist":
            values["dist"] = raw
            continue
        field_name = _LATENCY_NUMBERS.get(key)
        if field_name is None:
            raise ScriptError(f"{_LATENCY_USAGE}; unknown setting {key!r}")
        try:
            values[field_name] = float(raw)
        except ValueError:
            raise ScriptError(f"{_LATENCY_USAGE}; {key}={raw!r} is not a number") from None
    rest = text[position:]
    if not rest.strip():
        raise ScriptError(f"{_LATENCY_USAGE} (e.g. /latency ttft=200 tps=50 /stream 100)")
    try:
        return Latency(**values), rest
    except ValueError as exc:
        raise ScriptError(f"/latency: {exc}") from None


def plan_for_text(text: str, tools: Container[str] | None = None) -> Plan:
    """Derives the model's behaviour from the last user message's text; `tools`: the names of the
    agent's tools, for the keyword rules (None: the demo agent's, all of them).

    Raises:
        ScriptError: the text is a command with malformed arguments.
    """
    stripped = text.strip()
    command, _, rest = stripped.partition(" ")
    if command == "/latency":
        latency, message = parse_latency(rest)
        return replace(plan_for_text(message, tools), latency=latency)
    if command == "/echo":
        return Plan(deltas=words(stripped[len("/echo ") :]) if rest else ())
    if command == "/stream":
        parts = rest.split()
        try:
            count = int(parts[0]) if parts else 10
            delay_ms = float(parts[1]) if len(parts) > 1 else 0.0
        except ValueError:
            raise ScriptError("/stream takes N [MS]") from None
        if not 0 <= count <= MAX_STREAM_TOKENS or delay_ms < 0:
            raise ScriptError(f"/stream N must be 0..{MAX_STREAM_TOKENS} and MS >= 0")
        return Plan(deltas=tuple(f"tok{i} " for i in range(count)), delay_s=delay_ms / 1000)
    if command == "/tool":
        return Plan(steps=_parse_tool_lines(stripped))
    if command == "/think":
        return Plan(thought=rest, deltas=("done",))
    if command == "/image":
        return Plan(image=True, deltas=words("Here is an image."))
    if command == "/error":
        return Plan(error=rest or "scripted failure")
    return _keyword_plan(stripped, tools)


def tiny_png(width: int = 8, height: int = 8, rgb: tuple[int, int, int] = (220, 40, 40)) -> bytes:
    """A small solid-colour PNG, built with zlib so no image library is needed."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def usage(prompt: str, answer: str) -> types.GenerateContentResponseUsageMetadata:
    prompt_tokens = max(1, len(prompt.split()))
    answer_tokens = len(answer.split())
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt_tokens,
        candidates_token_count=answer_tokens,
        total_token_count=prompt_tokens + answer_tokens,
    )
