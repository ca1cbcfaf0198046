"""The one place that talks to ADK: loading agents, session stores, runs, history import.

`AgentHost` owns the ADK `Runner` and session service for the process. Sessions are keyed by
(user, chat id): one ADK session per chat. Everything the gateway keeps about a chat (pending
approvals, standing permissions) lives in that session's state, so it shares the store's
durability: in memory it dies with the process, in SQLite or PostgreSQL it survives restarts.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from agents.tools import PermissionPlugin, tool_kind
from gateway.converter import ToolKind
from gateway.requests import ToolPart, UIMessage

__all__ = ["AgentHost", "AgentLoadError", "load_agent", "session_service_from_uri", "ui_message_content"]


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


def session_service_from_uri(uri: str) -> BaseSessionService:
    if uri.startswith("memory://"):
        return InMemorySessionService()
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


# --- the host ------------------------------------------------------------------------------------


class AgentHost:
    """The ADK runner and session store of the process."""

    def __init__(self, agent: BaseAgent | App, session_service: BaseSessionService, *, max_llm_calls: int) -> None:
        plugin = PermissionPlugin()
        if isinstance(agent, App):
            app = agent.model_copy(update={"plugins": [*agent.plugins, plugin]})
            if not isinstance(app.root_agent, BaseAgent):
                raise AgentLoadError("the App's root_agent must be an ADK agent")
            self.root_agent: BaseAgent = app.root_agent
            self.app_name = app.name
            self.runner = Runner(app=app, session_service=session_service)
        else:
            self.root_agent = agent
            self.app_name = agent.name
            self.runner = Runner(app_name=agent.name, agent=agent, session_service=session_service, plugins=[plugin])
        self.session_service = session_service
        self.max_llm_calls = max_llm_calls
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

    async def aclose(self) -> None:
        await self.runner.close()

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
        """Appends prior UI messages to a fresh session, so the model sees the conversation."""
        agent_name = self.root_agent.name
        for message in messages:
            invocation_id = f"import-{uuid.uuid4().hex[:12]}"
            if message.role == "user":
                await self._append(
                    session, Event(invocation_id=invocation_id, author="user", content=ui_message_content(message))
                )
                continue
            if message.role != "assistant":
                continue
            text_parts = [
                types.Part(text=str(p.get("text"))) for p in message.parts if p.get("type") == "text" and p.get("text")
            ]
            calls, responses = [], []
            for tool in message.tool_parts():
                args = tool.input if isinstance(tool.input, dict) else {}
                calls.append(
                    types.Part(function_call=types.FunctionCall(id=tool.toolCallId, name=tool.tool_name, args=args))
                )
                response = _tool_response(tool)
                if response is not None:
                    responses.append(
                        types.Part(
                            function_response=types.FunctionResponse(
                                id=tool.toolCallId,
                                name=tool.tool_name,
                                response=json.loads(json.dumps(response, default=str)),
                            )
                        )
                    )
            # The model's calls, the responses it got (ADK sends them as role "user"), then its text.
            for role, parts in (("model", calls), ("user", responses), ("model", text_parts)):
                if parts:
                    content = types.Content(role=role, parts=parts)
                    await self._append(session, Event(invocation_id=invocation_id, author=agent_name, content=content))

    async def _append(self, session: Session, event: Event) -> None:
        event.timestamp = time.time()
        await self.session_service.append_event(session, event)

    # --- runs ----------------------------------------------------------------------------------

    def run_config(self) -> RunConfig:
        return RunConfig(streaming_mode=StreamingMode.SSE, max_llm_calls=self.max_llm_calls)

    async def run(
        self,
        user_id: str,
        chat_id: str,
        new_message: types.Content,
        *,
        state_delta: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """One ADK invocation; the generator is always closed, also when the caller is cancelled."""
        stream = self.runner.run_async(
            user_id=user_id,
            session_id=chat_id,
            new_message=new_message,
            state_delta=state_delta,
            run_config=self.run_config(),
        )
        async with aclosing(stream) as events:
            async for event in events:
                yield event

    def run_live(
        self, user_id: str, chat_id: str, queue: LiveRequestQueue, run_config: RunConfig
    ) -> AsyncGenerator[Event, None]:
        return self.runner.run_live(
            user_id=user_id, session_id=chat_id, live_request_queue=queue, run_config=run_config
        )
