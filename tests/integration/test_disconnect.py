"""A client that goes away stops its run at once: nothing left running, no tool after it."""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.sessions import InMemorySessionService

from adk_gateway.agents.adk import AgentHost
from adk_gateway.keys import REGISTRY

from .conftest import StartGateway
from .support import (
    Conversation,
    LiveStream,
    ToolLog,
    chat_body,
    counting_agent,
    post_chat,
    settings,
    user_message,
    wait_for,
)

FREED_WITHIN_S = 1.0


def registry_empty(client: Any) -> bool:
    return client.app[REGISTRY].counts() == {"connections": 0, "runs": 0}


def leftover_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t not in baseline and t is not asyncio.current_task() and not t.done()}


async def counting_gateway(gateway: StartGateway, log: ToolLog, **overrides: Any) -> Any:
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    return await gateway(settings(**overrides), host=host)


async def test_disconnect_mid_stream_frees_everything_at_once(gateway: StartGateway) -> None:
    client = await gateway()
    # Warm up the connection pool and the agent, then take the baseline.
    await post_chat(client, chat_body("warm", [user_message("/echo warm")]))
    await wait_for(lambda: registry_empty(client), what="the warm-up run to end")
    baseline = set(asyncio.all_tasks())

    messages = [user_message("/stream 200 20")]
    stream = await LiveStream.open(client, chat_body("d1", messages))
    await stream.until(lambda c: c["type"] == "text-delta")
    await stream.take(3)
    assert client.app[REGISTRY].counts() == {"connections": 1, "runs": 1}
    stream.close()

    took = await wait_for(lambda: registry_empty(client), FREED_WITHIN_S, "the registry to be empty")
    assert took < FREED_WITHIN_S
    await wait_for(lambda: not leftover_tasks(baseline), FREED_WITHIN_S, "the run's tasks to end")
    # The chat answers the next message at once (the client posts what it kept of the answer).
    messages += [
        {"id": stream.reply.chunks[0]["messageId"], "role": "assistant",
         "parts": [{"type": "text", "text": stream.reply.text}]},
        user_message("/echo next"),
    ]
    reply = await post_chat(client, chat_body("d1", messages))
    assert reply.status == 200 and reply.text == "next"


async def test_disconnect_while_a_tool_runs_cancels_it(gateway: StartGateway) -> None:
    log = ToolLog(slow_s=5.0)
    client = await counting_gateway(gateway, log)
    await post_chat(client, chat_body("warm", [user_message("/echo warm")]))
    await wait_for(lambda: registry_empty(client), what="the warm-up run to end")
    baseline = set(asyncio.all_tasks())
    chat = Conversation(client, "d2")
    chat.messages.append(user_message("/tool slow {}\n/then\n/tool tick {}"))
    stream = await LiveStream.open(client, chat_body(chat.chat_id, chat.messages))
    await stream.until(lambda c: c["type"] == "tool-input-available")
    await wait_for(lambda: log.started.get("slow") == 1, what="the tool to start")
    stream.close()

    await wait_for(lambda: log.cancelled.get("slow") == 1, FREED_WITHIN_S, "the tool to be cancelled")
    await wait_for(lambda: registry_empty(client), FREED_WITHIN_S, "the registry to be empty")
    await wait_for(lambda: not leftover_tasks(baseline), FREED_WITHIN_S, "the run's tasks to end")
    assert log.count("slow") == 0 and log.count("tick") == 0  # neither finished nor ran later

    # Then the same chat answers the next message; the earlier tools stay unrun.
    chat.messages.append({"id": stream.reply.chunks[0]["messageId"], "role": "assistant", "parts": []})
    reply = await chat.send("/echo still there")
    assert reply.status == 200 and reply.text == "still there"
    assert log.count("slow") == 0 and log.count("tick") == 0
    assert log.started.get("slow") == 1


async def test_disconnect_between_steps_runs_no_later_step(gateway: StartGateway) -> None:
    log = ToolLog(slow_s=5.0)
    client = await counting_gateway(gateway, log)
    text = "/tool tick {}\n/then\n/tool slow {}\n/then\n/tool tick {}"
    stream = await LiveStream.open(client, chat_body("d3", [user_message(text)]))
    await stream.until(lambda c: c["type"] == "tool-output-available")
    assert log.count("tick") == 1
    stream.close()
    await wait_for(lambda: registry_empty(client), FREED_WITHIN_S, "the registry to be empty")
    # The second step may have begun (its tool started) but never finished, and no third step ran.
    assert log.count("slow") == 0
    assert log.started.get("slow", 0) == log.cancelled.get("slow", 0)
    assert log.count("tick") == 1


async def test_disconnect_while_waiting_for_the_grace_of_a_busy_chat(gateway: StartGateway) -> None:
    client = await gateway(settings(busy_grace_ms=300))
    first = await LiveStream.open(client, chat_body("d4", [user_message("/stream 200 20")]))
    await first.take(3)
    # The tab reloads: the old stream drops and the new POST comes at once; it waits, then runs.
    messages = [user_message("/stream 200 20"), user_message("/echo fresh")]
    pending = asyncio.ensure_future(post_chat(client, chat_body("d4", messages)))
    first.close()
    reply = await pending
    assert reply.status == 200 and reply.text == "fresh"
    await wait_for(lambda: registry_empty(client), FREED_WITHIN_S, "the registry to be empty")


async def test_detached_run_goes_on_and_is_stopped_by_the_stop_endpoint(gateway: StartGateway) -> None:
    log = ToolLog(slow_s=5.0)
    client = await counting_gateway(gateway, log, detach_on_disconnect=True)
    stream = await LiveStream.open(client, chat_body("d5", [user_message("/tool slow {}")]))
    await stream.until(lambda c: c["type"] == "tool-input-available")
    await wait_for(lambda: log.started.get("slow") == 1, what="the tool to start")
    stream.close()
    await wait_for(lambda: client.app[REGISTRY].counts()["connections"] == 0, FREED_WITHIN_S, "the connection")
    assert client.app[REGISTRY].counts()["runs"] == 1  # detached: still running
    assert log.cancelled.get("slow") is None
    async with client.post("/api/chat/d5/stop", json={}) as response:
        assert await response.json() == {"stopped": True}
    assert log.cancelled.get("slow") == 1 and log.count("slow") == 0
    assert registry_empty(client)
