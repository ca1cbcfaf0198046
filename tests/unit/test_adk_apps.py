"""The ADK apps of tests/adk_apps, each run offline through a plain ADK `Runner` (SSE streaming), loaded by ADK's
own `AgentLoader` as `adk web` loads them: the event shapes the gateway relies on for each feature.

Also the local OAuth2 server of tests/oauth_server.py, on its own and in the sign-in app's full flow.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import json
import os
import struct
import subprocess
import sys
import urllib.parse
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from google.adk.agents import BaseAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.artifacts import InMemoryArtifactService
from google.adk.cli.utils.agent_loader import AgentLoader
from google.adk.events import Event
from google.adk.models import LLMRegistry
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from tests.oauth_server import CLIENT_ID, CLIENT_SECRET, OAuthServer, running_oauth_server

APPS = Path(__file__).resolve().parents[1] / "adk_apps"
ROOT_AGENTS = {
    "artifacts_app": "artifact_agent",
    "grounding_app": "search_agent",
    "long_running_app": "reimbursement_agent",
    "sequential_app": "writing_pipeline",
    "sign_in_app": "calendar_agent",
    "state_app": "shopping_agent",
    "transfer_app": "coordinator",
}
MODEL_VERSION = "gemini-2.5-flash-offline-001"
USER = "u1"
REDIRECT_URI = "http://127.0.0.1:9/api/oauth/callback"


# --- helpers -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loader() -> AgentLoader:
    return AgentLoader(str(APPS))


@pytest.fixture(scope="module")
def gemini_like(loader: AgentLoader) -> ModuleType:
    loader.load_agent("grounding_app")  # puts the agents folder on sys.path, as for `adk web`
    return importlib.import_module("gemini_like")


class App:
    """One app on a Runner with in-memory sessions and artifacts, and one session."""

    def __init__(self, name: str, agent: BaseAgent) -> None:
        self.name = name
        self.agent = agent
        self.artifacts = InMemoryArtifactService()
        self.runner = Runner(
            app_name=name, agent=agent, session_service=InMemorySessionService(), artifact_service=self.artifacts
        )
        self.session_id = ""

    async def turn(self, message: str | types.Content, mode: StreamingMode = StreamingMode.SSE) -> list[Event]:
        if isinstance(message, str):
            message = types.Content(role="user", parts=[types.Part(text=message)])
        run_config = RunConfig(streaming_mode=mode)
        stream = self.runner.run_async(
            user_id=USER, session_id=self.session_id, new_message=message, run_config=run_config
        )
        return [event async for event in stream]

    async def state(self) -> dict[str, Any]:
        session = await self.runner.session_service.get_session(
            app_name=self.name, user_id=USER, session_id=self.session_id
        )
        assert session is not None
        return dict(session.state)


@asynccontextmanager
async def app(loader: AgentLoader, name: str) -> AsyncIterator[App]:
    opened = App(name, loader.load_agent(name))  # type: ignore[arg-type]
    session = await opened.runner.session_service.create_session(app_name=name, user_id=USER)
    opened.session_id = session.id
    try:
        yield opened
    finally:
        await opened.runner.close()


def texts(event: Event) -> str:
    return "".join(p.text or "" for p in (event.content.parts if event.content else None) or [])


def calls(event: Event) -> list[types.FunctionCall]:
    return [p.function_call for p in (event.content.parts if event.content else None) or [] if p.function_call]


def responses(event: Event) -> list[types.FunctionResponse]:
    return [p.function_response for p in (event.content.parts if event.content else None) or [] if p.function_response]


def finals(events: list[Event]) -> list[Event]:
    """The model's non-partial responses (one per model call), without function-response events."""
    return [e for e in events if not e.partial and e.content and e.content.role == "model"]


def answer(events: list[Event]) -> str:
    """The text of the last model response."""
    return texts(finals(events)[-1])


def reply(call: types.FunctionCall, response: dict[str, Any]) -> types.Content:
    return types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(name=call.name, id=call.id, response=response))],
    )


# --- the folder and the model --------------------------------------------------------------------------------


