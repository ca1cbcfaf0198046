"""The one place that talks to ADK: loading agents, session stores, runs, history import.

Apps. `load_agents` reads the `--agent` spec: 'demo' and 'module:attr' are one app; an agents
folder is every app ADK's own `AgentLoader` lists in it (packages, agent.py, root_agent.yaml),
each app's `.env` loaded by that loader as `adk web` loads it. `AgentApps` holds one `AgentHost`
per app, all on one session store, and picks the host of a request's `app` (absent: the default).

`AgentHost` owns one app's ADK `Runner`. Sessions are keyed by (app, user, chat id): one ADK
session per chat, under the app that answers it. Everything the gateway keeps about a chat (pending
approvals, standing permissions) lives in that session's state, so it shares the store's
durability: in memory it dies with the process, in SQLite or PostgreSQL it survives restarts.

Bounds (`AgentHost.configure`, from the settings):

- Every session-store call, the runner's own included, goes through `GuardedSessionService` and
  fails with `StoreUnavailable` past `store_timeout_s`.
- `memory://` is a `MemorySessionService` (`adk_gateway.agents.memory_store`: ADK's in-memory semantics without
  copying the session on each read): chats idle longer than the TTL and the least recently used
  past a cap are dropped (never one with a run in progress).
- Each model call of a run is bounded by `model_timeout_s` (`AgentHost.run` raises
  `ModelTimedOut`), each server tool call by `tool_timeout_s`, and a stop waits at most
  `cancel_timeout_s` for a tool that ignores its cancellation (`adk_gateway.agents.tools.BoundsPlugin`).
- A posted history is converted to ADK events in slices of a few milliseconds, giving the event
  loop back between them, and appended in bulk to the in-memory store: importing is linear and
  never holds the loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import importlib
import json
import os
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import urlparse

import structlog
from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.artifacts import BaseArtifactService
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.telemetry import ContentCapturingMode, TelemetryConfig
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types
from opentelemetry import trace

from adk_gateway.agents.artifacts import BoundedArtifactService, part_bytes
from adk_gateway.agents.events import agent_event
from adk_gateway.agents.held_events import HoldingSessionService
from adk_gateway.agents.inference_scope import keep_call_summary
from adk_gateway.agents.legacy_names import install_legacy_names
from adk_gateway.agents.live import LiveChannel, live_run_config
from adk_gateway.agents.memory_store import MemorySessionService
from adk_gateway.agents.pacing import PacingPlugin, ReaderGate
from adk_gateway.agents.tools import Bounds, BoundsPlugin, LiveToolGate, PermissionPlugin, tool_info, tool_kind
from adk_gateway.core.approval import REJECTED_TEXT, AgentReply, Confirmation
from adk_gateway.core.errors import ModelTimedOut, StartupError, StoreUnavailable, UnknownApp
from adk_gateway.core.events import AgentEvent
from adk_gateway.core.kinds import CONFIRMATION_TOOL, ToolInfo, ToolKind
from adk_gateway.core.pacing import Pacer
from adk_gateway.core.requests import ToolPart, UIMessage
from adk_gateway.core.transcript import Record, Transcript
from adk_gateway.metrics import Metrics

__all__ = [
    "AgentApps",
    "AgentHost",
    "AgentLoadError",
    "GuardedSessionService",
    "LoadedAgents",
    "MemorySessionService",
    "ModelCallsExhausted",
    "Turn",
    "history_events",
    "install_tracer_provider",
    "load_agent",
    "load_agents",
    "session_service_from_uri",
    "turn_content",
    "ui_message_content",
]

log = structlog.get_logger("adk_gateway.agents.adk")

T = TypeVar("T")
ChatKey = tuple[str, str]

# The key of what the chat service records on a session's events (`custom_metadata`): the chat's
# messages as the client holds them, and its approvals (see `AgentHost.records`).
RECORD_KEY: Final = "adk_gateway"


class AgentLoadError(StartupError):
    """The configured agent (`--agent`, `--app`) or its session store could not be loaded; the
    message says why."""

    def __init__(self, message: str, *, setting: str = "agent") -> None:
        super().__init__(message, setting=setting)


class ModelCallsExhausted(Exception):
    """A run made its `max_llm_calls` model calls and was ended by ADK (`AgentHost.run`)."""


# What a run is given: the user's new message, or what the agent is told about its calls (the
# approval book's replies: confirmations and tool results).
Turn = UIMessage | Sequence[AgentReply]


# --- loading -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedAgents:
    """What an `--agent` spec names: each app's agent by app name (in a stable order), the app a
    request without `app` gets, and the agents folder they came from (None for 'demo' and
    'module:attr')."""

    agents: dict[str, BaseAgent | App]
    default: str
    folder: Path | None = None


def _agent_from_module_attr(spec: str) -> BaseAgent | App:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name and module_name.startswith(exc.name):
            # The usual cause: the module is the user's own, and its folder is not on the path.
            hint = (f" (is it in {Path.cwd()}? run the gateway from the folder that holds it, add that folder "
                    "to PYTHONPATH, or pass the agent's folder instead: --agent ./path/to/agent)")
        raise AgentLoadError(f"cannot import {module_name!r}: {exc}{hint}") from None
    target: Any = module
    for name in (attr or "root_agent").split("."):
        if not hasattr(target, name):
            raise AgentLoadError(f"{module_name!r} has no attribute {attr!r}")
        target = getattr(target, name)
    if not isinstance(target, BaseAgent | App):
        raise AgentLoadError(f"{spec!r} is not an ADK agent or App (got {type(target).__name__})")
    return target


def _agents_from_folder(spec: str, default: str) -> LoadedAgents:
    """Every app of an agents folder, loaded by ADK's own `AgentLoader` (what `adk web` and
    `adk api_server` use): packages, `agent.py` modules and `root_agent.yaml` configs, each app's
    `.env` loaded as it is. A folder that is itself one app (agent.py or root_agent.yaml in it, or
    a package) is that one app. The app name is the app's folder name, as in ADK."""
    from google.adk.cli.service_registry import load_services_module
    from google.adk.cli.utils.agent_loader import AgentLoader

    import adk_gateway.agents.scripted  # noqa: F401  (registers the offline `scripted` model for YAML agents)

    folder_text, _, named = spec.partition("::")
    folder = Path(folder_text).resolve()
    loader = AgentLoader(str(folder))
    names = loader.list_agents()
    if not names and (folder / "__init__.py").is_file():
        loader, names = AgentLoader(str(folder.parent)), [folder.name]  # a package that is one app
    if not names:
        raise AgentLoadError(f"{folder} has no agents (folders with agent.py, root_agent.yaml or __init__.py)")
    agents_dir = Path(loader.agents_dir)
    if any((agents_dir / name).is_file() for name in ("services.py", "services.yaml", "services.yml")):
        load_services_module(str(agents_dir))  # the folder's own session-store schemes, as ADK does
    default = default or named or names[0]
    if default not in names:
        raise AgentLoadError(f"{folder} has no app {default!r} (its apps: {', '.join(names)})", setting="app")
    loaded: dict[str, BaseAgent | App] = {}
    for name in names:
        try:
            agent = loader.load_agent(name)
        except Exception as exc:
            raise AgentLoadError(f"cannot load app {name!r} from {agents_dir}: {exc}") from exc
        if not isinstance(agent, BaseAgent | App):
            raise AgentLoadError(f"app {name!r} in {agents_dir} is not an ADK agent or App")
        loaded[name] = agent
    return LoadedAgents(agents=loaded, default=default, folder=agents_dir)


