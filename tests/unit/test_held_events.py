"""The store that holds a turn's latest event back for the turn's record (`agents/held_events.py`),
on the gateway's own store and on ADK's SQL store (SQLite), which checks for stale sessions."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.events import Event, EventActions
from google.adk.sessions import BaseSessionService
from google.genai import types

from adk_gateway.agents.adk import session_service_from_uri
from adk_gateway.agents.held_events import HoldingSessionService

APP, USER, CHAT = "app", "u1", "c1"


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseSessionService]:
    uri = "memory://" if request.param == "memory" else f"sqlite+aiosqlite:///{tmp_path}/s.db"
    yield session_service_from_uri(uri)


def said(text: str, *, invocation: str = "inv-1", author: str = "agent", **state: object) -> Event:
    return Event(invocation_id=invocation, author=author, timestamp=time.time(),
                 content=types.Content(role="model", parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=dict(state)))


async def stored_texts(store: BaseSessionService) -> list[str]:
    session = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
    assert session is not None
    return [e.content.parts[0].text or "" for e in session.events if e.content and e.content.parts]


async def test_the_latest_event_waits_for_the_next_and_the_runner_sees_it_at_once(store: BaseSessionService) -> None:
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("one", k=1))
        assert [e.content.parts[0].text for e in session.events] == ["one"]  # the runner's view
        assert session.state["k"] == 1
        assert await stored_texts(store) == []
        await held.append_event(session, said("two"))
        assert await stored_texts(store) == ["one"]
    assert await stored_texts(store) == ["one", "two"]  # the hold's end stores what is left
    assert [e.content.parts[0].text for e in session.events] == ["one", "two"]  # once each


async def test_the_turns_record_rides_on_its_last_event(store: BaseSessionService) -> None:
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("answer"))
        released = await held.release(APP, USER, CHAT, invocation_id="inv-1", state_delta={"book": [1]},
                                      custom_metadata={"record": {"messages": ["m"]}})
        assert released
        stored = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
        assert stored is not None and len(stored.events) == 1
        assert stored.events[0].custom_metadata == {"record": {"messages": ["m"]}}
        assert stored.state["book"] == [1]
    stored = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
    assert stored is not None and len(stored.events) == 1  # nothing stored twice


async def test_a_record_of_another_invocation_or_without_a_hold_is_not_merged(store: BaseSessionService) -> None:
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    assert not await held.release(APP, USER, CHAT, invocation_id="inv-1", state_delta={}, custom_metadata={})
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("answer", invocation="inv-2"))
        assert not await held.release(APP, USER, CHAT, invocation_id="inv-1", state_delta={"x": 1},
                                      custom_metadata={})
    stored = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
    assert stored is not None and [e.invocation_id for e in stored.events] == ["inv-2"]
    assert "x" not in stored.state


async def test_the_gateways_own_writes_and_reads_come_after_what_is_held(store: BaseSessionService) -> None:
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("model"))
        read = await held.get_session(app_name=APP, user_id=USER, session_id=CHAT)
        assert read is not None and [e.content.parts[0].text for e in read.events if e.content] == ["model"]
        await held.append_event(session, said("later"))
        fresh = await held.get_session(app_name=APP, user_id=USER, session_id=CHAT)
        assert fresh is not None
        await held.append_now(fresh, said("gateway", author="user"))  # stored at once, after "later"
        assert await stored_texts(store) == ["model", "later", "gateway"]


async def test_a_session_gone_stale_meanwhile_still_gets_its_event(tmp_path: Path) -> None:
    """Another writer (a rename, another instance) between the runner's last write and the turn's
    end: ADK's SQL store refuses the runner's session object; the event goes through a fresh read."""
    store = session_service_from_uri(f"sqlite+aiosqlite:///{tmp_path}/s.db")
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("answer"))
        other = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
        assert other is not None
        await store.append_event(other, Event(invocation_id="rename", author="user", timestamp=time.time(),
                                              actions=EventActions(state_delta={"title": "t"})))
        assert await held.release(APP, USER, CHAT, invocation_id="inv-1", state_delta={"book": 1},
                                  custom_metadata={"record": 1})
    stored = await store.get_session(app_name=APP, user_id=USER, session_id=CHAT)
    assert stored is not None
    # Both stored; a SQL store orders events by their time (the answer came first).
    assert [e.invocation_id for e in stored.events] == ["inv-1", "rename"]
    assert stored.events[0].custom_metadata == {"record": 1}
    assert stored.state["book"] == 1 and stored.state["title"] == "t"


async def test_flush_stores_everything_held(store: BaseSessionService) -> None:
    held = HoldingSessionService(store)
    session = await held.create_session(app_name=APP, user_id=USER, session_id=CHAT)
    async with held.hold(APP, USER, CHAT):
        await held.append_event(session, said("answer"))
        await held.flush()
        assert await stored_texts(store) == ["answer"]
    assert await stored_texts(store) == ["answer"]
