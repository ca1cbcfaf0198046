"""Property: no request whose credential names user U reads or changes state keyed to another user.

Hypothesis draws sequences of requests by three users with API keys, over two shared chat ids.
Every request also *claims* another user in every way a client can (the `x-user-id` header and
a `userId` body field). The model tracks which approvals each user was issued; the gateway must
refuse every answer by anyone but the owner (403, tool not run), answer resumes and stops of
other users' chats as unknown, and let owners' answers run the tool exactly once, with the
owner's own arguments.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.adk.sessions import InMemorySessionService
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_gateway.agents.adk import AgentHost
from adk_gateway.app import make_app

from .support import Conversation, ToolLog, counting_agent, post_chat
from .support import settings as gateway_settings

USERS = ("alice", "bob", "carol")
CHATS = ("chat-1", "chat-2")
KEYS = {user: f"key-{user}-{index:04d}" for index, user in enumerate(USERS)}


@dataclass
class Issued:
    """An approval the gateway asked `owner` in `chat`, with the body that answers it."""

    owner: str
    chat: str
    answer_body: dict[str, Any]
    open: bool = True


@dataclass
class Model:
    issued: list[Issued] = field(default_factory=list)
    runs: int = 0


ask = st.tuples(st.just("ask"), st.sampled_from(USERS), st.sampled_from(CHATS), st.sampled_from(USERS))
answer = st.tuples(st.just("answer"), st.sampled_from(USERS), st.integers(0, 7), st.sampled_from(USERS))
resume = st.tuples(st.just("resume"), st.sampled_from(USERS), st.sampled_from(CHATS), st.sampled_from(USERS))
stop = st.tuples(st.just("stop"), st.sampled_from(USERS), st.sampled_from(CHATS), st.sampled_from(USERS))
whoami = st.tuples(st.just("me"), st.sampled_from(USERS), st.just(""), st.sampled_from(USERS))
operations = st.lists(st.one_of(ask, answer, resume, stop, whoami), min_size=1, max_size=10)


def headers_of(actor: str, claimed: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[actor]}", "x-user-id": claimed}


async def play(keys_file: Path, ops: list[tuple[str, str, Any, str]]) -> None:
    log = ToolLog()
    host = AgentHost(counting_agent(log), InMemorySessionService(), max_llm_calls=25)
    app = make_app(gateway_settings(auth="api-keys", auth_api_keys_file=str(keys_file)), host=host)
    model = Model()
    async with TestClient(TestServer(app)) as client:
        for op, actor, target, claimed in ops:
            headers = headers_of(actor, claimed)
            if op == "ask":
                chat = Conversation(client, target)
                chat.headers = headers
                reply = await chat.send(f'/tool guarded {{"item": "{actor}"}}')
                assert reply.status == 200 and reply.finish_reason == "tool-calls", reply
                for earlier in model.issued:  # a new turn leaves the owner's older question behind
                    if earlier.owner == actor and earlier.chat == target:
                        earlier.open = False
                part = chat.pending_approvals()[0]
                chat.answer(part, True)
                model.issued.append(Issued(actor, target, copy.deepcopy(chat.continuation_body())))
            elif op == "answer":
                if not model.issued:
                    continue
                issued = model.issued[target % len(model.issued)]
                body = {**issued.answer_body, "userId": claimed}
                reply = await post_chat(client, body, headers=headers)
                if actor != issued.owner:
                    assert reply.status == 403 and reply.error_code == "approval_invalid", reply
                elif issued.open:
                    assert reply.status == 200, reply
                    outputs = reply.of_type("tool-output-available")
                    assert [o["output"]["done"] for o in outputs] == [actor]
                    issued.open = False
                    model.runs += 1
                else:
                    assert reply.status in (403, 409), reply
            elif op == "resume":
                async with client.get(f"/api/chat/{target}/stream", headers=headers) as response:
                    assert response.status == 204  # every run here has ended and was delivered
            elif op == "stop":
                async with client.post(f"/api/chat/{target}/stop", json={"userId": claimed},
                                       headers=headers) as response:
                    assert await response.json() == {"stopped": False}
            else:
                async with client.get("/api/me", headers=headers) as response:
                    assert (await response.json())["user"] == actor
            assert log.count("guarded") == model.runs, (op, actor, claimed)


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys"
    path.write_text("".join(f"{key} {user}\n" for user, key in KEYS.items()))
    return path


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_no_credential_reaches_another_users_state(keys_file: Path, ops: list[tuple[str, str, Any, str]]) -> None:
    asyncio.run(play(keys_file, ops))
