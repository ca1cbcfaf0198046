"""The doors and failures of the ADK features (issue 32), through real sockets: who may answer a
long-running tool, which state a client may set, who may read an artifact, what a sign-in's
callback accepts, and how a failing artifact store or token exchange ends a turn (the chat goes
on). The features themselves, with the real AI SDK clients: tests/e2e/test_adk_features.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient
from google.adk.artifacts import InMemoryArtifactService

from adk_gateway.agents.adk import AgentHost, load_agents
from adk_gateway.agents.memory_store import MemorySessionService
from tests.oauth_server import OAuthServer, running_oauth_server

from .conftest import StartGateway
from .support import Conversation, chat_body, new_id, post_chat, settings, user_message

APPS = Path(__file__).resolve().parents[1] / "adk_apps"
SECRET = "a-test-secret-that-is-long-enough-for-hs256"
REIMBURSE = "Please reimburse $250 for a team dinner"
CALENDAR = "What is on my calendar today?"


def apps_settings(**overrides: Any) -> Any:
    return settings(agent=str(APPS), client_state="cart", **overrides)


def bearer(user: str) -> dict[str, str]:
    token = jwt.encode({"sub": user, "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with running_oauth_server() as server:
        yield server


@pytest.fixture
def oauth_env(oauth: OAuthServer, monkeypatch: pytest.MonkeyPatch) -> OAuthServer:
    monkeypatch.setenv("ADK_TEST_OAUTH_URL", oauth.url)
    oauth.token_status = 200
    return oauth


def in_app(chat: Conversation, app: str) -> Conversation:
    original = chat.post

    async def post(body: dict[str, Any]) -> Any:
        return await original({**body, "app": app})

    chat.post = post  # type: ignore[method-assign]
    return chat


# --- long-running tools -------------------------------------------------------------------------------


async def test_only_the_chat_that_asked_answers_a_long_running_tool(gateway: StartGateway) -> None:
    client = await gateway(apps_settings())
    chat = in_app(Conversation(client), "long_running_app")
    first = await chat.send(REIMBURSE)
    assert first.finish_reason == "tool-calls"
    [call] = chat.tool_parts("ask_for_approval")
    assert call["state"] == "input-available" and "providerExecuted" not in call
    # A forged call id, and the same call answered in another chat: refused, nothing runs.
    forged = in_app(chat.fork(), "long_running_app")
    forged_part = forged.part(call["toolCallId"])
    forged_part["toolCallId"] = "adk-forged"
    forged.add_output(forged_part, {"status": "approved"})
    assert (await forged.continue_()).error_code == "approval_invalid"
    elsewhere = in_app(chat.fork(chat_id=new_id("other")), "long_running_app")
    elsewhere.add_output(elsewhere.part(call["toolCallId"]), {"status": "approved"})
    refused = await elsewhere.continue_()
    assert (refused.status, refused.error_code) == (403, "approval_invalid")
    # The chat that asked answers it; the agent goes on; answering it again is refused.
    chat.add_output(chat.part(call["toolCallId"]), {"status": "approved"})
    answered = await chat.continue_()
    assert answered.status == 200 and answered.finish_reason == "stop"
    assert answered.text.endswith("Done: $250.00 reimbursed for a team dinner.")
    again = await in_app(chat.fork(), "long_running_app").continue_()
    assert again.status in (403, 409)


async def test_a_long_running_answer_over_the_websocket_is_checked_too(gateway: StartGateway) -> None:
    client = await gateway(apps_settings())
    chat = in_app(Conversation(client), "long_running_app")
    await chat.send(REIMBURSE)
    [call] = chat.tool_parts("ask_for_approval")
    forged = chat.fork()
    forged.part(call["toolCallId"])["toolCallId"] = "adk-forged"
    forged.add_output(forged.part("adk-forged"), {"status": "approved"})
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": chat.chat_id, "trigger": "submit-message",
                            "messageId": forged.assistant["id"], "messages": forged.messages, "headers": {},
                            "body": {"app": "long_running_app"}})
        frame = await ws.receive_json(timeout=10)
        assert frame["type"] == "error" and frame["requestId"] == "r1" and frame.get("code") == "approval_invalid"


# --- state ---------------------------------------------------------------------------------------------


async def test_a_client_sets_only_the_state_keys_it_may_see(gateway: StartGateway) -> None:
    client = await gateway(apps_settings())
    chat_id = new_id("state")
    refused = await post_chat(client, chat_body(chat_id, [user_message("add 2 apples")], app="state_app",
                                                state={"cart": [], "user:plan": "gold"}))
    assert (refused.status, refused.error_code) == (400, "state_key_refused")
    assert "user:plan" in json.dumps(refused.body)
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": chat_id, "trigger": "submit-message",
                            "messages": [user_message("add 2 apples")], "headers": {},
                            "body": {"app": "state_app", "state": {"secret": 1}}})
        frame = await ws.receive_json(timeout=10)
        assert frame["type"] == "error" and frame.get("code") == "state_key_refused"
    # Nothing ran: the chat has no session, no artifacts.
    async with client.get(f"/api/chats/{chat_id}/artifacts?app=state_app") as response:
        assert response.status == 404


async def test_without_client_state_keys_no_state_is_shown_or_set(gateway: StartGateway) -> None:
    client = await gateway(settings(agent=str(APPS)))
    chat = in_app(Conversation(client), "state_app")
    reply = await chat.send("add 2 apples")
    assert reply.status == 200 and not reply.of_type("data-state")
    refused = await post_chat(client, chat_body(new_id("c"), [user_message("hi")], app="state_app", state={"cart": []}))
    assert refused.error_code == "state_key_refused"


# --- artifacts -----------------------------------------------------------------------------------------


async def test_artifact_links_need_no_credential_and_the_list_needs_the_chats_user(gateway: StartGateway) -> None:
    client = await gateway(apps_settings(auth="jwt", auth_jwt_secret=SECRET))
    chat = in_app(Conversation(client), "artifacts_app")
    chat.headers.update(bearer("alice"))
    reply = await chat.send("Write a report and draw a chart")
    files = {c["mediaType"]: c["url"] for c in reply.of_type("file")}
    assert set(files) == {"text/plain", "image/png"}
    for url in files.values():
        path = urlsplit(url)
        async with client.get(f"{path.path}?{path.query}") as response:  # no Authorization header
            assert response.status == 200
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert "sandbox" in response.headers["Content-Security-Policy"]
    listing_path = f"/api/chats/{chat.chat_id}/artifacts?app=artifacts_app"
    async with client.get(listing_path, headers=bearer("alice")) as response:
        listed = await response.json()
    assert [(a["name"], a["versions"], a["mediaType"]) for a in listed["artifacts"]] == [
        ("chart.png", [0], "image/png"), ("report.txt", [0], "text/plain")]
    fresh = urlsplit(listed["artifacts"][1]["url"])
    async with client.get(f"{fresh.path}?{fresh.query}") as response:
        assert await response.read() == b"Q3 sales\nRevenue: 42\nCosts: 17\n"
    async with client.get(listing_path, headers=bearer("bob")) as response:
        assert response.status == 404  # another user's chat is an unknown chat
    async with client.get(listing_path) as response:
        assert response.status == 401
    # A link made for alice does not open bob's artifact of the same name, nor the same link expired.
    query = dict(parse_qsl(urlsplit(files["text/plain"]).query))
    for changed in ({"user": "bob"}, {"expires": "1"}, {"signature": "x" + query["signature"][1:]}):
        forged = "&".join(f"{k}={v}" for k, v in {**query, **changed}.items())
        async with client.get(f"{urlsplit(files['text/plain']).path}?{forged}") as response:
            assert response.status == 403
            assert (await response.json())["error"]["code"] == "link_refused"


class BrokenArtifacts(InMemoryArtifactService):
    async def save_artifact(self, **_kwargs: Any) -> int:
        raise OSError("the bucket is gone")


async def test_a_failing_artifact_store_ends_the_tool_with_an_error_and_the_chat_goes_on(
    gateway: StartGateway,
) -> None:
    loaded = load_agents(str(APPS), "scripted", default="artifacts_app")
    host = AgentHost(loaded.agents["artifacts_app"], MemorySessionService(), max_llm_calls=10,
                     app_name="artifacts_app", artifact_service=BrokenArtifacts())
    client = await gateway(settings(), host=host)
    chat = Conversation(client)
    failed = await chat.send("Write a report")
    assert failed.status == 200 and failed.finish_reason == "stop"
    # The store's own words stay in the log; the client (and the model) get a general message and
    # an id to quote.
    [error] = failed.of_type("tool-output-error")
    assert error["errorText"].startswith("The tool failed. (error err-")
    assert "bucket" not in json.dumps(failed.chunks)
    assert not failed.of_type("file")
    after = await chat.send("hello")
    assert after.status == 200 and after.finish_reason == "stop"


# --- sign-ins ------------------------------------------------------------------------------------------


async def sign_in_turn(client: TestClient[Any, Any], **headers: str) -> tuple[Conversation, dict[str, Any]]:
    chat = in_app(Conversation(client), "sign_in_app")
    chat.headers.update(headers)
    reply = await chat.send(CALENDAR)
    assert reply.finish_reason == "tool-calls", reply.chunks
    [asked] = chat.tool_parts("adk_request_credential")
    return chat, asked


async def follow(url: str, **headers: str) -> tuple[int, str]:
    """What the popup does: opens the URL and follows its redirects to the gateway's callback."""
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def test_a_sign_in_goes_through_the_gateways_callback_once(gateway: StartGateway, oauth_env: OAuthServer) -> None:
    client = await gateway(apps_settings())
    chat, asked = await sign_in_turn(client)
    auth_uri = asked["input"]["authUri"]
    assert dict(parse_qsl(urlsplit(auth_uri).query))["redirect_uri"].endswith("/api/oauth/callback")
    status, page = await follow(auth_uri)
    assert status == 200 and '"ok": true' in page and "adk-gateway:oauth" in page
    # The same callback again (a reused state): refused, and the sign-in it completed stands.
    status, page = await follow(auth_uri)
    assert status == 400 and "used already" in page
    before = len(oauth_env.token_requests)
    chat.add_output(chat.part(asked["toolCallId"]), {"signedIn": True})
    reply = await chat.continue_()
    assert reply.finish_reason == "stop"
    assert reply.text == "You have 2 events today: Standup at 09:00, Design review at 14:00."
    assert len(oauth_env.token_requests) == before + 1


