"""What a real ADK agent's features become for the real AI SDK clients (issue 32).

One gateway serves tests/adk_apps, an agents folder of seven small apps written the way ADK's own
samples write them, on an offline model that streams as Gemini does through ADK (partials, then a
final response repeating usage and grounding): grounding (`google_search`), artifacts
(`tool_context.save_artifact`), a `LongRunningFunctionTool`, a transfer to a sub-agent and a
`SequentialAgent`, shared state (`tool_context.state`, shown with `--client-state cart`), and a
tool that needs the user's sign-in (`tool_context.request_credential`, against a local OAuth2
server). Each scenario runs with `ai` 6 and 7, over SSE and the WebSocket; the driver validates
every chunk with the client's own schema and counts the requests of each turn.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.e2e.support import assert_clean, problems, run_scenario, text_of, tool_parts
from tests.oauth_server import OAuthServer

pytestmark = pytest.mark.e2e

KINDS = ["sse6", "sse7", "ws", "ws6"]
SIGN_IN = {"adk_request_credential": {"visit": "authUri", "output": {"signedIn": True}, "needsApproval": False}}


def scenario(url: str, kind: str, app: str, *steps: dict[str, Any], **options: Any) -> dict[str, Any]:
    headers = {"x-ai-sdk-major": "7"} if kind in ("sse7", "ws") else {}
    return run_scenario({"kind": kind, "baseUrl": url, "headers": headers, "body": {"app": app},
                         "includeChunks": True, **options, "steps": list(steps)})


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def answer_of(result: dict[str, Any], *, requests: int = 1) -> dict[str, Any]:
    """The chat's one answer, after exactly `requests` requests (a resend loop is a failure)."""
    assert_clean(result)
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"], problems(result)
    assert len(result["requests"]) == requests, problems(result)
    assert result["status"] == "ready", problems(result)
    message: dict[str, Any] = result["messages"][1]
    return message


