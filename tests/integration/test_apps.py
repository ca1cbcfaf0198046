"""An agents folder with several apps: every app served by name, picked per chat by the request's
`app` (SSE body, a WebSocket `send` frame's `body`, a `live-start` frame), the default without
one, an unknown name refused before anything runs, `GET /api/apps`, YAML agents and per-agent `.env`.

The folder (made once for the module) holds two Python apps — a package (`__init__.py` and
`agent.py`) and a bare `agent.py` — and one YAML app (`root_agent.yaml` naming a tool module next
to it). Each app has a `whoami` tool that says which app it is, so the scripted model's
`/tool whoami {}` shows who answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient

from adk_gateway.keys import SERVICE

from .conftest import StartGateway
from .support import WAIT_S, Json, chat_body, new_id, post_chat, settings, user_message

APPS = ("billing_apps_test", "notes_apps_test", "weather_apps_test")  # alphabetical, as ADK lists them
ENV_VARIABLE = "APPS_TEST_WEATHER_GREETING"

WHOAMI = textwrap.dedent(
    """
    import os


    def whoami() -> dict:
        \"\"\"Says which app answers.\"\"\"
        return {{"app": "{app}", "greeting": os.environ.get("{variable}", "unset")}}
    """
)
PYTHON_AGENT = textwrap.dedent(
    """
    from google.adk.agents import LlmAgent

    import adk_gateway.agents.scripted  # noqa: F401  (registers the offline model)
    from {module} import whoami

    root_agent = LlmAgent(name="{name}", model="scripted", tools=[whoami])
    """
)
YAML_AGENT = textwrap.dedent(
    """
    agent_class: LlmAgent
    name: notes_agent
    model: scripted
    instruction: You keep notes.
    tools:
      - name: notes_apps_test.tools.whoami
    """
)


@pytest.fixture(scope="module")
def agents_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("agents") / "agents"
    weather = root / "weather_apps_test"  # a package, with its own .env
    weather.mkdir(parents=True)
    (weather / "__init__.py").write_text("from . import agent\n")
    (weather / "tools.py").write_text(WHOAMI.format(app="weather", variable=ENV_VARIABLE))
    (weather / "agent.py").write_text(PYTHON_AGENT.format(module="weather_apps_test.tools", name="weather_agent"))
    (weather / ".env").write_text(f"{ENV_VARIABLE}=hello from the weather app's .env\n")
    billing = root / "billing_apps_test"  # agent.py alone
    billing.mkdir()
    (billing / "tools.py").write_text(WHOAMI.format(app="billing", variable=ENV_VARIABLE))
    (billing / "agent.py").write_text(PYTHON_AGENT.format(module="billing_apps_test.tools", name="billing_agent"))
    notes = root / "notes_apps_test"  # ADK's YAML agent
    notes.mkdir()
    (notes / "tools.py").write_text(WHOAMI.format(app="notes", variable=ENV_VARIABLE))
    (notes / "root_agent.yaml").write_text(YAML_AGENT)
    (root / "not_an_app").mkdir()  # no agent in it: not listed
    yield root
    os.environ.pop(ENV_VARIABLE, None)
    for name in list(sys.modules):
        if name.split(".")[0] in APPS:
            del sys.modules[name]
    sys.path[:] = [entry for entry in sys.path if entry != str(root)]


async def start(gateway: StartGateway, folder: Path, **overrides: Any) -> TestClient[Any, Any]:
    return await gateway(settings(agent=str(folder), **overrides))


def whoami_result(text: str) -> Json:
    """The tool result in the scripted model's closing line `whoami -> {...}`."""
    name, _, result = text.partition(" -> ")
    assert name == "whoami", text
    answer: Json = json.loads(result)
    return answer


async def ask_sse(client: TestClient[Any, Any], chat_id: str, **extra: Any) -> Any:
    return await post_chat(client, chat_body(chat_id, [user_message("/tool whoami {}")], **extra))


async def ask_ws(client: TestClient[Any, Any], chat_id: str, body: Json) -> list[Json]:
    """One `send` frame with `body`; the frames of its answer, up to `end` or `error`."""
    frames: list[Json] = []
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": chat_id, "trigger": "submit-message",
                            "messages": [user_message("/tool whoami {}")], "headers": {}, "body": body})
        async with asyncio.timeout(WAIT_S):
            while not frames or frames[-1]["type"] not in ("end", "error"):
                message = await ws.receive()
                assert message.type is WSMsgType.TEXT, message
                frames.append(json.loads(message.data))
    return frames


def ws_text(frames: list[Json]) -> str:
    return "".join(f["chunk"]["delta"] for f in frames if f["type"] == "chunk" and f["chunk"]["type"] == "text-delta")


