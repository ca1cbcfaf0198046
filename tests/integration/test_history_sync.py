"""History sync: a posted history that continues the session costs nothing to check; any other
history rebuilds the session from what was posted (the client's history is the truth)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from adk_gateway.agents.adk import AgentHost
from adk_gateway.keys import HOST, REGISTRY

from .conftest import StartGateway
from .support import Conversation, LiveStream, chat_body, post_chat, settings, user_message, wait_for


class ImportLog:
    """Counts the sessions the chat service resets (created or rebuilt) and the messages imported."""

    def __init__(self, host: AgentHost) -> None:
        self.resets = 0
        self.imported: list[int] = []
        reset, imported = host.reset_session, host.import_history

        async def counting_reset(*args: Any, **kwargs: Any) -> Any:
            self.resets += 1
            return await reset(*args, **kwargs)

        async def counting_import(session: Any, messages: Any) -> None:
            self.imported.append(len(messages))
            await imported(session, messages)

        host.reset_session = counting_reset  # type: ignore[method-assign]
        host.import_history = counting_import  # type: ignore[method-assign]


async def start(gateway: StartGateway) -> tuple[TestClient[Any, Any], ImportLog]:
    client = await gateway()
    return client, ImportLog(client.app[HOST])


async def model_view(client: TestClient[Any, Any], chat: Conversation) -> list[tuple[str, str]]:
    """(role, text) of every text the session holds: what the model sees of the chat."""
    session = await client.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None
    return [
        (event.content.role or "", part.text)
        for event in session.events
        if event.content is not None and event.content.parts
        for part in event.content.parts
        if part.text and not part.thought
    ]


def posted_view(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        ("user" if m["role"] == "user" else "model", part["text"])
        for m in messages
        for part in m["parts"]
        if part.get("type") == "text"
    ]


async def test_a_chat_that_continues_is_never_rebuilt(gateway: StartGateway) -> None:
    client, imports = await start(gateway)
    chat = Conversation(client)
    for turn in range(12):
        reply = await chat.send(f"/echo turn {turn}")
        assert reply.status == 200 and reply.text == f"turn {turn}"
    assert imports.resets == 1 and imports.imported == []  # the new chat's session, and nothing imported
    assert await model_view(client, chat) == posted_view(chat.messages)


@pytest.mark.parametrize("change", ["edit a user message", "edit an answer", "drop a turn", "insert a user message",
                                    "add a field"])
async def test_a_changed_earlier_message_rebuilds_the_session(gateway: StartGateway, change: str) -> None:
    client, imports = await start(gateway)
    chat = Conversation(client)
    for turn in range(4):
        await chat.send(f"/echo turn {turn}")
    if change == "edit a user message":
        chat.messages[2]["parts"][0]["text"] = "/echo edited"
    elif change == "edit an answer":
        chat.messages[3]["parts"][-1]["text"] = "an answer the client changed"
    elif change == "drop a turn":
        del chat.messages[2:4]
    elif change == "insert a user message":
        chat.messages.insert(4, user_message("/echo never sent"))
    else:
        chat.messages[0]["metadata"] = {"pinned": True}
    reply = await chat.send("/echo after the change")
    assert reply.status == 200 and reply.text == "after the change"
    assert imports.resets == 2 and imports.imported == [len(chat.messages) - 2]
    assert await model_view(client, chat) == posted_view(chat.messages)
    # ...and from then on the rebuilt session is in sync again.
    await chat.send("/echo once more")
    assert imports.resets == 2
    assert await model_view(client, chat) == posted_view(chat.messages)


async def test_a_regenerate_rebuilds_from_the_posted_history(gateway: StartGateway) -> None:
    client, imports = await start(gateway)
    chat = Conversation(client)
    await chat.send("/echo one")
    await chat.send("/echo two")
    chat.messages.pop()  # the client drops the answer it regenerates
    reply = await post_chat(client, {**chat_body(chat.chat_id, chat.messages), "trigger": "regenerate-message"})
    assert reply.status == 200 and reply.text == "two"
    assert imports.resets == 2 and imports.imported == [2]


async def test_earlier_messages_are_validated_when_a_chat_is_imported(gateway: StartGateway) -> None:
    client, imports = await start(gateway)
    bad_part = {"type": "tool-x", "toolCallId": "t1", "state": "exploded"}
    history = [user_message("/echo hi"), {"id": "a1", "role": "assistant", "parts": [bad_part]},
               user_message("/echo again")]
    reply = await post_chat(client, chat_body("imported", history))
    assert reply.status == 400, reply.body
    assert reply.body["error"]["code"] == "invalid_body"  # type: ignore[index]
    assert "messages.1.parts" in reply.body["error"]["message"]  # type: ignore[index]
    assert imports.imported == []


async def test_a_deep_earlier_message_is_refused_when_imported(gateway: StartGateway) -> None:
    client = await gateway(settings(max_json_depth=16))
    deep: Any = "bottom"
    for _ in range(20):
        deep = {"d": deep}
    history = [{**user_message("/echo hi"), "metadata": deep}, user_message("/echo again")]
    reply = await post_chat(client, chat_body("deep", history))
    assert reply.status == 400 and reply.body["error"]["code"] == "invalid_json"  # type: ignore[index]
    # The same message as the last one is refused when the body is parsed.
    reply = await post_chat(client, chat_body("deep-last", history[:1]))
    assert reply.status == 400 and reply.body["error"]["code"] == "invalid_json"  # type: ignore[index]


async def test_a_bad_head_anywhere_is_refused_with_its_location(gateway: StartGateway) -> None:
    client = await gateway()
    history = [user_message("/echo hi"), {"id": "a1", "role": "tool", "parts": []}, user_message("/echo again")]
    reply = await post_chat(client, chat_body("heads", history))
    assert reply.status == 400
    assert "messages.1.role" in reply.body["error"]["message"]  # type: ignore[index]


JSON = {"Content-Type": "application/json"}


def posted_with(messages: list[dict[str, Any]], index: int, raw: bytes, chat_id: str) -> bytes:
    """A body of `messages` whose message at `index` is replaced by the bytes `raw`."""
    encoded = [json.dumps(m).encode() for m in messages]
    encoded[index] = raw
    return b'{"id": ' + json.dumps(chat_id).encode() + b', "messages": [' + b", ".join(encoded) + b"]}"


async def test_a_client_that_writes_its_json_its_own_way_stays_in_sync(gateway: StartGateway) -> None:
    """The fingerprint is over the bytes as posted: a client that always indents its JSON (not
    what orjson would write) continues its session like any other."""
    client, imports = await start(gateway)
    chat = Conversation(client)
    for turn in range(4):
        chat.messages.append(user_message(f"/echo turn {turn}"))
        reply = await post_chat(client, json.dumps(chat_body(chat.chat_id, chat.messages), indent=2), headers=JSON)
        assert reply.status == 200 and reply.text == f"turn {turn}"
        chat.messages.append({"id": f"answer-{turn}", "role": "assistant",
                              "parts": [{"type": "text", "text": reply.text}]})
    assert imports.resets == 1 and imports.imported == []
    assert await model_view(client, chat) == posted_view(chat.messages)


@pytest.mark.parametrize("chat_state", ["new chat", "chat in sync"])
async def test_an_earlier_message_that_is_not_json_is_refused_when_read(gateway: StartGateway,
                                                                         chat_state: str) -> None:
    """An earlier message's bytes are not parsed with the body; those the session has not run are
    parsed, and refused as the body would be, before anything runs."""
    client, imports = await start(gateway)
    chat = Conversation(client)
    if chat_state == "chat in sync":
        await chat.send("/echo one")
    history = [*chat.messages, {"id": "a-bad"}, user_message("/echo two")]
    # An answer with a byte that is not UTF-8 in its text (0xff).
    bad = b'{"id": "a-bad", "role": "assistant", "parts": [{"type": "text", "text": "\xff"}]}'
    reply = await post_chat(client, posted_with(history, len(history) - 2, bad, chat.chat_id), headers=JSON)
    assert reply.status == 400 and reply.body["error"]["code"] == "invalid_json", reply.body  # type: ignore[index]
    assert imports.imported == []
    # The same answer as valid JSON is taken.
    good = bad.replace(b"\xff", b"?")
    reply = await post_chat(client, posted_with(history, len(history) - 2, good, chat.chat_id), headers=JSON)
    assert reply.status == 200 and reply.text == "two", reply.body


# Operations a client may apply to its history between two turns.
EDITS = st.sampled_from(["none", "none", "none", "edit-user", "edit-answer", "drop-turn", "insert-user", "truncate"])


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(EDITS, min_size=1, max_size=8))
async def test_the_model_always_sees_the_posted_history(gateway: StartGateway, edits: list[str]) -> None:
    """Whatever the client does to its history between turns, after each turn the session holds
    exactly the posted history and the answer."""
    client = await gateway()
    chat = Conversation(client)
    for index, edit in enumerate(edits):
        turns = len(chat.messages) // 2
        if turns and edit == "edit-user":
            chat.messages[2 * (index % turns)]["parts"][0]["text"] = f"/echo edited {index}"
        elif turns > 1 and edit == "edit-answer":
            # Not the latest answer: an answer is fingerprinted when it is first posted back, so a
            # change made to it before that is not seen (docs/design/0007-history-sync.md).
            chat.messages[2 * (index % (turns - 1)) + 1]["parts"][-1]["text"] = f"changed {index}"
        elif turns and edit == "drop-turn":
            del chat.messages[2 * (index % turns) : 2 * (index % turns) + 2]
        elif turns and edit == "insert-user":
            chat.messages.insert(2 * (index % turns), user_message(f"/echo inserted {index}"))
            chat.messages.insert(2 * (index % turns) + 1,
                                 {"id": f"inserted-answer-{index}", "role": "assistant",
                                  "parts": [{"type": "text", "text": f"inserted {index}"}]})
        elif turns and edit == "truncate":
            del chat.messages[2 * (index % turns) :]
        posted = copy.deepcopy(chat.messages)
        reply = await chat.send(f"/echo turn {index}")
        assert reply.status == 200, reply.body
        assert await model_view(client, chat) == posted_view([*posted, *chat.messages[len(posted):]])


async def test_a_plain_turn_adds_adks_own_events_and_one_record(gateway: StartGateway) -> None:
    """The plan's state rides on the run's first event; the turn's record (the book, and the
    messages as the client holds them: what `GET /api/chats/{id}` gives) rides on its last: a turn
    adds ADK's own events and no other (each event costs every later turn of the chat)."""
    client, _ = await start(gateway)
    chat = Conversation(client)
    await chat.send("/echo one")
    session = await client.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None
    assert [(e.author, bool(e.content)) for e in session.events] == [("user", True), ("demo_agent", True)]
    recorded = session.events[-1].custom_metadata["adk_gateway"]["messages"]
    assert [m["role"] for m in recorded] == ["user", "assistant"] and recorded[0] == chat.messages[0]
    assert session.events[-1].actions.state_delta["gateway:turn"] == session.state["gateway:turn"]
    # An approval asked in a turn is saved with the run's last event, before the client is asked.
    await chat.send('/tool process_payment {"amount": 5, "recipient": "bob"}')
    session = await client.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None and all(e.content is not None for e in session.events)
    assert "adk_gateway" in (session.events[-1].custom_metadata or {})
    assert session.state["gateway:approvals"]["calls"][0]["state"] == "approval-requested"


