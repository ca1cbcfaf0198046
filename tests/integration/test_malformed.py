"""Malformed requests get a JSON 4xx `{"error": {"code", "message"}}`, never a 500, and the gateway
keeps serving."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from adk_gateway.keys import REGISTRY

from .conftest import StartGateway
from .support import chat_body, post_chat, settings, user_message

GOOD = chat_body("good", [user_message("/echo ok")])
MAX_BODY = 2048


def msg(**fields: Any) -> dict[str, Any]:
    return {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}], **fields}


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("not json", b"{not json", "invalid_json"),
    ("empty body", b"", "invalid_json"),
    ("not utf-8", b'{"id": "\xff\xfe"}', "invalid_json"),
    ("json array", [GOOD], "invalid_body"),
    ("json string", "\"hello\"", "invalid_body"),
    ("json null", b"null", "invalid_body"),
    ("missing id", {"messages": [msg()]}, "invalid_body"),
    ("missing messages", {"id": "c"}, "invalid_body"),
    ("empty messages", {"id": "c", "messages": []}, "invalid_body"),
    ("id not a string", {"id": 5, "messages": [msg()]}, "invalid_body"),
    ("empty id", {"id": "", "messages": [msg()]}, "invalid_body"),
    ("id with a slash", {"id": "a/b", "messages": [msg()]}, "invalid_body"),
    ("messages not a list", {"id": "c", "messages": {"0": msg()}}, "invalid_body"),
    ("message not an object", {"id": "c", "messages": ["hi"]}, "invalid_body"),
    ("unknown trigger", {"id": "c", "messages": [msg()], "trigger": "resubmit"}, "invalid_body"),
    ("unknown role", {"id": "c", "messages": [msg(role="tool")]}, "invalid_body"),
    ("message without id", {"id": "c", "messages": [{"role": "user", "parts": []}]}, "invalid_body"),
    ("parts not a list", {"id": "c", "messages": [msg(parts="hi")]}, "invalid_body"),
    ("part without type", {"id": "c", "messages": [msg(parts=[{"text": "hi"}])]}, "invalid_body"),
    ("part type not a string", {"id": "c", "messages": [msg(parts=[{"type": 1}])]}, "invalid_body"),
    ("tool part with a bad state", {"id": "c", "messages": [msg(role="assistant", parts=[
        {"type": "tool-x", "toolCallId": "t1", "state": "exploded"}])]}, "invalid_body"),
    ("tool part without a call id", {"id": "c", "messages": [msg(role="assistant", parts=[
        {"type": "tool-x", "state": "input-available"}])]}, "invalid_body"),
    ("approval without an id", {"id": "c", "messages": [msg(role="assistant", parts=[
        {"type": "tool-x", "toolCallId": "t1", "state": "approval-responded", "approval": {"approved": True}}])]},
     "invalid_body"),
    ("messageId not a string", {"id": "c", "messages": [msg()], "messageId": 7}, "invalid_body"),
]


async def assert_still_serving(client: TestClient[Any, Any]) -> None:
    reply = await post_chat(client, GOOD)
    assert reply.status == 200 and reply.text == "ok" and reply.done
    assert client.app[REGISTRY].counts()["runs"] == 0


def assert_error_shape(reply: Any, status: int, code: str | None = None) -> None:
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers["content-type"].startswith("application/json")
    assert isinstance(reply.body, dict) and set(reply.body) == {"error"}, reply.body
    assert set(reply.body["error"]) == {"code", "message"}
    assert isinstance(reply.body["error"]["message"], str) and reply.body["error"]["message"]
    assert "Traceback" not in json.dumps(reply.body)
    if code is not None:
        assert reply.body["error"]["code"] == code


@pytest.mark.parametrize(("body", "code"), [(b, c) for _, b, c in BAD_BODIES], ids=[n for n, _, _ in BAD_BODIES])
async def test_bad_bodies_are_400(gateway: StartGateway, body: Any, code: str) -> None:
    client = await gateway(settings(max_body_bytes=MAX_BODY))
    payload = body if isinstance(body, bytes) else json.dumps(body)
    reply = await post_chat(client, payload, headers={"Content-Type": "application/json"})
    assert_error_shape(reply, 400, code)
    await assert_still_serving(client)


async def test_all_bad_bodies_in_a_row_then_a_good_one(gateway: StartGateway) -> None:
    client = await gateway(settings(max_body_bytes=MAX_BODY))
    for _, body, _ in BAD_BODIES:
        payload = body if isinstance(body, bytes) else json.dumps(body)
        reply = await post_chat(client, payload)
        assert 400 <= reply.status < 500
    await assert_still_serving(client)


async def test_validation_message_names_the_field(gateway: StartGateway) -> None:
    client = await gateway()
    reply = await post_chat(client, {"id": "c", "messages": [msg(role="tool")]})
    assert_error_shape(reply, 400, "invalid_body")
    assert "messages.0.role" in reply.body["error"]["message"]  # type: ignore[index]


async def test_oversized_body_is_413(gateway: StartGateway) -> None:
    client = await gateway(settings(max_body_bytes=MAX_BODY))
    big = chat_body("big", [user_message("/echo " + "x" * (MAX_BODY * 4))])
    reply = await post_chat(client, big)
    assert_error_shape(reply, 413, "payload_too_large")
    await assert_still_serving(client)


async def test_oversized_chunked_body_is_413(gateway: StartGateway) -> None:
    client = await gateway(settings(max_body_bytes=MAX_BODY))
    payload = json.dumps(chat_body("big", [user_message("/echo " + "y" * (MAX_BODY * 4))])).encode()

    async def pieces() -> Any:  # no Content-Length: the limit is enforced while reading
        for start in range(0, len(payload), 512):
            yield payload[start : start + 512]

    async with client.post("/api/chat", data=pieces(), headers={"Content-Type": "application/json"}) as response:
        assert response.status == 413
        body = await response.json()
    assert body["error"]["code"] == "payload_too_large"
    await assert_still_serving(client)


async def test_just_under_the_limit_is_served(gateway: StartGateway) -> None:
    client = await gateway(settings(max_body_bytes=MAX_BODY))
    body = chat_body("fits", [user_message("/echo hi")])
    padding = MAX_BODY - len(json.dumps(body)) - 20
    body["pad"] = "z" * padding
    assert len(json.dumps(body)) <= MAX_BODY
    reply = await post_chat(client, body)
    assert reply.status == 200 and reply.text == "hi"


async def test_script_errors_are_an_error_chunk_not_a_500(gateway: StartGateway) -> None:
    client = await gateway()
    reply = await post_chat(client, chat_body("s", [user_message("/tool broken {not json")]))
    assert reply.status == 200
    assert reply.types[-1] == "error" and reply.done
    [error] = reply.of_type("error")
    assert "\n" not in error["errorText"] and "not JSON" in error["errorText"]
    await assert_still_serving(client)


async def test_last_message_from_system_is_400(gateway: StartGateway) -> None:
    client = await gateway()
    reply = await post_chat(client, chat_body("sys", [msg(role="system")]))
    assert_error_shape(reply, 400)
    await assert_still_serving(client)


async def test_continuation_of_an_unknown_chat_is_refused(gateway: StartGateway) -> None:
    client = await gateway()
    assistant = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]}
    reply = await post_chat(client, chat_body("nobody", [user_message("hi"), assistant], messageId="a1"))
    assert_error_shape(reply, 409, "continuation_refused")
    await assert_still_serving(client)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_wrong_method_is_a_json_405(gateway: StartGateway, method: str) -> None:
    client = await gateway()
    async with client.request(method, "/api/chat") as response:
        assert response.status == 405
        body = await response.json()
    assert set(body["error"]) == {"code", "message"}
    await assert_still_serving(client)
