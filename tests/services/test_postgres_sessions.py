"""The PostgreSQL session store: an approval asked by one gateway is answered on a restarted one.

Pending approvals live in the chat's ADK session (`gateway:approvals`), so with a shared,
durable session store an approval survives a restart (or lands on another instance) and is
still checked: answering it twice is refused.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.agents.adk import AgentHost, session_service_from_uri
from adk_gateway.agents.demo import build_demo_agent
from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.core.errors import StartupError

from .conftest import chat_body, read_sse, user_message

pytestmark = pytest.mark.services

PAYMENT = '/tool process_payment {"amount": 12.5, "recipient": "bob"}'


def _client(settings: Settings) -> TestClient[Any, Any]:
    return TestClient(TestServer(make_app(settings)))


def _continuation(chat_id: str, message_id: str, call: dict[str, Any], approval_id: str) -> dict[str, Any]:
    tool_part = {
        "type": "tool-process_payment",
        "toolCallId": call["toolCallId"],
        "state": "approval-responded",
        "input": call["input"],
        "providerExecuted": True,
        "approval": {"id": approval_id, "approved": True},
    }
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [
            user_message(PAYMENT),
            {"id": message_id, "role": "assistant", "parts": [{"type": "step-start"}, tool_part]},
        ],
    }


async def test_approval_survives_a_restart(postgres_url: str) -> None:
    settings = Settings(session_store=postgres_url)
    chat_id = f"pg-{uuid.uuid4().hex[:8]}"

    # Instance 1 asks for the approval, then goes away.
    async with _client(settings) as first:
        ready = await first.get("/readyz")
        assert ready.status == 200, await ready.text()
        response = await first.post("/api/chat", json=chat_body(chat_id, PAYMENT))
        assert response.status == 200, await response.text()
        asked = await read_sse(response)
    assert asked.done
    assert asked.types()[-1] == "finish" and asked.chunks[-1]["finishReason"] == "tool-calls"
    start = asked.chunks[0]
    call = next(c for c in asked.chunks if c["type"] == "tool-input-available")
    request = next(c for c in asked.chunks if c["type"] == "tool-approval-request")
    assert call["providerExecuted"] is True and request["toolCallId"] == call["toolCallId"]

    # Instance 2 (a new app, same database) accepts the answer and runs the tool.
    async with _client(settings) as second:
        ready = await second.get("/readyz")
        assert ready.status == 200, await ready.text()
        body = _continuation(chat_id, start["messageId"], call, request["approvalId"])
        response = await second.post("/api/chat", json=body)
        assert response.status == 200, await response.text()
        answered = await read_sse(response)
        assert answered.done
        output = next(c for c in answered.chunks if c["type"] == "tool-output-available")
        assert output["toolCallId"] == call["toolCallId"]
        assert output["output"]["status"] == "completed" and output["output"]["recipient"] == "bob"
        assert answered.text().startswith("process_payment -> ")
        assert answered.chunks[-1]["type"] == "finish" and answered.chunks[-1]["finishReason"] == "stop"
        # A continuation carries the same message id (or none).
        assert answered.chunks[0]["type"] == "start"
        assert answered.chunks[0].get("messageId", start["messageId"]) == start["messageId"]

        # The same approval again: already answered, refused, nothing runs.
        replay = await second.post("/api/chat", json=body)
        assert replay.status == 403
        assert (await replay.json())["error"]["code"] == "approval_invalid"


async def test_a_store_that_does_not_answer_stops_the_start() -> None:
    # A port nothing listens on: the store is configured but unreachable.
    settings = Settings(session_store="postgresql://postgres@127.0.0.1:9/adk")
    runner = web.AppRunner(make_app(settings))
    with pytest.raises(StartupError, match="does not answer") as refused:
        await runner.setup()
    await runner.cleanup()
    assert refused.value.setting == "session_store"


async def test_readyz_reports_a_store_that_stopped_answering() -> None:
    """Once started (here with a host built beforehand, which the start does not check), a store
    that does not answer makes /readyz say so."""
    settings = Settings(session_store="postgresql://postgres@127.0.0.1:9/adk")
    store = session_service_from_uri(settings.session_store)
    host = AgentHost(build_demo_agent("scripted"), store, max_llm_calls=5)
    async with TestClient(TestServer(make_app(settings, host=host))) as client:
        response = await client.get("/readyz")
        assert response.status == 503
        assert (await response.json())["status"] == "store_unreachable"