def test_the_folder_is_an_adk_agents_folder(loader: AgentLoader, gemini_like: ModuleType) -> None:
    assert loader.list_agents() == sorted(ROOT_AGENTS)
    for name, root in ROOT_AGENTS.items():
        agent = loader.load_agent(name)
        assert isinstance(agent, BaseAgent) and agent.name == root
        model = getattr(agent, "model", None) or agent.sub_agents[0].model  # type: ignore[attr-defined]
        assert type(model) is gemini_like.GeminiLike  # the top-level module `gemini_like`, one class for all
        assert model.model == "gemini-2.5-flash"
    assert str(APPS) in sys.path


async def test_the_model_by_name_echoes(gemini_like: ModuleType) -> None:
    from google.adk.agents import Agent
    from google.adk.models import Gemini

    assert LLMRegistry.resolve("offline/gemini-2.5-flash") is gemini_like.GeminiLike
    assert LLMRegistry.resolve("gemini-like-001") is Gemini  # Gemini's `gemini-.*` is registered first
    named = App("echo", Agent(name="echo", model="offline/gemini-2.5-flash"))
    session = await named.runner.session_service.create_session(app_name="echo", user_id=USER)
    named.session_id = session.id
    try:
        assert answer(await named.turn("ping")) == "You said: ping."
    finally:
        await named.runner.close()


# --- grounding ------------------------------------------------------------------------------------------------


async def test_grounding_streams_like_gemini(loader: AgentLoader, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app(loader, "grounding_app") as grounding:
        requests: list[Any] = []
        monkeypatch.setattr(grounding.agent.model, "calls", requests)  # type: ignore[attr-defined]
        events = await grounding.turn("What is the capital of France?")
    assert [(e.partial, texts(e)) for e in events] == [
        (True, "Paris is "),
        (True, "the capital "),
        (True, "of France."),
        (False, "Paris is the capital of France."),
    ]
    assert {e.id for e in events} == {events[0].id} and {e.author for e in events} == {"search_agent"}
    assert all(e.model_version == MODEL_VERSION for e in events)
    assert [e.usage_metadata is not None for e in events] == [False, False, True, True]
    assert events[-1].usage_metadata == events[-2].usage_metadata
    assert events[-1].usage_metadata.total_token_count == 14  # type: ignore[union-attr]
    assert [e.grounding_metadata is not None for e in events] == [False, False, True, True]
    grounding_md = events[-1].grounding_metadata
    assert grounding_md is not None and grounding_md == events[-2].grounding_metadata
    chunks = grounding_md.grounding_chunks or []
    assert [(c.web.uri, c.web.title) for c in chunks if c.web] == [
        ("https://en.wikipedia.org/wiki/Paris", "wikipedia.org"),
        ("https://www.britannica.com/place/Paris", "britannica.com"),
    ]
    assert [(c.retrieved_context.uri, c.retrieved_context.title) for c in chunks if c.retrieved_context] == [
        ("gs://adk-test-corpus/france.pdf", "france.pdf")
    ]
    assert "capital of France" in (grounding_md.search_entry_point.rendered_content or "")  # type: ignore[union-attr]
    assert grounding_md.grounding_supports[0].grounding_chunk_indices == [0, 1, 2]  # type: ignore[index]
    assert grounding_md.web_search_queries == ["What is the capital of France?"]
    # ADK's google_search accepted the model (its name is a Gemini name) and asked for the built-in search.
    assert [t.google_search is not None for t in requests[0].config.tools] == [True]


async def test_grounding_without_streaming_is_one_event(loader: AgentLoader) -> None:
    async with app(loader, "grounding_app") as grounding:
        events = await grounding.turn("capital of France?", StreamingMode.NONE)
    [event] = events
    assert not event.partial and texts(event) == "Paris is the capital of France."
    assert event.usage_metadata is not None and event.grounding_metadata is not None


# --- artifacts -----------------------------------------------------------------------------------------------


def assert_png(data: bytes, size: tuple[int, int]) -> None:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, kinds, idat = 8, [], b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length : position + 12 + length])
        assert zlib.crc32(kind + body) == crc
        kinds.append(kind)
        if kind == b"IHDR":
            assert struct.unpack(">II", body[:8]) == size
        idat += body if kind == b"IDAT" else b""
        position += 12 + length
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]
    assert len(zlib.decompress(idat)) == size[1] * (1 + 3 * size[0])


