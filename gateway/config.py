"""Settings: every field is a CLI flag (`--field-name`) and an env variable (`ADK_GATEWAY_FIELD_NAME`).

Precedence: flag > environment > default. Values are validated at start; a wrong value stops the
process with one clear line naming the setting.

The flags and variables are read here (argparse, then one loop), not with pydantic-settings: its
command line words `--help` its own way (`--port int ... (default: 8080)`), its booleans refuse an
empty or padded variable, and a `BaseSettings` reads the environment whenever one is built.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["ENV_PREFIX", "MIN_HS256_SECRET_BYTES", "Settings", "SettingsError", "host_name", "is_ip_address",
           "is_loopback", "jwks_url_problem", "load_settings", "origin_key", "settings_table", "uses_vertex"]

ENV_PREFIX = "ADK_GATEWAY_"
SESSION_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SECRET_SETTINGS = frozenset({"auth_jwt_secret", "metrics_token", "url_signing_secret"})
MIN_HS256_SECRET_BYTES: Final = 32  # RFC 7518, section 3.2: a key at least as long as the hash


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)\.?)(?::(?P<port>[0-9]{1,5}))?")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def host_name(value: str) -> str | None:
    """The host of a `Host` header value (or an --allowed-hosts entry): lower case, without its port,
    an IPv6 address's brackets and a name's final dot. None when it is not a host name or address."""
    match = _HOST.fullmatch(value.strip().lower())
    if match is None:
        return None
    if match["v6"] is not None:
        try:
            return str(ipaddress.IPv6Address(match["v6"]))
        except ValueError:
            return None
    return match["name"]


def is_ip_address(name: str) -> bool:
    """True for an IPv4 or IPv6 address (as `host_name` gives it), False for a name."""
    if not name or not (name[0].isdigit() or ":" in name):
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_key(origin: str) -> str:
    """An Origin (or a URL) as compared whole: `scheme://host[:port]` in lower case, without a default
    port or a trailing slash. Something that is no such URL (`null`) is kept as written."""
    text = origin.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text.lower()
    if not parts.scheme or not parts.hostname:
        return text.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    scheme = parts.scheme.lower()
    shown = "" if port is None or _DEFAULT_PORTS.get(scheme) == port else f":{port}"
    return f"{scheme}://{host}{shown}"


def jwks_url_problem(url: str, *, allow_insecure: bool) -> str | None:
    """Why a JWKS URL is refused, or None: https://, or http:// to a loopback host (the gateway warns
    at start) or with --allow-insecure-jwks."""
    parts = urlsplit(url.strip())
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname:
        if allow_insecure or is_loopback(parts.hostname):
            return None
        return ("an http:// key set can be swapped by anyone on the path, who could then sign tokens for any user; "
                "use https://, or set --allow-insecure-jwks if this is meant")
    return "must be an https:// URL"


def _items(listed: str) -> list[str]:
    return [item.strip() for item in listed.split(",") if item.strip()]


class SettingsError(ValueError):
    """A setting has a wrong value; the message names it and says what is allowed."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port to listen on (0 picks a free one).")
    agent: str = Field(
        default="demo",
        description="Agent to serve: 'demo', 'package.module:attribute', or an ADK agents folder (as `adk web` "
        "takes it: every app in it is served, a request's `app` body field picks one; FOLDER::APP is FOLDER "
        "with --app APP).",
    )
    app: str = Field(
        default="",
        description="The app a request without `app` is served by (empty: the only app, or the first of an "
        "agents folder in alphabetical order).",
    )
    model: str = Field(
        default="",
        description="Model for the demo agent: 'scripted' (offline) or a Gemini model name. "
        "Empty: Gemini (gemini-2.5-flash) when GOOGLE_API_KEY is set or Vertex AI is "
        "(GOOGLE_GENAI_USE_VERTEXAI=true and GOOGLE_CLOUD_PROJECT), else scripted.",
    )
    session_store: str = Field(
        default="memory://",
        description="ADK session store: memory:// (the gateway's own), or any URI `adk api_server "
        "--session_service_uri` takes: sqlite:///path/to.db, postgresql://user@host/db, agentengine://ID, ...",
    )
    artifact_store: str = Field(
        default="memory://",
        description="Where agents' artifacts (`tool_context.save_artifact`) are kept: memory:// (this process, "
        "bounded by --artifact-memory-max-bytes), a folder, or any URI `adk api_server --artifact_service_uri` "
        "takes: gs://bucket (needs google-cloud-storage and Google credentials), file:///folder, ...",
    )
    artifact_memory_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024,
        description="memory:// artifacts: most bytes kept; the artifacts saved longest ago go first.",
    )
    artifact_url_ttl_s: float = Field(
        default=3600.0, gt=0, le=7 * 86_400,
        description="How long an artifact's link in a chat stays valid (the link is signed for its user, chat, "
        "name and version; GET /api/chats/{id}/artifacts gives fresh ones).",
    )
    client_state: str = Field(
        default="",
        description="Comma-separated session state keys the client sees (data-state chunks) and may set (a "
        "request's `state`); empty: none, since state often holds what the user must not see.",
    )
    public_url: str = Field(
        default="",
        description="The gateway's public origin for links it hands out (artifact links, the OAuth redirect of "
        "tool sign-ins), e.g. https://chat.example.com; empty: the request's own scheme and Host.",
    )
    url_signing_secret: str = Field(
        default="",
        description="Secret that signs artifact links and sign-in states (32+ bytes); empty: a random one per "
        "process (instances behind one load balancer must share one).", repr=False,
    )
    stream_store: str = Field(
        default="memory://",
        description="Where resumable streams are kept: memory:// (one process) or redis://host:port/db.",
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto",
        description="Log format: 'json' (one JSON object a line), 'console' (for people), or 'auto' (console when "
        "stderr is a terminal, else JSON).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info", description="Log level.")
    auth: Literal["none", "jwt", "api-keys"] = Field(
        default="none",
        description="How callers prove who they are: 'none' (the user is the --user-header value; only on a "
        "loopback host unless --allow-anonymous), 'jwt' (Authorization: Bearer <JWT>, the user is its 'sub'), "
        "or 'api-keys' (Authorization: Bearer <key> from --auth-api-keys-file).",
    )
    allow_anonymous: bool = Field(
        default=False, description="Allow --auth none on a host that is not loopback (anyone can be anyone)."
    )
    auth_jwt_secret: str = Field(
        default="", description="--auth jwt: the HS256 shared secret (32 bytes or more, unless "
        "--allow-weak-jwt-secret).", repr=False,
    )
    allow_weak_jwt_secret: bool = Field(
        default=False, description="Start with an --auth-jwt-secret shorter than 32 bytes (anyone who guesses it "
        "can sign tokens for any user; tests only)."
    )
    auth_jwks_url: str = Field(
        default="", description="--auth jwt: https:// URL of a JWKS key set for RS256/ES256 tokens (cached, "
        "refetched on an unknown 'kid'; at most 64 KiB, no redirects). http:// only on a loopback host (with a "
        "warning) or with --allow-insecure-jwks."
    )
    allow_insecure_jwks: bool = Field(
        default=False, description="Accept an http:// --auth-jwks-url on a host that is not loopback (anyone on the "
        "path can swap the keys and sign tokens for any user)."
    )
    auth_jwks_cache_s: float = Field(default=300.0, ge=0, le=86_400, description="How long a JWKS key set is kept.")
    auth_jwt_audience: str = Field(default="", description="--auth jwt: required 'aud' (empty: not checked).")
    auth_jwt_issuer: str = Field(default="", description="--auth jwt: required 'iss' (empty: not checked).")
    auth_jwt_leeway_s: float = Field(default=30.0, ge=0, le=3600, description="Clock leeway for 'exp' and 'nbf'.")
    auth_api_keys_file: str = Field(
        default="", description="--auth api-keys: file with one 'KEY USER' pair a line (re-read when it changes)."
    )
    metrics_token: str = Field(
        default="", description="Bearer token GET /metrics requires (empty: /metrics is public).", repr=False
    )
    user_header: str = Field(
        default="x-user-id",
        description="With --auth none: the request header (or WebSocket handshake header) naming the user; "
        "absent: 'anonymous'. Ignored with any other --auth.",
    )
    detach_on_disconnect: bool = Field(
        default=False,
        description="Keep a run going when its client disconnects (resume mode); stop it with "
        "POST /api/chat/{id}/stop or the socket's abort.",
    )
    approval_timeout_s: float = Field(
        default=0.0, ge=0, description="Seconds after which an unanswered approval ends as an error (0: off)."
    )
    max_llm_calls: int = Field(default=25, ge=1, le=1000, description="Model calls allowed per run.")
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, description="Largest POST body.")
    max_ws_frame_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Largest WebSocket text frame (a larger one closes with 1009)."
    )
    max_audio_frame_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest binary (live audio) WebSocket frame; 2 s of 16 kHz PCM16."
    )
    max_json_depth: int = Field(
        default=64, ge=8, le=512, description="Deepest JSON nesting accepted in a body or frame (400 invalid_json)."
    )
    max_history_messages: int = Field(
        default=1_000, ge=1, le=100_000, description="Most messages a posted history may hold (413 past it)."
    )
    max_runs: int = Field(
        default=256, ge=1, description="Concurrent runs per process, detached ones included (503 + Retry-After)."
    )
    max_runs_per_user: int = Field(
        default=8, ge=1, description="Concurrent runs per user (not `anonymous`) in this process (429 + Retry-After)."
    )
    max_sockets_per_user: int = Field(
        default=16, ge=1, description="Open WebSockets per user (not `anonymous`) in this process (429 at handshake)."
    )
    max_sends_per_minute: int = Field(
        default=120, ge=1, description="`send` frames per socket per minute (an `error` frame `rate_limited` past it; "
        "repeated abuse closes with 1008)."
    )
    max_live_sessions: int = Field(
        default=32, ge=1, description="Live (audio) sessions per process (a live-start past it gets an `error` frame "
        "`overloaded`)."
    )
    max_pending_bytes: int = Field(
        default=1024 * 1024, ge=4096, description="Bytes a connection may leave unsent before it is a slow reader."
    )
    slow_reader_grace_s: float = Field(
        default=10.0, ge=0, le=600, description="How long a reader may stay over --max-pending-bytes before it is cut."
    )
    model_timeout_s: float = Field(
        default=120.0, ge=0, description="Longest one model call may take (0: no limit); then an error chunk."
    )
    tool_timeout_s: float = Field(
        default=300.0, ge=0, description="Longest one server tool call may take (0: no limit); then a tool error."
    )
    store_timeout_s: float = Field(
        default=10.0, gt=0, description="Longest one session-store call may take before the request fails (memory:// "
        "calls wait on nothing and are not bounded)."
    )
    cancel_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="How long a stop waits for a tool that ignores cancellation."
    )
    memory_ttl_s: float = Field(
        default=3600.0, ge=0, description="memory:// sessions: drop chats idle this long (0: never)."
    )
    memory_max_chats: int = Field(
        default=10_000, ge=1, description="memory:// sessions: most chats kept; the least recently used go first."
    )
    keepalive_s: float = Field(default=15.0, gt=0, le=300, description="Idle SSE comment interval.")
    ws_heartbeat_s: float = Field(default=25.0, gt=0, le=300, description="WebSocket ping interval.")
    busy_grace_ms: int = Field(
        default=300, ge=0, le=10_000, description="How long a POST for a busy chat waits before 409."
    )
    resume_retention_s: float = Field(
        default=30.0, ge=0, description="How long a finished stream stays resumable."
    )
    stream_buffer_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest resumable stream kept per chat."
    )
    allowed_hosts: str = Field(
        default="",
        description="Comma-separated host names the gateway answers to (the Host header, any port), besides "
        "localhost, IP addresses and the --host name; any other Host gets 421 (DNS rebinding). Behind a proxy "
        "that passes the public Host (the nginx site does): the public names, e.g. chat.example.com. '*': any "
        "(not with --auth none).",
    )
    allowed_origins: str = Field(
        default="",
        description="Comma-separated Origins (scheme://host[:port]) of chat apps on other origins: each may call "
        "the HTTP API (CORS; a POST from any other foreign Origin gets 403) and open the WebSocket; empty: none "
        "(same-origin pages need none). '*' allows any origin, without credentials (not recommended; not with "
        "--auth none).",
    )
    cors_origins: str = Field(
        default="",
        description="The older name of --allowed-origins: its Origins are added to that list.",
    )
    vad_silence_ms: int = Field(
        default=700, ge=100, le=10_000, description="Hands-free live mode: silence that ends an utterance."
    )
    vad_threshold_dbfs: float = Field(default=-45.0, le=0, description="Hands-free live mode: speech level.")
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0, le=600, description="At SIGTERM: how long runs may finish before every stream is ended."
    )
    web_dir: str = Field(default="", description="Folder with the built chat page (default: web/dist).")
    gc_thresholds: str = Field(
        default="50000,20,2",
        description="The garbage collector's three thresholds (Python's `gc.set_threshold`); 'python' keeps "
        "Python's 700,10,10, whose frequent collections of a heap of thousands of runs cost a busy process "
        "about a quarter of its throughput. The default collects young objects rarely and the oldest "
        "generation after every second middle collection, so the reference cycles runs leave behind (ADK's "
        "telemetry scopes, the tracebacks of cancelled tasks) are freed within minutes: RSS levels off in "
        "`make soak` (with a last value of 10 it rose 6 MiB a minute for 5 minutes).",
    )
    scripted_ttft_ms: float = Field(
        default=0.0, ge=0, le=3_600_000, allow_inf_nan=False,
        description="The scripted model: time to the first token of every model call, in ms (the mean when "
        "drawn, see --scripted-latency-dist); a message's `/latency` command overrides it (load tests of "
        "frontends and proxies).",
    )
    scripted_tokens_per_s: float = Field(
        default=0.0, ge=0, allow_inf_nan=False,
        description="The scripted model: text tokens per second (the mean when drawn); 0: as fast as possible.",
    )
    scripted_latency_dist: Literal["fixed", "uniform", "normal", "exp"] = Field(
        default="fixed",
        description="The scripted model: how its time to first token and token gaps vary: 'fixed', 'uniform' "
        "(mean ± jitter x mean), 'normal' (deviation jitter x mean) or 'exp' (exponential).",
    )
    scripted_latency_jitter: float = Field(
        default=0.5, ge=0, le=10, description="The scripted model: the jitter of 'uniform' and 'normal' latency."
    )
    scripted_seed: int | None = Field(
        default=None,
        description="The scripted model: seed of the generator its drawn latencies come from (unset: a fresh one).",
    )

    @field_validator("session_store")
    @classmethod
    def _session_store(cls, value: str) -> str:
        # Which schemes exist is ADK's service registry's to say (at start); here only the shape.
        if not SESSION_URI.match(value):
            raise ValueError("must be a URI such as memory://, sqlite:///path/to.db or postgresql://user@host/db")
        return value

    @field_validator("stream_store")
    @classmethod
    def _stream_store(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://")):
            raise ValueError("must be memory:// or redis://host:port/db")
        return value

    @field_validator("gc_thresholds")
    @classmethod
    def _gc_thresholds(cls, value: str) -> str:
        value = value.strip()
        if value == "python":
            return value
        parts = value.split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ValueError("must be three positive integers, e.g. 50000,20,10, or 'python'")
        return ",".join(p.strip() for p in parts)

    def gc_threshold_values(self) -> tuple[int, int, int] | None:
        """The thresholds to set, or None for Python's own."""
        if self.gc_thresholds == "python":
            return None
        young, middle, old = (int(p) for p in self.gc_thresholds.split(","))
        return young, middle, old

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @model_validator(mode="after")
    def _auth_complete(self) -> Settings:
        if self.auth == "jwt" and not (self.auth_jwt_secret or self.auth_jwks_url):
            raise ValueError("--auth / ADK_GATEWAY_AUTH: 'jwt' needs --auth-jwt-secret or --auth-jwks-url")
        if self.auth == "api-keys" and not self.auth_api_keys_file:
            raise ValueError("--auth / ADK_GATEWAY_AUTH: 'api-keys' needs --auth-api-keys-file")
        if self.auth == "none" and not self.allow_anonymous and not is_loopback(self.host):
            raise ValueError(
                f"--auth / ADK_GATEWAY_AUTH: 'none' lets anyone act as any user, so it is only allowed on a "
                f"loopback host (got --host {self.host}); set --auth jwt or api-keys, or --allow-anonymous if "
                f"this is meant"
            )
        return self

    @model_validator(mode="after")
    def _doors_shut(self) -> Settings:
        """Settings that would leave a door open with nothing behind it stop the start (issue 36)."""
        if (self.auth == "jwt" and self.auth_jwt_secret and not self.allow_weak_jwt_secret
                and len(self.auth_jwt_secret.encode()) < MIN_HS256_SECRET_BYTES):
            raise ValueError(
                f"--auth-jwt-secret / ADK_GATEWAY_AUTH_JWT_SECRET: {len(self.auth_jwt_secret.encode())} bytes is too "
                f"short for HS256 (at least {MIN_HS256_SECRET_BYTES}: anyone who guesses it can sign tokens for any "
                f"user); generate one with `python3 -c 'import secrets; print(secrets.token_hex(32))'`, or set "
                f"--allow-weak-jwt-secret for a test"
            )
        if self.auth_jwks_url:
            problem = jwks_url_problem(self.auth_jwks_url, allow_insecure=self.allow_insecure_jwks)
            if problem is not None:
                raise ValueError(f"--auth-jwks-url / ADK_GATEWAY_AUTH_JWKS_URL: {problem}")
        for name, listed in (("allowed_hosts", self.allowed_hosts), ("allowed_origins", self.allowed_origins),
                             ("cors_origins", self.cors_origins)):
            if self.auth == "none" and "*" in _items(listed):
                raise ValueError(
                    f"{_flag(name)} / {ENV_PREFIX}{name.upper()}: '*' with --auth none would let every web site act "
                    f"as any user of this gateway; list the origins or hosts, or set --auth jwt or api-keys"
                )
        for entry in _items(self.allowed_hosts):
            match = _HOST.fullmatch(entry.lower())
            if entry != "*" and (match is None or match["port"] is not None or host_name(entry) is None):
                raise ValueError(
                    f"--allowed-hosts / ADK_GATEWAY_ALLOWED_HOSTS: {entry!r} is not a host name (list names such as "
                    f"chat.example.com, without a scheme or a port)"
                )
        return self

    @cached_property
    def host_names(self) -> frozenset[str]:
        """The names a request's Host may carry besides an IP address (`adk_gateway.transports.admission`): localhost,
        the --host name (unless it is a wildcard address) and --allowed-hosts."""
        names = {"localhost"}
        listen = host_name(self.host)
        if listen is not None and listen not in ("0.0.0.0", "::"):
            names.add(listen)
        names.update(name for entry in _items(self.allowed_hosts) if (name := host_name(entry)) is not None)
        return frozenset(names)

    @property
    def any_host(self) -> bool:
        """--allowed-hosts '*': the Host is not checked."""
        return "*" in _items(self.allowed_hosts)

    @property
    def origins(self) -> frozenset[str]:
        """The origins allowed besides the gateway's own, for the HTTP API (CORS) and the WebSocket
        alike: --allowed-origins and its older name --cors-origins, as listed (`'*'`: any)."""
        listed = f"{self.allowed_origins},{self.cors_origins}"
        return frozenset(o.strip().rstrip("/") for o in listed.split(",") if o.strip())

    @cached_property
    def origin_keys(self) -> frozenset[str]:
        """`origins`, each as `origin_key` compares it."""
        return frozenset(origin_key(origin) for origin in self.origins)

    @property
    def client_state_keys(self) -> frozenset[str]:
        return frozenset(key.strip() for key in self.client_state.split(",") if key.strip())

    def effective_model(self, env: Mapping[str, str] | None = None) -> str:
        """--model, else Gemini when google-genai has credentials to reach it (an API key, or Vertex
        AI settings as `adk web` reads them), else the offline scripted model."""
        env = os.environ if env is None else env
        if self.model:
            return self.model
        return "gemini-2.5-flash" if env.get("GOOGLE_API_KEY") or uses_vertex(env) else "scripted"


def uses_vertex(env: Mapping[str, str]) -> bool:
    """Gemini through Vertex AI: GOOGLE_GENAI_USE_VERTEXAI true (or 1) with a GOOGLE_CLOUD_PROJECT
    (google-genai then authenticates with the application default credentials)."""
    flag = env.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower()
    return flag in ("true", "1") and bool(env.get("GOOGLE_CLOUD_PROJECT"))


def settings_table() -> str:
    """The README's settings table (a test keeps the README in step with it)."""
    rows = ["| flag | environment variable | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = info.default
        shown = "(empty)" if default == "" else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        meaning = str(info.description).replace("|", "\\|")
        rows.append(f"| `{_flag(name)}` | `{ENV_PREFIX}{name.upper()}` | {shown} | {meaning} |")
    return "\n".join(rows)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adk-gateway",
        description="Serve Google ADK agents to Vercel AI SDK chat frontends.",
        epilog=f"Every flag can also be set as an environment variable {ENV_PREFIX}<NAME>. "
        "`adk-gateway loadtest --help`: the bundled load generator.",
    )
    for name, info in Settings.model_fields.items():
        env = ENV_PREFIX + name.upper()
        # argparse formats help with %: a literal one is doubled.
        help_text = f"{info.description} [env {env}; default {info.default!r}]".replace("%", "%%")
        if info.annotation is bool:
            parser.add_argument(_flag(name), dest=name, default=None, action=argparse.BooleanOptionalAction,
                                help=help_text)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, help=help_text)
    return parser


def load_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Builds settings from flags and the environment.

    Raises:
        SettingsError: a value is wrong; the message names the flag and the variable.
    """
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    raw: dict[str, Any] = {}
    for name, info in Settings.model_fields.items():
        value = getattr(args, name)
        if value is None:
            value = env.get(ENV_PREFIX + name.upper())
        if value is None:
            continue
        if info.annotation is bool and isinstance(value, str):
            try:
                value = _parse_bool(value)
            except ValueError as exc:
                raise SettingsError(f"{_flag(name)} / {ENV_PREFIX}{name.upper()}: {exc}") from None
        raw[name] = value
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            if not error["loc"]:  # a rule over several settings: its message names them
                problems.append(str(error["msg"]).removeprefix("Value error, "))
                continue
            name = str(error["loc"][0])
            shown = "…" if name in SECRET_SETTINGS else repr(error.get("input"))
            problems.append(f"{_flag(name)} / {ENV_PREFIX}{name.upper()}: {error['msg']} (got {shown})")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
