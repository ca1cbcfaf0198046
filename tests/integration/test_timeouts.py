"""Timeouts, and what a stop or a failure keeps.

A model call that hangs ends its run with an `error` chunk at `--model-timeout-s` and the chat
answers again; a server tool past `--tool-timeout-s` becomes the call's error result and the run
goes on; a stop waits at most `--cancel-timeout-s` for a tool that ignores its cancellation; a
session store that does not answer within `--store-timeout-s` is a 503 before the stream and an
`error` chunk inside a run. A stopped run saves its approval book, so an approval its client
already received stays answerable; `memory://` drops the least recently used chats, never one
that is running.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp.test_utils import TestClient
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools.function_tool import FunctionTool

from adk_gateway.agents.adk import AgentHost, MemorySessionService
from adk_gateway.keys import HOST, METRICS, REGISTRY

from .conftest import StartGateway
from .support import (
    Conversation,
    LiveStream,
    ToolLog,
    apply_chunks,
    chat_body,
    counting_agent,
    new_id,
    post_chat,
    settings,
    user_message,
    wait_for,
)

MODEL_TIMEOUT_S = 0.5
TOOL_TIMEOUT_S = 0.3
CANCEL_TIMEOUT_S = 0.3
STORE_TIMEOUT_S = 0.3


def metric(client: TestClient[Any, Any], name: str, **labels: str) -> float:
    return client.app[METRICS].registry.get_sample_value(name, labels) or 0.0


def last_user_text(llm_request: LlmRequest) -> str:
    for content in reversed(llm_request.contents or []):
        texts = [p.text for p in content.parts or () if p.text]
        if content.role == "user" and texts:
            return "".join(texts)
    return ""


async def hang_on_request(callback_context: Any, llm_request: LlmRequest) -> None:
    """A model that never answers a message starting with /hang (as a stuck provider would)."""
    if last_user_text(llm_request).startswith("/hang"):
        await asyncio.Event().wait()


async def assert_idle(client: TestClient[Any, Any]) -> None:
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, what="every run to end")


# --- model calls ----------------------------------------------------------------------------------


async def test_a_hanging_model_ends_with_an_error_chunk_then_the_chat_answers_again(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog(), before_model_callback=hang_on_request), InMemorySessionService(),
                     max_llm_calls=25)
    client = await gateway(settings(model_timeout_s=MODEL_TIMEOUT_S), host=host)
    chat = Conversation(client)
    started = time.monotonic()
    hung = await chat.send("/hang please")
    waited = time.monotonic() - started
    assert hung.status == 200 and hung.done
    assert hung.types[-1] == "error", hung.types
    assert hung.chunks[-1]["errorText"] == f"The model did not answer within {MODEL_TIMEOUT_S:g} s."
    assert waited >= MODEL_TIMEOUT_S * 0.9  # not before the bound
    assert metric(client, "adk_gateway_timeouts_total", kind="model") == 1
    await assert_idle(client)
    again = await chat.send("/echo I am back")
    assert again.status == 200 and again.text == "I am back" and again.finish_reason == "stop"
    assert metric(client, "adk_gateway_runs_finished_total", outcome="timeout") == 1


async def test_the_bound_is_per_model_call(gateway: StartGateway) -> None:
    """A run whose model calls each end inside the bound is not cut, however long its tools take
    in between; a call that streams for longer than the bound is."""
    log = ToolLog(slow_s=MODEL_TIMEOUT_S * 0.8)
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(model_timeout_s=MODEL_TIMEOUT_S), host=host)
    steady = await post_chat(client, chat_body("steady", [user_message("/tool slow\n/then\n/tool slow")]))
    assert steady.status == 200 and steady.finish_reason == "stop", steady.types
    assert log.count("slow") == 2  # 0.8 s of tools, three quick model calls
    streaming = await post_chat(client, chat_body("streaming", [user_message("/stream 4 50")]))  # 0.2 s
    assert streaming.finish_reason == "stop"
    assert metric(client, "adk_gateway_timeouts_total", kind="model") == 0
    too_long = await post_chat(client, chat_body("too-long", [user_message("/stream 100 20")]))  # 2 s
    assert too_long.types[-1] == "error" and "did not answer" in too_long.chunks[-1]["errorText"]
    assert 0 < len(too_long.of_type("text-delta")) < 100
    assert metric(client, "adk_gateway_timeouts_total", kind="model") == 1


async def test_a_hanging_model_over_a_socket_ends_that_request_only(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog(), before_model_callback=hang_on_request), InMemorySessionService(),
                     max_llm_calls=25)
    client = await gateway(settings(model_timeout_s=MODEL_TIMEOUT_S), host=host)

    def send(request_id: str, text: str) -> dict[str, Any]:
        return {"type": "send", "requestId": request_id, "id": new_id("ws"), "trigger": "submit-message",
                "messages": [user_message(text)], "headers": {}, "body": {}}

    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json(send("hangs", "/hang"))
        await ws.send_json(send("streams", "/stream 4 50"))
        frames: list[dict[str, Any]] = []
        async with asyncio.timeout(10):
            while sum(f["type"] == "end" for f in frames) < 2:
                frames.append(json.loads((await ws.receive()).data))
    hung = [f["chunk"] for f in frames if f["type"] == "chunk" and f["requestId"] == "hangs"]
    assert hung[-1]["type"] == "error" and "did not answer" in hung[-1]["errorText"]
    streamed = [f["chunk"] for f in frames if f["type"] == "chunk" and f["requestId"] == "streams"]
    assert streamed[-1]["type"] == "finish"


# --- tool calls -----------------------------------------------------------------------------------


async def test_a_tool_past_its_timeout_is_an_error_result_and_the_run_goes_on(gateway: StartGateway) -> None:
    log = ToolLog(slow_s=30.0)
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(tool_timeout_s=TOOL_TIMEOUT_S), host=host)
    reply = await post_chat(client, chat_body("slow", [user_message("/tool slow\n/tool tick")]))
    assert reply.status == 200 and reply.finish_reason == "stop", reply.types
    [failed] = reply.of_type("tool-output-error")
    assert failed["errorText"] == f"The tool slow did not finish within {TOOL_TIMEOUT_S:g} s."
    [ticked] = reply.of_type("tool-output-available")  # the call beside it still ran
    assert ticked["output"] == {"ticks": 1}
    # The model heard the failure and answered.
    assert f'slow -> {{"error":"The tool slow did not finish within {TOOL_TIMEOUT_S:g} s."}}' in reply.text
    assert log.cancelled.get("slow") == 1 and log.count("slow") == 0  # cancelled, never finished
    assert metric(client, "adk_gateway_timeouts_total", kind="tool") == 1
    await assert_idle(client)


class Stubborn:
    """A tool that ignores cancellation until the test lets it go."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.ignored = 0
        self.ended = False

    async def stubborn(self) -> dict[str, Any]:
        """Works until it is told to stop, whatever happens."""
        self.started.set()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.ignored += 1
        self.ended = True
        return {"done": True}


