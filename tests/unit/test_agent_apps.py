"""Several apps and ADK's conventions, without a server: session-store URIs through ADK's service
factory (`memory://` stays the gateway's own), the default app, a request's `app`, Vertex AI
settings as a model credential."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.cli.service_registry import get_service_registry
from google.adk.cli.utils import service_factory
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from adk_gateway.agents.adk import (
    AgentApps,
    AgentHost,
    AgentLoadError,
    MemorySessionService,
    load_agents,
    session_service_from_uri,
)
from adk_gateway.config import Settings
from adk_gateway.core.errors import UnknownApp
from adk_gateway.core.requests import LiveStartFrame, SendFrame, ValidationError, parse_frame
from tests.integration.support import ToolLog, counting_agent

# --- session-store URIs ---------------------------------------------------------------------------


@pytest.fixture
def factory_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URIs ADK's session-service factory is asked for (it still builds the store)."""
    calls: list[str] = []
    real = service_factory.create_session_service_from_options

    def spy(**kwargs: Any) -> BaseSessionService:
        calls.append(kwargs["session_service_uri"])
        return real(**kwargs)

    monkeypatch.setattr(service_factory, "create_session_service_from_options", spy)
    return calls


def test_memory_stays_the_gateway_s_own(factory_calls: list[str]) -> None:
    store = session_service_from_uri("memory://", memory_ttl_s=60, memory_max_chats=5)
    assert isinstance(store, MemorySessionService)
    assert (store.ttl_s, store.max_chats) == (60, 5)
    assert factory_calls == []


async def test_sqlite_goes_through_adk_s_factory(tmp_path: Path, factory_calls: list[str]) -> None:
    path = tmp_path / "nested" / "sessions.db"
    store = session_service_from_uri(f"sqlite:///{path}")
    assert factory_calls == [f"sqlite:///{path}"]
    assert isinstance(store, SqliteSessionService)
    assert path.parent.is_dir()  # the file's folder is made for it
    created = await store.create_session(app_name="a", user_id="u", session_id="c")
    assert created.id == "c" and path.is_file()


def test_the_aiosqlite_spelling_is_the_same_sqlite_store(tmp_path: Path, factory_calls: list[str]) -> None:
    store = session_service_from_uri(f"sqlite+aiosqlite:///{tmp_path}/s.db")
    assert isinstance(store, SqliteSessionService)
    assert factory_calls == [f"sqlite:///{tmp_path}/s.db"]


def test_postgresql_goes_through_adk_s_factory_with_asyncpg(factory_calls: list[str]) -> None:
    store = session_service_from_uri("postgresql://user@127.0.0.1:1/db")  # no connection until used
    assert isinstance(store, DatabaseSessionService)
    assert factory_calls == ["postgresql+asyncpg://user@127.0.0.1:1/db"]


def test_a_scheme_registered_with_adk_works_here() -> None:
    made: list[str] = []

    def factory(uri: str, **kwargs: Any) -> BaseSessionService:
        made.append(uri)
        return InMemorySessionService()

    get_service_registry().register_session_service("gatewaytest", factory)
    assert isinstance(session_service_from_uri("gatewaytest://x"), InMemorySessionService)
    assert made == ["gatewaytest://x"]


def test_a_uri_adk_cannot_serve_says_so_without_credentials() -> None:
    with pytest.raises(AgentLoadError, match="unsupported session store") as info:
        session_service_from_uri("nosuchdb://admin:hunter2@db/x")
    assert "hunter2" not in str(info.value)


def test_settings_accept_any_uri_but_not_a_bare_word() -> None:
    assert Settings(session_store="agentengine://123").session_store == "agentengine://123"
    with pytest.raises(ValueError, match="must be a URI"):
        Settings(session_store="sessions.db")


