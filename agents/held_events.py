"""A chat turn's latest event, held back from the store so that the turn's record can ride on it.

How it works
------------
The chat service writes one record at the end of every turn: the turn's messages as the client
holds them, the approval book and the turn's bookkeeping (`AgentHost.save_state`). Written as an
event of its own, that is a third event a turn beside the user's message and the model's answer,
and ADK walks every event of a session several times to build each model request: over a long
chat each such event costs a little more on every later turn (a 200-turn chat: about 1.5 ms a
turn at its end, BENCHMARKS.md). So while a turn runs (`hold`), each event the runner appends goes
to the runner's own session object at once (the runner sees its session as before) but reaches
the store only when the next one comes; the last one waits for the turn's end, where `release`
adds the record and the state delta to it and stores it. One write fewer, and no extra event.

- Order is kept: any write to a held chat's session stores the held event first; a read of it
  stores it first too (nothing reads a chat's session while its turn runs but that turn).
- The gateway's own writes (`append_now`) are never held: what a client is told it can answer
  (an approval) is stored before it is told.
- The hold ends with the turn: leaving `hold` stores whatever is still held (shielded from a
  second cancellation, at shutdown), and `flush` (which the runner calls when it closes) stores
  everything held. What the store lacks meanwhile is one event, the run's latest: a process that
  dies mid-turn loses it, as it loses the turn's record.
- A store that checks for stale sessions (ADK's SQL stores) may find the runner's session object
  stale at the turn's end (another request wrote to the chat meanwhile, e.g. a rename): the held
  event is then stored through a fresh read of the session, as the record was before.
- ADK allows buffering stores: `BaseSessionService.flush` exists for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse

__all__ = ["HoldingSessionService"]

SessionKey = tuple[str, str, str]  # app, user, session id


@dataclass(slots=True)
class _Held:
    session: Session  # the runner's session object, which has the event already
    event: Event


class HoldingSessionService(BaseSessionService):
    """Any session store, with a held chat's latest event kept back; see the module docstring."""

    def __init__(self, inner: BaseSessionService) -> None:
        self.inner = inner
        # The chats held now, each with its event not stored yet (None: nothing held yet).
        self._holds: dict[SessionKey, _Held | None] = {}

    # --- holding ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def hold(self, app_name: str, user_id: str, session_id: str) -> AsyncIterator[None]:
        """Holds the chat's latest event while the block runs (a turn); stores it on the way out
        unless `release` did."""
        key = (app_name, user_id, session_id)
        if key in self._holds:  # held already (one run a chat at a time: not expected)
            yield
            return
        self._holds[key] = None
        try:
            yield
        finally:
            held = self._holds.pop(key, None)
            if held is not None:
                store = asyncio.ensure_future(self._store(held))
                await asyncio.shield(store)

    async def release(self, app_name: str, user_id: str, session_id: str, *, invocation_id: str | None,
                      state_delta: Mapping[str, Any], custom_metadata: Mapping[str, Any]) -> bool:
        """Adds a state delta and metadata to the chat's held event, if it is of `invocation_id`,
        and stores it. False: nothing of that invocation is held (the caller writes its own event)."""
        key = (app_name, user_id, session_id)
        held = self._holds.get(key)
        if held is None or invocation_id is None or held.event.invocation_id != invocation_id \
                or held.event.actions.compaction is not None:
            return False
        self._holds[key] = None  # taken before any wait: a concurrent store finds nothing to store
        event = held.event
        event.actions.state_delta.update(state_delta)
        event.custom_metadata = {**(event.custom_metadata or {}), **custom_metadata}
        # The runner's session object gets the delta when the store appends the event to it.
        await self._store(held)
        return True

    async def _store_held(self, key: SessionKey) -> None:
        held = self._holds.get(key)
        if held is not None:
            self._holds[key] = None
            await self._store(held)

    async def _store(self, held: _Held) -> None:
        session, event = held.session, held.event
        # The session object has the event (appended when it was held); the store appends it again.
        events = session.events
        for index in range(len(events) - 1, -1, -1):
            if events[index] is event:
                del events[index]
                break
        try:
            await self.inner.append_event(session, event)
        except StaleSessionError as exc:  # another writer came between
            fresh = await self.inner.get_session(app_name=session.app_name, user_id=session.user_id,
                                                 session_id=session.id, config=GetSessionConfig(num_recent_events=0))
            if fresh is None:
                raise SessionNotFoundError(f"Session {session.id} not found.") from exc
            await self.inner.append_event(fresh, event)
            events.append(event)

    # --- BaseSessionService ------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """The runner's writes: held while the chat is held."""
        key = (session.app_name, session.user_id, session.id)
        if event.partial or key not in self._holds:
            return await self.inner.append_event(session, event)
        await self._store_held(key)
        # What a store's append does to the caller's session object, without the store.
        event = await super().append_event(session, event)
        self._holds[key] = _Held(session, event)
        return event

    async def append_now(self, session: Session, event: Event) -> Event:
        """The gateway's own writes: stored at once (after what is held of the chat)."""
        await self._store_held((session.app_name, session.user_id, session.id))
        return await self.inner.append_event(session, event)

    async def flush(self) -> None:
        for key in list(self._holds):
            await self._store_held(key)
        await self.inner.flush()

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        return await self.inner.create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        await self._store_held((app_name, user_id, session_id))
        return await self.inner.get_session(app_name=app_name, user_id=user_id, session_id=session_id, config=config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self.inner.list_sessions(app_name=app_name, user_id=user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        key = (app_name, user_id, session_id)
        if self._holds.get(key) is not None:
            self._holds[key] = None  # the session goes: nothing of it is left to store
        await self.inner.delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self.inner.get_user_state(app_name=app_name, user_id=user_id)
