"""The scripted model's command language: the user's text -> a `Plan` (CONTRACT.md, "The scripted
model"). Shared by the model (`agents.scripted`) and its live connection (`agents.scripted_live`);
pure, no ADK calls.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.genai import types

__all__ = ["MAX_STREAM_TOKENS", "Plan", "ScriptError", "ToolCall", "plan_for_text", "tiny_png", "usage", "words"]

_WORD = re.compile(r"\S+\s*|\s+")
MAX_STREAM_TOKENS = 100_000


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


class ScriptError(ValueError):
    """The user's script could not be parsed (bad /tool JSON, bad /stream count)."""


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


def _keyword_plan(text: str) -> Plan:
    """The demo agent's keyword rules for free text."""
    lowered = text.lower()
    if "weather" in lowered:
        match = re.search(r"\bin ([A-Za-z][\w .'-]*)", text)
        location = match.group(1).strip(" .?!") if match else "Tokyo"
        return Plan(steps=((ToolCall("get_weather", {"location": location}),),))
    if "pay" in lowered:
        amount_match = re.search(r"(\d+(?:\.\d+)?)", text)
        recipient_match = re.search(r"\bto ([A-Za-z][\w-]*)", text)
        amount = float(amount_match.group(1)) if amount_match else 10.0
        recipient = recipient_match.group(1) if recipient_match else "alice"
        args = {"amount": amount, "recipient": recipient}
        return Plan(steps=((ToolCall("process_payment", args),),))
    if "music" in lowered or "bgm" in lowered:
        track_match = re.search(r"(\d+)", text)
        track = int(track_match.group(1)) if track_match else 1
        return Plan(steps=((ToolCall("change_bgm", {"track": track}),),))
    if "location" in lowered or "where am i" in lowered:
        return Plan(steps=((ToolCall("get_location", {}),),))
    return Plan(deltas=words(f"You said: {text}"))


def plan_for_text(text: str) -> Plan:
    """Derives the model's behaviour from the last user message's text.

    Raises:
        ScriptError: the text is a command with malformed arguments.
    """
    stripped = text.strip()
    command, _, rest = stripped.partition(" ")
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
    return _keyword_plan(stripped)


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
