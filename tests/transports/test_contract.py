"""The transport contract: the same scenarios over SSE, the WebSocket and memory.

Each scenario is written once against the driver of `conftest.make_gateway` and asserts the chunks
a client receives — their types in order and their key fields — which the contract makes the same
whatever carries them. Each driver checks its own transport's framing as it reads (see
`drivers`). The demo agent (CONTRACT.md, "The demo agent") on the scripted model answers, except
where a tool must be slow enough to be stopped: there the counting agent of the integration
tests does.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from google.adk.sessions import InMemorySessionService

from adk_gateway.agents.adk import AgentHost
from tests.integration.support import (
    Conversation,
    Reply,
    ToolLog,
    counting_agent,
    new_id,
    settings,
    user_message,
    wait_for,
)

from .conftest import MakeGateway
from .drivers import Gateway, Stream

PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
LOCATION = "/tool get_location {}"
WHERE = {"city": "Oslo", "latitude": 59.91, "longitude": 10.75}
FREED_WITHIN_S = 1.0

# What a server tool that needs approval answers first: its call, the question, and the wait.
ASKED = [
    "start", "start-step", "data-agent", "tool-input-start", "tool-input-delta", "tool-input-available",
    "tool-approval-request", "finish-step", "finish",
]


def compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def conversation(gateway: Gateway, major: int = 6) -> Conversation:
    return Conversation(None, new_id("chat"), major=major, exchange=gateway.exchange)


def lines_of(reply: Reply, name: str) -> list[str]:
    return [line for line in reply.text.splitlines() if line.startswith(f"{name} -> ")]


def registry_empty(gateway: Gateway) -> bool:
    return gateway.registry.counts() == {"connections": 0, "runs": 0}


async def counting_gateway(make_gateway: MakeGateway, log: ToolLog, **overrides: Any) -> Gateway:
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    return await make_gateway(settings(**overrides), host=host)


async def slow_tool_started(gateway: Gateway, log: ToolLog, chat_id: str) -> Stream:
    """A stream whose first step's tool (`slow`) is running; a second step would call `tick`."""
    stream = await gateway.open(chat_id, [user_message("/tool slow {}\n/then\n/tool tick {}")])
    announced = await stream.until(lambda c: c["type"] == "tool-input-available")
    assert announced["toolName"] == "slow" and announced["providerExecuted"] is True
    await wait_for(lambda: log.started.get("slow") == 1, what="the tool to start")
    return stream


# --- answers -------------------------------------------------------------------------------------


async def test_echo(make_gateway: MakeGateway) -> None:
    gateway = await make_gateway()
    stream = await gateway.open(new_id("echo"), [user_message("/echo hello there world")])
    reply = await stream.rest()
    assert reply.types == [
        "start", "start-step", "data-agent", "text-start", "text-delta", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]
    assert [c["delta"] for c in reply.of_type("text-delta")] == ["hello ", "there ", "world"]
    assert reply.chunks[0]["messageId"].startswith("msg-")
    [text_start] = reply.of_type("text-start")
    assert {c["id"] for c in reply.chunks if c["type"].startswith("text-")} == {text_start["id"]}
    assert reply.finish_reason == "stop" and reply.done


async def test_stream(make_gateway: MakeGateway) -> None:
    gateway = await make_gateway()
    stream = await gateway.open(new_id("stream"), [user_message("/stream 40")])
    reply = await stream.rest()
    assert reply.types == ["start", "start-step", "data-agent", "text-start", *["text-delta"] * 40, "text-end",
                           "finish-step", "finish"]
    assert reply.text == "".join(f"tok{i} " for i in range(40))
    assert reply.finish_reason == "stop" and reply.done


# --- approvals -----------------------------------------------------------------------------------


async def test_approval_approved(make_gateway: MakeGateway) -> None:
    chat = conversation(await make_gateway())
    asked = await chat.send(PAYMENT)
    assert asked.types == ASKED
    assert asked.finish_reason == "tool-calls" and asked.done
    [call] = asked.of_type("tool-input-available")
    [request] = asked.of_type("tool-approval-request")
    assert call["toolName"] == "process_payment" and call["providerExecuted"] is True
    assert call["input"] == {"amount": 5, "recipient": "bob"}
    assert request["toolCallId"] == call["toolCallId"] and request["approvalId"].startswith("apr-")

    answered = await chat.approve(True)
    assert answered.types[:2] == ["start", "tool-output-available"]  # the result before the first step
    assert answered.types[-2:] == ["finish-step", "finish"] and answered.finish_reason == "stop"
    assert answered.chunks[0].get("messageId") in (None, asked.chunks[0]["messageId"])
    [output] = answered.of_type("tool-output-available")
    assert output["toolCallId"] == call["toolCallId"]
    assert output["output"]["status"] == "completed" and output["output"]["recipient"] == "bob"
    assert lines_of(answered, "process_payment") == [f"process_payment -> {compact(output['output'])}"]
    assert chat.tool_parts("process_payment")[0]["state"] == "output-available"


