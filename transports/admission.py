"""The door: what every HTTP request passes before its handler, and how a failure is answered.

In order: a request whose `Host` is not one the gateway answers to is refused with 421
(`check_host`: DNS rebinding, see below); a CORS preflight is answered (`preflight`); new runs are
refused while draining, POSTs are guarded against cross-site use, and the caller of an `/api/`
route is authenticated (`admit`, which checks the Host first and sets the request's `IDENTITY`);
then the handler runs, and what it raises becomes the JSON error shape (`answer`: a
`GatewayError` its own status and message, anything unexpected a 500 with the detail in the log
only).

DNS rebinding: a page on a name the attacker controls (`evil.test`) that later resolves to the
gateway's address is, for the browser, on its own origin: its requests carry `Host: evil.test`
and `Origin: http://evil.test`, which agree, so an Origin check alone lets them through. The Host
must therefore name the gateway itself: `localhost`, an IP address (a rebinding needs a name), the
`--host` name or one of `--allowed-hosts`, on any port (a browser sends the port of the page's own
URL, so it tells nothing; a dev server or a proxy that forwards with its own port keeps working).
Origins are compared whole (scheme, host and port, `config.origin_key`): the gateway's own is the
scheme it was reached with (a proxy's `X-Forwarded-Proto`, which a page cannot set on a
cross-site request or a socket) and the Host, or `--public-url`.

The app's one middleware (`adk_gateway.app`) runs these around every handler but the WebSocket
handshake's: a socket's handler calls `admit` and `answer` itself (`passes_itself`), so no
middleware frame stays on its stack for the socket's life (docs/perf/memory-per-connection.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import structlog
from aiohttp import web

from adk_gateway.config import host_name, is_ip_address, origin_key
from adk_gateway.core.errors import (
    GatewayError,
    HostRefused,
    OriginRefused,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
)
from adk_gateway.keys import AUTH, DRAINING, IDENTITY, METRICS, SETTINGS
from adk_gateway.services.auth import AnonymousAuth, Identity, bearer_token, query_token, redact, redact_target

__all__ = ["CORS_ALLOW_HEADERS", "CORS_EXPOSE_HEADERS", "WS_PATH", "admit", "answer", "check_host", "cors_headers",
           "identity_of", "is_own_origin", "loggable_target", "needs_no_credential", "passes_door_itself",
           "passes_itself", "preflight", "refused"]

log = structlog.get_logger("adk_gateway.app")

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

_PASSES_ITSELF: Final = "_passes_the_door_itself"
_NO_CREDENTIAL: Final = "_needs_no_credential"


def needs_no_credential(handler: HandlerT) -> HandlerT:
    """Marks an `/api/` handler whose request carries its own proof instead of the caller's
    credential (a signed link, a sign-in's state): the door does not authenticate it."""
    setattr(handler, _NO_CREDENTIAL, True)
    return handler


def passes_door_itself(handler: HandlerT) -> HandlerT:
    """Marks a handler that runs `admit` and `answer` itself (see the module docstring)."""
    setattr(handler, _PASSES_ITSELF, True)
    return handler


def passes_itself(handler: object) -> bool:
    return getattr(handler, _PASSES_ITSELF, False) is True


async def admit(request: web.Request, *, keep: bool = True) -> Identity | None:
    """The door's checks, in order; raises the `GatewayError` that refuses the request. Returns
    the caller of an `/api/` route (None for any other path), kept on the request (`IDENTITY`)
    unless `keep` is false: a socket keeps it in its handler instead (a request's first key
    costs it a dict table for as long as it lives)."""
    check_host(request)
    refuse_when_draining(request)
    guard_posts(request)
    identity = await authenticate(request)
    if keep and identity is not None:
        request[IDENTITY] = identity
    return identity


def answer(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The answer to what a request's checks or handler raised; re-raises what is not the API's
    to answer (an HTTP exception outside `/api/`, a client that went away, a failure of a page)."""
    if isinstance(exc, GatewayError):
        return web.json_response(exc.body(), status=exc.status, headers=exc.headers())
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return web.json_response({"error": {"code": "payload_too_large", "message": "The request body is too large."}},
                                 status=413)
    if isinstance(exc, web.HTTPException):
        if exc.status >= 400 and exc.empty_body is False and request.path.startswith("/api/"):
            return web.json_response({"error": {"code": exc.reason.lower().replace(" ", "_"), "message": exc.reason}},
                                     status=exc.status)
        raise exc
    if isinstance(exc, ConnectionError) or not request.path.startswith("/api/"):
        raise exc  # a client gone (e.g. before a handshake's answer) has nobody to answer
    # Anything unexpected: the client gets the one-line JSON error shape, the log the detail.
    log.error("request_failed", path=redact(request.path), error=redact(repr(exc)), exc_info=exc)
    error = GatewayError()
    return web.json_response(error.body(), status=error.status)


def refuse_when_draining(request: web.Request) -> None:
    if request.app[DRAINING].is_set() and request.method == "POST" and request.path == "/api/chat":
        raise ServiceUnavailable("The gateway is shutting down; try again.")


WS_PATH = "/api/chat/ws"


def check_host(request: web.Request) -> None:
    """Refuses (421) a request whose `Host` the gateway does not answer to (see the module
    docstring): `localhost`, an IP address, the `--host` name and `--allowed-hosts` pass."""
    settings = request.app[SETTINGS]
    if settings.any_host:
        return
    raw = request.headers.get("Host", "")
    name = host_name(raw)
    if name is not None and (name in settings.host_names or is_ip_address(name)):
        return
    refused(request, "host", host=raw[:200])
    raise HostRefused()


def own_origin(request: web.Request) -> str:
    """The origin this request was sent to, as `origin_key` writes it: the scheme the client used
    (a proxy's `X-Forwarded-Proto`, else the connection's) and the Host."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",", 1)[0].strip().lower()
    scheme = forwarded if forwarded in ("http", "https") else request.scheme
    return origin_key(f"{scheme}://{request.headers.get('Host', '')}")


def is_own_origin(request: web.Request, origin: str) -> bool:
    """The Origin is the gateway's own, compared whole: the origin the request was sent to, or
    `--public-url`'s. `https://127.0.0.1:PORT` is not the own origin of a gateway served over
    http on that port."""
    key = origin_key(origin)
    public_url = request.app[SETTINGS].public_url
    return key == own_origin(request) or (bool(public_url) and key == origin_key(public_url))


def guard_posts(request: web.Request) -> None:
    """CSRF: a form or `text/plain` POST from another site, or any POST, PATCH or DELETE from a
    foreign origin, is refused before it can start or stop a run, or change a chat. A JSON POST
    from another origin needs a CORS preflight, which only `--allowed-origins` passes."""
    if request.method in ("POST", "PATCH", "DELETE") and request.path.startswith("/api/"):
        origin = request.headers.get("Origin")
        if origin is not None and not is_own_origin(request, origin):
            settings = request.app[SETTINGS]
            if "*" not in settings.origins and origin_key(origin) not in settings.origin_keys:
                refused(request, "foreign_origin", origin=origin[:200])
                raise OriginRefused("This origin may not call the chat API.")
        if request.method != "DELETE" and request.content_type != "application/json":
            refused(request, "not_json", content_type=request.content_type)
            raise UnsupportedMediaType()


def loggable_target(request: web.Request) -> str:
    """The request's path and query as a log line may show them: the query's parameter names,
    never their values (`auth.redact_target`). Parses the raw query without caching it on the
    request (a socket's request lives as long as the socket)."""
    url = request.rel_url
    return redact_target(url.raw_path, url.raw_query_string)


def refused(request: web.Request, reason: str, **detail: object) -> None:
    request.app[METRICS].auth_refused.labels(reason=reason).inc()
    log.info("request_refused_at_door", reason=reason, method=request.method, path=loggable_target(request),
             peer=request.remote, **detail)


async def authenticate(request: web.Request) -> Identity | None:
    """The `Identity` of an `/api/` request's caller, or a 401 before its handler runs; None for
    any other path."""
    if not request.path.startswith("/api/") or getattr(request.match_info.handler, _NO_CREDENTIAL, False):
        return None
    auth = request.app[AUTH]
    if isinstance(auth, AnonymousAuth):
        return auth.claimed(request.headers)
    token = bearer_token(request.headers)
    if token is None and request.path == WS_PATH:
        # Browsers cannot set handshake headers. Read from the raw query, not `request.query`, which
        # would keep the parsed token on the request for the socket's life.
        token = query_token(request.rel_url.raw_query_string)
    if token is None:
        refused(request, "no_credential")
        raise Unauthorized()
    try:
        return await auth.verify(token)
    except Unauthorized as exc:
        refused(request, "invalid_credential", detail=exc.detail)
        raise


def identity_of(request: web.Request) -> Identity:
    """The caller the door authenticated."""
    return request[IDENTITY]


CORS_ALLOW_HEADERS = "content-type, x-user-id, x-ai-sdk-major, x-request-id, authorization, traceparent, tracestate"
CORS_EXPOSE_HEADERS = "x-vercel-ai-ui-message-stream"
_ALWAYS_ALLOWED = frozenset(CORS_ALLOW_HEADERS.split(", "))
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")  # an HTTP token, lower-cased


def cors_origin(request: web.Request) -> str | None:
    """The value for Access-Control-Allow-Origin, or None when this origin is not allowed."""
    settings = request.app[SETTINGS]
    origin = request.headers.get("Origin")
    if not settings.origins or origin is None or not request.path.startswith("/api/"):
        return None
    if "*" in settings.origins:
        return "*"
    return origin if origin_key(origin) in settings.origin_keys else None


def preflight(request: web.Request) -> web.Response | None:
    """The answer to a CORS preflight (a Host the gateway does not answer to gets 421 first);
    None for any other request."""
    if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
        try:
            check_host(request)
        except HostRefused as exc:
            return web.json_response(exc.body(), status=exc.status)
        origin = cors_origin(request)
        if origin is None:
            return web.Response(status=403)
        return web.Response(
            status=204,
            headers={
                **_origin_headers(origin),
                "Access-Control-Allow-Methods": "GET, POST, PATCH, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": _allowed_request_headers(request),
                "Access-Control-Max-Age": "600",
                "Vary": "Origin, Access-Control-Request-Headers",
            },
        )
    return None


def _origin_headers(origin: str) -> dict[str, str]:
    """Who may read the answer. A listed origin is trusted with credentials (an app's
    `credentials: 'include'`, cookies of a proxy's login); the wildcard never is, as browsers
    require."""
    if origin == "*":
        return {"Access-Control-Allow-Origin": origin}
    return {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Credentials": "true"}


def _allowed_request_headers(request: web.Request) -> str:
    """The headers a preflight may send: the gateway's own, plus those this preflight asks for.
    An app on an allowed origin may add headers of its own (the transports' `headers` option);
    admitting the origin is the check, so its headers are not refused one by one."""
    asked = (name.strip().lower() for name in request.headers.get("Access-Control-Request-Headers", "").split(","))
    extra = [name for name in dict.fromkeys(asked) if name not in _ALWAYS_ALLOWED and _HEADER_NAME.fullmatch(name)]
    return ", ".join([CORS_ALLOW_HEADERS, *extra])


async def cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    # on_response_prepare: also reaches streaming responses, whose headers go out before the body.
    origin = cors_origin(request)
    if origin is not None and "Access-Control-Allow-Origin" not in response.headers:
        response.headers.update(_origin_headers(origin))
        response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSE_HEADERS
        response.headers["Vary"] = "Origin"