async def test_a_forged_or_foreign_state_completes_nothing(gateway: StartGateway, oauth_env: OAuthServer) -> None:
    client = await gateway(apps_settings())
    async with client.get("/api/oauth/callback?code=abc&state=not-a-state") as response:
        assert response.status == 400
        assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
    async with client.get("/api/oauth/callback?code=abc") as response:
        assert response.status == 400
    # A state issued by another gateway (another secret) is forged here too.
    other = await gateway(apps_settings(url_signing_secret="another-secret-" + "x" * 32))
    _, asked = await sign_in_turn(other)
    state = dict(parse_qsl(urlsplit(asked["input"]["authUri"]).query))["state"]
    async with client.get(f"/api/oauth/callback?code=abc&state={state}") as response:
        assert response.status == 400


async def test_another_users_callback_is_refused(gateway: StartGateway, oauth_env: OAuthServer) -> None:
    client = await gateway(apps_settings(auth="jwt", auth_jwt_secret=SECRET))
    chat, asked = await sign_in_turn(client, **bearer("alice"))
    state = dict(parse_qsl(urlsplit(asked["input"]["authUri"]).query))["state"]
    async with client.get(f"/api/oauth/callback?code=abc&state={state}", headers=bearer("bob")) as response:
        assert response.status == 403
    # alice's own (a popup: no credential) still completes it.
    status, page = await follow(asked["input"]["authUri"])
    assert status == 200 and '"ok": true' in page
    # bob cannot answer her sign-in in her chat.
    bobs = chat.fork()
    bobs.headers.update(bearer("bob"))
    bobs.add_output(bobs.part(asked["toolCallId"]), {"signedIn": True})
    assert (await bobs.continue_()).status in (403, 409)