async def test_artifacts_ride_on_the_function_response_event(loader: AgentLoader) -> None:
    async with app(loader, "artifacts_app") as artifacts:
        events = await artifacts.turn("Write a report and draw a chart")
        [call_event] = [e for e in finals(events) if calls(e)]
        assert [(c.name, c.args) for c in calls(call_event)] == [
            ("save_report", {"title": "Q3 sales"}),
            ("make_chart", {}),
        ]
        [saved] = [e for e in events if responses(e)]
        assert saved.author == "artifact_agent" and saved.content.role == "user"  # type: ignore[union-attr]
        assert saved.actions.artifact_delta == {"report.txt": 0, "chart.png": 0}
        assert [r.response for r in responses(saved)] == [
            {"filename": "report.txt", "version": 0},
            {"filename": "chart.png", "version": 0},
        ]
        assert [e.actions.artifact_delta for e in events if e is not saved] == [{}] * (len(events) - 1)
        assert answer(events) == "Saved report.txt (version 0). Saved chart.png (version 0)."

        key = {"app_name": "artifacts_app", "user_id": USER, "session_id": artifacts.session_id}
        report = await artifacts.artifacts.load_artifact(filename="report.txt", **key)
        assert report is not None and report.inline_data is not None
        assert (report.inline_data.mime_type, report.inline_data.data) == (
            "text/plain",
            b"Q3 sales\nRevenue: 42\nCosts: 17\n",
        )
        chart = await artifacts.artifacts.load_artifact(filename="chart.png", **key)
        assert chart is not None and chart.inline_data is not None and chart.inline_data.mime_type == "image/png"
        assert_png(chart.inline_data.data or b"", (4, 4))

        events = await artifacts.turn("draw a chart")
        assert [e.actions.artifact_delta for e in events if responses(e)] == [{"chart.png": 1}]
        assert answer(events) == "Saved chart.png (version 1)."
        assert answer(await artifacts.turn("hello")) == "I can write a report or draw a chart."


# --- long-running tools --------------------------------------------------------------------------------------


async def test_long_running_approval_then_resume(loader: AgentLoader) -> None:
    async with app(loader, "long_running_app") as approvals:
        events = await approvals.turn("Please reimburse $250 for a team dinner")
        [call] = [c for e in finals(events) for c in calls(e)]
        assert (call.name, call.args) == ("ask_for_approval", {"purpose": "a team dinner", "amount": 250.0})
        call_events = [e for e in events if calls(e)]
        assert all(e.long_running_tool_ids == {call.id} for e in call_events)
        [interim] = [e for e in events if responses(e)]
        assert responses(interim)[0].response == {
            "status": "pending",
            "approver": "manager@example.com",
            "purpose": "a team dinner",
            "amount": 250.0,
            "ticket_id": "reimbursement-ticket-001",
        }
        # ADK calls the model again with the interim response, in the same invocation.
        assert len(finals(events)) == 2 and answer(events) == "Your request is waiting for approval."
        assert len({e.invocation_id for e in events}) == 1

        resumed = await approvals.turn(reply(call, {"status": "approved"}))
        assert {e.invocation_id for e in resumed} == {events[0].invocation_id}  # the invocation goes on
        [reimburse] = [c for e in finals(resumed) for c in calls(e)]
        assert (reimburse.name, reimburse.args) == ("reimburse", {"purpose": "a team dinner", "amount": 250.0})
        assert [r.response for e in resumed for r in responses(e)] == [
            {"status": "ok", "purpose": "a team dinner", "amount": 250.0}
        ]
        assert answer(resumed) == "Done: $250.00 reimbursed for a team dinner."


async def test_long_running_rejected_and_small_amounts(loader: AgentLoader) -> None:
    async with app(loader, "long_running_app") as approvals:
        events = await approvals.turn("Please reimburse $120 for a train ticket")
        [call] = [c for e in finals(events) for c in calls(e)]
        rejected = await approvals.turn(reply(call, {"status": "rejected"}))
        assert [calls(e) for e in rejected] == [[]] * len(rejected)
        assert answer(rejected) == "Sorry, your request was rejected."

        small = await approvals.turn("Please reimburse $50 for lunch.")
        assert [c.name for e in finals(small) for c in calls(e)] == ["reimburse"]
        assert not any(e.long_running_tool_ids for e in small)
        assert answer(small) == "Done: $50.00 reimbursed for lunch."