async def test_api_apps_lists_every_app_with_the_default(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    async with client.get("/api/apps") as response:
        assert response.status == 200
        whoami = [{"name": "whoami", "description": "Says which app answers.", "needsApproval": False,
                   "runsInBrowser": False, "longRunning": False, "parameters": {"type": "object", "properties": {}}}]
        assert await response.json() == {"apps": [
            {"name": "billing_apps_test", "default": True, "model": "scripted", "tools": whoami},  # no --app: the first
            {"name": "notes_apps_test", "default": False, "model": "scripted", "tools": whoami},  # (a YAML agent's)
            {"name": "weather_apps_test", "default": False, "model": "scripted", "tools": whoami},
        ]}

    chosen = await start(gateway, agents_folder, app="weather_apps_test")
    async with chosen.get("/api/apps") as response:
        listed = await response.json()
    assert [app["name"] for app in listed["apps"] if app["default"]] == ["weather_apps_test"]


async def test_each_app_answers_by_name_over_sse(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    apps = client.app[SERVICE].apps
    for app, answer in (("billing_apps_test", "billing"), ("notes_apps_test", "notes"),
                        ("weather_apps_test", "weather")):
        chat_id = new_id(app)
        reply = await ask_sse(client, chat_id, app=app)
        assert reply.status == 200, reply.body
        assert whoami_result(reply.text)["app"] == answer
        # The chat's ADK session lives under the app that answered, and under no other.
        for name in APPS:
            session = await apps.host(name).get_session("anonymous", chat_id, events=False)
            assert (session is not None) == (name == app), (name, app)
            if session is not None:
                assert session.app_name == app


async def test_the_yaml_app_is_adk_s_yaml_agent(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    host = client.app[SERVICE].apps.host("notes_apps_test")
    assert host.root_agent.name == "notes_agent"
    assert getattr(host.root_agent, "instruction", None) == "You keep notes."


async def test_without_app_the_default_answers(gateway: StartGateway, agents_folder: Path) -> None:
    first = await start(gateway, agents_folder)
    assert whoami_result((await ask_sse(first, new_id("c"))).text)["app"] == "billing"

    chosen = await start(gateway, agents_folder, app="weather_apps_test")
    assert whoami_result((await ask_sse(chosen, new_id("c"))).text)["app"] == "weather"
    assert whoami_result((await ask_sse(chosen, new_id("c"), app=None)).text)["app"] == "weather"


async def test_an_unknown_app_is_refused_before_anything_runs(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    service = client.app[SERVICE]
    for name in ("no_such_app", "not_an_app"):
        reply = await ask_sse(client, "chat-unknown", app=name)
        assert reply.status == 404 and reply.error_code == "unknown_app", reply.body
    reply = await ask_sse(client, "chat-unknown", app="../etc")  # not an app name at all
    assert reply.status == 400
    assert service.registry.counts()["runs"] == 0
    for name in APPS:
        assert await service.apps.host(name).get_session("anonymous", "chat-unknown", events=False) is None

    frames = await ask_ws(client, "chat-unknown", {"app": "no_such_app"})
    assert [f["type"] for f in frames] == ["error"] and frames[0]["code"] == "unknown_app", frames


async def test_a_websocket_send_picks_its_app_by_body(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    chat_id = new_id("ws")
    frames = await ask_ws(client, chat_id, {"app": "notes_apps_test"})
    assert frames[-1]["type"] == "end", frames
    assert whoami_result(ws_text(frames))["app"] == "notes"
    session = await client.app[SERVICE].apps.host("notes_apps_test").get_session("anonymous", chat_id)
    assert session is not None and session.app_name == "notes_apps_test"


async def test_a_live_session_opens_on_its_app(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "live-start", "requestId": "bad", "id": "chat-live-bad", "app": "nope"})
        refused = await receive(ws)
        assert refused["type"] == "error" and refused["code"] == "unknown_app", refused

        await ws.send_json({"type": "live-start", "requestId": "live", "id": "chat-live",
                            "body": {"app": "weather_apps_test"}})
        assert await receive(ws) == {"type": "start", "requestId": "live"}
        await ws.send_json({"type": "live-text", "requestId": "live", "text": "/tool whoami {}"})
        output = None
        while output is None:
            frame = await receive(ws)
            if frame["type"] == "chunk" and frame["chunk"]["type"] == "tool-output-available":
                output = frame["chunk"]["output"]
        assert output["app"] == "weather"
        await ws.send_json({"type": "live-stop", "requestId": "live"})
    session = await client.app[SERVICE].apps.host("weather_apps_test").get_session("anonymous", "chat-live")
    assert session is not None


async def test_an_app_s_env_file_reaches_its_agent(gateway: StartGateway, agents_folder: Path) -> None:
    client = await start(gateway, agents_folder)
    reply = await ask_sse(client, new_id("env"), app="weather_apps_test")
    assert whoami_result(reply.text)["greeting"] == "hello from the weather app's .env"


async def receive(ws: aiohttp.ClientWebSocketResponse) -> Json:
    async with asyncio.timeout(WAIT_S):
        message = await ws.receive()
    assert message.type is WSMsgType.TEXT, message
    frame: Json = json.loads(message.data)
    return frame


async def test_the_demo_agents_tools_are_listed_with_how_they_run(gateway: StartGateway) -> None:
    client = await gateway(settings())
    async with client.get("/api/apps") as response:
        [demo] = (await response.json())["apps"]
    tools = {tool["name"]: tool for tool in demo["tools"]}
    assert {"get_weather", "process_payment", "change_bgm", "get_location"} <= set(tools)
    assert tools["get_weather"]["needsApproval"] is False and tools["get_weather"]["runsInBrowser"] is False
    assert tools["process_payment"]["needsApproval"] is True
    assert tools["change_bgm"]["runsInBrowser"] is True
    assert all(tool["description"] for tool in tools.values())
    assert demo["model"] == "scripted"
    assert tools["process_payment"]["parameters"] == {
        "type": "object", "required": ["amount", "recipient"],
        "properties": {"amount": {"title": "Amount", "type": "number"},
                       "recipient": {"title": "Recipient", "type": "string"}}}
    assert tools["get_location"]["parameters"] == {"type": "object", "properties": {}}


async def test_the_offline_model_calls_only_the_tools_the_app_has(gateway: StartGateway, agents_folder: Path) -> None:
    """The demo's keyword rule for "weather" does not fire for an app without `get_weather`."""
    client = await start(gateway, agents_folder, app="weather_apps_test")
    reply = await post_chat(client, chat_body(new_id("kw"), [user_message("What is the weather in Paris?")]))
    assert reply.status == 200 and not reply.of_type("tool-input-available")
    assert reply.text == "You said: What is the weather in Paris?"