# --- Vertex AI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "model"),
    [
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "p"}, "gemini-2.5-flash"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "1", "GOOGLE_CLOUD_PROJECT": "p"}, "gemini-2.5-flash"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "TRUE", "GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "x"},
         "gemini-2.5-flash"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true"}, "scripted"),  # no project: nothing to reach
        ({"GOOGLE_GENAI_USE_VERTEXAI": "false", "GOOGLE_CLOUD_PROJECT": "p"}, "scripted"),
        ({"GOOGLE_CLOUD_PROJECT": "p"}, "scripted"),
    ],
)
def test_vertex_settings_count_as_a_model_credential(env: dict[str, str], model: str) -> None:
    assert Settings().effective_model(env) == model


# --- apps -----------------------------------------------------------------------------------------

AGENT_SOURCE = textwrap.dedent(
    """
    from google.adk.agents import LlmAgent
    import adk_gateway.agents.scripted  # noqa: F401

    root_agent = LlmAgent(name="{name}_agent", model="scripted")
    """
)
FOLDER_APPS = ("gamma_unit_app", "delta_unit_app")


@pytest.fixture
def agents_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "agents_root"
    for name in FOLDER_APPS:
        (root / name).mkdir(parents=True)
        (root / name / "agent.py").write_text(AGENT_SOURCE.format(name=name))
    yield root
    for module in list(sys.modules):
        if module.split(".")[0] in FOLDER_APPS:
            del sys.modules[module]


def test_a_folder_serves_every_app_named_after_its_folder(agents_dir: Path) -> None:
    loaded = load_agents(str(agents_dir), "scripted")
    assert list(loaded.agents) == ["delta_unit_app", "gamma_unit_app"]
    assert loaded.default == "delta_unit_app" and loaded.folder == agents_dir.resolve()
    apps = AgentApps.build(loaded, InMemorySessionService(), max_llm_calls=5)
    assert apps.names() == ["delta_unit_app", "gamma_unit_app"]
    host = apps.host("gamma_unit_app")
    assert (host.app_name, host.root_agent.name) == ("gamma_unit_app", "gamma_unit_app_agent")
    assert apps.host(None) is apps.host("delta_unit_app")


def test_the_default_app_is_app_then_folder_app_then_the_first(agents_dir: Path) -> None:
    assert load_agents(str(agents_dir), "scripted", default="gamma_unit_app").default == "gamma_unit_app"
    assert load_agents(f"{agents_dir}::gamma_unit_app", "scripted").default == "gamma_unit_app"
    with pytest.raises(AgentLoadError, match="no app 'nope'"):
        load_agents(str(agents_dir), "scripted", default="nope")


def test_one_app_specs_check_app() -> None:
    assert load_agents("demo", "scripted", default="demo_agent").default == "demo_agent"
    with pytest.raises(AgentLoadError, match="serves one app"):
        load_agents("demo", "scripted", default="weather")


def test_an_unknown_app_is_unknown_app() -> None:
    apps = AgentApps.single(AgentHost(counting_agent(ToolLog()), InMemorySessionService(), max_llm_calls=5))
    assert apps.names() == ["counting_agent"]
    with pytest.raises(UnknownApp) as info:
        apps.host("weather")
    assert info.value.status == 404 and info.value.error_code == "unknown_app"


def test_frames_carry_app() -> None:
    base = {"requestId": "r", "id": "c"}
    assert LiveStartFrame.model_validate({"type": "live-start", **base}).app is None
    assert LiveStartFrame.model_validate({"type": "live-start", **base, "app": "a"}).app == "a"
    assert LiveStartFrame.model_validate({"type": "live-start", **base, "body": {"app": "b"}}).app == "b"
    with pytest.raises(ValidationError):
        LiveStartFrame.model_validate({"type": "live-start", **base, "body": {"app": "a/b"}})
    send = parse_frame('{"type": "send", "requestId": "r", "id": "c", "body": {"app": "w"}, '
                       '"messages": [{"id": "m", "role": "user", "parts": []}]}')
    assert isinstance(send, SendFrame) and send.chat_request().app == "w"
