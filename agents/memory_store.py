"""The `memory://` session store: ADK's in-memory semantics without copying the session.

ADK's `InMemorySessionService` deep-copies the whole session, every event and every part, on each
`get_session` (the runner reads the session once per turn), and its duplicate check on
`append_event` scans every stored event. Over a long chat both grow with the number of events:
at turn 200 of a reused chat the deep copy is the largest single cost of a turn
(`docs/perf/profile-reused-chat.md`). `MemorySessionService` keeps the same behaviour for everything
callers rely on, with no per-event cost that grows with the session:

- `create_session`, `get_session` (with `GetSessionConfig.num_recent_events` and
  `after_timestamp`), `list_sessions` (sessions without events, sorted by last update, user, id),
  `delete_session`, `get_user_state`, `append_event` and `last_update_time` behave as ADK's.
- State prefixes as in ADK: `app:` keys live once per app and `user:` keys once per (app, user);
  both are stored without their prefix and merged back, prefixed, into every session returned.
  `temp:` keys are applied to the caller's session object for the rest of the invocation and
  stripped from the stored event, never persisted (`BaseSessionService.append_event`).
- An equal re-delivery of an already stored event is ignored, as in ADK; the check looks only at
  stored events with the same id (an index by id), not at every event.
- ADK has no stale-session check for its in-memory store (only the database stores raise
  `StaleSessionError`), and neither has this one: the gateway runs at most one invocation per
  chat at a time, so no two writers hold the same session.

What is copied and what is shared, and why:

- Each session handed out is a new `Session` object with its own `events` list (a copy of the
  list: pointers, not events) and its own `state` dict (a shallow copy of the session's state
  with the app and user state merged in). Appending to, removing from or reassigning entries of
  either therefore never changes what is stored; the runner appends to its copy and the store
  appends to its own list in `append_event`.
- Events are shared, not copied: an event is immutable once appended (ADK's own in-memory store
  stores the very object the runner passed to `append_event`, and hands the same objects out
  under its light-copy flag). Copying them is exactly the cost this store exists to avoid.
- State values are shared, not copied: state changes only through `state_delta` on events (ADK's
  `State` records writes as a delta, the store replaces the value), so a value is replaced, never
  edited in place, by anyone going through the API.

On top of ADK's behaviour it is bounded like the store it replaces: a chat idle longer than
`ttl_s` (0: never) is dropped, and past `max_chats` the least recently used goes first, never one
for which `busy(user, chat)` holds (a run in progress). See `MemorySessionService` for how.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.sessions.state import State

__all__ = ["MemorySessionService"]

log = structlog.get_logger("adk_gateway.agents.memory_store")

Key = tuple[str, str, str]  # (app, user, session id)


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state or state delta; `temp:` keys are dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


class MemorySessionService(BaseSessionService):
    """In-memory sessions, handed out without copying events; bounded by idle time and count.

    Eviction: every store call on a chat (create, get, append) moves its key to the end of an
    ordered dict, so the dict runs from least to most recently used. Each call first drops, from
    the front, chats idle past the TTL and then any above the cap; both stop at the first chat
    that stays, so the cost is the number dropped. A chat for which `busy(user, chat)` holds is
    never dropped; it counts as just used. Idle chats therefore go at the next store call, not on
    a timer: with no calls, nothing grows either.
    """

    def __init__(self, *, ttl_s: float = 0.0, max_chats: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # app -> user -> session id -> the stored session (never handed out).
        self.sessions: dict[str, dict[str, dict[str, Session]]] = {}
        # app -> user -> state (keys without the `user:` prefix); app -> state (without `app:`).
        self.user_state: dict[str, dict[str, dict[str, Any]]] = {}
        self.app_state: dict[str, dict[str, Any]] = {}
        self.ttl_s = ttl_s
        self.max_chats = max_chats
        self.clock = clock
        self.busy: Callable[[str, str], bool] = lambda _user, _chat: False
        self.evicted: Callable[[str], None] = lambda _reason: None  # "idle" or "lru"
        self._used: OrderedDict[Key, float] = OrderedDict()
        # The stored events of each session by event id, for the duplicate check.
        self._by_id: dict[Key, dict[str, list[Event]]] = {}

    # --- eviction --------------------------------------------------------------------------------

    def touch(self, app_name: str, user_id: str, session_id: str) -> None:
        """Marks a chat as just used."""
        key = (app_name, user_id, session_id)
        self._used[key] = self.clock()
        self._used.move_to_end(key)

    def _evict(self) -> None:
        now = self.clock()
        # Each pass either drops the front chat or moves a busy one to the back, so it visits
        # every chat at most once, and stops at the first that is neither idle nor over the cap.
        for _ in range(len(self._used)):
            key, used = next(iter(self._used.items()))
            idle = self.ttl_s > 0 and now - used > self.ttl_s
            if not idle and len(self._used) <= self.max_chats:
                return
            _app_name, user_id, session_id = key
            if self.busy(user_id, session_id):
                self._used[key] = now
                self._used.move_to_end(key)
                continue
            reason = "idle" if idle else "lru"
            self._drop(key)
            log.info("memory_chat_evicted", reason=reason, chat_id=session_id)
            self.evicted(reason)

    def _drop(self, key: Key) -> None:
        app_name, user_id, session_id = key
        self._used.pop(key, None)
        self._by_id.pop(key, None)
        users = self.sessions.get(app_name, {})
        chats = users.get(user_id)
        if chats is None or chats.pop(session_id, None) is None:
            return
        if not chats:
            del users[user_id]

    # --- reading -----------------------------------------------------------------------------------

    def _stored(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        return self.sessions.get(app_name, {}).get(user_id, {}).get(session_id)

    def _merged_state(self, app_name: str, user_id: str, state: dict[str, Any]) -> dict[str, Any]:
        merged = dict(state)
        for key, value in self.app_state.get(app_name, {}).items():
            merged[State.APP_PREFIX + key] = value
        for key, value in self.user_state.get(app_name, {}).get(user_id, {}).items():
            merged[State.USER_PREFIX + key] = value
        return merged

    def _handed_out(self, stored: Session, events: list[Event]) -> Session:
        """A session the caller may change freely: its own events list and state dict."""
        return stored.model_copy(update={
            "events": events,
            "state": self._merged_state(stored.app_name, stored.user_id, stored.state),
        })

    # --- BaseSessionService ------------------------------------------------------------------------

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        self._evict()
        session_id = session_id.strip() if session_id else None
        if session_id and self._stored(app_name, user_id, session_id) is not None:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        app_delta, user_delta, session_state = split_state(state or {})
        if app_delta:
            self.app_state.setdefault(app_name, {}).update(app_delta)
        if user_delta:
            self.user_state.setdefault(app_name, {}).setdefault(user_id, {}).update(user_delta)
        session_id = session_id or platform_uuid.new_uuid()
        stored = Session(app_name=app_name, user_id=user_id, id=session_id, state=session_state,
                         last_update_time=platform_time.get_time())
        self.sessions.setdefault(app_name, {}).setdefault(user_id, {})[session_id] = stored
        key = (app_name, user_id, session_id)
        self._by_id[key] = {}
        self.touch(*key)
        self._evict()
        return self._handed_out(stored, [])

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        self._evict()
        session_id = session_id.strip() if session_id else session_id
        stored = self._stored(app_name, user_id, session_id)
        if stored is None:
            return None
        events = stored.events
        if config is not None:
            if config.num_recent_events is not None:
                events = [] if config.num_recent_events == 0 else events[-config.num_recent_events:]
            if config.after_timestamp is not None:
                # The events at or after the timestamp: a scan back from the end, as ADK's.
                index = len(events) - 1
                while index >= 0 and events[index].timestamp >= config.after_timestamp:
                    index -= 1
                if index >= 0:
                    events = events[index + 1:]
        self.touch(app_name, user_id, session_id)
        return self._handed_out(stored, list(events))

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        users = self.sessions.get(app_name, {})
        if user_id is not None:
            users = {user_id: users[user_id]} if user_id in users else {}
        listed = [self._handed_out(stored, []) for chats in users.values() for stored in chats.values()]
        listed.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=listed)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        key = (app_name, user_id, session_id)
        self._used.pop(key, None)
        self._by_id.pop(key, None)
        chats = self.sessions.get(app_name, {}).get(user_id, {})
        chats.pop(session_id, None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return dict(self.user_state.get(app_name, {}).get(user_id, {}))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        key = (session.app_name, session.user_id, session.id)
        stored = self._stored(*key)
        if stored is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        by_id = self._by_id.setdefault(key, {})
        if any(e == event for e in by_id.get(event.id, ())):
            return event  # an equal re-delivery: already stored and applied
        # The caller's session: temp state applied, temp keys trimmed from the event, the rest of
        # the delta applied and the event appended (ADK's base implementation).
        event = await super().append_event(session, event)
        session.last_update_time = event.timestamp
        if stored is not session:
            stored.events.append(event)
            stored.last_update_time = event.timestamp
        by_id.setdefault(event.id, []).append(event)
        if event.actions and event.actions.state_delta:
            app_delta, user_delta, session_delta = split_state(event.actions.state_delta)
            if app_delta:
                self.app_state.setdefault(session.app_name, {}).update(app_delta)
            if user_delta:
                self.user_state.setdefault(session.app_name, {}).setdefault(session.user_id, {}).update(user_delta)
            if session_delta:
                stored.state.update(session_delta)
        if key in self._used:
            self.touch(*key)
        return event

    # --- bulk --------------------------------------------------------------------------------------

    def append_history(self, session: Session, events: Sequence[Event]) -> None:
        """Appends fresh events without state deltas (an imported history) in one step.

        What `append_event` would store for each of them, without the per-event work: imported
        events are new (fresh ids) and carry no state. `session` (the caller's copy) gets them too.
        """
        if not events:
            return
        key = (session.app_name, session.user_id, session.id)
        stored = self._stored(*key)
        if stored is None:
            raise ValueError(f"session {session.id} not found")
        stored.events.extend(events)
        stored.last_update_time = events[-1].timestamp
        by_id = self._by_id.setdefault(key, {})
        for event in events:
            by_id.setdefault(event.id, []).append(event)
        if session is not stored:
            session.events.extend(events)
            session.last_update_time = events[-1].timestamp
        self.touch(*key)
