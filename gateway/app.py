"""The app factory: routes, middlewares, and the process lifetime (cleanup_ctx / on_shutdown).

The services the transports serve from are built by `build_services` (also what tests use to
run chats in memory, without an app). Shutdown and cleanup run every step even after one fails
(`run_steps`): each failure is logged, and once the app's cleanup has run they are raised
together, so a failed step neither hides the others' failures nor keeps a later step from
running.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import WSCloseCode, web

from adk_gateway.agents.adk import AgentApps, AgentHost, load_agents, redact_uri, session_service_from_uri
from adk_gateway.agents.artifacts import ArtifactStoreError, artifact_service_from_uri
from adk_gateway.config import Settings, host_name, origin_key
from adk_gateway.core.errors import ServiceUnavailable, StartupError, Unauthorized
from adk_gateway.keys import (
    AUTH,
    DRAINING,
    HOST,
    LINKS,
    METRICS,
    REGISTRY,
    SERVICE,
    SETTINGS,
    SHUTDOWN_ERRORS,
    SIGN_INS,
)
from adk_gateway.metrics import Metrics
from adk_gateway.services.artifacts import ARTIFACT_ROUTE, ArtifactLinks
from adk_gateway.services.auth import bearer_token, build_authenticator
from adk_gateway.services.chat import ChatService
from adk_gateway.services.extras import Extras
from adk_gateway.services.leases import leases_for
from adk_gateway.services.registry import Limits, Registry
from adk_gateway.services.signin import CALLBACK_PATH, SignIns
from adk_gateway.services.streams import MemoryStreamStore, StreamStore
from adk_gateway.tracing import server_spans, tracing_enabled
from adk_gateway.transports import admission

__all__ = ["Services", "build_apps", "build_services", "make_app", "run_steps"]

log = structlog.get_logger("adk_gateway.app")

ROOT = Path(__file__).resolve().parent.parent

FALLBACK_PAGE = """<!doctype html><meta charset="utf-8"><title>adk-gateway</title>
<p>The chat page is not built. Run <code>make run</code> (it builds <code>web/dist</code>).</p>"""


def _stream_store(settings: Settings) -> StreamStore:
    if settings.stream_store.startswith(("redis://", "rediss://")):
        from adk_gateway.services.redis_streams import RedisStreamStore

        store: StreamStore = RedisStreamStore(
            settings.stream_store, retention_s=settings.resume_retention_s, max_bytes=settings.stream_buffer_bytes
        )
        return store
    return MemoryStreamStore(retention_s=settings.resume_retention_s, max_bytes=settings.stream_buffer_bytes)


Step = tuple[str, Callable[[], Awaitable[object]]]


async def run_steps(*steps: Step) -> list[Exception]:
    """Runs every step in order, also after one has failed; logs each failure and returns them.
    A cancellation is not a failure: it stops the steps at once."""
    errors: list[Exception] = []
    for name, step in steps:
        try:
            await step()
        except Exception as exc:
            log.error("step_failed", step=name, error=repr(exc), exc_info=exc)
            errors.append(exc)
    return errors


@dataclass(frozen=True, slots=True)
class Services:
    """What the transports serve from, built once per process (`build_services`)."""

    settings: Settings
    metrics: Metrics
    apps: AgentApps
    registry: Registry
    streams: StreamStore
    chat: ChatService

    @property
    def host(self) -> AgentHost:
        """The default app's host."""
        return self.apps.default_host

    def listen(self) -> None:
        """The stream store starts listening for stops other instances broadcast."""
        self.streams.listen_for_stops(self.registry.stop_soon)

    def closing_steps(self) -> list[Step]:
        """How they are closed, in order: every run stopped, then the stores, then each app."""
        return [
            ("stop runs", self.registry.aclose),
            ("close leases", self.registry.leases.aclose),
            ("close stream store", self.streams.aclose),
            *((f"close agent host {name}", host.aclose) for name, host in self.apps.hosts.items()),
        ]

    async def aclose(self) -> None:
        """Closes them all (`closing_steps`); raises an ExceptionGroup of every step that failed."""
        if errors := await run_steps(*self.closing_steps()):
            raise ExceptionGroup("closing the services failed", errors)


