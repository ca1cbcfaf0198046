"""`python -m adk_gateway` / `adk-gateway`: parse settings, configure logs, serve.

`adk-gateway loadtest ...` runs the load generator instead (`adk_gateway.loadtest`, its own flags).
"""

from __future__ import annotations

import errno
import gc
import socket
import sys
from collections.abc import Sequence
from importlib import metadata

import structlog
from aiohttp import web

from adk_gateway.config import ENV_PREFIX, Settings, SettingsError, load_settings
from adk_gateway.core.errors import StartupError
from adk_gateway.logs import AccessLogger, configure_logging
from adk_gateway.tracing import configure_tracing

LISTEN_BACKLOG = 4096


def configure_scripted_model(settings: Settings) -> None:
    """The scripted model's process-wide latency (its `--scripted-*` settings)."""
    from adk_gateway.agents.script import Latency
    from adk_gateway.agents.scripted import configure_latency

    configure_latency(
        Latency(ttft_ms=settings.scripted_ttft_ms, tokens_per_s=settings.scripted_tokens_per_s,
                dist=settings.scripted_latency_dist, jitter=settings.scripted_latency_jitter),
        seed=settings.scripted_seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["loadtest"]:
        from adk_gateway.loadtest.cli import main as loadtest

        return loadtest(args[1:])
    if args[:1] in (["--version"], ["-V"]):
        print(f"adk-gateway {package_version()}")
        return 0
    try:
        settings = load_settings(args)
    except SettingsError as exc:
        print(f"adk-gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    try:
        serve(settings)
    except StartupError as exc:
        flag = "--" + exc.setting.replace("_", "-")
        print(f"adk-gateway: {flag} / {ENV_PREFIX}{exc.setting.upper()}: {exc}", file=sys.stderr)
        return 2
    return 0


def serve(settings: Settings) -> None:
    """Builds the app, binds its sockets, and serves until a signal. Raises `StartupError` (before
    `listening` is logged) for a port in use, an agent or a store that cannot be loaded."""
    from adk_gateway.app import make_app
    from adk_gateway.config import is_loopback

    if settings.auth == "none" and not is_loopback(settings.host):
        structlog.get_logger("gateway").warning(
            "anonymous_access", host=settings.host,
            detail="--auth none on a reachable host: any client can act as any user (--allow-anonymous)",
        )
    configure_scripted_model(settings)
    from adk_gateway.agents.adk import install_tracer_provider

    configure_tracing(install_tracer_provider)
    app = make_app(settings)
    # The socket is bound before anything else starts, so a port in use is one line, not the
    # traceback of a server that had already said it was listening.
    sockets = bind(settings.host, settings.port)

    async def listening(app: web.Application) -> None:
        # Appended after `make_app`'s contexts: runs once the agent and the stores are up.
        # The names a request's Host may carry (besides IP addresses): any other is answered 421.
        structlog.get_logger("gateway").info("listening", url=f"http://{settings.host}:{settings.port}",
                                             hosts="*" if settings.any_host else sorted(settings.host_names))

    app.on_startup.append(listening)
    # What was loaded at start (ADK, the agent, the page) never becomes garbage: keep it out of
    # the collector's generations, so collections while serving stay short.
    gc.freeze()
    # A process holding thousands of runs has a large heap of young objects that live as long
    # as a run: with Python's default thresholds the collector rescans them many times a
    # second (see `--gc-thresholds`; docs/perf/benchmark-history.md, "Where the slope comes
    # from, and what the collector's thresholds do to it").
    if (thresholds := settings.gc_threshold_values()) is not None:
        gc.set_threshold(*thresholds)
    try:
        web.run_app(
            app,
            sock=sockets,
            handler_cancellation=True,
            shutdown_timeout=settings.shutdown_timeout_s,
            access_log_class=AccessLogger,
            # One log line instead of aiohttp's banner, so that every line is JSON with --log-format json.
            print=None,
        )
    finally:
        for sock in sockets:
            sock.close()


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address `host` resolves to (as aiohttp's own site would bind).
    Raises `StartupError` naming --port or --host when one cannot be bound."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"{host!r} does not resolve: {exc.strerror}", setting="host") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(
            (info[0], info[1], info[2], "", info[4]) for info in infos
        ):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            # The kernel's queue of connections not yet accepted: 128 (the default) overflows when
            # thousands of clients connect at once, and they then wait on SYN retries.
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"{host}:{port} is already in use (another gateway?); choose another port",
                               setting="port") from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", setting="host") from None
    return sockets


def package_version() -> str:
    try:
        return metadata.version("adk-gateway")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