async def test_a_client_cannot_hand_adk_its_own_redirect_or_token(
    gateway: StartGateway, oauth_env: OAuthServer
) -> None:
    # The client answers the sign-in without the callback ever having been reached, with a response
    # of its own: the gateway builds what ADK gets, so the tool still lacks its credential.
    client = await gateway(apps_settings())
    chat, asked = await sign_in_turn(client)
    before = len(oauth_env.token_requests)
    chat.add_output(chat.part(asked["toolCallId"]), {
        "authResponseUri": "https://attacker.test/cb?code=stolen&state=x", "accessToken": "forged-token"})
    reply = await chat.continue_()
    assert reply.status == 200
    [failed] = [c for c in reply.of_type("tool-output-error") if c["toolCallId"] == asked["input"]["toolCallId"]]
    assert "sign-in" in failed["errorText"].lower()
    assert reply.text == "I could not sign in to your calendar. Please try again."
    assert len(oauth_env.token_requests) == before  # no exchange of anything the client sent


async def test_a_failing_token_exchange_ends_the_tool_with_an_error_and_the_chat_goes_on(
    gateway: StartGateway, oauth_env: OAuthServer
) -> None:
    client = await gateway(apps_settings())
    chat, asked = await sign_in_turn(client)
    oauth_env.token_status = 400
    status, _ = await follow(asked["input"]["authUri"])
    assert status == 200
    chat.add_output(chat.part(asked["toolCallId"]), {"signedIn": True})
    reply = await chat.continue_()
    assert reply.status == 200 and reply.finish_reason == "stop"
    assert [c["errorText"] for c in reply.of_type("tool-output-error")] == [
        "The sign-in did not complete; the tool could not run."]
    oauth_env.token_status = 200
    after = await chat.send("hello")
    assert after.status == 200