def load_agents(spec: str, model: str, *, default: str = "") -> LoadedAgents:
    """Loads 'demo', 'module:attr' (one app each), or every app of an ADK agents folder.

    `default` (`--app`) names the app a request without `app` gets; empty: the one named by
    FOLDER::APP, else the first app in alphabetical order (the only one, for a single agent).

    Raises:
        AgentLoadError: the spec names no agent, an app fails to load, or `default` is no app.
    """
    install_legacy_names()  # an agent written for an earlier version imports `agents.scripted`
    if Path(spec.partition("::")[0]).is_dir():
        return _agents_from_folder(spec, default)
    if spec == "demo":
        from adk_gateway.agents.demo import build_demo_agent

        agent: BaseAgent | App = build_demo_agent(model)
    elif ":" in spec or "." in spec:
        agent = _agent_from_module_attr(spec)
    else:
        raise AgentLoadError(f"{spec!r} is neither 'demo', a module:attribute, nor a folder")
    name = agent.name
    if default and default != name:
        raise AgentLoadError(f"{spec!r} serves one app, {name!r}, not {default!r}", setting="app")
    return LoadedAgents(agents={name: agent}, default=name)


def load_agent(spec: str, model: str) -> BaseAgent | App:
    """The agent a request without `app` gets (see `load_agents`)."""
    loaded = load_agents(spec, model)
    return loaded.agents[loaded.default]


# Schemes whose URIs this gateway spells its own way before ADK's factory sees them: ADK's own
# SQLite store for both SQLite spellings, and the asyncio driver for PostgreSQL.
_URI_SPELLINGS: Final = (("sqlite+aiosqlite://", "sqlite://"), ("postgresql://", "postgresql+asyncpg://"))


def session_service_from_uri(
    uri: str, *, memory_ttl_s: float = 0.0, memory_max_chats: int = 10_000, agents_dir: Path | None = None
) -> BaseSessionService:
    """The session store a URI names. `memory://` is the gateway's own (`adk_gateway.agents.memory_store`);
    every other URI goes through ADK's service factory, as `adk api_server --session_service_uri`
    takes it (sqlite, postgresql, mysql, agentengine, and schemes an agents folder's services.py
    registers). `postgresql://` uses asyncpg; a SQLite file's folder is created."""
    if uri.startswith("memory://"):
        return MemorySessionService(ttl_s=memory_ttl_s, max_chats=memory_max_chats)
    from google.adk.cli.utils.service_factory import create_session_service_from_options

    for spelling, canonical in _URI_SPELLINGS:
        if uri.startswith(spelling):
            uri = canonical + uri.removeprefix(spelling)
            break
    if uri.startswith("sqlite://"):
        # ADK's reading of the path (SQLAlchemy's: sqlite:///relative.db, sqlite:////absolute.db).
        path = urlparse(uri).path.removeprefix("/")
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return create_session_service_from_options(
            base_dir=agents_dir or Path.cwd(), session_service_uri=uri, use_local_storage=False
        )
    except (ValueError, ImportError) as exc:
        raise AgentLoadError(f"unsupported session store {redact_uri(uri)!r}: {exc}",
                             setting="session_store") from None


def redact_uri(uri: str) -> str:
    """A store URI without its credentials, for messages."""
    scheme, sep, rest = uri.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else uri


# --- session stores -----------------------------------------------------------------------------


