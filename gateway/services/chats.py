"""A user's chats, kept on the server: listed, loaded as the client's own `UIMessage`s, renamed,
deleted, and their approvals audited (`GET/PATCH/DELETE /api/chats...`).

How it works
------------
Every chat is an ADK session of the app that answers it, keyed by (user, chat id): the user is
always the caller, so another user's chat is, to everyone else, an unknown one (404). What a chat
shows in a list (when it began, its first user text, a title given to it) is in its session state
(`CHAT_STATE_KEY`), so listing reads the store's list of sessions (ADK's `list_sessions`, without
events), not every chat. Its messages are what the chat service recorded after each run (the
messages as the client holds them, `adk_gateway.core.transcript`), rebuilt in order with ADK's
rewinds applied; its approval audit is recorded the same way. Deleting a chat stops its run
(here or on another instance), then removes the session with its artifacts and its resumable
stream.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Final

from adk_gateway.agents.adk import AgentHost
from adk_gateway.core.errors import BadRequest, NotFound
from adk_gateway.core.transcript import Record, Transcript, approval_audit
from adk_gateway.services.chat import ChatService
from adk_gateway.services.planning import CHAT_STATE_KEY

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "MAX_TITLE", "ChatSummary", "Chats"]

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 200
MAX_TITLE: Final = 200


@dataclass(frozen=True, slots=True)
class ChatSummary:
    id: str
    app: str
    title: str
    created_at: int
    updated_at: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "app": self.app, "title": self.title, "createdAt": self.created_at,
                "updatedAt": self.updated_at}


def _summary(host: AgentHost, session: Any) -> ChatSummary:
    meta = session.state.get(CHAT_STATE_KEY)
    meta = meta if isinstance(meta, dict) else {}
    updated = int(float(session.last_update_time or 0) * 1000)
    return ChatSummary(id=session.id, app=host.app_name, title=str(meta.get("title") or meta.get("preview") or ""),
                       created_at=int(meta.get("createdAt") or updated), updated_at=updated)


def _cursor(summary: ChatSummary) -> str:
    raw = json.dumps([summary.updated_at, summary.app, summary.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _after(cursor: str) -> tuple[int, str, str]:
    try:
        updated, app, chat = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return int(updated), str(app), str(chat)
    except (ValueError, TypeError) as exc:
        raise BadRequest("The cursor is not one this gateway gave.", code="invalid_cursor") from exc


def _order(summary: ChatSummary) -> tuple[int, str, str]:
    return summary.updated_at, summary.app, summary.id


class Chats:
    """The chats of the chat service's apps, as their users see them (see the module docstring)."""

    def __init__(self, service: ChatService) -> None:
        self.service = service

    async def page(self, user: str, *, app: str | None = None, limit: int = DEFAULT_LIMIT,
                   cursor: str | None = None) -> tuple[list[ChatSummary], str | None]:
        """The user's chats, most recently updated first, a page at a time."""
        hosts = [self.service.apps.host(app)] if app else list(self.service.apps.hosts.values())
        # A chat is a session the chat service has run a turn in (a live voice session is not listed).
        summaries = [_summary(host, session) for host in hosts for session in await host.chats(user)
                     if isinstance(session.state.get(CHAT_STATE_KEY), dict)]
        summaries.sort(key=_order, reverse=True)
        if cursor:
            after = _after(cursor)
            summaries = [s for s in summaries if _order(s) < after]
        page = summaries[: max(1, min(limit, MAX_LIMIT))]
        more = len(summaries) > len(page)
        return page, _cursor(page[-1]) if more and page else None

    async def find(self, user: str, chat: str, app: str | None = None) -> tuple[AgentHost, Any]:
        """The app and session of the user's chat (404 when the user has no such chat)."""
        hosts = [self.service.apps.host(app)] if app else list(self.service.apps.hosts.values())
        for host in hosts:
            session = await host.get_session(user, chat, events=False)
            if session is not None:
                return host, session
        raise NotFound("No such chat.")

    async def load(self, user: str, chat: str, app: str | None = None) -> dict[str, Any]:
        """The chat with its messages as the client held them."""
        host, session = await self.find(user, chat, app)
        records = await host.records(user, chat) or []
        summary = _summary(host, session)
        transcript = Transcript.of(records)
        run = self.service.registry.active_run((user, chat))
        ahead = run.recorded_ahead if run is not None else ()
        for message in ahead:  # a turn under way: its question is shown before its record is written
            if transcript.invocation_of(str(message.get("id"))) is None:
                transcript.add(Record("", (message,)))
        return {"id": chat, "app": host.app_name, "title": summary.title, "messages": transcript.messages}

    async def approvals(self, user: str, chat: str, app: str | None = None) -> list[dict[str, Any]]:
        host, _ = await self.find(user, chat, app)
        return approval_audit(await host.records(user, chat) or [])

    async def rename(self, user: str, chat: str, title: Any, app: str | None = None) -> ChatSummary:
        if not isinstance(title, str) or not 1 <= len(title.strip()) <= MAX_TITLE:
            raise BadRequest(f"A title is 1 to {MAX_TITLE} characters.", code="invalid_title")
        host, session = await self.find(user, chat, app)
        meta = dict(session.state.get(CHAT_STATE_KEY) or {})
        meta["title"] = " ".join(title.split())
        meta.setdefault("createdAt", int(float(session.last_update_time or 0) * 1000))
        await host.save_state(user, chat, {CHAT_STATE_KEY: meta})
        _, renamed = await self.find(user, chat, host.app_name)
        return _summary(host, renamed)

    async def delete(self, user: str, chat: str, app: str | None = None) -> None:
        """Stops the chat's run, then removes its session, artifacts and resumable stream."""
        host, _ = await self.find(user, chat, app)
        key = (user, chat)
        await self.service.stop(key)
        log = self.service.streams.resumable(key)
        if log is not None:
            self.service.streams.discard(log)
        await host.delete_chat(user, chat)