# --- multi-agent ---------------------------------------------------------------------------------------------


async def test_transfer_to_sub_agents(loader: AgentLoader) -> None:
    async with app(loader, "transfer_app") as transfer:
        events = await transfer.turn("What's the weather in Paris?")
        authors = [e.author for e in events if not e.partial]
        assert authors == ["coordinator", "coordinator", "weather", "weather", "weather"]
        handoff = finals(events)[0]
        assert texts(handoff) == "Let me transfer you. "
        assert [(c.name, c.args) for c in calls(handoff)] == [("transfer_to_agent", {"agent_name": "weather"})]
        [transferred] = [e for e in events if e.actions.transfer_to_agent]
        assert transferred.actions.transfer_to_agent == "weather" and transferred.author == "coordinator"
        assert [(c.name, c.args) for e in finals(events) for c in calls(e)][1] == ("get_weather", {"city": "Paris"})
        assert answer(events) == "It is sunny and 22°C in Paris."
        assert len({e.invocation_id for e in events}) == 1

        # The next turn goes to the agent that answered last: weather hands over to greeter.
        events = await transfer.turn("hello")
        assert [e.author for e in finals(events)] == ["weather", "greeter"]
        assert answer(events) == "Hello! Nice to meet you."

    async with app(loader, "transfer_app") as transfer:
        events = await transfer.turn("Hi there")
        assert [e.author for e in finals(events)] == ["coordinator", "greeter"]
        assert answer(await transfer.turn("what can you do?")) == "Hello! Nice to meet you."
    async with app(loader, "transfer_app") as transfer:
        assert answer(await transfer.turn("what can you do?")) == "I can greet you or tell you the weather."


async def test_sequential_agents_take_turns(loader: AgentLoader) -> None:
    async with app(loader, "sequential_app") as pipeline:
        events = await pipeline.turn("Write a poem about the sea")
        assert [(e.author, e.partial) for e in events] == [
            ("writer", True),
            ("writer", True),
            ("writer", False),
            ("reviewer", True),
            ("reviewer", True),
            ("reviewer", False),
        ]
        writer, reviewer = finals(events)
        assert writer.id != reviewer.id and writer.invocation_id == reviewer.invocation_id
        assert (texts(writer), writer.actions.state_delta) == (
            "Roses are red, violets are blue.",
            {"draft": "Roses are red, violets are blue."},
        )
        assert (texts(reviewer), reviewer.actions.state_delta) == (
            "The draft rhymes. Approved.",
            {"review": "The draft rhymes. Approved."},
        )
        assert writer.usage_metadata is not None and reviewer.usage_metadata is not None
        assert await pipeline.state() == {
            "draft": "Roses are red, violets are blue.",
            "review": "The draft rhymes. Approved.",
        }


# --- state ---------------------------------------------------------------------------------------------------


async def test_the_cart_is_session_state(loader: AgentLoader) -> None:
    async with app(loader, "state_app") as shop:
        events = await shop.turn("add 2 apples")
        [call] = [c for e in finals(events) for c in calls(e)]
        assert (call.name, call.args) == ("add_to_cart", {"item": "apples", "quantity": 2})
        [tool_event] = [e for e in events if responses(e)]
        assert tool_event.actions.state_delta == {"cart": [{"item": "apples", "quantity": 2}]}  # temp: stripped
        assert answer(events) == "Added 2 apples. Cart: 2 apples."
        assert finals(events)[-1].actions.state_delta == {"summary": "Added 2 apples. Cart: 2 apples."}

        events = await shop.turn("add 3 pears")
        assert answer(events) == "Added 3 pears. Cart: 2 apples, 3 pears."
        assert await shop.state() == {
            "cart": [{"item": "apples", "quantity": 2}, {"item": "pears", "quantity": 3}],
            "summary": "Added 3 pears. Cart: 2 apples, 3 pears.",
        }
        assert answer(await shop.turn("what now?")) == "Tell me what to add, e.g. add 2 apples."


