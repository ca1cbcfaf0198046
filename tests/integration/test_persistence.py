"""A pending approval survives a restart of the gateway when sessions live in SQLite."""

from __future__ import annotations

from pathlib import Path

from adk_gateway.agents.adk import AgentHost, session_service_from_uri
from adk_gateway.agents.tools import APPROVALS_STATE_KEY
from adk_gateway.keys import HOST

from .conftest import StartGateway
from .support import Conversation, ToolLog, counting_agent, settings


async def test_pending_approval_survives_a_restart(gateway: StartGateway, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"
    log = ToolLog()

    host1 = AgentHost(counting_agent(log), session_service_from_uri(store), max_llm_calls=25)
    app1 = await gateway(settings(session_store=store), host=host1)
    chat = Conversation(app1, "persisted-chat")
    first = await chat.send('/tool guarded {"item": "plum"}')
    assert first.finish_reason == "tool-calls"
    [request] = first.of_type("tool-approval-request")
    await app1.close()  # the gateway shuts down (cleanup closes the runner and the store)
    assert log.count("guarded") == 0

    host2 = AgentHost(counting_agent(log), session_service_from_uri(store), max_llm_calls=25)
    app2 = await gateway(settings(session_store=store), host=host2)
    session = await app2.app[HOST].get_session("anonymous", "persisted-chat")
    assert session is not None
    [call] = session.state[APPROVALS_STATE_KEY]["calls"]
    assert call["approvalId"] == request["approvalId"] and call["state"] == "approval-requested"

    chat.client = app2
    reply = await chat.approve()
    assert reply.status == 200, reply.body
    assert reply.types[:2] == ["start", "tool-output-available"]
    assert log.count("guarded") == 1
    assert reply.finish_reason == "stop"
    assert reply.text == 'guarded -> {"done":"plum","runs":1}'
    # Answered once: a replay after the restart is refused and runs nothing.
    replay = await chat.post(chat.continuation_body())
    assert replay.status == 409 and log.count("guarded") == 1


async def test_demo_agent_with_the_sqlite_setting(gateway: StartGateway, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/demo.db"
    app1 = await gateway(settings(session_store=store))
    chat = Conversation(app1)
    first = await chat.send('/tool process_payment {"amount": 5, "recipient": "bob"}')
    assert first.finish_reason == "tool-calls"
    await app1.close()

    app2 = await gateway(settings(session_store=store))
    chat.client = app2
    reply = await chat.approve()
    assert reply.status == 200
    [output] = reply.of_type("tool-output-available")
    assert output["output"]["status"] == "completed" and output["output"]["recipient"] == "bob"
    assert reply.text.startswith("process_payment -> {")
    session = await app2.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None
    completed = [
        p.function_response for e in session.events for p in (e.content.parts if e.content else None) or []
        if p.function_response and p.function_response.name == "process_payment"
        and (p.function_response.response or {}).get("status") == "completed"
    ]
    assert len(completed) == 1  # the payment ran exactly once
