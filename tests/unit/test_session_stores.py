"""Unit tests for the bounded session stores of adk_gateway.agents.adk: the store-call timeout and the bulk
history import (the `memory://` store's eviction is tested in test_memory_store.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from adk_gateway.agents.adk import (
    AgentHost,
    GuardedSessionService,
    MemorySessionService,
    append_history_in_memory,
    history_events,
)
from adk_gateway.core.errors import StoreUnavailable
from adk_gateway.core.pacing import EVERY
from adk_gateway.core.requests import UIMessage
from tests.integration.support import ToolLog, counting_agent
from tests.turns import CountedMessages, Turns

APP = "app"


# --- the store-call timeout -----------------------------------------------------------------------


class HangingStore(InMemorySessionService):
    def __init__(self) -> None:
        super().__init__()
        self.hang = asyncio.Event()

    async def get_session(self, **kwargs: Any) -> Session | None:
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")


async def test_a_hanging_store_call_fails_with_store_unavailable() -> None:
    counted: list[str] = []
    store = GuardedSessionService(HangingStore(), timeout_s=0.05)
    store.timed_out = counted.append
    with pytest.raises(StoreUnavailable) as failed:
        await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert failed.value.status == 503 and failed.value.headers() == {"Retry-After": "1"}
    assert counted == ["get_session"]
    # Other calls go through to the store as they are.
    created = await store.create_session(app_name=APP, user_id="u", session_id="c")
    assert created.id == "c"


async def test_no_timeout_means_no_bound() -> None:
    store = GuardedSessionService(InMemorySessionService())
    session = await store.create_session(app_name=APP, user_id="u", session_id="c")
    await store.append_event(session, Event(invocation_id="i", author="user", timestamp=time.time()))
    again = await store.get_session(app_name=APP, user_id="u", session_id="c")
    assert again is not None and len(again.events) == 1


@pytest.mark.parametrize(("store", "bound"), [(MemorySessionService(), 0.0), (InMemorySessionService(), 10.0),
                                             (HangingStore(), 10.0)], ids=["memory", "adk-in-memory", "subclass"])
def test_only_the_gateways_own_memory_store_goes_unbounded(store: Any, bound: float) -> None:
    """`memory://` never waits on anything, so its calls get no timer; any other store (ADK's, or
    a subclass of one that may do I/O) keeps `--store-timeout-s`."""
    host = AgentHost(counting_agent(ToolLog()), store, max_llm_calls=5)
    host.configure(store_timeout_s=10.0)
    assert host.guarded.timeout_s == bound


# --- history import ---------------------------------------------------------------------------------


def history(count: int) -> list[UIMessage]:
    messages = []
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        messages.append(UIMessage.model_validate(
            {"id": f"m{index}", "role": role, "parts": [{"type": "text", "text": f"message {index}"}]}))
    return messages


def test_history_events_keep_order_and_end_at_now() -> None:
    events = history_events("agent", history(50), now=5_000.0)
    assert [e.content.parts[0].text for e in events if e.content and e.content.parts] == [
        f"message {i}" for i in range(50)]
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert stamps[-1] < 5_000.0
    assert [e.author for e in events[:2]] == ["user", "agent"]


def test_history_events_pair_tool_calls_with_their_results() -> None:
    message = UIMessage.model_validate({"id": "a", "role": "assistant", "parts": [
        {"type": "tool-lookup", "toolCallId": "t1", "state": "output-available", "input": {"q": 1}, "output": 2},
        {"type": "text", "text": "done"}]})
    calls, responses, text = history_events("agent", [message])
    assert calls.content is not None and calls.content.role == "model"
    assert calls.content.parts is not None and calls.content.parts[0].function_call is not None
    assert calls.content.parts[0].function_call.args == {"q": 1}
    assert responses.content is not None and responses.content.parts is not None
    response = responses.content.parts[0].function_response
    assert response is not None and response.id == "t1" and response.response == {"result": 2}
    assert text.content == types.Content(role="model", parts=[types.Part(text="done")])


async def test_bulk_append_is_what_append_event_would_store() -> None:
    store = MemorySessionService()
    bulk = await store.create_session(app_name=APP, user_id="u", session_id="bulk")
    one_by_one = await store.create_session(app_name=APP, user_id="u", session_id="single")
    append_history_in_memory(store, bulk, history_events("agent", history(30)))
    for event in history_events("agent", history(30)):
        await store.append_event(one_by_one, event)
    stored_bulk = await store.get_session(app_name=APP, user_id="u", session_id="bulk")
    stored_single = await store.get_session(app_name=APP, user_id="u", session_id="single")
    assert stored_bulk is not None and stored_single is not None
    assert [e.content for e in stored_bulk.events] == [e.content for e in stored_single.events]
    assert [e.content for e in bulk.events] == [e.content for e in stored_bulk.events]


class CountingStore(MemorySessionService):
    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    async def append_event(self, session: Session, event: Event) -> Event:
        self.appends += 1
        return await super().append_event(session, event)


async def test_importing_a_long_history_never_holds_the_loop() -> None:
    """10,000 messages: converted a few at a time between turns given to the loop (counted, not
    timed: `tests.turns`), and appended to the in-memory store in one step (ADK's per-event append
    compares with every stored event: quadratic)."""
    store = CountingStore()
    host = AgentHost(counting_agent(ToolLog()), store, max_llm_calls=5)
    session = await host.reset_session("u", "long", exists=False)
    messages = CountedMessages(history(10_000))
    with Turns(lambda: messages.taken) as turns:
        await host.import_history(session, messages)
    stored = await host.get_session("u", "long")
    assert stored is not None and len(stored.events) == 10_000
    assert [e.content.parts[0].text for e in stored.events[:3] if e.content and e.content.parts] == [
        "message 0", "message 1", "message 2"]
    assert store.appends == 0  # one bulk step, not 10,000 scans of the stored events
    assert turns.widest <= 2 * EVERY, f"{turns.widest} messages converted between two turns of another task"
