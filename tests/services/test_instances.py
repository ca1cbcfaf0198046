"""Two gateways on one PostgreSQL and one Redis: one run per chat holds across them.

- The same approval POSTed to both instances at once, 50 times: the tool runs exactly once each
  time (the other request is refused: 409 while the chat is leased, or 403 once it is answered).
- Two POSTs for one chat on two instances at once: one runs, the other gets 409 `chat_busy`.
- The lease primitives themselves: Redis (fenced by a token) and PostgreSQL advisory locks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.agents.adk import AgentHost, session_service_from_uri
from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.services.leases import PostgresLeases, RedisLeases
from tests.integration.support import Conversation, ToolLog, counting_agent, new_id, post_chat, user_message

pytestmark = pytest.mark.services


@asynccontextmanager
async def two_instances(postgres_url: str, redis_url: str, log: ToolLog) -> AsyncIterator[
        tuple[TestClient[Any, Any], TestClient[Any, Any]]]:
    settings = Settings(model="scripted", session_store=postgres_url, stream_store=redis_url, busy_grace_ms=100)
    clients = []
    for _ in range(2):
        host = AgentHost(counting_agent(log), session_service_from_uri(postgres_url), max_llm_calls=25)
        clients.append(TestClient(TestServer(make_app(settings, host=host), handler_cancellation=True)))
    async with clients[0] as a, clients[1] as b:
        yield a, b


async def test_one_approval_sent_to_two_instances_runs_its_tool_once(postgres_url: str, redis_url: str) -> None:
    log = ToolLog()
    async with two_instances(postgres_url, redis_url, log) as (a, b):
        for round_ in range(50):
            chat = Conversation(a, new_id(f"twice-{round_}"))
            asked = await chat.send(f'/tool guarded {{"item": "r{round_}"}}')
            assert asked.finish_reason == "tool-calls", asked.types
            chat.answer(chat.pending_approvals()[0], True)
            body = chat.continuation_body()
            before = log.count("guarded")
            first, second = await asyncio.gather(post_chat(a, body), post_chat(b, body))
            statuses = sorted([first.status, second.status])
            assert log.count("guarded") == before + 1, (round_, statuses)
            assert statuses[0] == 200 and statuses[1] in (403, 409), statuses
            winner = first if first.status == 200 else second
            assert len(winner.of_type("tool-output-available")) == 1


async def test_two_posts_for_one_chat_on_two_instances(postgres_url: str, redis_url: str) -> None:
    log = ToolLog()
    async with two_instances(postgres_url, redis_url, log) as (a, b):
        chat_id = new_id("both")
        body = {"id": chat_id, "trigger": "submit-message",
                "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "/stream 20 50"}]}]}
        first, second = await asyncio.gather(post_chat(a, body), post_chat(b, body))
        statuses = sorted([first.status, second.status])
        assert statuses == [200, 409], statuses
        refused = first if first.status == 409 else second
        assert refused.error_code == "chat_busy"
        # Once the run has ended, the chat is free on either instance.
        again = await post_chat(b, {**body, "messages": [*body["messages"], {
            "id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}, {
            "id": "u2", "role": "user", "parts": [{"type": "text", "text": "/echo free"}]}]})
        assert again.status == 200 and again.text == "free"


async def test_redis_lease_is_exclusive_fenced_and_renewed(redis_url: str) -> None:
    leases = RedisLeases(redis_url, ttl_ms=300)
    key = ("alice", f"lease-{uuid.uuid4().hex[:8]}")
    lost: list[str] = []
    try:
        held = await leases.acquire(key, on_lost=lambda: lost.append("a"))
        assert held is not None
        assert await leases.acquire(key, on_lost=lambda: None) is None
        # Renewed while held: still exclusive after several TTLs.
        await asyncio.sleep(1.0)
        assert await leases.acquire(key, on_lost=lambda: None) is None and not lost
        # Another holder's token is never freed by a stale release.
        await leases.redis.set(leases._name(key), "someone-else", px=5000)
        await held.release()
        assert await leases.redis.get(leases._name(key)) == "someone-else"
        await leases.redis.delete(leases._name(key))
        again = await leases.acquire(key, on_lost=lambda: None)
        assert again is not None
        await again.release()
        assert await leases.redis.get(leases._name(key)) is None
    finally:
        await leases.aclose()


async def test_redis_lease_lost_is_reported(redis_url: str) -> None:
    leases = RedisLeases(redis_url, ttl_ms=300)
    key = ("alice", f"lost-{uuid.uuid4().hex[:8]}")
    lost = asyncio.Event()
    try:
        held = await leases.acquire(key, on_lost=lost.set)
        assert held is not None
        await leases.redis.set(leases._name(key), "taken-over", px=5000)
        async with asyncio.timeout(5):
            await lost.wait()
        await held.release()
        await leases.redis.delete(leases._name(key))
    finally:
        await leases.aclose()


async def test_postgres_advisory_lease(postgres_url: str) -> None:
    one, two = PostgresLeases(postgres_url), PostgresLeases(postgres_url)
    key = ("alice", f"pg-lease-{uuid.uuid4().hex[:8]}")
    try:
        held = await one.acquire(key, on_lost=lambda: None)
        assert held is not None
        assert await two.acquire(key, on_lost=lambda: None) is None
        other_user = await two.acquire(("bob", key[1]), on_lost=lambda: None)
        assert other_user is not None
        await other_user.release()
        await held.release()
        again = await two.acquire(key, on_lost=lambda: None)
        assert again is not None
        await again.release()
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_resume_of_another_instances_run_ends_when_its_server_shuts_down(redis_url: str) -> None:
    """SIGTERM on the instance serving a resume (of a run that lives on another instance): the resume
    ends with an `error` chunk and `[DONE]`, not a dropped connection, and the run goes on."""
    import aiohttp

    from adk_gateway.keys import REGISTRY

    from .conftest import chat_body as text_body
    from .conftest import read_sse

    settings = Settings(model="scripted", stream_store=redis_url, detach_on_disconnect=True, shutdown_timeout_s=0.5)
    a, b = TestClient(TestServer(make_app(settings))), TestClient(TestServer(make_app(settings)))
    await a.start_server()
    await b.start_server()
    chat_id = new_id("resume-drain")
    try:
        async with aiohttp.ClientSession() as http:
            started = await http.post(a.make_url("/api/chat"), json=text_body(chat_id, "/stream 400 25"))
            await read_sse(started, until=lambda read: "text-delta" in read.types())
            started.close()  # detached: the run goes on on A
            resumed = await http.get(b.make_url(f"/api/chat/{chat_id}/stream"))
            assert resumed.status == 200
            first = await read_sse(resumed, until=lambda read: read.types().count("text-delta") >= 2)
            rest = asyncio.ensure_future(read_sse(resumed))
            await b.close()  # B drains: its resumes end
            read = await asyncio.wait_for(rest, timeout=10)
            assert read.done and read.chunks and read.chunks[-1]["type"] == "error", read.types()[-3:]
            assert "resume" in read.chunks[-1]["errorText"]
            assert first.chunks and a.app[REGISTRY].active_run(("anonymous", chat_id)) is not None
    finally:
        await a.close()
        await b.close()


async def test_a_chat_made_on_one_instance_is_listed_loaded_continued_and_deleted_on_the_other(
    postgres_url: str, redis_url: str
) -> None:
    settings = Settings(model="scripted", session_store=postgres_url, stream_store=redis_url,
                        url_signing_secret="one-secret-for-both-instances-0123456789")
    headers = {"x-user-id": f"user-{uuid.uuid4().hex[:8]}"}
    chat_id = new_id("shared")
    async with TestClient(TestServer(make_app(settings))) as a, TestClient(TestServer(make_app(settings))) as b:
        first = await post_chat(a, {"id": chat_id, "message": user_message("/echo made on a")}, headers=headers)
        assert first.status == 200
        async with b.get("/api/chats", headers=headers) as response:
            assert [c["id"] for c in (await response.json())["chats"]] == [chat_id]
        async with b.get(f"/api/chats/{chat_id}", headers=headers) as response:
            loaded = await response.json()
        assert [m["role"] for m in loaded["messages"]] == ["user", "assistant"]
        # Continued on b with a last-message request, then an approval asked there and answered on a.
        second = await post_chat(b, {"id": chat_id, "message": user_message("/echo continued on b")}, headers=headers)
        assert second.text == "continued on b"
        asked = await post_chat(b, {"id": chat_id, "message": user_message(PAYMENT)}, headers=headers)
        assert asked.finish_reason == "tool-calls"
        async with a.get(f"/api/chats/{chat_id}", headers=headers) as response:
            pending = (await response.json())["messages"][-1]
        part = next(p for p in pending["parts"] if p.get("state") == "approval-requested")
        part["state"] = "approval-responded"
        part["approval"] = {**part["approval"], "approved": True}
        paid = await post_chat(a, {"id": chat_id, "message": pending, "messageId": pending["id"]}, headers=headers)
        assert paid.of_type("tool-output-available"), paid.chunks
        async with b.get(f"/api/chats/{chat_id}/approvals", headers=headers) as response:
            [audit] = (await response.json())["approvals"]
        assert audit["decision"] == "allow-once" and audit["answeredBy"] == headers["x-user-id"]
        # A regenerate on a (rewinding the PostgreSQL session), seen on b.
        user_two = loaded_user_message(await load(b, chat_id, headers), 1)
        again = await post_chat(a, {"id": chat_id, "trigger": "regenerate-message", "message": user_two},
                                headers=headers)
        assert again.text == "continued on b"
        after = await load(b, chat_id, headers)
        assert [m["role"] for m in after["messages"]] == ["user", "assistant", "user", "assistant"]
        async with b.delete(f"/api/chats/{chat_id}", headers=headers) as response:
            assert response.status == 204
        async with a.get(f"/api/chats/{chat_id}", headers=headers) as response:
            assert response.status == 404


PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'


async def load(client: TestClient[Any, Any], chat_id: str, headers: dict[str, str]) -> dict[str, Any]:
    async with client.get(f"/api/chats/{chat_id}", headers=headers) as response:
        assert response.status == 200
        loaded: dict[str, Any] = await response.json()
        return loaded


def loaded_user_message(loaded: dict[str, Any], index: int) -> dict[str, Any]:
    users = [m for m in loaded["messages"] if m["role"] == "user"]
    return users[index]