def build_apps(settings: Settings) -> AgentApps:
    """Every app the settings' `--agent` names, on the one session store `--session-store` names.
    The apps load first: their `.env` files may hold what the store needs (as with `adk web`)."""
    loaded = load_agents(settings.agent, settings.effective_model(), default=settings.app)
    store = session_service_from_uri(settings.session_store, memory_ttl_s=settings.memory_ttl_s,
                                     memory_max_chats=settings.memory_max_chats, agents_dir=loaded.folder)
    try:
        artifacts = artifact_service_from_uri(settings.artifact_store, max_bytes=settings.artifact_memory_max_bytes,
                                              agents_dir=loaded.folder)
    except ArtifactStoreError as exc:
        raise StartupError(str(exc), setting="artifact_store") from None
    return AgentApps.build(loaded, store, max_llm_calls=settings.max_llm_calls, artifact_service=artifacts)


def signing_secret(settings: Settings) -> bytes:
    """What signs artifact links and sign-in states: `--url-signing-secret`, else one of this process's own."""
    return settings.url_signing_secret.encode() or secrets.token_bytes(32)


def build_services(
    settings: Settings, *, host: AgentHost | AgentApps | None = None, metrics: Metrics | None = None,
    links: ArtifactLinks | None = None, sign_ins: SignIns | None = None, listen: bool = True,
) -> Services:
    """The apps (the settings' agent unless a host or apps are given), the registry, the stream
    store and the chat service, wired together; `listen`: the stream store listens for other
    instances' stops now (else the caller starts it, `Services.listen`)."""
    metrics = metrics or Metrics()
    if links is None or sign_ins is None:
        secret = signing_secret(settings)
        links = links or ArtifactLinks(secret, ttl_s=settings.artifact_url_ttl_s)
        sign_ins = sign_ins or SignIns(secret)
    if isinstance(host, AgentHost):
        host = AgentApps.single(host)
    apps = build_apps(settings) if host is None else host
    registry = Registry(detach_on_disconnect=settings.detach_on_disconnect,
                        busy_grace_s=settings.busy_grace_ms / 1000,
                        limits=Limits.from_settings(settings), metrics=metrics,
                        leases=leases_for(settings.session_store, settings.stream_store))
    apps.configure(model_timeout_s=settings.model_timeout_s, tool_timeout_s=settings.tool_timeout_s,
                   store_timeout_s=settings.store_timeout_s, cancel_timeout_s=settings.cancel_timeout_s,
                   metrics=metrics, busy=lambda user, chat: registry.active_run((user, chat)) is not None)
    streams = _stream_store(settings)
    if listen:
        streams.listen_for_stops(registry.stop_soon)
    chat = ChatService(apps, registry, streams, approval_timeout_s=settings.approval_timeout_s,
                       stream_max_bytes=settings.stream_buffer_bytes, max_json_depth=settings.max_json_depth,
                       metrics=metrics, extras=Extras(links, sign_ins), client_state_keys=settings.client_state_keys)
    return Services(settings=settings, metrics=metrics, apps=apps, registry=registry, streams=streams, chat=chat)


async def _stores_answer(services: Services) -> None:
    """The stores the settings name answer now, or the process does not start: one line naming the
    setting beats a gateway that answers every chat with 503. (Once started, a store that stops
    answering is a 503 `store_unavailable` per request, and `/readyz` says so.)"""
    settings = services.settings
    if not settings.session_store.startswith("memory://"):
        try:
            await asyncio.wait_for(services.host.store_answers(), timeout=settings.store_timeout_s)
        except Exception as exc:
            raise StartupError(f"{redact_uri(settings.session_store)} does not answer ({_why(exc)})",
                               setting="session_store") from None
    try:
        answered = await asyncio.wait_for(services.streams.ping(), timeout=settings.store_timeout_s)
    except TimeoutError:
        answered = False
    if not answered:
        raise StartupError(f"{redact_uri(settings.stream_store)} does not answer", setting="stream_store")