async def test_a_stop_waits_at_most_the_cancel_timeout_for_a_tool_that_ignores_it(gateway: StartGateway) -> None:
    tool = Stubborn()
    agent = LlmAgent(name="stubborn_agent", model="scripted", instruction="Test.",
                     tools=[FunctionTool(tool.stubborn)])
    host = AgentHost(agent, InMemorySessionService(), max_llm_calls=5)
    client = await gateway(settings(cancel_timeout_s=CANCEL_TIMEOUT_S), host=host)
    messages = [user_message("/tool stubborn")]
    stream = await LiveStream.open(client, chat_body("stuck", messages))
    await stream.until(lambda c: c["type"] == "tool-input-available")
    await asyncio.wait_for(tool.started.wait(), 5)
    try:
        async with asyncio.timeout(5):  # without the bound the stop would wait for ever
            async with client.post("/api/chat/stuck/stop", json={}) as response:
                assert await response.json() == {"stopped": True}
        reply = await stream.rest()
        assert reply.types[-1] == "abort" and reply.done
        assert tool.ignored >= 1 and not tool.ended
        assert metric(client, "adk_gateway_timeouts_total", kind="cancel") == 1
        await assert_idle(client)
        # The chat is free again, although the tool has still not ended.
        messages += [{"id": "a1", "role": "assistant", "parts": []}, user_message("/echo next")]
        after = await post_chat(client, chat_body("stuck", messages))
        assert after.status == 200 and after.text == "next"
    finally:
        tool.release.set()
    await wait_for(lambda: tool.ended and not host.bounds.abandoned, what="the abandoned tool to end")


# --- the session store ----------------------------------------------------------------------------


class SlowStore(InMemorySessionService):
    """A store that stops answering: reads of chats named `stuck-*`, and writes of model answers
    to chats named `slow-write-*`."""

    async def get_session(self, **kwargs: Any) -> Session | None:
        if str(kwargs.get("session_id", "")).startswith("stuck-"):
            await asyncio.Event().wait()
        return await super().get_session(**kwargs)

    async def append_event(self, session: Session, event: Event) -> Event:
        model_answer = event.content is not None and event.content.role == "model" and not event.partial
        if session.id.startswith("slow-write-") and model_answer:
            await asyncio.Event().wait()
        return await super().append_event(session, event)


