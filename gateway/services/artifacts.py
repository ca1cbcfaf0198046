"""Links to the agents' artifacts that work as an `<img src>` or an `<a href>`: signed, short-lived.

An artifact a tool saves (`tool_context.save_artifact`) reaches the chat as a `file` part whose
URL the browser fetches without any header or cookie, so the URL itself is the credential:
`/api/chats/{chat}/artifacts/{name}/versions/{version}?app=&user=&expires=&signature=` where the
signature is an HMAC over (app, user, chat, name, version, expiry). A link whose chat, name,
version, app, user or expiry was changed, or that expired, is refused (403); a link that checks
out but names an artifact the store no longer holds is 404. `GET /api/chats/{chat}/artifacts`
(an authenticated request of the chat's user) lists a chat's artifacts with fresh links.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Final
from urllib.parse import quote, urlencode

__all__ = ["ARTIFACT_ROUTE", "ArtifactLinks"]

ARTIFACT_ROUTE: Final = "/api/chats/{chat_id}/artifacts/{name}/versions/{version}"


class ArtifactLinks:
    """Signs and checks artifact links with `secret`; a link lives `ttl_s` seconds."""

    def __init__(self, secret: bytes, *, ttl_s: float = 3600.0) -> None:
        self._secret = secret
        self.ttl_s = ttl_s

    def _signature(self, *parts: str | int) -> str:
        """The HMAC of (app, user, chat, name, version, expiry)."""
        message = "\x1f".join(map(str, parts)).encode()
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def link(self, origin: str, *, app: str, user: str, chat: str, name: str, version: int, now: float) -> str:
        """The artifact version's URL (absolute with `origin`, else a path)."""
        expires = int(now + self.ttl_s)
        path = ARTIFACT_ROUTE.format(chat_id=quote(chat, safe=""), name=quote(name, safe=""), version=version)
        query = urlencode({"app": app, "user": user, "expires": expires,
                           "signature": self._signature(app, user, chat, name, version, expires)})
        return f"{origin.rstrip('/')}{path}?{query}"

    def check(self, *, app: str, user: str, chat: str, name: str, version: int, expires: str, signature: str,
              now: float) -> bool:
        """Whether a link's parts are the ones it was signed for, and it has not expired."""
        try:
            deadline = int(expires)
        except ValueError:
            return False
        expected = self._signature(app, user, chat, name, version, deadline)
        return hmac.compare_digest(expected.encode(), signature.encode()) and now <= deadline
