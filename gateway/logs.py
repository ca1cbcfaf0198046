"""structlog set-up: JSON or console lines, with context (connection, chat, request ids) bound
per task through `structlog.contextvars`.

`bind()` / `unbind()` bind one such value for a block without a context manager: a connection that
lives for minutes keeps only the token, not a `bound_contextvars` generator and its frame."""

from __future__ import annotations

import logging
import sys
from contextvars import Token
from typing import Any

import structlog

__all__ = ["bind", "configure_logging", "get_logger", "unbind"]


def _redact_credentials(
    logger: object, method: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """Last line of defence: no log line carries an access token or a bearer credential."""
    from gateway.services.auth import redact

    for key, value in event_dict.items():
        if isinstance(value, str) and ("access_token=" in value or "earer " in value):
            event_dict[key] = redact(value)
    return event_dict


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    log_level = getattr(logging, level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redact_credentials, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(log_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Route the standard library's loggers (aiohttp, ADK) through the same level; ADK is chatty.
    logging.basicConfig(
        level=max(log_level, logging.WARNING), stream=sys.stderr, format="%(name)s %(levelname)s %(message)s"
    )
    for noisy in ("google_adk", "google.adk", "google_genai", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(log_level, logging.WARNING))
    # ADK warns on every partial event that carries no usage metadata, which is all of them.
    logging.getLogger("google_adk.google.adk.telemetry").setLevel(logging.ERROR)


def bind(key: str, value: object) -> Token[Any]:
    """Adds `key=value` to every log line of the current task (and the tasks it starts) until
    `unbind(key, token)` with the token returned here."""
    return structlog.contextvars.bind_contextvars(**{key: value})[key]


def unbind(key: str, token: Token[Any]) -> None:
    """Restores `key` to what it was before the `bind()` that returned `token`."""
    structlog.contextvars.reset_contextvars(**{key: token})


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
