"""What a load test does: `LoadConfig`, its checks, and the refusal of targets that are not ours."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_PROMPT",
    "SCENARIOS",
    "SSE_PATH",
    "TRANSPORTS",
    "WS_PATH",
    "ChatMode",
    "LoadConfig",
    "Scenario",
    "TargetRefused",
    "Transport",
    "check_target",
    "redact",
]

Transport = Literal["sse", "ws", "adk"]
ChatMode = Literal["fresh", "reused"]
Scenario = Literal["echo", "stream", "approval", "browser-tool", "idle", "live"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)
SCENARIOS: tuple[str, ...] = get_args(Scenario)
DISTRIBUTIONS = ("fixed", "uniform", "normal", "exp")

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})
SSE_PATH = "/api/chat"
WS_PATH = "/api/chat/ws"
TOKEN_PARAM = "access_token"
DEFAULT_PROMPT = "/echo hello from the load generator"
APPROVAL_PROMPT = '/tool process_payment {"amount": 1.5, "recipient": "loadtest"}'
BROWSER_TOOL_PROMPT = "/tool get_location {}"
DEFAULT_TOOL_OUTPUT: dict[str, Any] = {"latitude": 35.6812, "longitude": 139.7671, "accuracy_m": 10}
MAX_SILENCE_MS = 3_600_000  # the scripted model's longest /latency ttft
_CREDENTIAL = re.compile(r"(access_token=)[^&\s\"']+|(Bearer\s+)[^\s\"',]+", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` without credentials: error details quote URLs (the WebSocket's carries the token)."""
    return _CREDENTIAL.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", text)


class TargetRefused(ValueError):
    """The URL points at a host that is not loopback and --allow-remote was not given."""


def check_target(url: str, allow_remote: bool = False) -> None:
    """Refuses anything but http(s)/ws(s) URLs on a loopback host, unless `allow_remote`.

    The host is checked by name or literal address only; no DNS lookup is made.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https", "ws", "wss"}:
        raise TargetRefused(f"unsupported URL scheme {parts.scheme!r} (use http:// or https://)")
    host = (parts.hostname or "").lower()
    if not host:
        raise TargetRefused(f"no host in URL {url!r}")
    if allow_remote or host in LOOPBACK_NAMES:
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise TargetRefused(
        f"refusing to load-test {host!r}: only loopback hosts (localhost, 127.0.0.0/8, ::1) are allowed "
        "by default; pass --allow-remote if you own that server"
    )


@dataclass(slots=True)
class LoadConfig:
    """One load test. Fixed concurrency (`concurrency` clients, each sending its next request when
    the last one ended) unless `rate` is set: then requests arrive at `rate` per second whatever
    the answers do, at most `max_in_flight` at a time (the arrivals past it are dropped)."""

    url: str = "http://127.0.0.1:8080"
    transport: Transport = "sse"
    scenario: Scenario = "echo"
    concurrency: int = 1
    rate: float | None = None
    max_in_flight: int = 1000
    requests: int = 100
    duration_s: float = 60.0
    timeout_s: float = 30.0
    prompt: str | None = None  # None: the scenario's own
    chat: ChatMode = "fresh"
    ws_connection: Literal["worker", "request"] = "worker"
    abort_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    token: str | None = None  # gateways with --auth jwt/api-keys: Bearer on HTTP, ?access_token= on ws
    adk_app: str = ""
    allow_remote: bool = False
    sse_path: str = SSE_PATH
    ws_path: str = WS_PATH
    # stream: the answer the scripted model streams (through its /latency command)
    tokens: int = 20
    tokens_per_s: float = 0.0
    ttft_ms: float = 0.0
    latency_dist: str = "fixed"
    # approval, browser-tool: what a browser tool "returns"; how many POSTs one turn may take
    tool_output: Any = field(default_factory=lambda: dict(DEFAULT_TOOL_OUTPUT))
    max_round_trips: int = 6
    # live: a WAV file sent in real time, `audio_frame_ms` a frame
    wav: str | None = None
    audio_frame_ms: int = 20

    @property
    def mode(self) -> Literal["concurrency", "rate"]:
        return "concurrency" if self.rate is None else "rate"

    def prompt_text(self) -> str:
        """The user message of each request: `prompt`, else the scenario's."""
        if self.prompt is not None:
            return self.prompt
        if self.scenario == "stream":
            settings = []
            if self.ttft_ms:
                settings.append(f"ttft={self.ttft_ms:g}")
            if self.tokens_per_s:
                settings.append(f"tps={self.tokens_per_s:g}")
            if settings and self.latency_dist != "fixed":
                settings.append(f"dist={self.latency_dist}")
            command = f"/stream {self.tokens}"
            return f"/latency {' '.join(settings)} {command}" if settings else command
        if self.scenario == "approval":
            return APPROVAL_PROMPT
        if self.scenario == "browser-tool":
            return BROWSER_TOOL_PROMPT
        if self.scenario == "idle":
            # A model silent for longer than the test: the stream stays open with nothing to say.
            silent_ms = min(MAX_SILENCE_MS, math.ceil((self.duration_s + self.timeout_s) * 1000))
            return f"/latency ttft={silent_ms} /echo idle"
        return DEFAULT_PROMPT

    def validate(self) -> None:
        """Raises ValueError (TargetRefused for the URL) naming the flag that is wrong."""
        check_target(self.url, self.allow_remote)
        if self.transport not in TRANSPORTS:
            raise ValueError("transport must be sse, ws or adk")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}")
        if self.chat not in ("fresh", "reused"):
            raise ValueError("chat must be fresh or reused")
        if self.concurrency < 1 or self.requests < 1:
            raise ValueError("concurrency and requests must be at least 1")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError("--rate must be a positive number of requests per second")
        if self.max_in_flight < 1:
            raise ValueError("--max-in-flight must be at least 1")
        if not (self.duration_s > 0 and self.timeout_s > 0):
            raise ValueError("duration and timeout must be positive")
        if self.abort_after is not None and self.abort_after < 1:
            raise ValueError("abort-after must be at least 1")
        if self.transport == "adk":
            if not self.adk_app:
                raise ValueError("--adk-app is needed with --transport adk")
            if self.scenario not in ("echo", "stream"):
                raise ValueError("--transport adk runs the echo and stream scenarios only")
        if self.token is not None:
            if self.transport == "adk":
                raise ValueError("--token is for the gateway's transports (sse, ws), not --transport adk")
            if not self.token or any(ch.isspace() for ch in self.token):
                raise ValueError("--token must be non-empty and without blanks")
        if self.scenario == "stream":
            if not 0 <= self.tokens <= 100_000:
                raise ValueError("--tokens must be 0..100000")
            if self.tokens_per_s < 0 or self.ttft_ms < 0:
                raise ValueError("--tokens-per-s and --ttft-ms must be >= 0")
            if self.latency_dist not in DISTRIBUTIONS:
                raise ValueError(f"--latency-dist must be one of {', '.join(DISTRIBUTIONS)}")
        if self.scenario == "live":
            if self.transport != "ws":
                raise ValueError("the live scenario needs --transport ws")
            if not self.wav:
                raise ValueError("the live scenario needs --wav FILE (PCM16 audio)")
            if not 10 <= self.audio_frame_ms <= 1000:
                raise ValueError("--audio-frame-ms must be 10..1000")
        if self.max_round_trips < 1:
            raise ValueError("max round trips must be at least 1")
        try:
            json.dumps(self.tool_output)
        except (TypeError, ValueError):
            raise ValueError("--tool-output must be JSON") from None
