"""The HTTP API beside the chat stream: the user's chats, a chat's artifacts, and the OAuth
callback of tool sign-ins.

- `GET /api/chats?app&limit&cursor`, `GET|PATCH|DELETE /api/chats/{chat}`,
  `GET /api/chats/{chat}/approvals`: the caller's chats (`adk_gateway.services.chats`); another
  user's chat answers exactly as an unknown one, 404.

- `GET /api/chats/{chat}/artifacts` (the chat's user, authenticated like every `/api/` route):
  the chat's artifacts, each with its versions, media type and a fresh signed link to its latest.
- `GET /api/chats/{chat}/artifacts/{name}/versions/{version}?app&user&expires&signature`: an
  artifact's bytes, for an `<img src>` or an `<a href>` that carries no header and no cookie, so
  the signed link is the credential (`adk_gateway.services.artifacts`). Served so that a stored file
  can do nothing on the gateway's origin: its own media type, `nosniff`, and a sandboxing CSP.
- `GET /api/oauth/callback?code&state` (or `error`): where the provider sends the user's browser
  back at the end of a tool sign-in. Its state is the credential (`adk_gateway.services.signin`); the
  page it answers tells the app that opened the popup, and closes.
"""

from __future__ import annotations

import secrets
import time
from typing import Final
from urllib.parse import quote

import orjson
import structlog
from aiohttp import web

from adk_gateway.core.errors import BadRequest, LinkRefused, NotFound
from adk_gateway.keys import AUTH, LINKS, SERVICE, SETTINGS, SIGN_INS
from adk_gateway.services.auth import AnonymousAuth, bearer_token
from adk_gateway.services.chats import DEFAULT_LIMIT, Chats
from adk_gateway.services.planning import TURN_STATE_KEY
from adk_gateway.services.signin import CALLBACK_PATH, SignInRefused, callback_page
from adk_gateway.transports import admission
from adk_gateway.transports.chat_steps import public_origin

__all__ = ["artifact_file", "chat", "chat_approvals", "chat_artifacts", "chats", "delete_chat", "oauth_callback",
           "rename_chat"]

log = structlog.get_logger("adk_gateway.transports.resources")

# An artifact is shown as what it is and can run nothing on the gateway's origin.
_ARTIFACT_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox",
    "Cross-Origin-Resource-Policy": "cross-origin",
    "Referrer-Policy": "no-referrer",
}


def _chats(request: web.Request) -> Chats:
    return Chats(request.app[SERVICE])


async def chats(request: web.Request) -> web.Response:
    query = request.query
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise BadRequest("limit must be a number.", code="invalid_limit") from None
    page, cursor = await _chats(request).page(admission.identity_of(request).user_id, app=query.get("app") or None,
                                              limit=limit, cursor=query.get("cursor") or None)
    body: dict[str, object] = {"chats": [summary.to_json() for summary in page]}
    if cursor is not None:
        body["nextCursor"] = cursor
    return web.json_response(body, dumps=_dumps)


async def chat(request: web.Request) -> web.Response:
    loaded = await _chats(request).load(admission.identity_of(request).user_id, request.match_info["chat_id"],
                                        request.query.get("app") or None)
    return web.json_response(loaded, dumps=_dumps)


async def rename_chat(request: web.Request) -> web.Response:
    try:
        body = await request.json(loads=orjson.loads)
    except ValueError:
        raise BadRequest("The body must be JSON.", code="invalid_json") from None
    title = body.get("title") if isinstance(body, dict) else None
    summary = await _chats(request).rename(admission.identity_of(request).user_id, request.match_info["chat_id"], title,
                                           request.query.get("app") or None)
    return web.json_response(summary.to_json(), dumps=_dumps)


async def delete_chat(request: web.Request) -> web.Response:
    await _chats(request).delete(admission.identity_of(request).user_id, request.match_info["chat_id"],
                                 request.query.get("app") or None)
    return web.Response(status=204)


async def chat_approvals(request: web.Request) -> web.Response:
    audit = await _chats(request).approvals(admission.identity_of(request).user_id, request.match_info["chat_id"],
                                            request.query.get("app") or None)
    return web.json_response({"approvals": audit}, dumps=_dumps)


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