async def test_approval_denied(make_gateway: MakeGateway) -> None:
    chat = conversation(await make_gateway())
    asked = await chat.send(PAYMENT)
    [call] = asked.of_type("tool-input-available")
    answered = await chat.approve(False, reason="not now")
    assert answered.types[:2] == ["start", "tool-output-denied"]
    assert answered.chunks[1]["toolCallId"] == call["toolCallId"]
    assert "tool-output-available" not in answered.types
    assert answered.finish_reason == "stop" and answered.done
    assert lines_of(answered, "process_payment") == ['process_payment -> {"error":"This tool call is rejected."}']
    assert chat.tool_parts("process_payment")[0]["state"] == "output-denied"


async def test_browser_tool(make_gateway: MakeGateway) -> None:
    """`get_location` runs in the browser, after approval: asked, approved (re-announced to run),
    then its output goes to the agent."""
    chat = conversation(await make_gateway())
    asked = await chat.send(LOCATION)
    assert asked.types == ASKED
    [call] = asked.of_type("tool-input-available")
    assert call["toolName"] == "get_location" and "providerExecuted" not in call
    assert asked.finish_reason == "tool-calls"

    go = await chat.approve(True)
    assert go.types == ["start", "tool-input-available", "finish"]
    assert go.chunks[1]["toolCallId"] == call["toolCallId"] and "providerExecuted" not in go.chunks[1]
    assert go.finish_reason == "tool-calls"

    [part] = chat.tool_parts("get_location")
    chat.add_output(part, WHERE)
    done = await chat.continue_()
    assert done.status == 200 and done.finish_reason == "stop" and done.done
    assert "tool-input-available" not in done.types
    assert lines_of(done, "get_location") == [f"get_location -> {compact(WHERE)}"]


async def test_deny_and_stop(make_gateway: MakeGateway) -> None:
    """No model call after "deny and stop": the turn ends with the denial; `interrupted` for ai 7."""
    gateway = await make_gateway()
    for major, reason in ((7, "interrupted"), (6, "stop")):
        chat = conversation(gateway, major=major)
        asked = await chat.send(PAYMENT)
        [request] = asked.of_type("tool-approval-request")
        stopped = await chat.approve(False, reason="stop")
        assert stopped.types == ["start", "tool-output-denied", "finish"], major
        assert stopped.chunks[1]["toolCallId"] == request["toolCallId"]
        assert stopped.finish_reason == reason and stopped.done
        after = await chat.send("/echo next")  # the chat goes on with the next message
        assert after.text == "next" and after.finish_reason == "stop"


# --- a second client, a stop, a client that leaves -----------------------------------------------


async def test_resume_follows_a_running_stream_from_its_first_chunk(make_gateway: MakeGateway) -> None:
    gateway = await make_gateway()
    chat_id = new_id("resume")
    first = await gateway.open(chat_id, [user_message("/stream 30 10")])
    await first.take(5)
    second = await gateway.resume(chat_id)
    assert second is not None
    first_reply, second_reply = await first.rest(), await second.rest()
    assert second_reply.chunks == first_reply.chunks  # the whole answer, from `start`
    assert second_reply.text == "".join(f"tok{i} " for i in range(30))
    assert first_reply.done and second_reply.done
    # Delivered in full: nothing to resume any more.
    assert await gateway.resume(chat_id) is None
    assert await gateway.resume(new_id("never")) is None


