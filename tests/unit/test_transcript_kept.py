"""`AgentHost.transcript`: kept between calls and brought up to date from the events added since,
and rebuilt whenever the session no longer starts with what it was built from."""

from __future__ import annotations

import time

from google.adk.events import Event, EventActions

from adk_gateway.agents.adk import RECORD_KEY, AgentHost, session_service_from_uri
from tests.integration.support import ToolLog, counting_agent

USER, CHAT = "u1", "c1"


def recorded(invocation: str, *ids: str) -> Event:
    messages = [{"id": i, "role": "user" if i.startswith("u") else "assistant", "parts": []} for i in ids]
    return Event(invocation_id=invocation, author="user", timestamp=time.time(),
                 custom_metadata={RECORD_KEY: {"messages": messages}})


async def append(host: AgentHost, event: Event) -> None:
    session = await host.get_session(USER, CHAT, events=False)
    assert session is not None
    await host.session_service.append_now(session, event)


async def ids(host: AgentHost) -> list[str]:
    transcript = await host.transcript(USER, CHAT)
    assert transcript is not None
    return [str(m["id"]) for m in transcript.messages]


async def test_the_transcript_follows_the_chat_turn_by_turn() -> None:
    host = AgentHost(counting_agent(ToolLog()), session_service_from_uri("memory://"), max_llm_calls=5)
    assert await host.transcript(USER, CHAT) is None
    await host.create_session(USER, CHAT)
    assert await ids(host) == []
    await append(host, recorded("i1", "u1", "a1"))
    assert await ids(host) == ["u1", "a1"]
    kept = await host.transcript(USER, CHAT)
    await append(host, recorded("i2", "u2", "a2"))
    assert await ids(host) == ["u1", "a1", "u2", "a2"]
    assert await host.transcript(USER, CHAT) is kept  # brought up to date, not rebuilt
    assert kept is not None and kept.last is not None and kept.last["id"] == "a2"
    # A rewind recorded in the session drops what came from the invocation it names.
    await append(host, Event(invocation_id="rw", author="user", timestamp=time.time(),
                             actions=EventActions(rewind_before_invocation_id="i2")))
    assert await ids(host) == ["u1", "a1"]
    # The chat deleted and made again: a new transcript, not the old one extended.
    await host.delete_chat(USER, CHAT)
    assert await host.transcript(USER, CHAT) is None
    await host.create_session(USER, CHAT)
    await append(host, recorded("j1", "u9"))
    assert await ids(host) == ["u9"]


async def test_a_chat_whose_events_changed_under_the_kept_transcript_is_rebuilt() -> None:
    store = session_service_from_uri("memory://")
    host = AgentHost(counting_agent(ToolLog()), store, max_llm_calls=5)
    await host.create_session(USER, CHAT)
    await append(host, recorded("i1", "u1", "a1"))
    await append(host, recorded("i2", "u2", "a2"))
    assert await ids(host) == ["u1", "a1", "u2", "a2"]
    # Another writer's session made again under the same id, as long as the kept one was.
    await store.delete_session(app_name=host.app_name, user_id=USER, session_id=CHAT)
    await host.create_session(USER, CHAT)
    await append(host, recorded("k1", "u7"))
    await append(host, recorded("k2", "u8"))
    assert await ids(host) == ["u7", "u8"]
