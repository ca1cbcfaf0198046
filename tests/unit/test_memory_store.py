"""The `memory://` store (`adk_gateway.agents.memory_store.MemorySessionService`): the same answers as ADK's
`InMemorySessionService` for the same calls, without copying events; and its eviction."""

from __future__ import annotations

import itertools
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.adk.events import Event, EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.agents.memory_store import MemorySessionService

APP = "app"
T = TypeVar("T")


def resolve(call: Coroutine[Any, Any, T]) -> T:
    """Runs a store call that never waits (both in-memory stores) to its result, without a loop."""
    try:
        call.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    call.close()
    raise AssertionError("the store call waited")


# --- the same calls against ADK's store and ours ------------------------------------------------------

USERS = st.sampled_from(["u1", "u2"])
SESSION_IDS = st.sampled_from(["s1", "s2", " s1 ", "s3"])
STATE_KEYS = st.sampled_from(["k", "other", "app:a", "app:b", "user:c", "temp:t"])
STATES = st.dictionaries(STATE_KEYS, st.integers(0, 3), max_size=4)
TIMES = st.sampled_from([10.0, 20.0, 20.0, 30.0, 40.0])


@dataclass(frozen=True)
class EventSpec:
    """An event to build twice, once for each store (appending trims the event's temp keys)."""

    event_id: str
    author: str
    text: str
    timestamp: float
    delta: dict[str, int]
    partial: bool

    def build(self) -> Event:
        return Event(
            id=self.event_id, invocation_id="inv", author=self.author, timestamp=self.timestamp,
            partial=self.partial or None,
            content=types.Content(role="user" if self.author == "user" else "model",
                                  parts=[types.Part(text=self.text)]),
            actions=EventActions(state_delta=dict(self.delta)),
        )


EVENTS = st.builds(
    EventSpec,
    event_id=st.sampled_from(["e1", "e2", "e3", "e4", "e5"]),
    author=st.sampled_from(["user", "agent"]),
    text=st.sampled_from(["hi", "there"]),
    timestamp=TIMES,
    delta=STATES,
    partial=st.sampled_from([False, False, False, True]),
)
CONFIGS = st.none() | st.builds(
    GetSessionConfig,
    num_recent_events=st.none() | st.integers(0, 4),
    after_timestamp=st.none() | TIMES,
)

OPERATIONS = st.one_of(
    st.tuples(st.just("create"), USERS, st.none() | SESSION_IDS, st.none() | STATES),
    st.tuples(st.just("get"), USERS, SESSION_IDS, CONFIGS),
    st.tuples(st.just("append"), st.integers(0, 20), EVENTS),
    st.tuples(st.just("append_unknown"), USERS, EVENTS),
    st.tuples(st.just("list"), st.none() | USERS),
    st.tuples(st.just("delete"), USERS, SESSION_IDS),
    st.tuples(st.just("user_state"), USERS),
)


@dataclass
class Caller:
    """One store and the sessions its caller holds (what create/get returned, appended to since)."""

    store: BaseSessionService
    ids: Iterator[int] = field(default_factory=itertools.count)
    held: list[Session] = field(default_factory=list)

    @contextmanager
    def providers(self, now: float) -> Iterator[None]:
        platform_time.set_time_provider(lambda: now)
        platform_uuid.set_id_provider(lambda: f"generated-{next(self.ids)}")
        try:
            yield
        finally:
            platform_time.reset_time_provider()
            platform_uuid.reset_id_provider()

    def apply(self, operation: tuple[Any, ...], now: float) -> Any:
        with self.providers(now):
            try:
                return self._apply(operation)
            except Exception as error:  # the same failure from both stores is the same answer
                return ("raised", type(error).__name__)

    def _apply(self, operation: tuple[Any, ...]) -> Any:
        kind, *args = operation
        if kind == "create":
            user, session_id, state = args
            session = resolve(self.store.create_session(
                app_name=APP, user_id=user, session_id=session_id, state=dict(state) if state else state))
            self.held.append(session)
            return view(session)
        if kind == "get":
            user, session_id, config = args
            got = resolve(self.store.get_session(app_name=APP, user_id=user, session_id=session_id, config=config))
            if got is not None:
                self.held.append(got)
            return view(got)
        if kind == "append":
            index, spec = args
            if not self.held:
                return "nothing held"
            session = self.held[index % len(self.held)]
            appended = resolve(self.store.append_event(session, spec.build()))
            return appended.model_dump(), view(session)
        if kind == "append_unknown":
            user, spec = args
            stranger = Session(app_name=APP, user_id=user, id="unknown")
            return resolve(self.store.append_event(stranger, spec.build())).model_dump()
        if kind == "list":
            (user,) = args
            return [view(s) for s in resolve(self.store.list_sessions(app_name=APP, user_id=user)).sessions]
        if kind == "delete":
            user, session_id = args
            resolve(self.store.delete_session(app_name=APP, user_id=user, session_id=session_id))
            return None
        (user,) = args
        return resolve(self.store.get_user_state(app_name=APP, user_id=user))


