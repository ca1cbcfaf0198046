"""Chats kept on the server (issue 33), with the real AI SDK clients: what `GET /api/chats/{id}`
gives back is the chat the client held after streaming it (the same message ids, parts, states and
details, message-level metadata aside), whatever the chat held — text, reasoning, an image, tools
approved, denied, run in the browser, a pending approval, sources, an artifact — and a client can
go on from it; requests that carry only the last message (the AI SDK's persistence pattern) run
on the server's history, continue, regenerate and edit.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.e2e.support import assert_clean, problems, run_scenario, text_of, tool_parts

pytestmark = pytest.mark.e2e

KINDS = ["sse6", "sse7", "ws", "ws6"]
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
WHERE = {"get_location": {"output": {"latitude": 48.85, "longitude": 2.35}}}


def scenario(url: str, kind: str, *steps: dict[str, Any], **options: Any) -> dict[str, Any]:
    headers = {"x-ai-sdk-major": "7"} if kind in ("sse7", "ws") else {}
    return run_scenario({"kind": kind, "baseUrl": url, "headers": headers, "includeChunks": False,
                         **options, "steps": [*steps, {"type": "waitIdle"}, load("loaded")]})


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def load(name: str, client: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "http", "method": "GET", "path": "/api/chats/{chatId}", "name": name,
                            "noDefaultHeaders": True}
    return {**step, "client": client} if client else step


def loaded(result: dict[str, Any], name: str = "loaded") -> dict[str, Any]:
    [answer] = [h for h in result["http"] if h["name"] == name]
    assert answer["status"] == 200, answer
    body: dict[str, Any] = answer["body"]
    return body


def without_message_metadata(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as compared: message-level metadata may differ (the client merges usage over a
    continuation's responses); everything else must not."""
    return [{key: value for key, value in message.items() if key != "metadata"} for message in messages]


def assert_same_chat(result: dict[str, Any], name: str = "loaded") -> dict[str, Any]:
    assert_clean(result)
    body = loaded(result, name)
    held = json.loads(json.dumps(result["messages"]))
    assert without_message_metadata(body["messages"]) == without_message_metadata(held), (
        json.dumps(body["messages"], indent=1)[:3000] + "\n---\n" + json.dumps(held, indent=1)[:3000])
    return body


CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "text": ([send("/echo hello there"), send("/stream 5")], {}),
    "reasoning": ([send("/think a deep thought")], {}),
    "image": ([send("/image")], {}),
    "approved": ([send(PAYMENT), {"type": "approve", "approved": True}], {}),
    "denied": ([send(PAYMENT), {"type": "approve", "approved": False}], {}),
    "browser tool": ([send("/tool get_location {}"), {"type": "approve", "approved": True}],
                     {"browserTools": {"get_location": {"output": {"latitude": 48.85, "longitude": 2.35}}}}),
    "pending approval": ([send(PAYMENT)], {}),
}


@pytest.mark.parametrize("last_message", [False, True], ids=["full-history", "last-message"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_chat_is_the_chat_the_client_held(gateway_url: str, kind: str, case: str, last_message: bool) -> None:
    steps, options = CASES[case]
    result = scenario(gateway_url, kind, *steps, lastMessage=last_message, **options)
    body = assert_same_chat(result)
    assert body["title"] == " ".join(text_of(result["messages"][0]).split())[:80]
    assert body["app"] == "demo_agent"
    if last_message:
        sends = [r for r in result["requests"] if r["kind"] in ("post", "ws-send")]
        assert sends and all(r["lastMessageOnly"] for r in sends), problems(result)
        if kind in ("ws", "ws6"):
            assert all(r["messageCount"] == 1 for r in sends), problems(result)


@pytest.mark.parametrize("case", ["sources", "artifact"])
@pytest.mark.parametrize("kind", KINDS)
def test_sources_and_artifacts_load_as_they_were_streamed(apps_url: str, kind: str, case: str) -> None:
    app, text = {"sources": ("grounding_app", "What is the capital of France?"),
                 "artifact": ("artifacts_app", "Write a report and draw a chart")}[case]
    result = scenario(apps_url, kind, send(text), body={"app": app}, lastMessage=True)
    body = assert_same_chat(result)
    kinds = {part["type"] for part in body["messages"][1]["parts"]}
    assert ({"source-url", "source-document", "data-search-suggestions"} if case == "sources" else {"file"}) <= kinds


@pytest.mark.parametrize("kind", KINDS)
def test_a_pending_approval_loaded_elsewhere_is_answered_there(gateway_url: str, kind: str) -> None:
    # Another device opens the chat from the server while it waits for an approval, approves it,
    # and the stock automatic resend continues the message: one request, the tool runs.
    result = run_scenario({
        "kind": kind, "baseUrl": gateway_url, "headers": {"x-ai-sdk-major": "7"} if kind in ("sse7", "ws") else {},
        "lastMessage": True, "peers": {"b": {"messagesFrom": "http:pending"}},
        "steps": [send(PAYMENT), {"type": "waitIdle"}, load("pending"),
                  {"type": "approve", "approved": True, "client": "b"}, {"type": "waitIdle", "client": "b"},
                  load("after", client="b")],
    })
    assert_clean(result)
    pending = loaded(result, "pending")["messages"][-1]
    [asked] = tool_parts(pending, "process_payment")
    assert asked["state"] == "approval-requested" and asked["approval"]["id"].startswith("apr-")
    peer = result["peers"]["b"]
    assert len(peer["requests"]) == 1 and peer["requests"][0]["lastMessageRole"] == "assistant", problems(peer)
    [paid] = tool_parts(peer["messages"][-1], "process_payment")
    assert paid["state"] == "output-available" and paid["output"]["status"] == "completed"
    after = next(h for h in peer["http"] if h["name"] == "after")["body"]
    assert without_message_metadata(after["messages"]) == without_message_metadata(peer["messages"])


@pytest.mark.parametrize("kind", KINDS)
def test_last_message_requests_regenerate_and_edit_on_the_servers_history(gateway_url: str, kind: str) -> None:
    result = run_scenario({
        "kind": kind, "baseUrl": gateway_url, "headers": {"x-ai-sdk-major": "7"} if kind in ("sse7", "ws") else {},
        "lastMessage": True,
        "steps": [send("/echo one"), send("/echo two"), {"type": "regenerate"}, {"type": "waitIdle"},
                  load("loaded")],
    })
    body = assert_same_chat(result)
    assert [text_of(m) for m in body["messages"]] == ["/echo one", "one", "/echo two", "two"]
    regenerate = [r for r in result["requests"] if r.get("trigger") == "regenerate-message"]
    assert len(regenerate) == 1 and regenerate[0]["lastMessageOnly"], problems(result)


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{url}/api/chat", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            response.read()
            return response.status, {}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_an_old_message_sent_again_is_refused_and_changes_nothing(gateway_url: str) -> None:
    result = scenario(gateway_url, "sse7", send("/echo one"), send("/echo two"), lastMessage=True)
    body = assert_same_chat(result)
    first = result["messages"][0]
    status, error = post(gateway_url, {"id": result["chatId"], "message": first})
    assert (status, error["error"]["code"]) == (409, "continuation_refused")
    status, error = post(gateway_url, {"id": result["chatId"], "message": result["messages"][1]})
    assert (status, error["error"]["code"]) == (409, "continuation_refused")  # an earlier answer
    with urllib.request.urlopen(f"{gateway_url}/api/chats/{result['chatId']}", timeout=10) as response:
        assert json.loads(response.read())["messages"] == body["messages"]