def append_history_in_memory(
    service: MemorySessionService | InMemorySessionService, session: Session, events: Sequence[Event]
) -> None:
    """Appends fresh events without state deltas to an in-memory session in one step.

    ADK's `InMemorySessionService.append_event` compares each new event with every stored one (its
    duplicate check), so appending a history one event at a time is quadratic: 2,001 messages took
    2.3 s. Imported events are new (fresh ids) and carry no state, so appending them is all the
    per-event path would do. The `memory://` store has this as `MemorySessionService.append_history`.
    """
    if isinstance(service, MemorySessionService):
        service.append_history(session, events)
        return
    if not events:
        return
    try:
        stored = service.sessions[session.app_name][session.user_id][session.id]
    except KeyError:
        raise ValueError(f"session {session.id} not found") from None
    stored.events.extend(events)
    stored.last_update_time = events[-1].timestamp
    if session is not stored:
        session.events.extend(events)
        session.last_update_time = events[-1].timestamp


class GuardedSessionService(BaseSessionService):
    """Any session store, with every call bounded by `timeout_s` (0: unbounded), and every failure
    of the store itself told as one.

    A store that does not answer in time, or that cannot be reached (a refused or dropped
    connection, a server shutting down or starting up, too many connections: `store_errors()`),
    fails the call with `StoreUnavailable`: before a response streams that is a JSON 503
    `store_unavailable` with `Retry-After`, inside a run an `error` chunk. Nothing is retried here
    (a write may have happened); the client's retry is, once the store is back, and the connection
    pool gets new connections by itself. Other errors (an unknown or stale session, a bug) go on
    unchanged. The runner uses this service too, so its own reads and writes are bounded the same way.
    """

    UNAVAILABLE_TEXT: Final = "The session store is not available; try again."

    def __init__(self, inner: BaseSessionService, *, timeout_s: float = 0.0) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.timed_out: Callable[[str], None] = lambda _operation: None
        self.store_errors = self.unavailable_errors()

    @staticmethod
    def unavailable_errors() -> tuple[type[BaseException], ...]:
        """What a store that is down or out of reach raises, by driver: OSError (a refused
        connection: asyncpg lets it through SQLAlchemy as it is), SQLAlchemy's operational,
        interface and pool errors, asyncpg's connection, shutdown and resource errors, sqlite3's
        operational errors (a locked or unreadable file)."""
        import sqlite3

        kinds: list[type[BaseException]] = [OSError, sqlite3.OperationalError]
        with contextlib.suppress(ImportError):
            from sqlalchemy import exc as sa

            kinds += [sa.OperationalError, sa.InterfaceError, sa.DisconnectionError, sa.TimeoutError]
        with contextlib.suppress(ImportError):
            from asyncpg import exceptions as pg

            kinds += [pg.PostgresConnectionError, pg.OperatorInterventionError, pg.InsufficientResourcesError,
                      pg.InterfaceError]
        return tuple(kinds)

    def _unavailable(self, exc: BaseException) -> bool:
        if isinstance(exc, self.store_errors):
            return True
        invalidated = getattr(exc, "connection_invalidated", False)  # SQLAlchemy: a connection found dead
        return invalidated is True

    async def _bounded(self, operation: str, call: Awaitable[T]) -> T:
        bound: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.timeout(self.timeout_s) if self.timeout_s else contextlib.nullcontext())
        try:
            async with bound:
                return await call
        except Exception as exc:
            if isinstance(bound, asyncio.Timeout) and bound.expired():
                log.warning("store_timeout", operation=operation, timeout_s=self.timeout_s)
                self.timed_out(operation)
                raise StoreUnavailable(detail=f"{operation} took longer than {self.timeout_s:g} s") from None
            if not self._unavailable(exc):
                raise
            log.warning("store_unavailable", operation=operation, error=repr(exc))
            raise StoreUnavailable(self.UNAVAILABLE_TEXT, detail=f"{operation}: {exc!r}") from None

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        return await self._bounded("create_session", self.inner.create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id))

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        return await self._bounded("get_session", self.inner.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config))

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self._bounded("list_sessions", self.inner.list_sessions(app_name=app_name, user_id=user_id))

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._bounded("delete_session", self.inner.delete_session(
            app_name=app_name, user_id=user_id, session_id=session_id))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._bounded("get_user_state", self.inner.get_user_state(app_name=app_name, user_id=user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        return await self._bounded("append_event", self.inner.append_event(session, event))

    async def flush(self) -> None:
        await self._bounded("flush", self.inner.flush())


# --- UI messages -> ADK content ------------------------------------------------------------------


def _data_url_part(url: str, media_type: str) -> types.Part | None:
    if not url.startswith("data:"):
        return types.Part(file_data=types.FileData(file_uri=url, mime_type=media_type))
    header, _, payload = url.partition(",")
    try:
        data = base64.b64decode(payload, validate=True) if ";base64" in header else payload.encode()
    except (binascii.Error, ValueError):
        return None
    return types.Part(inline_data=types.Blob(mime_type=media_type, data=data))


def ui_message_content(message: UIMessage) -> types.Content:
    """A user message's text and files as ADK content."""
    parts: list[types.Part] = []
    for raw in message.parts:
        kind = raw.get("type")
        if kind == "text" and raw.get("text"):
            parts.append(types.Part(text=str(raw["text"])))
        elif kind == "file" and isinstance(raw.get("url"), str):
            part = _data_url_part(raw["url"], str(raw.get("mediaType") or "application/octet-stream"))
            if part is not None:
                parts.append(part)
    if not parts:
        parts.append(types.Part(text=""))
    return types.Content(role="user", parts=parts)


def reply_part(reply: AgentReply) -> types.Part:
    """What the approval book says to tell the agent, as an ADK function response: the answer to
    ADK's confirmation call, or the tool's own result."""
    if isinstance(reply, Confirmation):
        response = types.FunctionResponse(
            name=CONFIRMATION_TOOL, id=reply.confirmation_id, response={"confirmed": reply.confirmed}
        )
    else:
        response = types.FunctionResponse(name=reply.tool_name, id=reply.tool_call_id, response=reply.response)
    return types.Part(function_response=response)


def turn_content(turn: Turn) -> types.Content:
    """A run's new message: the user's, or the replies to the agent's calls (role "user", as ADK
    sends function responses)."""
    if isinstance(turn, UIMessage):
        return ui_message_content(turn)
    return types.Content(role="user", parts=[reply_part(reply) for reply in turn])


def _tool_response(part: ToolPart) -> dict[str, Any] | None:
    if part.state == "output-available":
        return part.output if isinstance(part.output, dict) else {"result": part.output}
    if part.state == "output-error":
        return {"error": part.errorText or "error"}
    if part.state == "output-denied":
        return {"error": REJECTED_TEXT}
    return None


def history_events(agent_name: str, messages: Sequence[UIMessage], *, now: float | None = None) -> list[Event]:
    """Prior UI messages as the ADK events a session would hold for them (pure)."""
    events = [event for message in messages for event in message_events(agent_name, message)]
    stamp_history(events, now)
    return events


def stamp_history(events: list[Event], now: float | None = None) -> None:
    """Timestamps that rise by a microsecond per event and end at `now`: every store keeps the
    history's order, and later events sort after it."""
    end = time.time() if now is None else now
    for index, event in enumerate(events):
        event.timestamp = end - (len(events) - index) * 1e-6


def message_events(agent_name: str, message: UIMessage) -> list[Event]:
    """One prior UI message as ADK events: a user's content; an assistant's tool calls, the results
    it got (ADK sends them as role "user"), then its text."""
    invocation_id = f"import-{uuid.uuid4().hex[:12]}"
    record = {RECORD_KEY: {"messages": [ui_message_dict(message)]}}
    if message.role == "user":
        return [Event(invocation_id=invocation_id, author="user", content=ui_message_content(message),
                      custom_metadata=record)]
    if message.role != "assistant":
        return [Event(invocation_id=invocation_id, author="user", custom_metadata=record)]
    text_parts = [
        types.Part(text=str(p.get("text"))) for p in message.parts if p.get("type") == "text" and p.get("text")
    ]
    calls, responses = [], []
    for tool in message.tool_parts():
        args = tool.input if isinstance(tool.input, dict) else {}
        calls.append(types.Part(function_call=types.FunctionCall(id=tool.toolCallId, name=tool.tool_name, args=args)))
        response = _tool_response(tool)
        if response is not None:
            result = types.FunctionResponse(
                id=tool.toolCallId, name=tool.tool_name, response=json.loads(json.dumps(response, default=str))
            )
            responses.append(types.Part(function_response=result))
    events = [
        Event(invocation_id=invocation_id, author=agent_name, content=types.Content(role=role, parts=parts))
        for role, parts in (("model", calls), ("user", responses), ("model", text_parts))
        if parts
    ]
    if not events:
        events.append(Event(invocation_id=invocation_id, author=agent_name))
    events[0].custom_metadata = record
    return events


def ui_message_dict(message: UIMessage) -> dict[str, Any]:
    """A posted UI message as the chat's record keeps it: what the client sent (its parsed JSON
    values themselves, not copies: a message may hold megabytes of text or files)."""
    data: dict[str, Any] = {**(message.model_extra or {}), "id": message.id, "role": message.role,
                            "parts": message.parts}
    if message.metadata is not None:
        data["metadata"] = message.metadata
    return data


class _ModelClock:
    """The deadline of the model call in progress of one run (see `adk_gateway.agents.tools.BoundsPlugin`)."""

    def __init__(self, timeout_s: float, scope: asyncio.Timeout) -> None:
        self.timeout_s = timeout_s
        self.scope = scope

    def call_started(self) -> None:
        # Scheduled from an empty context: a cancelled timer stays in the loop's queue until its
        # time (or a purge) and keeps its context, which would keep the ended run's ADK objects.
        contextvars.Context().run(self.scope.reschedule, asyncio.get_running_loop().time() + self.timeout_s)

    def call_ended(self) -> None:
        if not self.scope.expired():
            self.scope.reschedule(None)


# --- the host ------------------------------------------------------------------------------------


# ADK's telemetry settings that, when nothing records spans, spare each model call the conversion
# of the whole request into span attributes (see `telemetry_config`).
_UNTRACED: Final = TelemetryConfig(
    genai_semconv_stability_opt_in="stable", capture_message_content=ContentCapturingMode.NO_CONTENT
)
_SEMCONV_OPT_IN: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"
# The error code of the event ADK yields when a run reaches `max_llm_calls`.
_CALLS_EXHAUSTED: Final = LlmCallsLimitExceededError.__name__


def install_tracer_provider() -> None:
    """ADK's own tracer provider setup (as `adk web` and `adk api_server` use it): an OTLP
    exporter as the environment's `OTEL_EXPORTER_OTLP_*` variables name it."""
    from google.adk.telemetry.setup import maybe_set_otel_providers

    maybe_set_otel_providers()


def telemetry_config() -> TelemetryConfig | None:
    """The `RunConfig.telemetry` of a run: None (ADK's defaults) when spans are recorded.

    With ADK's defaults, every model call converts the whole request (every content of the
    history) into experimental GenAI span attributes, whether or not a tracer records them: a
    cost per call that grows with the chat. While no OpenTelemetry tracer provider is installed
    (the global one is still the API's proxy) and the operator chose no semantic conventions
    (`OTEL_SEMCONV_STABILITY_OPT_IN` unset), runs ask ADK for its stable conventions without
    message content, a supported setting whose per-call work is a fraction of that. Installing a
    tracer provider (or choosing conventions) gives ADK's defaults back, run by run.
    """
    if os.environ.get(_SEMCONV_OPT_IN) or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return _UNTRACED


# How many chats' transcripts an app keeps between turns (`AgentHost.transcript`).
TRANSCRIPTS_KEPT: Final = 1000


def records_of(events: Iterable[Event]) -> Iterator[Record]:
    """What the chat service recorded on these events, and their rewinds, in order."""
    for event in events:
        metadata = event.custom_metadata
        if metadata is not None and RECORD_KEY in metadata:
            recorded = metadata[RECORD_KEY]
            yield Record(event.invocation_id, tuple(recorded.get("messages") or ()),
                         approvals=tuple(recorded.get("approvals") or ()))
        rewound = event.actions.rewind_before_invocation_id if event.actions is not None else None
        if rewound:
            yield Record(event.invocation_id, rewound_to=rewound)


@dataclass(slots=True)
class _KeptTranscript:
    transcript: Transcript
    seen: int  # the session's events it was built from
    last_id: str  # the last of them


class AgentHost:
    """One app's ADK runner, and the session store (shared by every app of the process).

    Its sessions live under `app_name`: the app's folder name for an agents folder (as in ADK's
    own servers), else the App's or the root agent's name."""

    def __init__(
        self,
        agent: BaseAgent | App,
        session_service: BaseSessionService,
        *,
        max_llm_calls: int,
        app_name: str | None = None,
        artifact_service: BaseArtifactService | None = None,
    ) -> None:
        plugin = self.permissions = PermissionPlugin()
        pacing = self.pacing = PacingPlugin()
        # Every app has an artifact store (a tool's `save_artifact` fails without one).
        self.artifacts = artifact_service if artifact_service is not None else BoundedArtifactService()
        self.bounds = Bounds()
        bounds_plugin = BoundsPlugin(self.bounds)
        # The store as configured; the same store with every call bounded; and that with a turn's
        # latest event held for the turn's record (what everyone uses: `HoldingSessionService`).
        self.store = session_service
        self.guarded = GuardedSessionService(session_service)
        self.session_service = HoldingSessionService(self.guarded)
        if isinstance(agent, App):
            app = agent.model_copy(update={"plugins": [bounds_plugin, pacing, *agent.plugins, plugin]})
            if not isinstance(app.root_agent, BaseAgent):
                raise AgentLoadError("the App's root_agent must be an ADK agent")
            self.root_agent: BaseAgent = app.root_agent
            self.app_name = app_name or app.name
            self.runner = Runner(app=app, app_name=self.app_name, session_service=self.session_service,
                                 artifact_service=self.artifacts)
        else:
            self.root_agent = agent
            self.app_name = app_name or agent.name
            self.runner = Runner(app_name=self.app_name, agent=agent, session_service=self.session_service,
                                 artifact_service=self.artifacts, plugins=[bounds_plugin, pacing, plugin])
        self.max_llm_calls = max_llm_calls
        self._run_configs: dict[bool, RunConfig] = {}
        self._transcripts: dict[ChatKey, _KeptTranscript] = {}  # the chats read last at the end
        # ADK imports its A2A agent lazily on every run (a failed import is retried each time):
        # importing it here moves the third of a second it takes from the first chat to start-up.
        with contextlib.suppress(ImportError):
            importlib.import_module("google.adk.agents.remote_a2a_agent")
        # ADK keeps every streamed response of a model call until the call ends (2.5 KiB a chunk):
        # its scopes keep only the two its telemetry reads (`adk_gateway.agents.inference_scope`).
        keep_call_summary()
        self.model_timeout_s = 0.0
        self.metrics = Metrics()
        self._tools: dict[str, BaseTool] = {}
        # Each agent's model by the agent's name: what a message names when a response does not.
        self.models: dict[str, str] = {}
        self._collect_tools(self.root_agent)

    def _collect_tools(self, agent: BaseAgent) -> None:
        if isinstance(agent, LlmAgent):
            for tool in agent.tools:
                if isinstance(tool, BaseTool):
                    self._tools[tool.name] = tool
                elif callable(tool):  # a plain function, which ADK wraps the same way
                    function = FunctionTool(tool)
                    self._tools.setdefault(function.name, function)
            model = agent.model
            name = model if isinstance(model, str) else getattr(model, "model", "")
            if name:
                self.models[agent.name] = name
        for sub in agent.sub_agents:
            self._collect_tools(sub)

    def tool_kind(self, name: str) -> ToolKind:
        return tool_kind(self._tools.get(name))

    def root_model(self) -> str:
        """The name of the root agent's model ("" when it has none of its own)."""
        return self.models.get(self.root_agent.name, "")

    def tools(self) -> list[ToolInfo]:
        """The tools of the app's agents (sub-agents included; toolsets, which list their tools
        only when asked in a run, are not), by name."""
        return [tool_info(tool) for _name, tool in sorted(self._tools.items())]

    def configure(
        self,
        *,
        model_timeout_s: float = 0.0,
        tool_timeout_s: float = 0.0,
        store_timeout_s: float = 0.0,
        cancel_timeout_s: float = 5.0,
        metrics: Metrics | None = None,
        busy: Callable[[str, str], bool] | None = None,
    ) -> None:
        """Applies the settings' bounds (0: no limit); `busy(user, chat)` says a chat has a run in
        progress, which the in-memory store never evicts."""
        self.metrics = metrics or self.metrics
        timeouts = self.metrics.timeouts
        self.model_timeout_s = model_timeout_s
        self.bounds.tool_timeout_s = tool_timeout_s
        self.bounds.cancel_timeout_s = cancel_timeout_s
        self.bounds.fired = lambda kind: timeouts.labels(kind=kind).inc()
        # `memory://` (this process's own store, which never waits on anything) is not bounded:
        # a timer per call would cost a turn five of them for nothing.
        self.guarded.timeout_s = 0.0 if type(self.store) is MemorySessionService else store_timeout_s
        self.guarded.timed_out = lambda _operation: timeouts.labels(kind="store").inc()
        if isinstance(self.store, MemorySessionService):
            evictions = self.metrics.memory_evictions
            self.store.evicted = lambda reason: evictions.labels(reason=reason).inc()
            if busy is not None:
                self.store.busy = busy

    async def aclose(self) -> None:
        await self.runner.close()
        for call in list(self.bounds.abandoned):
            call.cancel()
        if self.bounds.abandoned:
            await asyncio.wait(list(self.bounds.abandoned), timeout=self.bounds.cancel_timeout_s)

    # --- sessions ------------------------------------------------------------------------------

    async def get_session(self, user_id: str, chat_id: str, *, events: bool = True) -> Session | None:
        """The chat's session; `events=False` loads only its state (a copy of a long session's
        events is most of the cost of a turn with the in-memory store)."""
        config = None if events else GetSessionConfig(num_recent_events=0)
        return await self.session_service.get_session(
            app_name=self.app_name, user_id=user_id, session_id=chat_id, config=config
        )

    async def create_session(self, user_id: str, chat_id: str) -> Session:
        return await self.session_service.create_session(app_name=self.app_name, user_id=user_id, session_id=chat_id)

    async def store_answers(self) -> None:
        """Raises what the session store's client raises when it cannot be reached (start-up's
        check). A SQL store is asked for a connection (ADK's own calls would log an error of
        theirs first); any other store for a session that does not exist."""
        from sqlalchemy.ext.asyncio import AsyncEngine  # (ADK's SQL store's, installed with ADK)

        engine = getattr(self.store, "db_engine", None)
        if isinstance(engine, AsyncEngine):
            async with engine.connect():
                return
        await self.store.get_session(app_name=self.app_name, user_id="__startup__", session_id="__startup__")

    async def reset_session(self, user_id: str, chat_id: str, *, exists: bool | None = None) -> Session:
        """A new, empty session for the chat (the old one, if any, is deleted)."""
        self._transcripts.pop((user_id, chat_id), None)
        if exists is None:
            exists = await self.get_session(user_id, chat_id, events=False) is not None
        if exists:
            await self.session_service.delete_session(app_name=self.app_name, user_id=user_id, session_id=chat_id)
        return await self.create_session(user_id, chat_id)

    async def save_state(self, user_id: str, chat_id: str, delta: dict[str, Any], *,
                         record: Mapping[str, Any] | None = None, invocation_id: str | None = None) -> None:
        """Applies a state delta to the chat's session; `record`: what the chat service keeps
        of the chat with it (its messages, approvals: see `records`), under `invocation_id`. In a
        held turn (`holding`) both ride on the turn's latest event when it is of `invocation_id`."""
        metadata = {RECORD_KEY: dict(record)} if record else {}
        if await self.session_service.release(self.app_name, user_id, chat_id, invocation_id=invocation_id,
                                              state_delta=delta, custom_metadata=metadata):
            return
        session = await self.get_session(user_id, chat_id, events=False)
        if session is None:
            session = await self.create_session(user_id, chat_id)
        event = Event(
            invocation_id=invocation_id or f"gateway-{uuid.uuid4().hex[:12]}",
            author="user",
            actions=EventActions(state_delta=delta),
            timestamp=time.time(),
            custom_metadata=metadata or None,
        )
        await self.session_service.append_now(session, event)

    def holding(self, user_id: str, chat_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A chat turn's block: the run's latest event is held back for the turn's record (see
        `adk_gateway.agents.held_events`)."""
        return self.session_service.hold(self.app_name, user_id, chat_id)

    async def records(self, user_id: str, chat_id: str) -> list[Record] | None:
        """What the chat service recorded in the chat's session, in order, and its rewinds (see
        `adk_gateway.core.transcript`); None: no such chat."""
        session = await self.get_session(user_id, chat_id)
        if session is None:
            return None
        return list(records_of(session.events))

    async def transcript(self, user_id: str, chat_id: str) -> Transcript | None:
        """The chat's messages rebuilt from its records (None: no such chat), for reading only.

        A last-message turn reads it on every turn: the transcript is kept between calls (the
        chats read last, `TRANSCRIPTS_KEPT` of them) and brought up to date from the events
        added since, so a turn does not fold the whole chat again. A kept one is used only while
        the session still starts with the events it was built from (the last one it saw is where
        it was); anything else (a chat deleted and made again, an event stored out of order)
        rebuilds it."""
        key = (user_id, chat_id)
        session = await self.get_session(user_id, chat_id)
        if session is None:
            self._transcripts.pop(key, None)
            return None
        events = session.events
        kept = self._transcripts.pop(key, None)
        if kept is not None and 0 < kept.seen <= len(events) and events[kept.seen - 1].id == kept.last_id:
            transcript, start = kept.transcript, kept.seen
        else:
            transcript, start = Transcript(), 0
        for record in records_of(events[start:]):
            transcript.add(record)
        if events:
            self._transcripts[key] = _KeptTranscript(transcript, len(events), events[-1].id)
            while len(self._transcripts) > TRANSCRIPTS_KEPT:
                self._transcripts.pop(next(iter(self._transcripts)))
        return transcript

    async def rewind(self, user_id: str, chat_id: str, invocation_id: str) -> None:
        """Rewinds the chat's session to before `invocation_id` (ADK's own rewind: later turns are
        no longer seen by the model, and their state changes are undone)."""
        await self.runner.rewind_async(user_id=user_id, session_id=chat_id, rewind_before_invocation_id=invocation_id)

    async def chats(self, user_id: str) -> list[Session]:
        """The user's chats of this app (sessions without their events)."""
        listed = await self.session_service.list_sessions(app_name=self.app_name, user_id=user_id)
        return list(listed.sessions)

    async def delete_chat(self, user_id: str, chat_id: str) -> None:
        """The chat's session and the artifacts it saved are gone."""
        self._transcripts.pop((user_id, chat_id), None)
        for name in await self.artifacts.list_artifact_keys(app_name=self.app_name, user_id=user_id,
                                                            session_id=chat_id):
            if not name.startswith("user:"):  # the user's own artifacts outlive a chat
                await self.artifacts.delete_artifact(app_name=self.app_name, user_id=user_id, filename=name,
                                                     session_id=chat_id)
        await self.session_service.delete_session(app_name=self.app_name, user_id=user_id, session_id=chat_id)

    async def import_history(self, session: Session, messages: Sequence[UIMessage]) -> None:
        """Appends prior UI messages to a fresh session, so the model sees the conversation.

        Linear in the history, and never holding the event loop: conversion gives the loop a
        turn every few messages (`adk_gateway.core.pacing`); the in-memory store takes the events in
        one step, other stores one event per awaited write, paced too (a store that answers
        without waiting never suspends).
        """
        agent_name = self.root_agent.name
        events: list[Event] = []
        pacer = Pacer()
        for message in messages:
            events += message_events(agent_name, message)
            await pacer.step()
        stamp_history(events)
        if isinstance(self.store, (MemorySessionService, InMemorySessionService)):
            append_history_in_memory(self.store, session, events)
            return
        for event in events:
            await self.session_service.append_now(session, event)
            await pacer.step()

    # --- runs ----------------------------------------------------------------------------------

    def run_config(self) -> RunConfig:
        """The runs' `RunConfig`, one per telemetry choice, built once: ADK reads it and never
        changes it for `run_async` (only live runs adjust theirs, and they build their own)."""
        telemetry = telemetry_config()
        config = self._run_configs.get(telemetry is None)
        if config is None or config.max_llm_calls != self.max_llm_calls:
            config = RunConfig(streaming_mode=StreamingMode.SSE, max_llm_calls=self.max_llm_calls, telemetry=telemetry)
            self._run_configs[telemetry is None] = config
        return config

    async def run(
        self,
        user_id: str,
        chat_id: str,
        turn: Turn,
        *,
        state_delta: dict[str, Any] | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """One ADK invocation, its events read into the core's `AgentEvent`s; the generator is
        always closed, also when the caller is cancelled.

        Raises:
            ModelTimedOut: a model call took longer than `model_timeout_s`.
            ModelCallsExhausted: the run made `max_llm_calls` model calls.
        """
        stream = self.runner.run_async(
            user_id=user_id,
            session_id=chat_id,
            new_message=turn_content(turn),
            state_delta=state_delta,
            run_config=self.run_config(),
        )
        key: ChatKey = (user_id, chat_id)
        clock: _ModelClock | None = None
        try:
            # The deadline cancels this task where it waits for the model; the caller awaits
            # nothing between events, so that is always inside this block.
            async with asyncio.timeout(None) as scope:
                if self.model_timeout_s:
                    clock = _ModelClock(self.model_timeout_s, scope)
                    self.bounds.clocks[key] = clock
                async with aclosing(stream) as events:
                    async for event in events:
                        if event.error_code == _CALLS_EXHAUSTED:
                            # ADK yields the limit as an error event, then raises it: the run
                            # ends as its `ModelCallsExhausted`, not as a model error.
                            continue
                        yield agent_event(event, self.models)
        except TimeoutError:
            if not scope.expired():
                raise
            log.warning("model_timeout", chat_id=chat_id, timeout_s=self.model_timeout_s)
            self.metrics.timeouts.labels(kind="model").inc()
            raise ModelTimedOut(f"The model did not answer within {self.model_timeout_s:g} s.") from None
        except LlmCallsLimitExceededError as exc:
            raise ModelCallsExhausted(str(exc)) from None
        finally:
            if clock is not None and self.bounds.clocks.get(key) is clock:
                del self.bounds.clocks[key]

    @contextlib.contextmanager
    def paced_by(self, user_id: str, chat_id: str, gate: ReaderGate) -> Iterator[None]:
        """While in the block, the chat's model calls wait whenever its readers are behind
        (`adk_gateway.agents.pacing`)."""
        key: ChatKey = (user_id, chat_id)
        self.pacing.gates[key] = gate
        try:
            yield
        finally:
            if self.pacing.gates.get(key) is gate:
                del self.pacing.gates[key]

    async def append_replies(self, user_id: str, chat_id: str, replies: Sequence[AgentReply]) -> None:
        """Tells the chat's session what became of its calls without running the model ("deny and
        stop": the interrupt results are the calls' answers, and the turn ends there)."""
        if not replies:
            return
        session = await self.get_session(user_id, chat_id, events=False)
        if session is None:
            return
        event = Event(
            invocation_id=f"interrupt-{uuid.uuid4().hex[:12]}",
            author=self.root_agent.name,
            content=turn_content(replies),
            timestamp=time.time(),
        )
        await self.session_service.append_now(session, event)

    # --- live runs -----------------------------------------------------------------------------

    def live_channel(self) -> LiveChannel:
        """The input of a new live invocation (audio, text, images, utterance marks)."""
        return LiveChannel()

    async def run_live(
        self, user_id: str, chat_id: str, channel: LiveChannel, gate: LiveToolGate | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """One live invocation fed by `channel`, its events read into the core's `AgentEvent`s.
        `gate`: where the permission plugin asks about the tool calls of this invocation (ADK
        cannot confirm a call in a live run, see `adk_gateway.agents.tools`)."""
        if gate is not None:
            self.permissions.attach_live(channel.queue, gate)
        try:
            events = self.runner.run_live(
                user_id=user_id, session_id=chat_id, live_request_queue=channel.queue,
                run_config=live_run_config(self.max_llm_calls),
            )
            async with aclosing(events) as stream:
                async for event in stream:
                    yield agent_event(event, self.models)
        finally:
            self.permissions.detach_live(channel.queue)

    # --- artifacts -----------------------------------------------------------------------------

    async def artifact(self, user_id: str, chat_id: str, name: str, version: int) -> tuple[bytes, str] | None:
        """A version of a chat's artifact: its bytes and media type (None: there is none)."""
        part = await self.artifacts.load_artifact(
            app_name=self.app_name, user_id=user_id, session_id=chat_id, filename=name, version=version)
        return part_bytes(part) if part is not None else None

    async def artifact_media_type(self, user_id: str, chat_id: str, name: str, version: int) -> str:
        """The media type of a version of a chat's artifact (octet-stream when the store does not say)."""
        try:
            found = await self.artifacts.get_artifact_version(
                app_name=self.app_name, user_id=user_id, session_id=chat_id, filename=name, version=version)
        except NotImplementedError:
            found = None
        if found is not None and found.mime_type:
            return str(found.mime_type)
        loaded = await self.artifact(user_id, chat_id, name, version)
        return loaded[1] if loaded is not None else "application/octet-stream"

    async def artifact_list(self, user_id: str, chat_id: str) -> list[tuple[str, list[int]]]:
        """A chat's artifacts (and the user's own, `user:` names), each with its versions."""
        names = await self.artifacts.list_artifact_keys(app_name=self.app_name, user_id=user_id, session_id=chat_id)
        listed = []
        for name in names:
            versions = await self.artifacts.list_versions(
                app_name=self.app_name, user_id=user_id, session_id=chat_id, filename=name)
            listed.append((name, sorted(versions)))
        return listed


class AgentApps:
    """The apps this process serves (one `AgentHost` each, all on one session store), by name, and
    the one a request without `app` gets.

    A chat is known by (user, chat id) everywhere in the gateway; its ADK session lives under the
    app that answers it. A chat id belongs to one app: the same id sent to another app is another
    ADK session, which the gateway's stream log and run registry (keyed by chat id) do not tell
    apart."""

    def __init__(self, hosts: dict[str, AgentHost], default: str) -> None:
        if default not in hosts:
            raise AgentLoadError(f"no app {default!r} among {', '.join(hosts)}", setting="app")
        self.hosts = dict(hosts)
        self.default = default

    @classmethod
    def single(cls, host: AgentHost) -> AgentApps:
        return cls({host.app_name: host}, host.app_name)

    @classmethod
    def build(cls, loaded: LoadedAgents, session_service: BaseSessionService, *, max_llm_calls: int,
              artifact_service: BaseArtifactService | None = None) -> AgentApps:
        artifacts = artifact_service if artifact_service is not None else BoundedArtifactService()
        hosts = {
            name: AgentHost(agent, session_service, max_llm_calls=max_llm_calls,
                            app_name=name if loaded.folder is not None else None, artifact_service=artifacts)
            for name, agent in loaded.agents.items()
        }
        default = hosts[loaded.default].app_name
        return cls({host.app_name: host for host in hosts.values()}, default)

    @property
    def default_host(self) -> AgentHost:
        return self.hosts[self.default]

    def names(self) -> list[str]:
        """Every app's name, in the order the apps were listed (alphabetical for a folder)."""
        return list(self.hosts)

    def host(self, name: str | None) -> AgentHost:
        """The host of app `name` (None: the default).

        Raises:
            UnknownApp: no app of that name is served.
        """
        if name is None:
            return self.default_host
        host = self.hosts.get(name)
        if host is None:
            raise UnknownApp(f"No app named {name!r} is served here; GET /api/apps lists them.")
        return host

    def configure(
        self,
        *,
        model_timeout_s: float = 0.0,
        tool_timeout_s: float = 0.0,
        store_timeout_s: float = 0.0,
        cancel_timeout_s: float = 5.0,
        metrics: Metrics | None = None,
        busy: Callable[[str, str], bool] | None = None,
    ) -> None:
        """`AgentHost.configure` for every app."""
        for host in self.hosts.values():
            host.configure(model_timeout_s=model_timeout_s, tool_timeout_s=tool_timeout_s,
                           store_timeout_s=store_timeout_s, cancel_timeout_s=cancel_timeout_s, metrics=metrics,
                           busy=busy)