async def chat_artifacts(request: web.Request) -> web.Response:
    identity = admission.identity_of(request)
    chat_id = request.match_info["chat_id"]
    host = request.app[SERVICE].apps.host(request.query.get("app") or None)
    if await host.get_session(identity.user_id, chat_id, events=False) is None:
        raise NotFound("No such chat.")
    origin = public_origin(request.scheme, request.host, request.app[SETTINGS])
    links = request.app[LINKS]
    now = time.time()
    listed = []
    for name, versions in await host.artifact_list(identity.user_id, chat_id):
        if not versions:
            continue
        latest = versions[-1]
        listed.append({
            "name": name, "versions": versions,
            "mediaType": await host.artifact_media_type(identity.user_id, chat_id, name, latest),
            "url": links.link(origin, app=host.app_name, user=identity.user_id, chat=chat_id, name=name,
                              version=latest, now=now),
        })
    return web.json_response({"artifacts": listed})


@admission.needs_no_credential
async def artifact_file(request: web.Request) -> web.Response:
    chat_id = request.match_info["chat_id"]
    name = request.match_info["name"]
    query = request.query
    try:
        version = int(request.match_info["version"])
    except ValueError:
        raise NotFound() from None
    app, user = query.get("app", ""), query.get("user", "")
    if not request.app[LINKS].check(app=app, user=user, chat=chat_id, name=name, version=version,
                                    expires=query.get("expires", ""), signature=query.get("signature", ""),
                                    now=time.time()):
        raise LinkRefused()
    host = request.app[SERVICE].apps.host(app)
    found = await host.artifact(user, chat_id, name, version)
    if found is None:
        raise NotFound("This artifact is no longer kept.")
    data, media_type = found
    headers = {**_ARTIFACT_HEADERS, "Content-Type": media_type, "Cache-Control": "private, max-age=300",
               "Content-Disposition": f"inline; filename*=UTF-8''{quote(name.rsplit('/', 1)[-1], safe='')}"}
    return web.Response(body=data, headers=headers)


@admission.needs_no_credential
async def oauth_callback(request: web.Request) -> web.Response:
    """The end of a tool sign-in: see the module docstring. Refusals answer a page too (the user
    sees it in the popup), with status 400 or 403."""
    query = request.query
    sign_ins = request.app[SIGN_INS]
    try:
        owner = sign_ins.read_state(query.get("state", ""), time.time())
    except SignInRefused as exc:
        log.warning("sign_in_refused", reason=str(exc))
        return _page(None, False, "This sign-in is not valid. Close this window and try again.", status=400)
    if not await _caller_may_be(request, owner.user):
        log.warning("sign_in_refused", reason="another user's callback", tool_call_id=owner.call_id)
        return _page(owner.call_id, False, "This sign-in belongs to another user.", status=403)
    host = request.app[SERVICE].apps.host(owner.app)
    session = await host.get_session(owner.user, owner.chat, events=False)
    turn = dict(session.state.get(TURN_STATE_KEY) or {}) if session is not None else {}
    pending = turn.setdefault("signIns", {})
    ok = "code" in query and "error" not in query
    origin = public_origin(request.scheme, request.host, request.app[SETTINGS])
    try:
        sign_ins.complete(pending, owner, f"{origin}{CALLBACK_PATH}?{request.query_string}", ok=ok)
    except SignInRefused as exc:
        log.warning("sign_in_refused", reason=str(exc), tool_call_id=owner.call_id)
        return _page(owner.call_id, False, "This sign-in was used already. Close this window.", status=400)
    await host.save_state(owner.user, owner.chat, {TURN_STATE_KEY: turn})
    log.info("sign_in_completed", chat_id=owner.chat, tool_call_id=owner.call_id, ok=ok)
    if not ok:
        return _page(owner.call_id, False, "The sign-in was not completed. You can close this window.")
    return _page(owner.call_id, True, "Signed in. You can close this window.")


async def _caller_may_be(request: web.Request, user: str) -> bool:
    """A popup's request carries no credential; one that does (a client calling the callback
    itself) must be the user the sign-in was issued for."""
    auth = request.app[AUTH]
    if isinstance(auth, AnonymousAuth):
        claimed = request.headers.get(request.app[SETTINGS].user_header)
        return claimed is None or claimed == user
    token = bearer_token(request.headers)
    if token is None:
        return True
    try:
        return (await auth.verify(token)).user_id == user
    except Exception:
        return False


def _page(tool_call_id: str | None, ok: bool, message: str, *, status: int = 200) -> web.Response:
    nonce = secrets.token_urlsafe(12)
    return web.Response(
        text=callback_page(tool_call_id, ok, message, nonce), status=status, content_type="text/html",
        headers={"Content-Security-Policy": f"default-src 'none'; script-src 'nonce-{nonce}'; "
                                            "style-src 'unsafe-inline'; frame-ancestors 'none'",
                 "Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"},
    )
