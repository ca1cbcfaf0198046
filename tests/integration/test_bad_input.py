"""Bad input never becomes a 5xx or a silent close.

Deep JSON is a 400 `invalid_json` over HTTP and an `error` frame over WebSocket (the socket keeps
answering); invalid UTF-8 in a text frame closes with 1007; an unexpected failure inside one
WebSocket request ends that request only; a history past `--max-history-messages` is a 413, and a
long history is refused or imported while other streams go on (the turns it gives the event loop
are counted in test_floods, its longest stall is a figure of `make bench`); tool error text is
scrubbed like model error text.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from google.adk.agents import LlmAgent
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools.function_tool import FunctionTool

from adk_gateway.agents.adk import AgentHost
from adk_gateway.keys import METRICS, REGISTRY

from .conftest import StartGateway
from .support import (
    LiveStream,
    ToolLog,
    chat_body,
    counting_agent,
    long_history,
    post_chat,
    settings,
    user_message,
    wait_for,
)

Frame = dict[str, Any]
WAIT_S = 5.0

DEEP_ARRAY = "[" * 5_000 + "]" * 5_000
# The history cap of the long-history tests. Each model call makes ADK walk the whole session on the loop
# (its in-memory store deep-copies it, the request builder copies every event), about 45 us per
# message on a 2-core test machine: 1,000 messages come close to 50 ms, 500 stay well under.
HISTORY_CAP = 500


def metric(client: TestClient[Any, Any], name: str, **labels: str) -> float:
    value = client.app[METRICS].registry.get_sample_value(name, labels)
    return value or 0.0


def send_frame(request_id: str, chat_id: str, messages: list[Frame], **extra: Any) -> Frame:
    return {"type": "send", "requestId": request_id, "id": chat_id, "trigger": "submit-message",
            "messages": messages, "headers": {}, "body": {}, **extra}


async def frames_until(ws: aiohttp.ClientWebSocketResponse, done: Callable[[list[Frame]], bool]) -> list[Frame]:
    frames: list[Frame] = []
    async with asyncio.timeout(WAIT_S):
        while not done(frames):
            message = await ws.receive()
            assert message.type is WSMsgType.TEXT, message
            frames.append(json.loads(message.data))
    return frames


def ended(request_id: str) -> Callable[[list[Frame]], bool]:
    return lambda frames: any(f.get("requestId") == request_id and f["type"] in ("end", "error") for f in frames)


async def echo_works(ws: aiohttp.ClientWebSocketResponse) -> None:
    rid = f"ok-{uuid.uuid4().hex[:6]}"
    await ws.send_json(send_frame(rid, f"chat-{rid}", [user_message("/echo still here")]))
    frames = await frames_until(ws, ended(rid))
    assert frames[-1] == {"type": "end", "requestId": rid}, frames[-1]
    text = "".join(f["chunk"]["delta"] for f in frames if f["type"] == "chunk" and f["chunk"]["type"] == "text-delta")
    assert text == "still here"


async def assert_still_serving(client: TestClient[Any, Any]) -> None:
    reply = await post_chat(client, chat_body(f"ok-{uuid.uuid4().hex[:6]}", [user_message("/echo ok")]))
    assert reply.status == 200 and reply.text == "ok" and reply.done


# --- deep and malformed JSON ------------------------------------------------------------------------


async def test_five_thousand_nested_arrays_are_a_400_not_a_500(gateway: StartGateway) -> None:
    client = await gateway()
    for body in (DEEP_ARRAY, '{"id": "c", "messages": ' + DEEP_ARRAY + "}", '{"a":' * 5_000 + "1" + "}" * 5_000):
        reply = await post_chat(client, body.encode(), headers={"Content-Type": "application/json"})
        assert reply.status == 400, (reply.status, reply.body)
        assert reply.error_code == "invalid_json"
        assert "nested" in reply.body["error"]["message"]  # type: ignore[index]
    assert metric(client, "adk_gateway_request_errors_total", code="invalid_json") == 3
    await assert_still_serving(client)


async def test_depth_limit_is_the_configured_one(gateway: StartGateway) -> None:
    client = await gateway(settings(max_json_depth=16))

    def body_with_extra(depth: int) -> dict[str, Any]:
        extra: Any = 1
        for _ in range(depth - 1):  # the body object itself is the first level
            extra = [extra]
        return chat_body(f"d{depth}", [user_message("/echo deep enough")], extra=extra)

    fits = await post_chat(client, body_with_extra(16))
    assert fits.status == 200 and fits.text == "deep enough"
    too_deep = await post_chat(client, body_with_extra(17))
    assert too_deep.status == 400 and too_deep.error_code == "invalid_json"


async def test_a_deep_frame_gets_an_error_and_the_socket_answers_the_next_send(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_str(DEEP_ARRAY)
        [error] = await frames_until(ws, lambda frames: len(frames) == 1)
        assert error["type"] == "error" and error["code"] == "invalid_json"
        assert "nested" in error["errorText"]
        # Deep inside an otherwise good frame: refused the same way, with nothing started.
        deep_body = send_frame("deep", "chat-deep", [user_message("/echo no")], body={"x": json.loads("[" * 100 + "]"
                                                                                                       * 100)})
        await ws.send_json(deep_body)
        [error] = await frames_until(ws, lambda frames: len(frames) == 1)
        assert error["type"] == "error" and error["code"] == "invalid_json"
        assert client.app[REGISTRY].counts()["runs"] == 0
        await echo_works(ws)
        assert not ws.closed


async def test_invalid_utf8_in_a_text_frame_closes_with_1007(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.ws_connect("/api/chat/ws") as other:
        async with client.ws_connect("/api/chat/ws") as ws:
            await ws.send_frame(b'{"type": "send", "x": "\xff\xfe"}', WSMsgType.TEXT)
            async with asyncio.timeout(WAIT_S):
                message = await ws.receive()
            assert message.type is WSMsgType.CLOSE, message
            assert message.data == 1007  # WSCloseCode.INVALID_TEXT
        await echo_works(other)  # another socket never notices
    await wait_for(lambda: client.app[REGISTRY].counts() == {"connections": 0, "runs": 0}, what="cleanup")


# --- one request fails, the socket carries on -------------------------------------------------------


class FailingStore(InMemorySessionService):
    """A session store that fails for one chat (a broken row, a driver bug)."""

    async def get_session(self, **kwargs: Any) -> Session | None:
        if kwargs.get("session_id") == "broken":
            raise RuntimeError("disk on fire at /var/lib/gateway/sessions.db")
        return await super().get_session(**kwargs)


async def test_a_store_failure_ends_only_its_own_request_on_a_shared_socket(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog()), FailingStore(), max_llm_calls=25)
    client = await gateway(host=host)
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send_frame("long", "fine", [user_message("/stream 30 20")]))
        frames = await frames_until(ws, lambda new: any(f["type"] == "chunk" for f in new))
        await ws.send_json(send_frame("doomed", "broken", [user_message("/echo never")]))
        frames += await frames_until(ws, ended("doomed"))
        [error] = [f for f in frames if f.get("requestId") == "doomed"]
        assert error["type"] == "error" and error["code"] == "internal_error"
        assert "/var/lib" not in error["errorText"]
        # The other request on the socket goes on to its end, and the socket takes new ones.
        frames += await frames_until(ws, ended("long"))
        long = [f for f in frames if f.get("requestId") == "long"]
        assert long[-1] == {"type": "end", "requestId": "long"}
        assert [f["sequence"] for f in long if f["type"] == "chunk"] == list(range(len(long) - 2))
        await echo_works(ws)
    assert metric(client, "adk_gateway_request_errors_total", code="internal_error") == 1
    await wait_for(lambda: client.app[REGISTRY].counts() == {"connections": 0, "runs": 0}, what="cleanup")


async def test_a_store_failure_over_http_is_a_json_500_without_detail(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog()), FailingStore(), max_llm_calls=25)
    client = await gateway(host=host)
    reply = await post_chat(client, chat_body("broken", [user_message("/echo never")]))
    assert reply.status == 500 and reply.error_code == "internal_error", reply
    assert "/var/lib" not in json.dumps(reply.body)
    fine = await post_chat(client, chat_body("fine", [user_message("/echo still here")]))
    assert fine.status == 200 and fine.text == "still here"


# --- history size -----------------------------------------------------------------------------------


async def test_a_history_past_the_cap_is_413(gateway: StartGateway) -> None:
    client = await gateway(settings(max_history_messages=5))
    at_cap = await post_chat(client, chat_body("five", long_history(5)))
    assert at_cap.status == 200 and at_cap.text == "the end"
    past = await post_chat(client, chat_body("six", long_history(6)))
    assert past.status == 413 and past.error_code == "history_too_long"
    assert "6 messages" in past.body["error"]["message"]  # type: ignore[index]
    await assert_still_serving(client)


async def test_a_history_past_the_cap_over_a_socket_is_an_error_frame(gateway: StartGateway) -> None:
    client = await gateway(settings(max_history_messages=5))
    async with client.ws_connect("/api/chat/ws") as ws:
        for index in range(12):  # not counted as bad frames: the socket is never closed for it
            await ws.send_json(send_frame(f"long-{index}", "six", long_history(6)))
            [error] = await frames_until(ws, lambda frames: len(frames) == 1)
            assert error == {**error, "type": "error", "requestId": f"long-{index}", "code": "history_too_long"}
        await echo_works(ws)


async def open_streams(client: TestClient[Any, Any], count: int) -> list[LiveStream]:
    streams = [await LiveStream.open(client, chat_body(f"bg-{i}", [user_message("/stream 100000 100")]))
               for i in range(count)]
    for stream in streams:
        await stream.take(2)
    return streams


async def close_streams(client: TestClient[Any, Any], streams: list[LiveStream]) -> None:
    for stream in streams:
        await stream.take(2)  # still streaming after the long request
        stream.close()
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, what="the streams to stop")


async def test_ten_thousand_messages_past_the_cap_are_refused_while_other_streams_go_on(gateway: StartGateway) -> None:
    """10,000 messages with regenerate while 50 streams run, past the cap: a 413, and the streams go
    on. (That the 1 MiB body is read, parsed and counted a slice at a time is counted in
    test_floods; the longest stall it causes is a figure of `make bench`.)"""
    client = await gateway(settings(max_history_messages=HISTORY_CAP, max_runs_per_user=100))
    streams = await open_streams(client, 50)
    body = json.dumps(chat_body("huge", long_history(10_000), trigger="regenerate-message")).encode()
    reply = await post_chat(client, body, headers={"Content-Type": "application/json"})
    assert reply.status == 413 and reply.error_code == "history_too_long"
    await close_streams(client, streams)


async def test_a_history_at_the_cap_is_imported_while_other_streams_go_on(gateway: StartGateway) -> None:
    """A history at the cap with regenerate while 50 streams run: imported and answered, and the
    streams go on (the import's turns given to the loop are counted in test_floods)."""
    client = await gateway(settings(max_history_messages=HISTORY_CAP, max_runs_per_user=100))
    streams = await open_streams(client, 50)
    body = json.dumps(chat_body("long", long_history(HISTORY_CAP), trigger="regenerate-message")).encode()
    reply = await post_chat(client, body, headers={"Content-Type": "application/json"})
    assert reply.status == 200 and reply.text == "the end", (reply.status, reply.body)
    await close_streams(client, streams)


# --- tool error text --------------------------------------------------------------------------------


async def test_tool_error_text_is_scrubbed_like_model_errors(gateway: StartGateway) -> None:
    async def leaky() -> dict[str, Any]:
        """Fails, saying too much."""
        return {"error": "boom at /srv/app/secrets/db.py line 3\nTraceback (most recent call last): ..."}

    async def wordy() -> dict[str, Any]:
        """Fails at length."""
        return {"error": "x" * 5_000}

    agent = LlmAgent(name="leaky_agent", model="scripted", instruction="Test.",
                     tools=[FunctionTool(leaky), FunctionTool(wordy)])
    client = await gateway(host=AgentHost(agent, InMemorySessionService(), max_llm_calls=5))
    reply = await post_chat(client, chat_body("leak", [user_message("/tool leaky\n/tool wordy")]))
    assert reply.status == 200 and reply.finish_reason == "stop"
    first, second = reply.of_type("tool-output-error")
    assert first["errorText"] == "boom at … line 3"
    assert len(second["errorText"]) <= 300 and "\n" not in second["errorText"]