def view(session: Session | None) -> Any:
    if session is None:
        return None
    return (session.id, session.app_name, session.user_id, dict(session.state),
            [e.model_dump() for e in session.events], session.last_update_time)


@settings(max_examples=300, deadline=None)
@given(st.lists(OPERATIONS, max_size=40))
def test_same_answers_as_adks_in_memory_store(operations: list[tuple[Any, ...]]) -> None:
    adk = Caller(InMemorySessionService())
    ours = Caller(MemorySessionService())
    for step, operation in enumerate(operations):
        now = 1_000.0 + step
        expected = adk.apply(operation, now)
        assert ours.apply(operation, now) == expected, operation
    # And what is stored in the end, read back whole.
    for user, session_id in itertools.product(["u1", "u2"], ["s1", "s2", "s3", "generated-0"]):
        final = ("get", user, session_id, None)
        assert ours.apply(final, 0.0) == adk.apply(final, 0.0)


# --- no copies, and no way to corrupt the store through a copy ----------------------------------------


def event(event_id: str, timestamp: float, delta: dict[str, Any] | None = None) -> Event:
    return Event(id=event_id, invocation_id="i", author="user", timestamp=timestamp,
                 content=types.Content(role="user", parts=[types.Part(text=event_id)]),
                 actions=EventActions(state_delta=delta or {}))


async def test_sessions_handed_out_share_events_but_not_lists_or_state() -> None:
    store = MemorySessionService()
    session = await store.create_session(app_name=APP, user_id="u", session_id="c", state={"k": [1]})
    await store.append_event(session, event("e1", 1.0, {"x": 1, "app:y": 2}))
    first = await store.get_session(app_name=APP, user_id="u", session_id="c")
    second = await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert first is not None and second is not None
    assert first.events[0] is second.events[0]  # events are shared, not copied
    assert first.events is not second.events and first.state is not second.state
    first.events.clear()
    first.events.append(event("stray", 2.0))
    first.state["x"] = 99
    first.state["app:y"] = 99
    del first.state["k"]
    again = await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert again is not None
    assert [e.id for e in again.events] == ["e1"]
    assert again.state == {"k": [1], "x": 1, "app:y": 2}


async def test_a_stale_copy_appends_to_the_stored_session() -> None:
    store = MemorySessionService()
    stale = await store.create_session(app_name=APP, user_id="u", session_id="c")
    fresh = await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert fresh is not None
    await store.append_event(fresh, event("e1", 1.0))
    await store.append_event(stale, event("e2", 2.0))
    stored = await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert stored is not None and [e.id for e in stored.events] == ["e1", "e2"]
    assert stored.last_update_time == 2.0


async def test_bulk_history_is_what_append_event_would_store() -> None:
    store = MemorySessionService()
    bulk = await store.create_session(app_name=APP, user_id="u", session_id="bulk")
    single = await store.create_session(app_name=APP, user_id="u", session_id="single")
    events = [event(f"e{i}", float(i)) for i in range(30)]
    store.append_history(bulk, events)
    for item in events:
        await store.append_event(single, item)
    stored_bulk = await store.get_session(app_name=APP, user_id="u", session_id="bulk")
    stored_single = await store.get_session(app_name=APP, user_id="u", session_id="single")
    assert stored_bulk is not None and stored_single is not None
    assert stored_bulk.events == stored_single.events == bulk.events
    assert stored_bulk.last_update_time == stored_single.last_update_time == 29.0
    # A re-delivered history event is recognised as already stored.
    await store.append_event(stored_bulk, events[3])
    again = await store.get_session(app_name=APP, user_id="u", session_id="bulk")
    assert again is not None and len(again.events) == 30