async def test_stop_ends_the_run_and_no_tool_runs_after_it(make_gateway: MakeGateway) -> None:
    log = ToolLog(slow_s=5.0)
    gateway = await counting_gateway(make_gateway, log)
    chat_id = new_id("stop")
    stream = await slow_tool_started(gateway, log, chat_id)
    await stream.stop()
    reply = await stream.rest()
    assert reply.types[-1] == "abort" and reply.done
    assert reply.types[:4] == ["start", "start-step", "data-agent", "tool-input-start"]
    assert "tool-output-available" not in reply.types and "finish" not in reply.types
    assert log.cancelled.get("slow") == 1
    assert log.count("slow") == 0 and log.count("tick") == 0  # neither finished nor ran later
    await wait_for(lambda: gateway.registry.counts()["runs"] == 0, FREED_WITHIN_S, "the run to end")
    # The chat takes the next message at once.
    messages = [user_message("/tool slow {}"), {"id": reply.chunks[0]["messageId"], "role": "assistant", "parts": []},
                user_message("/echo after the stop")]
    after = await (await gateway.open(chat_id, messages)).rest()
    assert after.text == "after the stop" and after.finish_reason == "stop"
    assert log.count("tick") == 0


async def test_disconnect_stops_the_run_and_frees_everything(make_gateway: MakeGateway) -> None:
    log = ToolLog(slow_s=5.0)
    gateway = await counting_gateway(make_gateway, log)
    # Warm up (the agent's first run, the client's first connection), then take the baseline.
    await (await gateway.open(new_id("warm"), [user_message("/echo warm")])).rest()
    await wait_for(lambda: registry_empty(gateway), what="the warm-up to end")
    baseline = asyncio.all_tasks()
    chat_id = new_id("gone")
    stream = await slow_tool_started(gateway, log, chat_id)
    assert gateway.registry.counts()["runs"] == 1
    await stream.disconnect()
    await wait_for(lambda: log.cancelled.get("slow") == 1, FREED_WITHIN_S, "the tool to be cancelled")
    await wait_for(lambda: registry_empty(gateway), FREED_WITHIN_S, "the registry to be empty")
    await wait_for(lambda: not asyncio.all_tasks() - baseline - {asyncio.current_task()}, FREED_WITHIN_S,
                   "the run's and the connection's tasks to end")
    assert gateway.registry.held()["runs"] == 0
    assert log.count("slow") == 0 and log.count("tick") == 0  # neither finished nor ran later
    # The chat answers the next message at once; the earlier tools stay unrun.
    messages = [user_message("/tool slow {}\n/then\n/tool tick {}"),
                {"id": stream.chunks[0]["messageId"], "role": "assistant", "parts": []}, user_message("/echo back")]
    after = await (await gateway.open(chat_id, messages)).rest()
    assert after.text == "back" and after.finish_reason == "stop"
    assert log.count("tick") == 0


async def test_idle_stream_gets_keepalives(make_gateway: MakeGateway) -> None:
    gateway = await make_gateway(settings(keepalive_s=0.05, ws_heartbeat_s=0.05))
    stream = await gateway.open(new_id("idle"), [user_message("/stream 3 150")])
    reply = await stream.rest()
    assert reply.types == ["start", "start-step", "data-agent", "text-start", "text-delta", "text-delta", "text-delta",
                           "text-end", "finish-step", "finish"]
    assert reply.text == "tok0 tok1 tok2 " and reply.done
    assert stream.keepalives >= 2, stream.keepalives


async def test_no_keepalive_while_chunks_flow(make_gateway: MakeGateway) -> None:
    gateway = await make_gateway()  # the default interval (15 s, a 25 s heartbeat) is far longer
    stream = await gateway.open(new_id("busy"), [user_message("/stream 20")])
    await stream.rest()
    assert stream.keepalives == 0


async def test_a_busy_chat_is_refused_before_any_chunk(make_gateway: MakeGateway, transport: str) -> None:
    """One run per chat: a second request while the first streams gets `chat_busy` (409 over
    HTTP, an `error` frame over the WebSocket), and the first stream goes on intact."""
    gateway = await make_gateway(settings(busy_grace_ms=20))
    chat_id = new_id("busy")
    first = await gateway.open(chat_id, [user_message("/stream 30 10")])
    await first.take(3)
    refused = await gateway.exchange({"id": chat_id, "messages": [user_message("/echo me too")],
                                      "trigger": "submit-message"}, {})
    assert refused.error_code == "chat_busy" and not refused.chunks
    assert refused.status == (0 if transport == "ws" else 409)  # the driver's status of an `error` frame: 0
    reply = await first.rest()
    assert reply.text == "".join(f"tok{i} " for i in range(30)) and reply.finish_reason == "stop"