async def test_a_store_that_does_not_answer_before_the_stream_is_a_503(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog()), SlowStore(), max_llm_calls=25)
    client = await gateway(settings(store_timeout_s=STORE_TIMEOUT_S), host=host)
    reply = await post_chat(client, chat_body("stuck-1", [user_message("/echo never")]))
    assert reply.status == 503 and reply.error_code == "store_unavailable"
    assert reply.headers["retry-after"] == "1"
    assert metric(client, "adk_gateway_timeouts_total", kind="store") == 1
    fine = await post_chat(client, chat_body("fine", [user_message("/echo fine")]))
    assert fine.status == 200 and fine.text == "fine"
    async with client.ws_connect("/api/chat/ws") as ws:
        await ws.send_json({"type": "send", "requestId": "r1", "id": "stuck-2", "trigger": "submit-message",
                            "messages": [user_message("/echo never")], "headers": {}, "body": {}})
        async with asyncio.timeout(5):
            error = json.loads((await ws.receive()).data)
        assert error == {**error, "type": "error", "requestId": "r1", "code": "store_unavailable"}
    await assert_idle(client)


async def test_a_store_that_stops_answering_inside_a_run_is_an_error_chunk(gateway: StartGateway) -> None:
    host = AgentHost(counting_agent(ToolLog()), SlowStore(), max_llm_calls=25)
    client = await gateway(settings(store_timeout_s=STORE_TIMEOUT_S), host=host)
    reply = await post_chat(client, chat_body("slow-write-1", [user_message("/echo lost")]))
    assert reply.status == 200 and reply.done
    assert reply.types[-1] == "error", reply.types
    assert reply.chunks[-1]["errorText"] == "The session store did not answer in time; try again."
    assert metric(client, "adk_gateway_timeouts_total", kind="store") >= 1
    await assert_idle(client)


# --- what a stop keeps ----------------------------------------------------------------------------


async def test_an_approval_sent_before_a_stop_stays_answerable(gateway: StartGateway) -> None:
    """One step asks for a browser tool (approval first) and runs a slow server tool; the client
    has the approval when the run is stopped. Answering it afterwards is accepted (it was a 403)."""
    log = ToolLog(slow_s=30.0)
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(), host=host)
    chat = Conversation(client)
    text = '/tool show_card {"title": "hello"}\n/tool slow'
    chat.messages.append(user_message(text))
    stream = await LiveStream.open(client, chat_body(chat.chat_id, chat.messages))
    request = await stream.until(lambda c: c["type"] == "tool-approval-request")
    await wait_for(lambda: log.started.get("slow") == 1, what="the slow tool to start")
    async with client.post(f"/api/chat/{chat.chat_id}/stop", json={}) as response:
        assert await response.json() == {"stopped": True}
    reply = await stream.rest()
    assert reply.types[-1] == "abort" and reply.done
    assistant: dict[str, Any] = {"id": new_id("asst"), "role": "assistant", "parts": []}
    apply_chunks(assistant, reply.chunks)
    chat.messages.append(assistant)
    [pending] = chat.pending_approvals()
    assert pending["approval"]["id"] == request["approvalId"]
    answered = await chat.approve(True)
    assert answered.status == 200, (answered.status, answered.body)
    [run_now] = answered.of_type("tool-input-available")
    assert run_now["toolCallId"] == request["toolCallId"]  # the browser may run the tool now
    assert answered.finish_reason == "tool-calls"


# --- memory:// eviction ---------------------------------------------------------------------------


async def test_memory_chats_past_the_cap_are_evicted_but_never_a_running_one(gateway: StartGateway) -> None:
    client = await gateway(settings(memory_max_chats=2))
    store = client.app[HOST].store
    assert isinstance(store, MemorySessionService)
    running = await LiveStream.open(client, chat_body("running", [user_message("/stream 40 25")]))
    await running.take(2)
    for name in ("one", "two", "three"):
        reply = await post_chat(client, chat_body(name, [user_message(f"/echo {name}")]))
        assert reply.text == name
    kept = {session_id for users in store.sessions.values() for chats in users.values() for session_id in chats}
    assert kept == {"running", "three"}
    assert metric(client, "adk_gateway_memory_evictions_total", reason="lru") == 2
    finished = await running.rest()
    assert finished.finish_reason == "stop"  # its session was there for every write
