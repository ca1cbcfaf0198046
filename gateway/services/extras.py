"""What a chat turn shows with the chat service's other parts: artifact links and sign-ins.

The message converter (`adk_gateway.core.converter`) says that a tool saved an artifact version
(`ArtifactSaved`) or that ADK asks the user to sign in (`SignInRequested`); showing either needs
more than the core has: the store's media type and a signed link (`ArtifactLinks`), or a sign-in
state and the gateway's callback (`SignIns`). `Extras.fill_in` does that for the running turn
and hands the result back to the turn's converter, the one writer of its chunks. A store that
fails here costs the message its link (logged), never the run.
"""

from __future__ import annotations

import time

import structlog

from adk_gateway.core.effects import ArtifactSaved, SignInRequested
from adk_gateway.core.kinds import CREDENTIAL_TOOL
from adk_gateway.services.artifacts import ArtifactLinks
from adk_gateway.services.signin import SignIns
from adk_gateway.services.turn import ChatTurn

__all__ = ["Extras"]

log = structlog.get_logger("adk_gateway.services.chat")


class Extras:
    """Carries out the effects that need links: see the module docstring."""

    def __init__(self, links: ArtifactLinks, sign_ins: SignIns) -> None:
        self.links = links
        self.sign_ins = sign_ins

    async def fill_in(self, turn: ChatTurn, effect: SignInRequested | ArtifactSaved) -> None:
        if isinstance(effect, ArtifactSaved):
            await self._artifact(turn, effect)
        else:
            self._sign_in(turn, effect)

    async def _artifact(self, turn: ChatTurn, saved: ArtifactSaved) -> None:
        host, user, chat = turn.host, turn.ctx.user_id, turn.chat_id
        try:
            media_type = await host.artifact_media_type(user, chat, saved.name, saved.version)
        except Exception as exc:
            log.warning("artifact_unreadable", chat_id=chat, artifact=saved.name, version=saved.version,
                        error=repr(exc))
            return
        url = self.links.link(turn.ctx.origin, app=host.app_name, user=user, chat=chat, name=saved.name,
                              version=saved.version, now=time.time())
        turn.emit(turn.converter.file(url, media_type))

    def _sign_in(self, turn: ChatTurn, asked: SignInRequested) -> None:
        pending = turn.turn.setdefault("signIns", {})
        shown = self.sign_ins.begin(
            pending, app=turn.host.app_name, user=turn.ctx.user_id, chat=turn.chat_id, call_id=asked.tool_call_id,
            auth_config=asked.auth_config, origin=turn.ctx.origin, now=time.time(),
        )
        if shown is None:
            log.warning("sign_in_without_url", chat_id=turn.chat_id, tool_call_id=asked.tool_call_id)
            return
        shown["toolCallId"] = asked.for_call_id
        turn.book.track(asked.tool_call_id, CREDENTIAL_TOOL, browser=True)
        turn.turn["asks"] = turn.turn.get("asks", 0) + 1
        turn.emit(turn.converter.sign_in(asked.tool_call_id, shown))
