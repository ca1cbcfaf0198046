"""The SSE transport on a real socket: framing, keep-alives, one run per chat, stop, resume,
regenerate, history import and the model-call cap."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_gateway.agents.adk import AgentHost
from adk_gateway.keys import HOST, REGISTRY

from .conftest import StartGateway
from .support import (
    Conversation,
    LiveStream,
    ToolLog,
    chat_body,
    counting_agent,
    new_id,
    post_chat,
    settings,
    user_message,
    wait_for,
)


def assert_well_formed(reply: Any) -> None:
    assert reply.status == 200
    assert reply.types[0] == "start", reply.types
    assert reply.types[-1] in ("finish", "error"), reply.types
    assert reply.done, "no data: [DONE]"


# --- framing -----------------------------------------------------------------------------------


async def test_headers_chunks_and_done(gateway: StartGateway) -> None:
    client = await gateway()
    reply = await post_chat(client, chat_body("c1", [user_message("/echo hello world")]))
    assert reply.status == 200
    assert reply.headers["content-type"].split(";")[0] == "text/event-stream"
    assert reply.headers["cache-control"] == "no-cache"
    assert reply.headers["x-accel-buffering"] == "no"
    assert reply.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert reply.types == [
        "start", "start-step", "data-agent", "text-start", "text-delta", "text-delta", "text-end", "finish-step",
        "finish",
    ]
    assert reply.text == "hello world"
    assert reply.chunks[0]["messageId"].startswith("msg-")
    assert reply.finish_reason == "stop"
    assert reply.done


async def test_raw_bytes_are_data_lines_only(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.post("/api/chat", json=chat_body("raw", [user_message("/echo a\nb")])) as response:
        raw = await response.read()
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    for event in events[:-1]:
        assert b"\n" not in event, event  # one line per event
        assert event.startswith((b"data: ", b": ")), event
    assert not any(e.startswith((b"event:", b"id:")) for e in events)


async def test_keepalive_comments_on_an_idle_stream(gateway: StartGateway) -> None:
    client = await gateway(settings(keepalive_s=0.05))
    stream = await LiveStream.open(client, chat_body("idle", [user_message("/stream 3 300")]))
    reply = await stream.rest()
    assert_well_formed(reply)
    assert reply.text == "tok0 tok1 tok2 "
    assert reply.comments.count("keep-alive") >= 3, reply.comments
    # Keep-alives fill the gaps between deltas.
    deltas = [i for i, kind in enumerate(stream.order) if kind == "text-delta"]
    assert any(kind == "comment" for kind in stream.order[deltas[0] : deltas[-1]]), stream.order


async def test_no_keepalive_when_chunks_flow(gateway: StartGateway) -> None:
    client = await gateway(settings(keepalive_s=30))
    reply = await post_chat(client, chat_body("busy", [user_message("/stream 20")]))
    assert reply.comments == ["stream-open"]


# --- continuation ------------------------------------------------------------------------------


async def test_continuation_start_reuses_the_assistant_message_id(gateway: StartGateway) -> None:
    client = await gateway()
    chat = Conversation(client)
    first = await chat.send('/tool process_payment {"amount": 5, "recipient": "bob"}')
    assert first.finish_reason == "tool-calls"
    assistant_id = chat.assistant["id"]
    assert assistant_id == first.chunks[0]["messageId"]
    second = await chat.approve()
    assert second.status == 200
    assert second.chunks[0]["type"] == "start"
    assert second.chunks[0].get("messageId") in (None, assistant_id)
    assert chat.assistant["id"] == assistant_id
    assert len(chat.messages) == 2
    assert "process_payment -> " in second.text


# --- one run per chat ----------------------------------------------------------------------------


async def test_second_post_for_a_busy_chat_gets_409_after_the_grace(gateway: StartGateway) -> None:
    client = await gateway(settings(busy_grace_ms=200))
    first = await LiveStream.open(client, chat_body("busy", [user_message("/stream 50 50")]))
    await first.until(lambda c: c["type"] == "text-delta")
    started = time.monotonic()
    second = await post_chat(client, chat_body("busy", [user_message("/echo me too")]))
    waited = time.monotonic() - started
    assert second.status == 409
    assert second.error_code == "chat_busy"
    assert set(second.body["error"]) == {"code", "message"}  # type: ignore[index]
    assert waited >= 0.2 - 0.01, waited
    # Another chat is not affected.
    other = await post_chat(client, chat_body("other", [user_message("/echo free")]))
    assert other.text == "free"
    # The first stream is intact and finishes.
    reply = await first.rest()
    assert_well_formed(reply)
    assert reply.text == "".join(f"tok{i} " for i in range(50))


async def test_post_right_after_a_stop_succeeds(gateway: StartGateway) -> None:
    client = await gateway()
    chat_id = "stopper"
    messages = [user_message("/stream 200 20")]
    first = await LiveStream.open(client, chat_body(chat_id, messages))
    await first.take(4)
    messages += [{"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "tok0"}]},
                 user_message("/echo after stop")]
    # The stop and the next message race, as they do from a browser: either order works.
    stopped, after = await asyncio.gather(
        _json(client.post(f"/api/chat/{chat_id}/stop", json={})), post_chat(client, chat_body(chat_id, messages))
    )
    assert stopped == {"stopped": True}  # only the stop ends the first run (it streams for 4 s)
    assert after.status == 200, after.body
    assert after.text == "after stop"
    reply = await first.rest()
    assert reply.types[-1] == "abort" and reply.done
    assert "finish" not in reply.types


async def test_post_while_the_run_is_stopping_waits_for_it(gateway: StartGateway) -> None:
    log = ToolLog(slow_s=10.0, cancel_cleanup_s=0.3)
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(busy_grace_ms=0), host=host)  # no grace: only the stop is waited for
    messages = [user_message("/tool slow {}")]
    first = await LiveStream.open(client, chat_body("stopping", messages))
    await first.until(lambda c: c["type"] == "tool-input-available")
    await wait_for(lambda: log.started.get("slow") == 1, what="the tool to start")
    stop = asyncio.ensure_future(_json(client.post("/api/chat/stopping/stop", json={})))
    await wait_for(lambda: log.cancelling.get("slow") == 1, what="the stop to begin")
    assert client.app[REGISTRY].counts()["runs"] == 1  # still stopping
    messages += [{"id": "a1", "role": "assistant", "parts": []}, user_message("/echo next")]
    after = await post_chat(client, chat_body("stopping", messages))
    assert after.status == 200, after.body
    assert after.text == "next"
    assert log.cancelled.get("slow") == 1  # the new run began only once the old one had ended
    assert await stop == {"stopped": True}
    assert log.count("slow") == 0
    await first.rest()


async def _json(request: Any) -> Any:
    async with request as response:
        assert response.status == 200
        return await response.json()


async def test_stop_endpoint(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.post("/api/chat/nothing-here/stop", json={}) as response:
        assert response.status == 200
        assert await response.json() == {"stopped": False}
    stream = await LiveStream.open(client, chat_body("s1", [user_message("/stream 200 20")]))
    await stream.take(3)
    async with client.post("/api/chat/s1/stop", json={}) as response:
        assert await response.json() == {"stopped": True}
    reply = await stream.rest()
    assert reply.types[-1] == "abort"
    assert reply.done
    assert len(reply.of_type("text-delta")) < 200
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, 1.0, "the run to end")
    # A stop only reaches the user's own chat.
    stream = await LiveStream.open(client, chat_body("s2", [user_message("/stream 30 20")]))
    await stream.take(3)
    async with client.post("/api/chat/s2/stop", json={}, headers={"x-user-id": "mallory"}) as response:
        assert await response.json() == {"stopped": False}
    reply = await stream.rest()
    assert reply.finish_reason == "stop"


# --- resume ----------------------------------------------------------------------------------------


async def test_resume_with_nothing_active_is_204(gateway: StartGateway) -> None:
    client = await gateway()
    async with client.get("/api/chat/never-used/stream") as response:
        assert response.status == 204
        assert await response.read() == b""
    await post_chat(client, chat_body("done-chat", [user_message("/echo hi")]))
    async with client.get("/api/chat/done-chat/stream") as response:
        assert response.status == 204  # finished and delivered: nothing to resume


async def test_resume_replays_an_active_stream_from_the_first_chunk(gateway: StartGateway) -> None:
    client = await gateway(settings(detach_on_disconnect=True))
    original = await LiveStream.open(client, chat_body("r1", [user_message("/stream 40 20")]))
    seen = await original.take(6)
    original.close()  # the tab goes away; in detach mode the run goes on
    resumed = await LiveStream.open(client, {}, method="GET", path="/api/chat/r1/stream")
    assert resumed.response.status == 200
    assert resumed.reply.headers["content-type"].startswith("text/event-stream")
    reply = await resumed.rest()
    assert reply.chunks[: len(seen)] == seen  # a full replay, same message id
    assert reply.chunks[0] == {"type": "start", "messageId": seen[0]["messageId"]}
    assert reply.text == "".join(f"tok{i} " for i in range(40))
    assert reply.finish_reason == "stop" and reply.done
    async with client.get("/api/chat/r1/stream") as response:
        assert response.status == 204


async def test_resume_while_the_first_client_still_reads(gateway: StartGateway) -> None:
    client = await gateway()
    original = await LiveStream.open(client, chat_body("r2", [user_message("/stream 20 20")]))
    await original.take(5)
    resumed = await LiveStream.open(client, {}, method="GET", path="/api/chat/r2/stream")
    first_reply, second_reply = await asyncio.gather(original.rest(), resumed.rest())
    assert second_reply.chunks == first_reply.chunks
    assert second_reply.done and first_reply.done


async def test_resume_is_per_user(gateway: StartGateway) -> None:
    client = await gateway()
    original = await LiveStream.open(client, chat_body("r3", [user_message("/stream 20 20")]))
    await original.take(3)
    async with client.get("/api/chat/r3/stream", headers={"x-user-id": "someone-else"}) as response:
        assert response.status == 204
    await original.rest()


# --- regenerate and history import -----------------------------------------------------------------


def model_texts(session: Any) -> list[str]:
    out = []
    for event in session.events:
        if event.author != "user" and event.content and event.content.role == "model":
            text = "".join(p.text or "" for p in event.content.parts or [] if p.text and not p.thought)
            if text:
                out.append(text)
    return out


def user_texts(session: Any) -> list[str]:
    return [
        "".join(p.text or "" for p in e.content.parts or [] if p.text)
        for e in session.events
        if e.author == "user" and e.content and any(p.text for p in e.content.parts or [])
    ]


async def test_regenerate_replaces_the_last_answer(gateway: StartGateway) -> None:
    client = await gateway()
    u1, u2 = user_message("/echo one"), user_message("/echo two")
    first = await post_chat(client, chat_body("regen", [u1]))
    a1 = {"id": first.chunks[0]["messageId"], "role": "assistant", "parts": [{"type": "text", "text": "one"}]}
    second = await post_chat(client, chat_body("regen", [u1, a1, u2]))
    assert second.text == "two"
    host = client.app[HOST]
    session = await host.get_session("anonymous", "regen")
    assert user_texts(session) == ["/echo one", "/echo two"]
    assert model_texts(session) == ["one", "two"]
    # regenerate(): the last assistant message is dropped from the history.
    again = await post_chat(client, chat_body("regen", [u1, a1, u2], trigger="regenerate-message"))
    assert again.status == 200 and again.text == "two"
    assert again.chunks[0]["messageId"] != second.chunks[0]["messageId"]
    session = await host.get_session("anonymous", "regen")
    assert user_texts(session) == ["/echo one", "/echo two"]  # not "/echo two" twice
    assert model_texts(session) == ["one", "two"]


async def test_an_unknown_chat_with_history_is_imported(gateway: StartGateway) -> None:
    seen: list[list[types.Content]] = []

    def capture(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        seen.append(list(llm_request.contents))

    host = AgentHost(counting_agent(ToolLog(), before_model_callback=capture), InMemorySessionService(),
                     max_llm_calls=25)
    client = await gateway(settings(), host=host)
    history = [
        user_message("/echo first question"),
        {
            "id": "old-assistant",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "tool-tick", "toolCallId": "call-old", "state": "output-available", "input": {},
                 "output": {"ticks": 41}, "providerExecuted": True},
                {"type": "text", "text": "first answer", "state": "done"},
            ],
        },
        user_message("/echo second question"),
    ]
    chat_id = new_id("imported")
    reply = await post_chat(client, chat_body(chat_id, history))
    assert reply.status == 200
    assert reply.text == "second question"
    contents = seen[-1]
    flat = [(c.role, p.text, p.function_call.name if p.function_call else None,
             dict(p.function_response.response or {}) if p.function_response else None)
            for c in contents for p in c.parts or []]
    assert ("user", "/echo first question", None, None) in flat
    assert ("model", None, "tick", None) in flat
    assert ("user", None, None, {"ticks": 41}) in flat
    assert ("model", "first answer", None, None) in flat
    assert flat[-1] == ("user", "/echo second question", None, None)
    session = await host.get_session("anonymous", chat_id)
    assert user_texts(session) == ["/echo first question", "/echo second question"]
    assert model_texts(session) == ["first answer", "second question"]


# --- the model-call cap ------------------------------------------------------------------------------


async def test_llm_call_cap_ends_with_finish(gateway: StartGateway) -> None:
    client = await gateway(settings(max_llm_calls=25))
    lines = ['/tool get_weather {"location": "Oslo"}']
    for _ in range(30):
        lines += ["/then", '/tool get_weather {"location": "Oslo"}']
    reply = await post_chat(client, chat_body("cap", [user_message("\n".join(lines))]))
    assert reply.status == 200
    assert reply.types[-1] == "finish", reply.types[-5:]
    assert reply.finish_reason == "length"
    assert reply.done
    assert len(reply.of_type("tool-output-available")) == 25
    assert reply.types.count("start-step") == reply.types.count("finish-step") == 25
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, 1.0, "the run to end")
    # The chat still answers.
    again = await post_chat(client, chat_body("cap", [user_message("/echo still here")]))
    assert again.text == "still here"
