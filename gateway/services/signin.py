"""Tool sign-in: ADK's end-user OAuth2 flow (`adk_request_credential`), carried by the gateway.

How it works
------------
A tool that needs the user's own account (an OpenAPI, MCP or Google API toolset, or a tool that
calls `tool_context.request_credential`) makes ADK ask for a sign-in: an `adk_request_credential`
call whose `authConfig` holds the provider's authorization URL. The chat shows it as a tool part
the client answers (`tool-adk_request_credential`, input `{authUri, toolCallId}`), and:

1. `begin` makes the URL the user opens: ADK's, with the gateway's own `state` and its callback
   (`{origin}/api/oauth/callback`) as the `redirect_uri`. The state is random and sealed
   (encrypted and authenticated with the gateway's secret): it names, to the gateway only, the
   (app, user, chat, call) it was issued for; the sign-in is kept in the chat's session state
   (`SIGN_INS_STATE_KEY`), so any instance behind a load balancer can finish it.
2. The provider redirects the user's browser to the callback: `callback` checks the signature,
   finds the pending sign-in in that chat's session, takes it only once and only for the state it
   issued, and keeps the redirect URL it received (with the code). The page it answers tells the
   app (`window.opener.postMessage`, and a `BroadcastChannel`) that the sign-in ended.
3. The app answers the tool part (`addToolOutput`), and the automatic resend continues the
   message: `resolve` turns that answer into the function response ADK wants — the auth config
   with the callback's URL, the gateway's redirect URI and state — built here, never relayed from
   the client (ADK would use a token the client sent as it is). ADK then exchanges the code at
   the provider and runs the tool again. A sign-in the user did not finish is answered without a
   code: the tool still lacks its credential and says so; the chat goes on.

Everything the client sends is checked against what was issued: a state that is forged, reused,
or issued for another user or chat is refused, and a callback only ever completes the sign-in its
state names.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from adk_gateway.core.approval import AgentReply, FunctionResult
from adk_gateway.core.kinds import CREDENTIAL_TOOL

__all__ = ["CALLBACK_PATH", "SIGN_INS_STATE_KEY", "SignInRefused", "SignIns", "callback_page"]

log = structlog.get_logger("adk_gateway.services.signin")

CALLBACK_PATH: Final = "/api/oauth/callback"
# {adk_request_credential call id: {"nonce", "authConfig", "redirectUri", "issuedAt", "response"?, "ok"?}}
SIGN_INS_STATE_KEY: Final = "gateway:sign-ins"
MAX_PENDING: Final = 20  # sign-ins kept per chat (the oldest go first)
STATE_TTL_S: Final = 3600.0
_PURPOSE: Final = b"adk-gateway sign-in state"


class SignInRefused(Exception):
    """A callback that does not complete a sign-in this gateway is waiting for; nothing changed."""


@dataclass(frozen=True, slots=True)
class StateOwner:
    """Whom a sign-in's state was issued for."""

    app: str
    user: str
    chat: str
    call_id: str
    nonce: str
    issued_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SignIns:
    """Issues and checks sign-in states (see the module docstring); `secret` signs them."""

    def __init__(self, secret: bytes) -> None:
        self._cipher = AESGCM(hashlib.sha256(_PURPOSE + secret).digest())

    # --- the state ---------------------------------------------------------------------------

    def issue_state(self, app: str, user: str, chat: str, call_id: str, now: float) -> tuple[str, str]:
        """A new state for the sign-in of `call_id`, and its nonce. Sealed (AES-GCM): the provider,
        which sees the state, learns nothing of the user or the chat, and nobody can make one."""
        nonce = secrets.token_urlsafe(18)
        payload = json.dumps([app, user, chat, call_id, nonce, int(now)], separators=(",", ":")).encode()
        iv = secrets.token_bytes(12)
        return _b64(iv + self._cipher.encrypt(iv, payload, _PURPOSE)), nonce

    def read_state(self, state: str, now: float) -> StateOwner:
        """Whom a state was issued for; `SignInRefused` for a forged, malformed or stale one."""
        try:
            sealed = _unb64(state)
            payload = self._cipher.decrypt(sealed[:12], sealed[12:], _PURPOSE)
            app, user, chat, call_id, nonce, issued = json.loads(payload)
        except (InvalidTag, ValueError, TypeError) as exc:
            raise SignInRefused("the state was not issued here") from exc
        if now - float(issued) > STATE_TTL_S:
            raise SignInRefused("the sign-in took too long")
        return StateOwner(str(app), str(user), str(chat), str(call_id), str(nonce), float(issued))

    # --- 1. the URL to open ----------------------------------------------------------------------

    def begin(
        self, pending: dict[str, Any], *, app: str, user: str, chat: str, call_id: str,
        auth_config: Mapping[str, Any], origin: str, now: float,
    ) -> dict[str, Any] | None:
        """Records a sign-in in `pending` (the chat's sign-ins) and returns the tool part's input
        (`authUri`, the tool's `toolCallId`); None when ADK's request holds no URL to open."""
        oauth2 = ((auth_config.get("exchangedAuthCredential") or {}).get("oauth2") or {})
        auth_uri = oauth2.get("authUri") or oauth2.get("auth_uri")
        if not isinstance(auth_uri, str) or not auth_uri.startswith(("https://", "http://")):
            return None
        state, nonce = self.issue_state(app, user, chat, call_id, now)
        redirect_uri = origin.rstrip("/") + CALLBACK_PATH
        scheme, netloc, path, query, fragment = urlsplit(auth_uri)
        params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in ("state", "redirect_uri")]
        params += [("redirect_uri", redirect_uri), ("state", state)]
        url = urlunsplit((scheme, netloc, path, urlencode(params), fragment))
        pending[call_id] = {"nonce": nonce, "state": state, "authConfig": dict(auth_config),
                            "redirectUri": redirect_uri, "issuedAt": now}
        while len(pending) > MAX_PENDING:
            del pending[next(iter(pending))]
        return {"authUri": url}

    # --- 2. the callback -----------------------------------------------------------------------

    @staticmethod
    def complete(pending: dict[str, Any], owner: StateOwner, response_uri: str, *, ok: bool) -> None:
        """Records the provider's answer for the sign-in `owner` names (`SignInRefused`: none is
        waiting for this state, or it was answered already)."""
        record = pending.get(owner.call_id)
        if not isinstance(record, dict) or not hmac.compare_digest(str(record.get("nonce", "")), owner.nonce):
            raise SignInRefused("no sign-in is waiting for this state")
        if "response" in record or "ok" in record:
            raise SignInRefused("this sign-in was answered already")
        record["ok"] = ok
        if ok:
            record["response"] = response_uri

    # --- 3. the answer ADK gets --------------------------------------------------------------------

    @staticmethod
    def resolve(pending: dict[str, Any], replies: tuple[AgentReply, ...]) -> tuple[AgentReply, ...]:
        """The continuation's replies, with each answer to a sign-in replaced by the function
        response ADK wants (built from the recorded callback; the client's output is not used).
        Each sign-in is used once."""
        resolved: list[AgentReply] = []
        for reply in replies:
            if not isinstance(reply, FunctionResult) or reply.tool_name != CREDENTIAL_TOOL:
                resolved.append(reply)
                continue
            record = pending.pop(reply.tool_call_id, None) or {}
            config = json.loads(json.dumps(record.get("authConfig") or {}))
            credential = config.setdefault("exchangedAuthCredential", {"authType": "oauth2"})
            oauth2 = credential.setdefault("oauth2", {})
            for key in ("accessToken", "access_token", "refreshToken", "refresh_token", "idToken", "id_token",
                        "authResponseUri", "auth_response_uri", "authCode", "auth_code"):
                oauth2.pop(key, None)
            if record.get("response"):
                oauth2["authResponseUri"] = record["response"]
                oauth2["redirectUri"] = record["redirectUri"]
                oauth2["state"] = record["state"]
            else:
                log.info("sign_in_unfinished", tool_call_id=reply.tool_call_id)
            resolved.append(FunctionResult(reply.tool_call_id, CREDENTIAL_TOOL, config))
        return tuple(resolved)


def callback_page(tool_call_id: str | None, ok: bool, message: str, nonce: str) -> str:
    """What the sign-in popup shows at the end: it tells the page that opened it, then closes
    (`nonce`: the script's, as the page's Content-Security-Policy names it)."""
    detail = json.dumps({"type": "adk-gateway:oauth", "toolCallId": tool_call_id, "ok": ok})
    # `</` cannot end the script early: json.dumps escapes no slash, so the one in `</script>` is escaped here.
    script = detail.replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign-in</title></head>
<body><p>{html.escape(message)}</p>
<script nonce="{nonce}">
(function () {{
  var message = {script};
  try {{ if (window.opener) window.opener.postMessage(message, "*"); }} catch (e) {{}}
  try {{
    var channel = new BroadcastChannel("adk-gateway-oauth");
    channel.postMessage(message);
    channel.close();
  }} catch (e) {{}}
  setTimeout(function () {{ window.close(); }}, 300);
}})();
</script></body></html>
"""

