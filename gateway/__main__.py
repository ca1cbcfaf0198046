"""`python -m gateway` / `adk-gateway`: parse settings, configure logs, serve.

`adk-gateway loadtest ...` runs the load generator instead (`gateway.loadtest`, its own flags).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

import structlog
from aiohttp import web

from gateway.config import Settings, SettingsError, load_settings
from gateway.logs import AccessLogger, configure_logging
from gateway.tracing import configure_tracing

LISTEN_BACKLOG = 4096


def configure_scripted_model(settings: Settings) -> None:
    """The scripted model's process-wide latency (its `--scripted-*` settings)."""
    from agents.script import Latency
    from agents.scripted import configure_latency

    configure_latency(
        Latency(ttft_ms=settings.scripted_ttft_ms, tokens_per_s=settings.scripted_tokens_per_s,
                dist=settings.scripted_latency_dist, jitter=settings.scripted_latency_jitter),
        seed=settings.scripted_seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["loadtest"]:
        from gateway.loadtest.cli import main as loadtest

        return loadtest(args[1:])
    try:
        settings = load_settings(args)
    except SettingsError as exc:
        print(f"adk-gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    from agents.adk import AgentLoadError
    from gateway.app import make_app
    from gateway.config import is_loopback
    from gateway.services.auth import ApiKeyFileError

    if settings.auth == "none" and not is_loopback(settings.host):
        structlog.get_logger("gateway").warning(
            "anonymous_access", host=settings.host,
            detail="--auth none on a reachable host: any client can act as any user (--allow-anonymous)",
        )
    try:
        configure_scripted_model(settings)
        from agents.adk import install_tracer_provider

        configure_tracing(install_tracer_provider)
        app = make_app(settings)
        # What was loaded at start (ADK, the agent, the page) never becomes garbage: keep it out of
        # the collector's generations, so collections while serving stay short.
        gc.freeze()
        # A process holding thousands of runs has a large heap of young objects that live as long
        # as a run: with Python's default thresholds the collector rescans them many times a
        # second (see `--gc-thresholds`; docs/perf/benchmark-history.md, "Where the slope comes
        # from, and what the collector's thresholds do to it").
        if (thresholds := settings.gc_threshold_values()) is not None:
            gc.set_threshold(*thresholds)
        # The names a request's Host may carry (besides IP addresses): any other is answered 421.
        structlog.get_logger("gateway").info("listening", url=f"http://{settings.host}:{settings.port}",
                                             hosts="*" if settings.any_host else sorted(settings.host_names))
        web.run_app(
            app,
            host=settings.host,
            port=settings.port,
            handler_cancellation=True,
            # The kernel's queue of connections not yet accepted: 128 (the default) overflows when
            # thousands of clients connect at once, and they then wait on SYN retries.
            backlog=LISTEN_BACKLOG,
            shutdown_timeout=settings.shutdown_timeout_s,
            access_log_class=AccessLogger,
            # One log line instead of aiohttp's banner, so that every line is JSON with --log-format json.
            print=None,
        )
    except AgentLoadError as exc:
        print(f"adk-gateway: cannot load agent: {exc}", file=sys.stderr)
        return 2
    except ApiKeyFileError as exc:
        print(f"adk-gateway: --auth-api-keys-file / ADK_GATEWAY_AUTH_API_KEYS_FILE: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
