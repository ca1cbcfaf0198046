"""Property: a user's chats are theirs alone (issue 33). Hypothesis draws sequences of chat
operations by three users with API keys over three chat ids — start or continue a chat (a
last-message request), list, load, rename, delete, read its approval audit — each also claiming
another user (`x-user-id`). A model tracks who owns which chat: the owner sees and changes it;
anyone else gets exactly what an unknown chat gets (404, the same body), the list never shows
another's chat, and nothing another user does changes the owner's chat."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_gateway.app import make_app

from .support import post_chat, user_message
from .support import settings as gateway_settings

USERS = ("alice", "bob", "carol")
CHATS = ("chat-1", "chat-2", "chat-3")
KEYS = {user: f"key-{user}-{index:04d}" for index, user in enumerate(USERS)}

op = st.tuples(st.sampled_from(["send", "list", "load", "rename", "delete", "audit", "ask"]),
               st.sampled_from(USERS), st.sampled_from(CHATS), st.sampled_from(USERS))
operations = st.lists(op, min_size=1, max_size=12)


@dataclass
class Model:
    """The chats that exist, keyed as the gateway keys them: (user, chat id). Alice's "chat-1" and
    Bob's "chat-1" are two chats; to Bob, Alice's is unknown."""

    texts: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # each chat's user texts
    asked: dict[tuple[str, str], int] = field(default_factory=dict)  # approvals asked in each chat


def headers_of(actor: str, claimed: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[actor]}", "x-user-id": claimed}


async def not_found_body(client: TestClient[Any, Any], actor: str) -> Any:
    async with client.get("/api/chats/never-made-chat", headers=headers_of(actor, actor)) as response:
        assert response.status == 404
        return await response.json()


async def play(keys_file: Path, ops: list[tuple[str, str, str, str]]) -> None:
    app = make_app(gateway_settings(auth="api-keys", auth_api_keys_file=str(keys_file)))
    model = Model()
    async with TestClient(TestServer(app)) as client:
        unknown = {user: await not_found_body(client, user) for user in USERS}
        for index, (kind, actor, chat, claimed) in enumerate(ops):
            headers = headers_of(actor, claimed)  # every request also claims another user
            key = (actor, chat)
            mine = key in model.texts
            path = f"/api/chats/{chat}"
            if kind in ("send", "ask"):
                text = f"/echo {actor} {index}" if kind == "send" else \
                    f'/tool process_payment {{"amount": {index}, "recipient": "{actor}"}}'
                reply = await post_chat(client, {"id": chat, "message": user_message(text), "userId": claimed},
                                        headers=headers)
                assert reply.status == 200, reply
                model.texts.setdefault(key, []).append(text)
                if kind == "ask":
                    model.asked[key] = model.asked.get(key, 0) + 1
            elif kind == "list":
                async with client.get("/api/chats", headers=headers) as response:
                    assert response.status == 200
                    listed = {c["id"] for c in (await response.json())["chats"]}
                assert listed == {c for (user, c) in model.texts if user == actor}
            elif kind == "load":
                async with client.get(path, headers=headers) as response:
                    if mine:
                        loaded = await response.json()
                        texts = [m["parts"][0]["text"] for m in loaded["messages"] if m["role"] == "user"]
                        assert texts == model.texts[key]
                    else:
                        assert (response.status, await response.json()) == (404, unknown[actor])
            elif kind == "rename":
                async with client.patch(path, json={"title": f"by {actor}"}, headers=headers) as response:
                    if mine:
                        assert response.status == 200 and (await response.json())["title"] == f"by {actor}"
                    else:
                        assert (response.status, await response.json()) == (404, unknown[actor])
            elif kind == "delete":
                async with client.delete(path, headers=headers) as response:
                    if mine:
                        assert response.status == 204
                        del model.texts[key]
                        model.asked.pop(key, None)
                    else:
                        assert (response.status, await response.json()) == (404, unknown[actor])
            else:
                async with client.get(f"{path}/approvals", headers=headers) as response:
                    if mine:
                        assert len((await response.json())["approvals"]) == model.asked.get(key, 0)
                    else:
                        assert (response.status, await response.json()) == (404, unknown[actor])
        # Whatever the others did, each user's chats are as that user left them.
        for (user, chat), texts in model.texts.items():
            async with client.get(f"/api/chats/{chat}", headers=headers_of(user, user)) as response:
                loaded = await response.json()
                assert [m["parts"][0]["text"] for m in loaded["messages"] if m["role"] == "user"] == texts


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys"
    path.write_text("".join(f"{key} {user}\n" for user, key in KEYS.items()))
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_no_user_lists_loads_renames_deletes_or_audits_another_users_chat(
    keys_file: Path, ops: list[tuple[str, str, str, str]]
) -> None:
    asyncio.run(play(keys_file, ops))
