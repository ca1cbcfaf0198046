"""structlog set-up: JSON or console lines, with context (connection, chat, request ids) bound
per task through `structlog.contextvars`.

The standard library's loggers (ADK's, aiohttp's, any library's) go through the same processors
(structlog's `ProcessorFormatter` on the root handler), so with `--log-format json` every line on
stderr is one JSON object. `AccessLogger` writes one line per HTTP request (a WebSocket's when it
closes): method, path without its query string (tokens travel there), status, bytes and duration.
Every string value of every line passes `_redact_credentials`: a URL query's values, access tokens
(percent-encoded names too), bearer credentials and JWTs become `[redacted]`.

`bind()` / `unbind()` bind one such value for a block without a context manager: a connection that
lives for minutes keeps only the token, not a `bound_contextvars` generator and its frame."""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import Token
from typing import Any

import orjson
import structlog
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

__all__ = ["AccessLogger", "bind", "configure_logging", "get_logger", "unbind"]


# What a string must hold for `redact` to have anything to do: a query, an `access_token=` (plain
# or percent-encoded, any case), a bearer credential, a JWT. Most log values hold none of these.
_MAYBE_CREDENTIAL = re.compile(r"[?=%]|eyJ|earer|EARER")


def _redact_credentials(
    logger: object, method: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """Last line of defence: no log line carries a URL query's values, an access token (however
    its name is encoded), a bearer credential or a JWT (`adk_gateway.services.auth.redact`)."""
    from adk_gateway.services.auth import redact

    for key, value in event_dict.items():
        if isinstance(value, str) and _MAYBE_CREDENTIAL.search(value) is not None:
            event_dict[key] = redact(value)
    return event_dict


def _json_line(event_dict: Any, **kwargs: Any) -> str:
    """structlog's `JSONRenderer` serializer: orjson (a fraction of the standard library's time per
    line), values it cannot hold through structlog's fallback (`default`), keys that are not
    strings as their `str()`. A string orjson refuses (a lone surrogate, e.g. from a header's
    non-UTF-8 bytes) goes through the standard library's encoder, which escapes it: the line is
    written rather than lost."""
    try:
        return orjson.dumps(event_dict, default=kwargs.get("default"), option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(event_dict, default=kwargs.get("default") or repr, ensure_ascii=True)


def resolved_format(fmt: str) -> str:
    """`auto` is `console` on a terminal and `json` otherwise (a service, a container, a pipe)."""
    if fmt != "auto":
        return fmt
    return "console" if sys.stderr.isatty() else "json"


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    log_level = getattr(logging, level.upper(), logging.INFO)
    fmt = resolved_format(fmt)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(serializer=_json_line) if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redact_credentials, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(log_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # The standard library's records (aiohttp, ADK) through the same processors and renderer.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, _redact_credentials, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # ADK is chatty: the libraries speak from WARNING unless the gateway's level is stricter.
    root.setLevel(max(log_level, logging.WARNING))
    for noisy in ("google_adk", "google.adk", "google_genai"):
        logging.getLogger(noisy).setLevel(max(log_level, logging.WARNING))
    # Python warnings (ADK's `[EXPERIMENTAL]` notices, deprecations) as log lines too, not bare
    # text on stderr (logger `py.warnings`).
    logging.captureWarnings(True)
    # ADK warns on every partial event that carries no usage metadata, which is all of them.
    logging.getLogger("google_adk.google.adk.telemetry").setLevel(logging.ERROR)


class AccessLogger(AbstractAccessLogger):
    """One `access` line per request, written through structlog (aiohttp's `access_log_class`)."""

    log_access = structlog.get_logger("gateway.access")

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.log_access.info(
            "access",
            method=request.method,
            # Never the query string (`?access_token=` travels there); a query hidden in the path
            # (`%3F` decodes to `?`) is redacted on the way out (`_redact_credentials`).
            path=request.path,
            status=response.status,
            bytes=response.body_length,
            duration_ms=round(time * 1000, 1),
            remote=request.remote,
        )


def bind(key: str, value: object) -> Token[Any]:
    """Adds `key=value` to every log line of the current task (and the tasks it starts) until
    `unbind(key, token)` with the token returned here."""
    return structlog.contextvars.bind_contextvars(**{key: value})[key]


def unbind(key: str, token: Token[Any]) -> None:
    """Restores `key` to what it was before the `bind()` that returned `token`."""
    structlog.contextvars.reset_contextvars(**{key: token})


def bind_replacing(key: str, value: object) -> object:
    """`bind()` for a binding that lives long (a socket's): returns the value `key` had, to give
    back with `restore(key, previous)`. A `Token` kept for the binding's life would cost an object
    more per connection."""
    return bind(key, value).old_value


def restore(key: str, previous: object) -> None:
    """Gives `key` back the value `bind_replacing` returned (unbound when it had none: structlog
    leaves out a key set to `...`)."""
    structlog.contextvars.bind_contextvars(**{key: ... if previous is Token.MISSING else previous})


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