async def test_a_stopped_turn_keeps_its_events_and_its_record(gateway: StartGateway) -> None:
    """A stop lands while the run's latest event is held: it is stored with the stopped turn's
    record, and the chat loads with what the client was sent."""
    client, _ = await start(gateway)
    chat = Conversation(client)
    await chat.send("/echo before")
    stream = await LiveStream.open(client, chat_body(chat.chat_id, [*chat.messages, user_message("/stream 400 20")]))
    await stream.take(4)
    async with client.post(f"/api/chat/{chat.chat_id}/stop", json={}) as response:
        assert await response.json() == {"stopped": True}
    reply = await stream.rest()
    assert reply.types[-1] == "abort"
    await wait_for(lambda: client.app[REGISTRY].counts()["runs"] == 0, what="the run to end")
    session = await client.app[HOST].get_session("anonymous", chat.chat_id)
    assert session is not None
    assert [(e.author, bool(e.content)) for e in session.events] == [
        ("user", True), ("demo_agent", True), ("user", True)]
    assert "adk_gateway" in (session.events[-1].custom_metadata or {})
    async with client.get(f"/api/chats/{chat.chat_id}") as response:
        loaded = (await response.json())["messages"]
    assert [m["role"] for m in loaded] == ["user", "assistant", "user", "assistant"]
    assert loaded[2]["parts"][0]["text"] == "/stream 400 20"
    streamed = "".join(c["delta"] for c in reply.of_type("text-delta"))
    assert "".join(p.get("text", "") for p in loaded[3]["parts"]) == streamed
