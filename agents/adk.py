"""The one place that talks to ADK: loading agents, session stores, runs, history import.

`AgentHost` owns the ADK `Runner` and session service for the process. Sessions are keyed by
(user, chat id): one ADK session per chat. Everything the gateway keeps about a chat (pending
approvals, standing permissions) lives in that session's state, so it shares the store's
durability: in memory it dies with the process, in SQLite or PostgreSQL it survives restarts.

Bounds (`AgentHost.configure`, from the settings):

- Every session-store call, the runner's own included, goes through `GuardedSessionService` and
  fails with `StoreUnavailable` past `store_timeout_s`.
- `memory://` is a `MemorySessionService` (`agents.memory_store`: ADK's in-memory semantics without
  copying the session on each read): chats idle longer than the TTL and the least recently used
  past a cap are dropped (never one with a run in progress).
- Each model call of a run is bounded by `model_timeout_s` (`AgentHost.run` raises
  `ModelTimedOut`), each server tool call by `tool_timeout_s`, and a stop waits at most
  `cancel_timeout_s` for a tool that ignores its cancellation (`agents.tools.BoundsPlugin`).
- A posted history is converted to ADK events in slices of a few milliseconds, giving the event
  loop back between them, and appended in bulk to the in-memory store: importing is linear and
  never holds the loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import importlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any, Final, TypeVar

import structlog
from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.telemetry import ContentCapturingMode, TelemetryConfig
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from opentelemetry import trace

from agents.memory_store import MemorySessionService
from agents.tools import Bounds, BoundsPlugin, PermissionPlugin, tool_kind
from gateway.core.errors import ModelTimedOut, StoreUnavailable
from gateway.core.kinds import ToolKind
from gateway.core.requests import ToolPart, UIMessage
from gateway.metrics import Metrics

__all__ = [
    "AgentHost",
    "AgentLoadError",
    "GuardedSessionService",
    "MemorySessionService",
    "history_events",
    "load_agent",
    "session_service_from_uri",
    "ui_message_content",
]

log = structlog.get_logger("agents.adk")

T = TypeVar("T")
ChatKey = tuple[str, str]

# Longest stretch of history conversion on the event loop before it is given back (seconds).
SLICE_S: Final = 0.004


class AgentLoadError(ValueError):
    """The configured agent could not be loaded; the message says why."""


# --- loading -----------------------------------------------------------------------------------


def _agent_from_module_attr(spec: str) -> BaseAgent | App:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"cannot import {module_name!r}: {exc}") from None
    target: Any = module
    for name in (attr or "root_agent").split("."):
        if not hasattr(target, name):
            raise AgentLoadError(f"{module_name!r} has no attribute {attr!r}")
        target = getattr(target, name)
    if not isinstance(target, BaseAgent | App):
        raise AgentLoadError(f"{spec!r} is not an ADK agent or App (got {type(target).__name__})")
    return target


def _agent_from_folder(spec: str) -> BaseAgent | App:
    folder_text, _, app_name = spec.partition("::") if "::" in spec else (spec, "", "")
    folder = Path(folder_text).resolve()
    if (folder / "agent.py").is_file() or ((folder / "__init__.py").is_file() and not app_name):
        app_name, folder = folder.name, folder.parent
    if not app_name:
        apps = sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "agent.py").is_file())
        if not apps:
            raise AgentLoadError(f"{folder} has no agent packages (folders with agent.py)")
        app_name = apps[0]
    sys.path.insert(0, str(folder))
    try:
        package = importlib.import_module(app_name)
        module = package if hasattr(package, "root_agent") else importlib.import_module(f"{app_name}.agent")
    except ImportError as exc:
        raise AgentLoadError(f"cannot import agent package {app_name!r} from {folder}: {exc}") from None
    for attr in ("root_agent", "app"):
        target = getattr(module, attr, None)
        if isinstance(target, BaseAgent | App):
            return target
    raise AgentLoadError(f"{app_name}/agent.py defines no root_agent")


def load_agent(spec: str, model: str) -> BaseAgent | App:
    """Loads 'demo', 'module:attr', or an ADK agents folder (FOLDER or FOLDER::APP)."""
    if spec == "demo":
        from agents.demo import build_demo_agent

        return build_demo_agent(model)
    if Path(spec.partition("::")[0]).is_dir():
        return _agent_from_folder(spec)
    if ":" in spec or "." in spec:
        return _agent_from_module_attr(spec)
    raise AgentLoadError(f"{spec!r} is neither 'demo', a module:attribute, nor a folder")


def session_service_from_uri(
    uri: str, *, memory_ttl_s: float = 0.0, memory_max_chats: int = 10_000
) -> BaseSessionService:
    if uri.startswith("memory://"):
        return MemorySessionService(ttl_s=memory_ttl_s, max_chats=memory_max_chats)
    if uri.startswith(("sqlite://", "sqlite+aiosqlite://")):
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        path = uri.split("://", 1)[1]
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        path = "/" + path.lstrip("/") if path.startswith("/") else path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return SqliteSessionService(path)
    if uri.startswith(("postgresql://", "postgresql+asyncpg://")):
        from google.adk.sessions import DatabaseSessionService

        url = uri.replace("postgresql://", "postgresql+asyncpg://", 1)
        return DatabaseSessionService(url)
    raise AgentLoadError(f"unsupported session store {uri!r}")


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
    """Any session store, with every call bounded by `timeout_s` (0: unbounded).

    A store that does not answer in time fails the call with `StoreUnavailable`: before a response
    streams that is a 503, inside a run an `error` chunk. The runner uses this service too, so its
    own reads and writes are bounded the same way.
    """

    def __init__(self, inner: BaseSessionService, *, timeout_s: float = 0.0) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.timed_out: Callable[[str], None] = lambda _operation: None

    async def _bounded(self, operation: str, call: Awaitable[T]) -> T:
        if not self.timeout_s:
            return await call
        try:
            async with asyncio.timeout(self.timeout_s):
                return await call
        except TimeoutError:
            log.warning("store_timeout", operation=operation, timeout_s=self.timeout_s)
            self.timed_out(operation)
            raise StoreUnavailable(detail=f"{operation} took longer than {self.timeout_s:g} s") from None

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


def _tool_response(part: ToolPart) -> dict[str, Any] | None:
    if part.state == "output-available":
        return part.output if isinstance(part.output, dict) else {"result": part.output}
    if part.state == "output-error":
        return {"error": part.errorText or "error"}
    if part.state == "output-denied":
        return {"error": "This tool call is rejected."}
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
    if message.role == "user":
        return [Event(invocation_id=invocation_id, author="user", content=ui_message_content(message))]
    if message.role != "assistant":
        return []
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
    return [
        Event(invocation_id=invocation_id, author=agent_name, content=types.Content(role=role, parts=parts))
        for role, parts in (("model", calls), ("user", responses), ("model", text_parts))
        if parts
    ]


class _ModelClock:
    """The deadline of the model call in progress of one run (see `agents.tools.BoundsPlugin`)."""

    def __init__(self, timeout_s: float, scope: asyncio.Timeout) -> None:
        self.timeout_s = timeout_s
        self.scope = scope

    def call_started(self) -> None:
        self.scope.reschedule(asyncio.get_running_loop().time() + self.timeout_s)

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


class AgentHost:
    """The ADK runner and session store of the process."""

    def __init__(self, agent: BaseAgent | App, session_service: BaseSessionService, *, max_llm_calls: int) -> None:
        plugin = PermissionPlugin()
        self.bounds = Bounds()
        bounds_plugin = BoundsPlugin(self.bounds)
        # The store as configured, and the same store with every call bounded (what everyone uses).
        self.store = session_service
        self.session_service: GuardedSessionService = GuardedSessionService(session_service)
        if isinstance(agent, App):
            app = agent.model_copy(update={"plugins": [bounds_plugin, *agent.plugins, plugin]})
            if not isinstance(app.root_agent, BaseAgent):
                raise AgentLoadError("the App's root_agent must be an ADK agent")
            self.root_agent: BaseAgent = app.root_agent
            self.app_name = app.name
            self.runner = Runner(app=app, session_service=self.session_service)
        else:
            self.root_agent = agent
            self.app_name = agent.name
            self.runner = Runner(app_name=agent.name, agent=agent, session_service=self.session_service,
                                 plugins=[bounds_plugin, plugin])
        self.max_llm_calls = max_llm_calls
        self._run_configs: dict[bool, RunConfig] = {}
        # ADK imports its A2A agent lazily on every run (a failed import is retried each time):
        # importing it here moves the third of a second it takes from the first chat to start-up.
        with contextlib.suppress(ImportError):
            importlib.import_module("google.adk.agents.remote_a2a_agent")
        self.model_timeout_s = 0.0
        self.metrics = Metrics()
        self._tools: dict[str, BaseTool] = {}
        self._collect_tools(self.root_agent)

    def _collect_tools(self, agent: BaseAgent) -> None:
        if isinstance(agent, LlmAgent):
            for tool in agent.tools:
                if isinstance(tool, BaseTool):
                    self._tools[tool.name] = tool
        for sub in agent.sub_agents:
            self._collect_tools(sub)

    def tool_kind(self, name: str) -> ToolKind:
        return tool_kind(self._tools.get(name))

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
        self.session_service.timeout_s = store_timeout_s
        self.session_service.timed_out = lambda _operation: timeouts.labels(kind="store").inc()
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

    async def reset_session(self, user_id: str, chat_id: str, *, exists: bool | None = None) -> Session:
        """A new, empty session for the chat (the old one, if any, is deleted)."""
        if exists is None:
            exists = await self.get_session(user_id, chat_id, events=False) is not None
        if exists:
            await self.session_service.delete_session(app_name=self.app_name, user_id=user_id, session_id=chat_id)
        return await self.create_session(user_id, chat_id)

    async def save_state(self, user_id: str, chat_id: str, delta: dict[str, Any]) -> None:
        session = await self.get_session(user_id, chat_id, events=False)
        if session is None:
            session = await self.create_session(user_id, chat_id)
        event = Event(
            invocation_id=f"gateway-{uuid.uuid4().hex[:12]}",
            author="user",
            actions=EventActions(state_delta=delta),
            timestamp=time.time(),
        )
        await self.session_service.append_event(session, event)

    async def import_history(self, session: Session, messages: Sequence[UIMessage]) -> None:
        """Appends prior UI messages to a fresh session, so the model sees the conversation.

        Linear in the history, and never holding the event loop: conversion gives the loop back
        every `SLICE_S`; the in-memory store takes the events in one step, other stores one event
        per awaited write.
        """
        agent_name = self.root_agent.name
        events: list[Event] = []
        started = time.perf_counter()
        for message in messages:
            events += message_events(agent_name, message)
            if time.perf_counter() - started > SLICE_S:
                await asyncio.sleep(0)
                started = time.perf_counter()
        stamp_history(events)
        if isinstance(self.store, (MemorySessionService, InMemorySessionService)):
            append_history_in_memory(self.store, session, events)
            return
        for event in events:
            await self.session_service.append_event(session, event)

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
        new_message: types.Content,
        *,
        state_delta: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """One ADK invocation; the generator is always closed, also when the caller is cancelled.

        Raises:
            ModelTimedOut: a model call took longer than `model_timeout_s`.
        """
        stream = self.runner.run_async(
            user_id=user_id,
            session_id=chat_id,
            new_message=new_message,
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
                        yield event
        except TimeoutError:
            if not scope.expired():
                raise
            log.warning("model_timeout", chat_id=chat_id, timeout_s=self.model_timeout_s)
            self.metrics.timeouts.labels(kind="model").inc()
            raise ModelTimedOut(f"The model did not answer within {self.model_timeout_s:g} s.") from None
        finally:
            if clock is not None and self.bounds.clocks.get(key) is clock:
                del self.bounds.clocks[key]

    def run_live(
        self, user_id: str, chat_id: str, queue: LiveRequestQueue, run_config: RunConfig
    ) -> AsyncGenerator[Event, None]:
        return self.runner.run_live(
            user_id=user_id, session_id=chat_id, live_request_queue=queue, run_config=run_config
        )