def parts_of(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


def fetch(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("Content-Type", "")


@pytest.mark.parametrize("kind", KINDS)
def test_grounding_becomes_sources_and_search_suggestions(apps_url: str, kind: str) -> None:
    message = answer_of(scenario(apps_url, kind, "grounding_app", send("What is the capital of France?")))
    assert text_of(message) == "Paris is the capital of France."
    urls = [(p["url"], p.get("title")) for p in parts_of(message, "source-url")]
    assert urls == [("https://en.wikipedia.org/wiki/Paris", "wikipedia.org"),
                    ("https://www.britannica.com/place/Paris", "britannica.com")]
    [document] = parts_of(message, "source-document")
    assert (document["title"], document["mediaType"]) == ("france.pdf", "text/plain")
    [suggestions] = parts_of(message, "data-search-suggestions")
    assert "capital of France" in suggestions["data"]["html"]
    # Sources and suggestions belong to the step they were found in, once, with ids unique.
    types = [p["type"] for p in message["parts"]]
    assert types.count("step-start") == 1
    ids = [p["sourceId"] for p in message["parts"] if p["type"].startswith("source-")]
    assert len(ids) == len(set(ids)) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_the_message_reports_usage_once_per_model_call_the_model_and_when_it_began(
    apps_url: str, kind: str
) -> None:
    result = scenario(apps_url, kind, "grounding_app", send("What is the capital of France?"))
    message = answer_of(result)
    metadata = message["metadata"]
    # The model reports 14 tokens on its last streamed chunk and again on the final response.
    assert metadata["usage"] == {"inputTokens": 11, "outputTokens": 3, "totalTokens": 14}
    assert metadata["model"] == "gemini-2.5-flash-offline-001"
    assert metadata["agent"] == "search_agent"
    assert isinstance(metadata["createdAt"], int) and metadata["createdAt"] > 1_700_000_000_000


@pytest.mark.parametrize("kind", KINDS)
def test_artifacts_are_files_whose_signed_links_answer_with_their_bytes(apps_url: str, kind: str) -> None:
    message = answer_of(scenario(apps_url, kind, "artifacts_app", send("Write a report and draw a chart")))
    files = {p["mediaType"]: p["url"] for p in parts_of(message, "file")}
    assert set(files) == {"text/plain", "image/png"}
    status, body, media_type = fetch(files["text/plain"])
    assert (status, media_type) == (200, "text/plain") and body == b"Q3 sales\nRevenue: 42\nCosts: 17\n"
    status, body, media_type = fetch(files["image/png"])
    assert (status, media_type) == (200, "image/png") and body.startswith(b"\x89PNG")
    # The link is bound to its user, chat, name and version.
    link = urllib.parse.urlsplit(files["image/png"])
    query = dict(urllib.parse.parse_qsl(link.query))
    for changed in ({"user": "mallory"}, {"expires": str(int(query["expires"]) + 60)}, {"app": "state_app"}):
        assert fetch(urllib.parse.urlunsplit(link._replace(query=urllib.parse.urlencode({**query, **changed}))))[0] \
            == 403
    for path in (link.path.replace("chart.png", "report.txt"), link.path.replace("/versions/0", "/versions/1"),
                 link.path.replace(f"/chats/{result_chat(link.path)}/", "/chats/another-chat/")):
        assert fetch(urllib.parse.urlunsplit(link._replace(path=path)))[0] == 403


def result_chat(path: str) -> str:
    return path.split("/api/chats/", 1)[1].split("/", 1)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_running_tool_waits_for_the_apps_answer_and_the_agent_goes_on(apps_url: str, kind: str) -> None:
    result = scenario(apps_url, kind, "long_running_app", send("Please reimburse $250 for a team dinner"),
                      browserTools={"ask_for_approval": {"output": {"status": "approved"}, "needsApproval": False}})
    message = answer_of(result, requests=2)
    first = result["requests"][0]
    assert first["finishReason"] == "tool-calls"
    assert "tool-output-available" not in first["chunkTypes"]  # the interim result is not the tool's output
    # The call is in the message's last step, where the stock predicate looks for it.
    assert first["chunkTypes"][-5:] == ["tool-input-delta", "tool-input-available", "data-tool-status",
                                        "finish-step", "finish"]
    [status] = parts_of(message, "data-tool-status")
    assert status["data"]["output"]["status"] == "pending"
    [asked] = tool_parts(message, "ask_for_approval")
    assert asked["state"] == "output-available" and asked["output"] == {"status": "approved"}
    assert "providerExecuted" not in asked
    [paid] = tool_parts(message, "reimburse")
    assert paid["output"]["amount"] == 250
    assert text_of(message).endswith("Done: $250.00 reimbursed for a team dinner.")


@pytest.mark.parametrize("kind", KINDS)
def test_each_step_names_the_agent_that_speaks(apps_url: str, kind: str) -> None:
    message = answer_of(scenario(apps_url, kind, "transfer_app", send("What's the weather in Paris?")))
    assert [p["data"]["name"] for p in parts_of(message, "data-agent")] == ["coordinator", "weather"]
    assert message["metadata"]["agent"] == "weather"
    assert text_of(message).endswith("It is sunny and 22°C in Paris.")
    pipeline = answer_of(scenario(apps_url, kind, "sequential_app", send("Write a poem")))
    assert [p["data"]["name"] for p in parts_of(pipeline, "data-agent")] == ["writer", "reviewer"]
    assert text_of(pipeline) == "Roses are red, violets are blue.The draft rhymes. Approved."


@pytest.mark.parametrize("kind", KINDS)
def test_the_state_the_client_sees_and_sets(apps_url: str, kind: str) -> None:
    result = scenario(apps_url, kind, "state_app", send("add 2 apples"), send("add 3 pears"),
                      body={"app": "state_app", "state": {"cart": [{"item": "plums", "quantity": 1}]}})
    assert_clean(result)
    answers = [m for m in result["messages"] if m["role"] == "assistant"]
    [first] = parts_of(answers[0], "data-state")
    assert first == {"type": "data-state", "id": "state",
                     "data": {"cart": [{"item": "plums", "quantity": 1}, {"item": "apples", "quantity": 2}]}}
    [second] = parts_of(answers[1], "data-state")
    assert [entry["item"] for entry in second["data"]["cart"]] == ["plums", "pears"]  # the body's state, again
    assert not any("temp:" in str(part) or "summary" in str(part) for part in answers[0]["parts"]
                   if part["type"] == "data-state")


@pytest.mark.parametrize("kind", KINDS)
def test_a_tool_that_needs_the_users_sign_in(apps_url: str, kind: str, oauth: OAuthServer) -> None:
    before = len(oauth.token_requests)
    result = scenario(apps_url, kind, "sign_in_app", send("What is on my calendar today?"), browserTools=SIGN_IN)
    message = answer_of(result, requests=2)
    [asked] = tool_parts(message, "adk_request_credential")
    assert asked["state"] == "output-available" and "providerExecuted" not in asked
    auth_uri = urllib.parse.urlsplit(asked["input"]["authUri"])
    params = dict(urllib.parse.parse_qsl(auth_uri.query))
    assert params["redirect_uri"] == f"{apps_url}/api/oauth/callback"
    [visit] = [call for call in result["toolCalls"] if call["toolName"] == "adk_request_credential"]
    assert visit["visitStatus"] == 200 and "adk-gateway:oauth" in visit["visitBody"]
    # ADK exchanged the code the gateway's callback received, and the tool ran with the token.
    assert len(oauth.token_requests) == before + 1
    assert oauth.token_requests[-1]["form"]["redirect_uri"] == f"{apps_url}/api/oauth/callback"
    [tool] = tool_parts(message, "list_calendar_events")
    assert tool["state"] == "output-available" and tool["output"]["status"] == "success"
    assert text_of(message) == "You have 2 events today: Standup at 09:00, Design review at 14:00."