def _why(exc: BaseException) -> str:
    """The first line of what a store's client said."""
    if isinstance(exc, TimeoutError):
        return "no answer in --store-timeout-s"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


async def _agent_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    services = build_services(settings, host=app.get(HOST), metrics=app[METRICS], links=app[LINKS],
                              sign_ins=app[SIGN_INS], listen=False)
    if HOST not in app:  # (a host given to `make_app` is the caller's, with its own store)
        try:
            await _stores_answer(services)
        except StartupError:
            await run_steps(*services.closing_steps())
            raise
    services.listen()
    app[HOST] = services.host
    app[REGISTRY] = services.registry
    app[SERVICE] = services.chat
    log.info("agent_ready", app_name=services.host.app_name, apps=services.apps.names(),
             model=settings.effective_model(), session_store=settings.session_store.split("://")[0])
    try:
        yield
    finally:
        errors = await run_steps(*services.closing_steps(), ("close authenticator", app[AUTH].aclose))
        # The drain's failures too: a failing `on_shutdown` handler would keep aiohttp from
        # running this cleanup at all, so the drain only records them.
        errors = [*app[SHUTDOWN_ERRORS], *errors]
        if errors:
            raise ExceptionGroup("shutting down failed", errors)


async def _drain(app: web.Application) -> None:
    """SIGTERM (aiohttp has already stopped accepting connections): new runs are refused with 503,
    running ones — detached ones included — get `--shutdown-timeout-s` to finish; then every run
    left is stopped (its stream ends with `abort` and `[DONE]`, its `end` frame is sent, its
    approval book saved), and every socket is closed with 1001.

    Every step runs even when one before it failed; the failures are logged and raised at the end
    of the app's cleanup (`_agent_context`)."""
    app[DRAINING].set()
    settings = app[SETTINGS]
    if REGISTRY not in app:
        return
    registry = app[REGISTRY]
    runs = [run for run in registry.runs.values() if run.active]
    log.info("drain_started", runs=len(runs), sockets=len(registry.sockets(web.WebSocketResponse)),
             timeout_s=settings.shutdown_timeout_s)

    async def let_runs_finish() -> None:
        if runs:
            waiters = [asyncio.ensure_future(run.done.wait()) for run in runs]
            _, late = await asyncio.wait(waiters, timeout=settings.shutdown_timeout_s)
            for waiter in late:
                waiter.cancel()
            app[METRICS].drained_runs.labels(outcome="stopped").inc(len(late))
            app[METRICS].drained_runs.labels(outcome="finished").inc(len(runs) - len(late))

    async def end_resumes() -> None:
        if SERVICE in app:
            app[SERVICE].streams.end_resumes()  # resumes of runs on other instances end too

    async def let_deliveries_write() -> None:
        # What the stopped runs ended with (abort, `end` frames) reaches their clients.
        deliveries = [task for conn in list(registry.connections.values()) for task in conn.deliveries]
        if deliveries:
            await asyncio.wait(deliveries, timeout=1.0)

    closed: list[web.WebSocketResponse] = []

    async def close_sockets() -> None:
        closed.extend(registry.sockets(web.WebSocketResponse))  # the ones still open now
        results = await asyncio.gather(
            *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown") for ws in closed),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, Exception):
                log.info("socket_close_failed", error=repr(result))  # already gone: nothing to tell

    app[SHUTDOWN_ERRORS].extend(await run_steps(
        ("let runs finish", let_runs_finish),
        ("stop runs", registry.aclose),
        ("end resumes", end_resumes),
        ("let deliveries write", let_deliveries_write),
        ("close sockets", close_sockets),
    ))
    log.info("drain_done", sockets_closed=len(closed))


@web.middleware
def _door(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> Awaitable[web.StreamResponse]:
    """Every request's way in (`adk_gateway.transports.admission`): a CORS preflight is answered (421 first when
    its `Host` is not the gateway's); everything else runs its handler behind the door's checks,
    the `Host` first, and error answers.

    A plain function, not a coroutine: for a handler that passes the door itself (the
    WebSocket handshake's, `admission.passes_itself`), it hands aiohttp the handler's own coroutine,
    so no frame of the middleware stays on the stack for the socket's life.
    """
    preflight = admission.preflight(request)
    if preflight is not None:
        return _answered(preflight)
    if admission.passes_itself(handler):
        return handler(request)
    return _through_door(request, handler)


async def _answered(response: web.StreamResponse) -> web.StreamResponse:
    return response


async def _through_door(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        await admission.admit(request)
        return await handler(request)
    except Exception as exc:
        return admission.answer(request, exc)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    if SERVICE not in request.app:
        return web.json_response({"status": "starting"}, status=503)
    host = request.app[HOST]
    try:
        await asyncio.wait_for(host.get_session("__readyz__", "__readyz__", events=False), timeout=2)
    except Exception as exc:
        log.warning("readyz_store_unreachable", error=repr(exc))
        return web.json_response({"status": "store_unreachable"}, status=503)
    if not await request.app[SERVICE].streams.ping():
        log.warning("readyz_stream_store_unreachable")
        return web.json_response({"status": "stream_store_unreachable"}, status=503)
    return web.json_response({"status": "ready", "agent": host.app_name})


async def apps(request: web.Request) -> web.Response:
    """The apps this gateway serves, in a stable order; `default` marks the one a request without
    `app` gets; `model` names its root agent's model; `tools` lists each app's tools (name,
    description, needsApproval, runsInBrowser, longRunning, parameters: the JSON Schema of its
    arguments), for a page's suggestions."""
    if SERVICE not in request.app:
        raise ServiceUnavailable("The gateway is starting; try again.")
    served = request.app[SERVICE].apps
    return web.json_response({"apps": [
        {"name": name, "default": name == served.default, "model": served.host(name).root_model(),
         "tools": [tool.wire() for tool in served.host(name).tools()]}
        for name in served.names()
    ]})


async def me(request: web.Request) -> web.Response:
    """Who the credential names; pages call it to learn whether they must ask for a token."""
    return web.json_response({"user": admission.identity_of(request).user_id, "auth": request.app[AUTH].mode})


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    expected = request.app[SETTINGS].metrics_token
    if expected:
        offered = bearer_token(request.headers) or ""
        if not hmac.compare_digest(offered.encode(), expected.encode()):
            error = Unauthorized(token_sent=bool(offered))
            return web.json_response(error.body(), status=error.status, headers=error.headers())
    if REGISTRY in request.app:
        counts = request.app[REGISTRY].counts()
        m.active_runs.set(counts["runs"])
    return web.Response(body=m.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


STATIC_PREFIX = "/static/"


def page_headers(request: web.Request) -> dict[str, str]:
    """The headers of the chat page and its static files: a Content-Security-Policy, `nosniff`,
    no Referer, no framing.

    The policy lets the page load its own scripts, styles, fonts and workers ('self'); show images
    from itself, `data:` and `blob:` URLs and the gateway's artifact links (under its own origin,
    or `--public-url`'s): an image a model writes into markdown elsewhere is not fetched, so it
    cannot carry a chat out; connect to the gateway only (its http and ws origins, the origin the
    page was reached at and `--public-url`'s); no plugins, no `<base>`, and no page may frame it.
    Styles may be inline (`'unsafe-inline'`): Google's search suggestions are shown as the HTML
    Google sends, with its `<style>`, in a sandboxed `<iframe srcdoc>`, which inherits this
    policy; a style cannot fetch anything the policy does not allow, and the page renders no
    HTML from a model. The policy is the one of the page this gateway serves: a copy of the
    page served from another origin gets its own host's headers (README, "Threat model").
    """
    settings = request.app[SETTINGS]
    connect, images = ["'self'"], ["'self'", "data:", "blob:"]
    own = admission.own_origin(request)
    for origin in (own, origin_key(settings.public_url) if settings.public_url else ""):
        scheme, _, host = origin.partition("://")
        if scheme in ("http", "https") and host and host_name(host) is not None:
            socket = f"{'wss' if scheme == 'https' else 'ws'}://{host}"
            connect += [origin, socket] if origin != own else [socket]
            if origin != own:
                images.append(origin)
    policy = "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        f"img-src {' '.join(images)}",
        f"connect-src {' '.join(dict.fromkeys(connect))}",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }


async def _static_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the page's headers (`page_headers`) on its static files too."""
    if request.path.startswith(STATIC_PREFIX) and response.status < 400:
        response.headers.update(page_headers(request))


def _web_dir(settings: Settings) -> Path:
    """The built chat page: --web-dir; else a checkout's web/dist (`make run` builds it there);
    else the copy an installed wheel carries (gateway/page, made by deploy/packaging/backend.py)."""
    if settings.web_dir:
        return Path(settings.web_dir)
    checkout = ROOT / "web" / "dist"
    return checkout if (checkout / "index.html").is_file() else Path(__file__).resolve().parent / "page"


def make_app(settings: Settings | None = None, *, host: AgentHost | None = None) -> web.Application:
    """Builds the gateway app. `host` lets tests pass their own agent host."""
    from adk_gateway.transports.resources import (
        artifact_file,
        chat,
        chat_approvals,
        chat_artifacts,
        chats,
        delete_chat,
        oauth_callback,
        rename_chat,
    )
    from adk_gateway.transports.sse import chat_post, chat_resume, chat_stop
    from adk_gateway.transports.websocket import chat_socket

    settings = settings or Settings()
    # A server span per request, around everything else, when a tracer provider is installed.
    middlewares = [server_spans, _door] if tracing_enabled() else [_door]
    app = web.Application(middlewares=middlewares, client_max_size=settings.max_body_bytes + 1024)
    app[SETTINGS] = settings
    app[AUTH] = build_authenticator(settings)
    app[METRICS] = Metrics()
    app[SHUTDOWN_ERRORS] = []
    app[DRAINING] = asyncio.Event()
    secret = signing_secret(settings)
    app[LINKS] = ArtifactLinks(secret, ttl_s=settings.artifact_url_ttl_s)
    app[SIGN_INS] = SignIns(secret)
    if host is not None:
        app[HOST] = host
    app.cleanup_ctx.append(_agent_context)
    app.on_shutdown.append(_drain)
    app.on_response_prepare.append(admission.cors_headers)

    web_dir = _web_dir(settings)

    async def index(request: web.Request) -> web.StreamResponse:
        page = web_dir / "index.html"
        if page.is_file():
            return web.FileResponse(page, headers={"Cache-Control": "no-cache", **page_headers(request)})
        return web.Response(text=FALLBACK_PAGE, content_type="text/html", headers=page_headers(request))

    app.router.add_post("/api/chat", chat_post)
    app.router.add_get(admission.WS_PATH, chat_socket)
    app.router.add_get("/api/me", me)
    app.router.add_get("/api/apps", apps)
    app.router.add_get("/api/chat/{chat_id}/stream", chat_resume)
    app.router.add_post("/api/chat/{chat_id}/stop", chat_stop)
    app.router.add_get("/api/chats", chats)
    app.router.add_get("/api/chats/{chat_id}", chat)
    app.router.add_patch("/api/chats/{chat_id}", rename_chat)
    app.router.add_delete("/api/chats/{chat_id}", delete_chat)
    app.router.add_get("/api/chats/{chat_id}/approvals", chat_approvals)
    app.router.add_get("/api/chats/{chat_id}/artifacts", chat_artifacts)
    app.router.add_get(ARTIFACT_ROUTE, artifact_file)
    app.router.add_get(CALLBACK_PATH, oauth_callback)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", index)
    if web_dir.is_dir():
        app.router.add_static(STATIC_PREFIX, web_dir, append_version=False)
        app.on_response_prepare.append(_static_headers)
    return app