# --- eviction -----------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def make_store(**kwargs: Any) -> tuple[MemorySessionService, FakeClock, list[str]]:
    clock = FakeClock()
    store = MemorySessionService(clock=clock, **kwargs)
    evicted: list[str] = []
    store.evicted = evicted.append
    return store, clock, evicted


async def chats(store: MemorySessionService, user: str = "u") -> set[str]:
    return {s.id for s in (await store.list_sessions(app_name=APP, user_id=user)).sessions}


async def test_idle_chats_are_dropped_after_the_ttl() -> None:
    store, clock, evicted = make_store(ttl_s=60)
    await store.create_session(app_name=APP, user_id="u", session_id="old")
    clock.now += 30
    await store.create_session(app_name=APP, user_id="u", session_id="newer")
    clock.now += 31  # "old" is idle 61 s, "newer" 31 s
    assert await store.get_session(app_name=APP, user_id="u", session_id="newer") is not None
    assert await chats(store) == {"newer"}
    assert evicted == ["idle"]


async def test_using_a_chat_keeps_it() -> None:
    store, clock, evicted = make_store(ttl_s=60)
    session = await store.create_session(app_name=APP, user_id="u", session_id="kept")
    for number in range(5):
        clock.now += 50
        await store.append_event(session, event(f"e{number}", clock.now))
    assert await store.get_session(app_name=APP, user_id="u", session_id="kept") is not None
    assert evicted == []


async def test_touch_keeps_a_chat() -> None:
    store, clock, evicted = make_store(ttl_s=60)
    await store.create_session(app_name=APP, user_id="u", session_id="kept")
    clock.now += 50
    store.touch(APP, "u", "kept")
    clock.now += 50
    assert await store.get_session(app_name=APP, user_id="u", session_id="kept") is not None
    assert evicted == []


async def test_past_the_cap_the_least_recently_used_goes_first() -> None:
    store, clock, evicted = make_store(max_chats=3)
    for name in ("a", "b", "c"):
        clock.now += 1
        await store.create_session(app_name=APP, user_id="u", session_id=name)
    clock.now += 1
    await store.get_session(app_name=APP, user_id="u", session_id="a")  # "b" is now the least recent
    await store.create_session(app_name=APP, user_id="u", session_id="d")
    assert await chats(store) == {"a", "c", "d"}
    assert evicted == ["lru"]


async def test_a_busy_chat_is_never_dropped() -> None:
    store, clock, evicted = make_store(ttl_s=10, max_chats=2)
    store.busy = lambda _user, chat: chat == "running"
    await store.create_session(app_name=APP, user_id="u", session_id="running")
    await store.create_session(app_name=APP, user_id="u", session_id="idle")
    clock.now += 100
    await store.create_session(app_name=APP, user_id="u", session_id="fresh")
    assert await chats(store) == {"running", "fresh"}
    assert evicted == ["idle"]
    # Every chat busy and over the cap: nothing can go, and the store does not spin.
    store.busy = lambda _user, _chat: True
    await store.create_session(app_name=APP, user_id="u", session_id="more")
    assert await chats(store) == {"running", "fresh", "more"}


async def test_an_evicted_chat_is_gone_with_its_events() -> None:
    store, clock, evicted = make_store(ttl_s=1)
    session = await store.create_session(app_name=APP, user_id="gone", session_id="x")
    await store.append_event(session, event("e1", 1.0))
    clock.now += 5
    await store.create_session(app_name=APP, user_id="other", session_id="y")
    assert "gone" not in store.sessions[APP]  # an empty user is forgotten
    assert await store.get_session(app_name=APP, user_id="gone", session_id="x") is None
    assert evicted == ["idle"]
    recreated = await store.create_session(app_name=APP, user_id="gone", session_id="x")
    await store.append_event(recreated, event("e1", 1.0))  # not taken for a re-delivery
    stored = await store.get_session(app_name=APP, user_id="gone", session_id="x")
    assert stored is not None and [e.id for e in stored.events] == ["e1"]


async def test_delete_and_recreate_keeps_one_entry() -> None:
    store, _, evicted = make_store(max_chats=1)
    await store.create_session(app_name=APP, user_id="u", session_id="c")
    await store.delete_session(app_name=APP, user_id="u", session_id="c")
    await store.create_session(app_name=APP, user_id="u", session_id="c")
    assert await chats(store) == {"c"} and evicted == []
