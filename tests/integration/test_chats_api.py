"""The chats API (issue 33) through real sockets: paging, renaming, deleting a running chat,
the approval audit's decisions, and chats that survive a restart on SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.app import make_app
from adk_gateway.keys import REGISTRY

from .conftest import StartGateway
from .support import Conversation, new_id, post_chat, settings, user_message, wait_for

PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'


async def get(client: TestClient[Any, Any], path: str, **headers: str) -> tuple[int, Any]:
    async with client.get(path, headers=headers) as response:
        return response.status, await response.json()


async def test_the_list_pages_newest_first(gateway: StartGateway) -> None:
    client = await gateway(settings())
    made = []
    for index in range(5):
        chat_id = new_id(f"c{index}")
        reply = await post_chat(client, {"id": chat_id, "message": user_message(f"/echo  first   words\\n of {index}")})
        assert reply.status == 200
        made.append(chat_id)
    status, page = await get(client, "/api/chats?limit=2")
    assert status == 200 and [c["id"] for c in page["chats"]] == made[::-1][:2]
    assert page["chats"][0]["title"] == "/echo first words\\n of 4"
    seen = [c["id"] for c in page["chats"]]
    while "nextCursor" in page:
        _, page = await get(client, f"/api/chats?limit=2&cursor={page['nextCursor']}")
        seen += [c["id"] for c in page["chats"]]
    assert seen == made[::-1]
    summary = page["chats"][-1]
    assert summary["createdAt"] <= summary["updatedAt"] and summary["app"] == "demo_agent"
    _, everything = await get(client, "/api/chats?limit=100000")
    assert len(everything["chats"]) == 5 and "nextCursor" not in everything
    status, bad = await get(client, "/api/chats?cursor=not-ours")
    assert (status, bad["error"]["code"]) == (400, "invalid_cursor")
    status, _ = await get(client, "/api/chats?app=no_such_app")
    assert status == 404


async def test_a_title_is_one_to_two_hundred_characters(gateway: StartGateway) -> None:
    client = await gateway(settings())
    chat = Conversation(client)
    await chat.send("/echo hi")
    for title in ("", "   ", "x" * 201, 5, None):
        async with client.patch(f"/api/chats/{chat.chat_id}", json={"title": title}) as response:
            assert response.status == 400, title
    async with client.patch(f"/api/chats/{chat.chat_id}", json={"title": "  Trip   planning "}) as response:
        assert (await response.json())["title"] == "Trip planning"
    _, loaded = await get(client, f"/api/chats/{chat.chat_id}")
    assert loaded["title"] == "Trip planning"
    async with client.patch(f"/api/chats/{chat.chat_id}", data=b"title", headers={"content-type": "text/plain"}) as r:
        assert r.status == 415


async def test_deleting_a_running_chat_stops_it_first(gateway: StartGateway) -> None:
    client = await gateway(settings(detach_on_disconnect=True))
    chat_id = new_id("running")
    streaming = asyncio.ensure_future(post_chat(client, {"id": chat_id, "message": user_message("/stream 200 50")}))
    await wait_for(lambda: bool(client.app[REGISTRY].counts()["runs"]), what="the run to start")
    async with client.delete(f"/api/chats/{chat_id}") as response:
        assert response.status == 204
    reply = await streaming
    assert reply.types[-1] == "abort"
    assert client.app[REGISTRY].counts()["runs"] == 0
    assert (await get(client, f"/api/chats/{chat_id}"))[0] == 404
    async with client.get(f"/api/chat/{chat_id}/stream") as response:
        assert response.status == 204  # nothing left to resume
    async with client.delete(f"/api/chats/{chat_id}") as response:
        assert response.status == 404


async def test_the_audit_keeps_every_approval_and_its_decision(gateway: StartGateway) -> None:
    client = await gateway(settings(approval_timeout_s=0))
    chat = Conversation(client)
    await chat.send(PAYMENT)
    await chat.approve(True)
    await chat.send(PAYMENT)
    await chat.approve(False, "never")
    chat2 = Conversation(client)
    await chat2.send(PAYMENT)
    await chat2.send("/echo moving on")  # leaves the question behind
    _, audit = await get(client, f"/api/chats/{chat.chat_id}/approvals")
    assert [(a["tool"], a["decision"], a["answeredBy"]) for a in audit["approvals"]] == [
        ("process_payment", "allow-once", "anonymous"), ("process_payment", "deny-never", "anonymous")]
    first = audit["approvals"][0]
    assert first["input"] == {"amount": 5, "recipient": "bob"} and first["askedAt"] <= first["answeredAt"]
    _, left = await get(client, f"/api/chats/{chat2.chat_id}/approvals")
    [stopped] = left["approvals"]
    assert stopped["decision"] == "stopped" and "answeredBy" not in stopped and "answeredAt" not in stopped
    # A replayed answer is refused and adds nothing.
    replay = await chat.post(chat.continuation_body())
    assert replay.status in (403, 409)
    _, again = await get(client, f"/api/chats/{chat.chat_id}/approvals")
    assert again == audit


async def test_a_pending_approval_is_in_the_audit_without_a_decision(gateway: StartGateway) -> None:
    client = await gateway(settings())
    chat = Conversation(client)
    await chat.send(PAYMENT)
    _, audit = await get(client, f"/api/chats/{chat.chat_id}/approvals")
    [pending] = audit["approvals"]
    assert set(pending) == {"toolCallId", "tool", "input", "askedAt"}


async def test_chats_their_messages_and_audit_survive_a_restart_on_sqlite(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chats.db'}"
    chat_id = new_id("kept")
    async with TestClient(TestServer(make_app(settings(session_store=store)))) as client:
        assert (await post_chat(client, {"id": chat_id, "message": user_message("/echo one")})).status == 200
        assert (await post_chat(client, {"id": chat_id, "message": user_message(PAYMENT)})).status == 200
        _, before = await get(client, f"/api/chats/{chat_id}")
        # An edit of the first message rewinds the SQLite session to before it.
        first = before["messages"][0]
        edited = {**first, "parts": [{"type": "text", "text": "/echo uno"}]}
        again = await post_chat(client, {"id": chat_id, "message": edited, "messageId": first["id"]})
        assert again.text == "uno"
        _, edited_chat = await get(client, f"/api/chats/{chat_id}")
    async with TestClient(TestServer(make_app(settings(session_store=store)))) as client:
        _, listed = await get(client, "/api/chats")
        assert [c["id"] for c in listed["chats"]] == [chat_id]
        _, after = await get(client, f"/api/chats/{chat_id}")
        assert after == edited_chat
        assert [m["role"] for m in after["messages"]] == ["user", "assistant"]
        _, audit = await get(client, f"/api/chats/{chat_id}/approvals")
        assert len(audit["approvals"]) == 1  # asked before the edit: an audit is not rewound
