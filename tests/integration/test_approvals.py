"""Approvals over HTTP, with continuation bodies built the way the AI SDK client builds them.

The counting agent's `guarded` tool needs approval through ADK's confirmation and counts its runs,
so every refusal can show that no tool ran; `show_card` is a browser tool that needs approval.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from google.adk.sessions import InMemorySessionService

from adk_gateway.agents.adk import AgentHost
from adk_gateway.agents.tools import APPROVALS_STATE_KEY
from adk_gateway.core.approval import INTERRUPT_TEXT
from adk_gateway.keys import HOST, REGISTRY

from .conftest import StartGateway
from .support import Conversation, Reply, ToolLog, counting_agent, settings

GUARDED = '/tool guarded {"item": "apple"}'
CARD = '/tool show_card {"title": "hello"}'
CARD_OUTPUT = {"shown": True, "title": "hello"}


def compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@pytest.fixture
def log() -> ToolLog:
    return ToolLog()


@pytest.fixture
async def client(gateway: StartGateway, log: ToolLog) -> TestClient[Any, Any]:
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    return await gateway(settings(), host=host)


def assert_refused(reply: Reply, status: int, code: str) -> None:
    assert reply.status == status, (reply.status, reply.body, reply.types)
    assert reply.body is not None and reply.body["error"]["code"] == code
    assert set(reply.body["error"]) == {"code", "message"}


def lines_of(reply: Reply, name: str) -> list[str]:
    return [line for line in reply.text.splitlines() if line.startswith(f"{name} -> ")]


async def session_events(client: TestClient[Any, Any], chat: Conversation, user: str = "anonymous") -> list[Any]:
    session = await client.app[HOST].get_session(user, chat.chat_id)
    assert session is not None
    return list(session.events)


# --- approve / deny ------------------------------------------------------------------------------


async def test_approve(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    first = await chat.send(GUARDED)
    assert first.types == [
        "start", "start-step", "data-agent", "tool-input-start", "tool-input-delta", "tool-input-available",
        "tool-approval-request", "finish-step", "finish",
    ]
    assert first.finish_reason == "tool-calls"
    [request] = first.of_type("tool-approval-request")
    [announced] = first.of_type("tool-input-available")
    assert request["toolCallId"] == announced["toolCallId"]
    assert announced["providerExecuted"] is True and announced["input"] == {"item": "apple"}
    assert request["approvalId"].startswith("apr-")
    assert log.count("guarded") == 0

    second = await chat.approve()
    assert second.status == 200
    assert second.types[:2] == ["start", "tool-output-available"]  # the result before the first step
    assert second.chunks[0].get("messageId") in (None, chat.assistant["id"])
    assert "tool-approval-request" not in second.types
    assert second.finish_reason == "stop"
    assert log.count("guarded") == 1
    [part] = chat.tool_parts("guarded")
    assert part["state"] == "output-available"
    assert part["output"] == {"done": "apple", "runs": 1}
    assert part["approval"]["approved"] is True
    assert lines_of(second, "guarded") == ['guarded -> {"done":"apple","runs":1}']


async def test_deny(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    await chat.send(GUARDED)
    reply = await chat.approve(False, reason="not now")
    assert reply.types[:2] == ["start", "tool-output-denied"]
    assert reply.finish_reason == "stop"
    [part] = chat.tool_parts("guarded")
    assert part["state"] == "output-denied"
    assert lines_of(reply, "guarded") == ['guarded -> {"error":"This tool call is rejected."}']
    assert log.count("guarded") == 0


async def test_mixed_in_one_step(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    first = await chat.send('/tool guarded {"item": "a"}\n/tool guarded {"item": "b"}')
    assert len(first.of_type("tool-approval-request")) == 2
    approvals = {r["approvalId"] for r in first.of_type("tool-approval-request")}
    assert len(approvals) == 2  # one id per call
    # The SDK only sends once every approval is answered: both answers travel in one POST.
    first_part, second_part = chat.pending_approvals()
    chat.answer(first_part, True)
    chat.answer(second_part, False)
    reply = await chat.continue_()
    assert reply.status == 200
    assert [p["state"] for p in chat.tool_parts("guarded")] == ["output-available", "output-denied"]
    assert log.count("guarded") == 1
    assert lines_of(reply, "guarded") == [
        'guarded -> {"done":"a","runs":1}', 'guarded -> {"error":"This tool call is rejected."}',
    ]
    assert len(chat.replies) == 2


async def test_sequential_approvals(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    await chat.send('/tool guarded {"item": "a"}\n/then\n/tool guarded {"item": "b"}')
    middle = await chat.approve()
    assert middle.finish_reason == "tool-calls"
    assert not any(t.startswith("text-") for t in middle.types), middle.types  # no text in between
    assert middle.types.count("tool-approval-request") == 1
    assert log.count("guarded") == 1
    last = await chat.approve()
    assert last.finish_reason == "stop"
    assert log.count("guarded") == 2
    assert [p["state"] for p in chat.tool_parts("guarded")] == ["output-available", "output-available"]
    assert len(lines_of(last, "guarded")) == 2
    assert len(chat.messages) == 2 and len(chat.replies) == 3


# --- browser tools -------------------------------------------------------------------------------


async def test_browser_tool_approval_then_output_in_separate_posts(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    first = await chat.send(CARD)
    [announced] = first.of_type("tool-input-available")
    assert "providerExecuted" not in announced
    assert first.finish_reason == "tool-calls"
    assert first.types.count("tool-approval-request") == 1

    go = await chat.approve()
    # The approval's answer re-announces the call (the browser's signal to run it) and waits.
    assert go.types == ["start", "tool-input-available", "finish"]
    assert go.chunks[1]["toolCallId"] == announced["toolCallId"] and "providerExecuted" not in go.chunks[1]
    assert go.finish_reason == "tool-calls"

    [part] = chat.tool_parts("show_card")
    chat.add_output(part, CARD_OUTPUT)
    done = await chat.continue_()
    assert done.status == 200 and done.finish_reason == "stop"
    assert lines_of(done, "show_card") == [f"show_card -> {compact(CARD_OUTPUT)}"]
    assert len(chat.replies) == 3
    # Posting the finished message again is refused: no loop.
    again = await chat.post(chat.continuation_body())
    assert_refused(again, 409, "continuation_refused")


async def test_browser_tool_approval_and_output_in_one_post(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    await chat.send(CARD)
    [part] = chat.pending_approvals()
    # The browser ran the tool right after approving: output-available carrying the approval.
    chat.answer(part, True)
    chat.add_output(part, CARD_OUTPUT)
    reply = await chat.continue_()
    assert reply.status == 200
    assert reply.finish_reason == "stop"
    assert "tool-input-available" not in reply.types  # nothing to re-announce
    assert lines_of(reply, "show_card") == [f"show_card -> {compact(CARD_OUTPUT)}"]
    assert len(chat.replies) == 2


async def test_browser_tool_denied(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    await chat.send(CARD)
    reply = await chat.approve(False)
    assert reply.types[:2] == ["start", "tool-output-denied"]
    assert chat.tool_parts("show_card")[0]["state"] == "output-denied"
    assert lines_of(reply, "show_card") == ['show_card -> {"error":"This tool call is rejected."}']


async def test_browser_output_without_approval_is_refused(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    await chat.send(CARD)
    [part] = chat.pending_approvals()
    chat.add_output(part, CARD_OUTPUT)  # ran it without asking: the approval is still open
    reply = await chat.continue_()
    assert_refused(reply, 403, "approval_invalid")


# --- standing decisions --------------------------------------------------------------------------


async def test_always_allow_server_tool(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    await chat.send(GUARDED)
    await chat.approve(True, reason="always")
    assert log.count("guarded") == 1
    second = await chat.send('/tool guarded {"item": "pear"}')
    assert "tool-approval-request" not in second.types
    assert second.finish_reason == "stop"
    assert log.count("guarded") == 2
    [part] = chat.tool_parts("guarded")
    assert part["state"] == "output-available" and "approval" not in part
    assert lines_of(second, "guarded") == ['guarded -> {"done":"pear","runs":2}']


@pytest.mark.parametrize("major", [6, 7])
async def test_always_allow_browser_tool(client: TestClient[Any, Any], major: int) -> None:
    chat = Conversation(client, major=major)
    await chat.send(CARD)
    [part] = chat.pending_approvals()
    chat.answer(part, True, reason="always")
    chat.add_output(part, CARD_OUTPUT)
    await chat.continue_()
    second = await chat.send('/tool show_card {"title": "again"}')
    assert second.finish_reason == "tool-calls"
    [part] = chat.tool_parts("show_card")
    # Not asked: announced as a browser tool to run now (the page knows it answered "always").
    assert "tool-approval-request" not in second.types
    assert "tool-approval-response" not in second.types
    assert part["state"] == "input-available" and "approval" not in part
    chat.add_output(part, {"shown": True, "title": "again"})
    done = await chat.continue_()
    assert done.status == 200 and done.finish_reason == "stop"
    assert lines_of(done, "show_card") == ['show_card -> {"shown":true,"title":"again"}']


async def test_never_allow_server_tool(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    await chat.send(GUARDED)
    denied = await chat.approve(False, reason="never")
    assert "tool-output-denied" in denied.types
    second = await chat.send('/tool guarded {"item": "pear"}')
    assert "tool-approval-request" not in second.types
    [error] = second.of_type("tool-output-error")
    assert error["errorText"] == "Permission to use guarded has been permanently denied"
    assert chat.tool_parts("guarded")[0]["state"] == "output-error"
    assert second.finish_reason == "stop"
    assert log.count("guarded") == 0


async def test_never_allow_browser_tool(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    await chat.send(CARD)
    await chat.approve(False, reason="never")
    second = await chat.send('/tool show_card {"title": "again"}')
    assert "tool-approval-request" not in second.types
    [announced] = second.of_type("tool-input-available")
    assert announced["providerExecuted"] is True  # the browser must not run it
    [error] = second.of_type("tool-output-error")
    assert error["errorText"] == "Permission to use show_card has been permanently denied"
    assert second.finish_reason == "stop"


@pytest.mark.parametrize(("major", "reason"), [(6, "stop"), (7, "interrupted")])
async def test_deny_and_stop(client: TestClient[Any, Any], log: ToolLog, major: int, reason: str) -> None:
    chat = Conversation(client, major=major)
    first = await chat.send(GUARDED)
    [request] = first.of_type("tool-approval-request")
    events_before = len(await session_events(client, chat))
    reply = await chat.approve(False, reason="stop")
    assert reply.types == ["start", "tool-output-denied", "finish"]
    assert reply.chunks[1]["toolCallId"] == request["toolCallId"]
    assert reply.finish_reason == reason
    assert chat.tool_parts("guarded")[0]["state"] == "output-denied"
    assert log.count("guarded") == 0
    events = await session_events(client, chat)
    responses = [
        (i, p.function_response)
        for i, e in enumerate(events)
        for p in (e.content.parts if e.content else None) or []
        if p.function_response and p.function_response.id == request["toolCallId"]
    ]
    index, interrupt = responses[-1]
    assert index >= events_before
    assert str((interrupt.response or {}).get("error", "")).startswith(INTERRUPT_TEXT)
    # No model call followed the interrupt.
    later = events[index + 1 :]
    assert not any(e.content and e.content.role == "model" for e in later), later
    # The chat goes on with the next message.
    after = await chat.send("/echo next")
    assert after.text == "next"


async def test_deny_and_stop_beside_an_approval_stops_both(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client, major=7)
    first = await chat.send('/tool guarded {"item": "a"}\n/tool guarded {"item": "b"}')
    calls = [r["toolCallId"] for r in first.of_type("tool-approval-request")]
    approve, stop = chat.pending_approvals()
    chat.answer(approve, True, reason="always")
    chat.answer(stop, False, reason="stop")
    reply = await chat.continue_()
    assert reply.types == ["start", "tool-output-denied", "tool-output-denied", "finish"]
    assert [c["toolCallId"] for c in reply.of_type("tool-output-denied")] == calls
    assert reply.finish_reason == "interrupted"
    assert log.count("guarded") == 0
    # The "always" given in the same message still counts.
    again = await chat.send('/tool guarded {"item": "c"}')
    assert "tool-approval-request" not in again.types and log.count("guarded") == 1


async def test_the_same_approval_twice_in_one_message_is_refused(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = await pending_chat(client)
    [part] = chat.pending_approvals()
    chat.answer(part, True)
    chat.assistant["parts"].append(dict(part))
    reply = await chat.post(chat.continuation_body())
    assert_refused(reply, 403, "approval_invalid")
    assert log.count("guarded") == 0
    chat.assistant["parts"].pop()
    ok = await chat.continue_()
    assert ok.status == 200 and log.count("guarded") == 1


# --- refused approvals ---------------------------------------------------------------------------


async def pending_chat(client: TestClient[Any, Any], chat_id: str | None = None, user: str | None = None
                       ) -> Conversation:
    chat = Conversation(client, chat_id, user=user)
    reply = await chat.send(GUARDED)
    assert reply.finish_reason == "tool-calls"
    return chat


async def test_forged_approval_id(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = await pending_chat(client)
    [part] = chat.pending_approvals()
    real = part["approval"]["id"]
    forged = chat.fork()
    forged_part = forged.pending_approvals()[0]
    forged_part["approval"]["id"] = "apr-forged"
    forged.answer(forged_part, True)
    reply = await forged.continue_()
    assert_refused(reply, 403, "approval_invalid")
    assert log.count("guarded") == 0
    # The genuine approval still works afterwards.
    assert part["approval"]["id"] == real
    ok = await chat.approve()
    assert ok.status == 200 and log.count("guarded") == 1


async def test_approval_for_another_call(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = Conversation(client)
    await chat.send('/tool guarded {"item": "a"}\n/tool guarded {"item": "b"}')
    first, second = chat.pending_approvals()
    first["approval"]["id"], second["approval"]["id"] = second["approval"]["id"], first["approval"]["id"]
    chat.answer(first, True)
    chat.answer(second, True)
    reply = await chat.continue_()
    assert_refused(reply, 403, "approval_invalid")
    assert log.count("guarded") == 0


async def test_approval_from_another_chat(client: TestClient[Any, Any], log: ToolLog) -> None:
    source = await pending_chat(client)
    target = await pending_chat(client)
    stolen = source.pending_approvals()[0]
    target_part = target.pending_approvals()[0]
    target_part["approval"]["id"] = stolen["approval"]["id"]
    target.answer(target_part, True)
    assert_refused(await target.continue_(), 403, "approval_invalid")
    # Replaying the other chat's whole message into a chat that never asked: refused as well.
    copied = source.fork(chat_id="some-other-chat")
    copied.answer(copied.pending_approvals()[0], True)
    assert_refused(await copied.continue_(), 403, "approval_invalid")
    assert log.count("guarded") == 0


async def test_approval_from_another_user(client: TestClient[Any, Any], log: ToolLog) -> None:
    alice = await pending_chat(client, "shared-chat-id", user="alice")
    # Mallory posts Alice's approval for the same chat id under her own user id.
    mallory = alice.fork(user="mallory")
    mallory.answer(mallory.pending_approvals()[0], True)
    assert_refused(await mallory.continue_(), 403, "approval_invalid")
    # Also when Mallory has a chat of her own with that id and a pending approval there.
    await pending_chat(client, "shared-chat-id", user="mallory")
    assert_refused(await mallory.continue_(), 403, "approval_invalid")
    assert log.count("guarded") == 0
    ok = await alice.approve()
    assert ok.status == 200 and log.count("guarded") == 1


async def test_replayed_approval(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = await pending_chat(client)
    chat.answer(chat.pending_approvals()[0], True)
    body = chat.continuation_body()
    first = await chat.post(body)
    assert first.status == 200 and log.count("guarded") == 1
    replay = await chat.post(body)
    assert_refused(replay, 403, "approval_invalid")
    assert log.count("guarded") == 1


async def test_loop_guard(client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = await pending_chat(client)
    await chat.approve()
    assert chat.tool_parts("guarded")[0]["state"] == "output-available"
    events = len(await session_events(client, chat))
    # The finished message, posted again (what a looping sendAutomaticallyWhen would do).
    for _ in range(2):
        reply = await chat.post(chat.continuation_body())
        assert_refused(reply, 409, "continuation_refused")
    assert len(await session_events(client, chat)) == events  # no model run, nothing stored
    assert log.count("guarded") == 1
    assert client.app[REGISTRY].counts()["runs"] == 0


async def test_more_continuations_than_questions_are_refused(client: TestClient[Any, Any]) -> None:
    chat = Conversation(client)
    await chat.send(CARD)
    [part] = chat.pending_approvals()
    chat.answer(part, True)
    go = await chat.continue_()
    assert go.finish_reason == "tool-calls"
    chat.add_output(part, CARD_OUTPUT)
    done = await chat.continue_()
    assert done.finish_reason == "stop"
    # A client that flips the part back and posts again gets nothing more.
    part["state"] = "output-error"
    part["errorText"] = "oops"
    reply = await chat.post(chat.continuation_body())
    assert_refused(reply, 409, "continuation_refused")


# --- timeout ---------------------------------------------------------------------------------------


async def wait_until_expired(client: TestClient[Any, Any], chat: Conversation, timeout_s: float) -> None:
    session = await client.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None
    calls = session.state[APPROVALS_STATE_KEY]["calls"]
    issued = max(call["issuedAt"] for call in calls)
    await asyncio.sleep(max(0.0, issued + timeout_s - time.time()) + 0.01)
    assert time.time() - issued > timeout_s


@pytest.fixture
async def timeout_client(gateway: StartGateway, log: ToolLog) -> TestClient[Any, Any]:
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    return await gateway(settings(approval_timeout_s=0.05), host=host)


async def test_answer_after_the_approval_timeout(timeout_client: TestClient[Any, Any], log: ToolLog) -> None:
    chat = await pending_chat(timeout_client)
    call_id = chat.pending_approvals()[0]["toolCallId"]
    await wait_until_expired(timeout_client, chat, 0.05)
    reply = await chat.approve()
    assert reply.status == 200
    [error] = reply.of_type("tool-output-error")
    assert error["toolCallId"] == call_id and "timed out" in error["errorText"]
    outcomes = [c for c in reply.chunks if c["type"].startswith("tool-output") and c["toolCallId"] == call_id]
    assert outcomes == [error]  # one outcome per call: it ends as an error
    assert chat.tool_parts("guarded")[0]["state"] == "output-error"
    assert log.count("guarded") == 0
    assert reply.finish_reason == "stop"


async def test_browser_answer_after_the_approval_timeout(timeout_client: TestClient[Any, Any]) -> None:
    chat = Conversation(timeout_client)
    await chat.send(CARD)
    await wait_until_expired(timeout_client, chat, 0.05)
    reply = await chat.approve()
    assert reply.types[:2] == ["start", "tool-output-error"]
    assert "tool-input-available" not in reply.types  # the browser is not told to run it
    assert chat.tool_parts("show_card")[0]["state"] == "output-error"
    assert lines_of(reply, "show_card") == ['show_card -> {"error":"The approval timed out."}']


async def test_answer_before_the_timeout_runs(gateway: StartGateway, log: ToolLog) -> None:
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    client = await gateway(settings(approval_timeout_s=60), host=host)
    chat = await pending_chat(client)
    reply = await chat.approve()
    assert "tool-output-available" in reply.types and "tool-output-error" not in reply.types
    assert log.count("guarded") == 1