# --- tool sign-in --------------------------------------------------------------------------------------------


def credential_request(events: list[Event]) -> tuple[Event, types.FunctionCall]:
    [(event, call)] = [(e, c) for e in events for c in calls(e) if c.name == "adk_request_credential"]
    return event, call


async def sign_in(call: types.FunctionCall, redirect_uri: str = REDIRECT_URI) -> types.Content:
    """What the browser and the client do: open authUri with our redirect_uri, take the callback URL, and
    answer the adk_request_credential call with the auth config carrying it (as `adk web` does)."""
    config = json.loads(json.dumps((call.args or {})["authConfig"]))
    oauth2 = config["exchangedAuthCredential"]["oauth2"]
    url = oauth2["authUri"] + "&" + urllib.parse.urlencode({"redirect_uri": redirect_uri})
    async with aiohttp.ClientSession() as http, http.get(url, allow_redirects=False) as response:
        assert response.status == 302
        callback = response.headers["Location"]
    assert callback.startswith(redirect_uri + "?code=")
    oauth2["authResponseUri"], oauth2["redirectUri"] = callback, redirect_uri
    return reply(call, config)


async def test_sign_in_requests_a_credential_then_resumes(loader: AgentLoader, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_oauth_server() as server:
        monkeypatch.setenv("ADK_TEST_OAUTH_URL", server.url)
        async with app(loader, "sign_in_app") as calendar:
            events = await calendar.turn("What is on my calendar today?")
            [tool_call] = [c for e in finals(events) for c in calls(e) if c.name == "list_calendar_events"]
            assert tool_call.args == {"day": "today"}
            request_event, request = credential_request(events)
            assert request_event.long_running_tool_ids == {request.id}
            assert request_event.author == "calendar_agent" and request_event.content.role == "user"  # type: ignore[union-attr]
            assert (request.args or {})["functionCallId"] == tool_call.id
            oauth2 = (request.args or {})["authConfig"]["exchangedAuthCredential"]["oauth2"]
            auth_uri = urllib.parse.urlsplit(oauth2["authUri"])
            query = urllib.parse.parse_qs(auth_uri.query)
            assert f"{auth_uri.scheme}://{auth_uri.netloc}{auth_uri.path}" == f"{server.url}/authorize"
            assert (query["client_id"], query["response_type"], query["state"]) == (
                [CLIENT_ID],
                ["code"],
                [oauth2["state"]],
            )
            assert "redirect_uri" not in query and CLIENT_SECRET not in json.dumps(request.args)
            [pending] = [e for e in events if responses(e)]
            assert responses(pending)[0].response == {
                "status": "pending",
                "message": "Need user authorization to access their calendar.",
            }
            assert list(pending.actions.requested_auth_configs) == [tool_call.id]
            assert len(finals(events)) == 1  # the model is not called again: the invocation waits for the user
            assert server.token_requests == []

            resumed = await calendar.turn(await sign_in(request))
            [token_request] = server.token_requests
            assert token_request["client_auth"] == "client_secret_basic" and token_request["client_id"] == CLIENT_ID
            assert token_request["form"]["grant_type"] == "authorization_code"
            assert token_request["form"]["redirect_uri"] == REDIRECT_URI and token_request["status"] == 200
            [result] = [r for e in resumed for r in responses(e)]
            assert result.id == tool_call.id  # the original tool call, run again with the token
            assert result.response == {
                "status": "success",
                "day": "today",
                "events": [{"summary": "Standup", "start": "09:00"}, {"summary": "Design review", "start": "14:00"}],
            }
            assert {e.invocation_id for e in resumed} == {events[0].invocation_id}
            assert answer(resumed) == "You have 2 events today: Standup at 09:00, Design review at 14:00."

            # The token stays in the session (as in ADK's sample): no new sign-in on the next turn.
            later = await calendar.turn("Any meetings tomorrow?")
            assert not [c for e in later for c in calls(e) if c.name == "adk_request_credential"]
            assert answer(later) == "You have 1 event tomorrow: Dentist at 08:30."
            assert len(server.token_requests) == 1


async def test_a_failed_token_exchange_is_a_pending_response(
    loader: AgentLoader, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_oauth_server(token_status=400) as server:
        monkeypatch.setenv("ADK_TEST_OAUTH_URL", server.url)
        async with app(loader, "sign_in_app") as calendar:
            _, request = credential_request(await calendar.turn("show my calendar"))
            resumed = await calendar.turn(await sign_in(request))
            assert [r["status"] for r in server.token_requests] == [400]
            [pending] = [e for e in resumed if responses(e)]
            assert responses(pending)[0].response["status"] == "pending"  # type: ignore[index]
            assert pending.actions.requested_auth_configs  # the tool asked again, but no new request is sent
            assert not [c for e in resumed for c in calls(e) if c.name == "adk_request_credential"]
            assert answer(resumed) == "I could not sign in to your calendar. Please try again."


# --- the OAuth server on its own -----------------------------------------------------------------------------


async def authorize(http: aiohttp.ClientSession, server: OAuthServer, **params: str) -> tuple[int, str]:
    query = {"response_type": "code", "client_id": CLIENT_ID, "redirect_uri": REDIRECT_URI, "state": "s1"} | params
    async with http.get(f"{server.url}/authorize", params=query, allow_redirects=False) as response:
        return response.status, response.headers.get("Location", "")


def code_of(location: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert query["state"] == ["s1"]
    return query["code"][0]


async def test_the_oauth_server() -> None:
    with running_oauth_server(redirect_uris=[REDIRECT_URI]) as server:
        async with aiohttp.ClientSession() as http:
            assert (await authorize(http, server, client_id="someone"))[0] == 400
            assert (await authorize(http, server, redirect_uri="http://evil.example/cb"))[0] == 400
            status, location = await authorize(http, server)
            assert status == 302 and location.startswith(REDIRECT_URI + "?")
            code = code_of(location)

            form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI}
            wrong = aiohttp.BasicAuth(CLIENT_ID, "nope")
            async with http.post(f"{server.url}/token", data=form, auth=wrong) as response:
                assert response.status == 401
            secrets = {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
            async with http.post(f"{server.url}/token", data=form | secrets) as response:  # client_secret_post
                assert response.status == 200
                token = await response.json()
            assert token["token_type"] == "bearer" and token["expires_in"] == 3600
            async with http.post(f"{server.url}/token", data=form | secrets) as response:
                assert response.status == 400  # codes are single-use
            assert [(r["client_auth"], r["status"]) for r in server.token_requests] == [
                ("client_secret_basic", 401),
                ("client_secret_post", 200),
                ("client_secret_post", 400),
            ]
            assert all("client_secret" not in r["form"] for r in server.token_requests)

            async with http.get(f"{server.url}/userinfo") as response:
                assert response.status == 401
            bearer = {"Authorization": f"Bearer {token['access_token']}"}
            async with http.get(f"{server.url}/userinfo", headers=bearer) as response:
                assert (await response.json())["sub"] == "user-1"

            # PKCE: the verifier must match the challenge given to /authorize.
            verifier = "v" * 43
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            code = code_of((await authorize(http, server, code_challenge=challenge, code_challenge_method="S256"))[1])
            basic = aiohttp.BasicAuth(CLIENT_ID, CLIENT_SECRET)
            pkce = form | {"code": code, "code_verifier": "x" * 43}
            async with http.post(f"{server.url}/token", data=pkce, auth=basic) as response:
                assert response.status == 400

            server.deny = True
            status, location = await authorize(http, server)
            assert status == 302 and "error=access_denied" in location and "state=s1" in location


async def test_the_oauth_server_as_a_process() -> None:
    command = [sys.executable, "-m", "tests.oauth_server", "--port", "0", "--token-status", "500"]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = await asyncio.create_subprocess_exec(*command, cwd=root, env=env, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 10)).decode()
        assert line.startswith("oauth server on http://127.0.0.1:")
        url = line.split()[-1]
        async with aiohttp.ClientSession() as http, http.post(f"{url}/token", data={"code": "x"}) as response:
            assert response.status == 500
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 10) == 0
