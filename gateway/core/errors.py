"""One error tree. Clients get `code` and a short `message`; logs get the detail.

    GatewayError                      status  code
    ├── BadRequest                    400     bad_request (or a more precise code)
    │   └── PayloadTooLarge           413     payload_too_large
    │       └── HistoryTooLong        413     history_too_long
    ├── Unauthorized                  401     unauthorized (with WWW-Authenticate: Bearer)
    ├── ApprovalInvalid               403     approval_invalid
    ├── LinkRefused                   403     link_refused      (a signed link changed or expired)
    ├── OriginRefused                 403     origin_refused
    ├── HostRefused                   421     host_refused      (a Host not in --allowed-hosts: DNS rebinding)
    ├── UnsupportedMediaType          415     unsupported_media_type
    ├── ChatBusy                      409     chat_busy
    ├── ContinuationRefused           409     continuation_refused
    ├── NotFound                      404     not_found
    │   └── UnknownApp                404     unknown_app      (a request's `app` names no served app)
    ├── AgentFailed                   500     agent_failed
    ├── ModelTimedOut                 504     model_timeout     (inside a run: an `error` chunk)
    ├── SlowReader                    -       slow_reader       (mid-stream only: SSE cut, close 4008)
    ├── ServiceUnavailable            503     unavailable
    │   └── StoreUnavailable          503     store_unavailable (Retry-After; inside a run: an `error` chunk)
    └── LimitReached                  429     rate_limited      (all: Retry-After)
        ├── TooManyRuns               429     too_many_runs
        ├── TooManySockets            429     too_many_sockets
        └── Overloaded                503     overloaded        (close 1013)

Beside the tree, `StartupError`: something a setting names keeps the process from starting (an
agent that does not import, a store that does not parse or answer, a port in use). It reaches no
client: `python -m adk_gateway` prints it as one line naming the setting's flag and variable and exits
with status 2.

`LimitReached` is a cap answered before anything streams (gateway/services/registry.py). Its `reason`
names the cap (the Prometheus label of `adk_gateway_rejections_total`), and `retry_after_s` goes
out as `Retry-After` on HTTP.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

__all__ = [
    "AgentFailed",
    "ApprovalInvalid",
    "BadRequest",
    "ChatBusy",
    "CloseCode",
    "ContinuationRefused",
    "GatewayError",
    "HistoryTooLong",
    "HostRefused",
    "LimitReached",
    "LinkRefused",
    "ModelTimedOut",
    "NotFound",
    "OriginRefused",
    "Overloaded",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "SlowReader",
    "StartupError",
    "StoreUnavailable",
    "TooManyRuns",
    "TooManySockets",
    "Unauthorized",
    "UnknownApp",
    "UnsupportedMediaType",
]


class CloseCode(enum.IntEnum):
    """The WebSocket close codes the gateway sends (RFC 6455, section 7.4.1), so the core needs no
    WebSocket library; aiohttp's `WSCloseCode` has the same values."""

    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013
    UNSUPPORTED_DATA = 1003


class GatewayError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    close_code: ClassVar[int] = CloseCode.INTERNAL_ERROR
    default_message: ClassVar[str] = "Something went wrong."

    def __init__(self, message: str | None = None, *, detail: str | None = None, code: str | None = None) -> None:
        self.message = message or self.default_message
        self.detail = detail
        self.error_code = code or self.code
        super().__init__(detail or self.message)

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.error_code, "message": self.message}}

    def headers(self) -> dict[str, str]:
        """Response headers that go with this error."""
        return {}


class BadRequest(GatewayError):
    status = 400
    code = "bad_request"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "The request is malformed."


class PayloadTooLarge(BadRequest):
    status = 413
    code = "payload_too_large"
    close_code = CloseCode.MESSAGE_TOO_BIG
    default_message = "The request body is too large."


class HistoryTooLong(PayloadTooLarge):
    """The posted history has more messages than `--max-history-messages`. Over WebSocket an
    `error` frame, not a close: the socket itself did nothing wrong."""

    code = "history_too_long"
    default_message = "The chat history is too long."


class Unauthorized(GatewayError):
    """No credential, or one that does not verify. `token_sent` picks the RFC 6750 challenge."""

    status = 401
    code = "unauthorized"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "Authentication required: send Authorization: Bearer <token>."

    def __init__(self, message: str | None = None, *, detail: str | None = None, token_sent: bool = False) -> None:
        super().__init__(message, detail=detail)
        self.token_sent = token_sent

    def headers(self) -> dict[str, str]:
        challenge = 'Bearer realm="adk-gateway"'
        if self.token_sent:
            challenge += ', error="invalid_token"'
        return {"WWW-Authenticate": challenge}


class UnsupportedMediaType(GatewayError):
    status = 415
    code = "unsupported_media_type"
    close_code = CloseCode.UNSUPPORTED_DATA
    default_message = "POST bodies must be application/json."


class ApprovalInvalid(GatewayError):
    status = 403
    code = "approval_invalid"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "This approval was not issued for this chat, or was already answered."


class LinkRefused(GatewayError):
    status = 403
    code = "link_refused"
    default_message = "This link is not valid (changed, or expired)."


class OriginRefused(GatewayError):
    status = 403
    code = "origin_refused"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "This origin may not open the chat socket."


class HostRefused(GatewayError):
    """A request whose `Host` is not one the gateway answers to (`--allowed-hosts`): a page on a
    rebinding domain that resolves to the gateway's address is refused before anything runs."""

    status = 421
    code = "host_refused"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "This gateway does not answer to that host name."


class ChatBusy(GatewayError):
    status = 409
    code = "chat_busy"
    default_message = "This chat is still answering; stop it or wait for it to finish."


class ContinuationRefused(GatewayError):
    status = 409
    code = "continuation_refused"
    default_message = "Nothing new to continue with: this answer is already complete."


class NotFound(GatewayError):
    status = 404
    code = "not_found"
    default_message = "Not found."


class UnknownApp(NotFound):
    code = "unknown_app"
    default_message = "This gateway serves no app of that name (GET /api/apps lists them)."


class AgentFailed(GatewayError):
    status = 500
    code = "agent_failed"
    default_message = "The agent failed."


class ModelTimedOut(GatewayError):
    """One model call took longer than `--model-timeout-s`; the run ends with an `error` chunk."""

    status = 504
    code = "model_timeout"
    default_message = "The model did not answer in time."


class SlowReader(GatewayError):
    """A client that did not read its stream fast enough was cut (see `adk_gateway.transports.base`). Raised
    only after the stream began, so it never becomes a status: SSE ends with an `error` chunk
    when one can still be written, a socket closes with 4008 ("slow", as Centrifugo's 3008).
    `reason`: `pending` (over `--max-pending-bytes` for the grace), `stalled` (a write blocked
    for the grace), `overrun` (fell so far behind that the stream log dropped what it had not
    read)."""

    status = 503
    code = "slow_reader"
    close_code = 4008
    default_message = "The connection was too slow to keep up with the stream, so it was cut."

    def __init__(self, reason: str, *, pending_bytes: int, detail: str | None = None) -> None:
        super().__init__(detail=detail or f"{reason}: {pending_bytes} bytes pending")
        self.reason = reason
        self.pending_bytes = pending_bytes


class ServiceUnavailable(GatewayError):
    status = 503
    code = "unavailable"
    close_code = CloseCode.TRY_AGAIN_LATER
    default_message = "The gateway is not ready."


class StoreUnavailable(ServiceUnavailable):
    """A session-store call failed to answer within `--store-timeout-s`."""

    code = "store_unavailable"
    default_message = "The session store did not answer in time; try again."

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class LimitReached(GatewayError):
    """A cap refused the request before anything streamed; the client may retry after `retry_after_s`."""

    status = 429
    code = "rate_limited"
    close_code = CloseCode.POLICY_VIOLATION
    default_message = "Too many requests; slow down and try again shortly."
    default_reason: ClassVar[str] = "rate"
    default_retry_after_s: ClassVar[int] = 2

    def __init__(
        self, message: str | None = None, *, reason: str | None = None, retry_after_s: int | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message, detail=detail)
        self.reason = reason or self.default_reason
        self.retry_after_s = max(1, retry_after_s if retry_after_s is not None else self.default_retry_after_s)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class TooManyRuns(LimitReached):
    code = "too_many_runs"
    default_message = "You have too many answers running; wait for one to finish."
    default_reason = "runs_per_user"


class TooManySockets(LimitReached):
    code = "too_many_sockets"
    default_message = "You have too many chat sockets open; close one first."
    default_reason = "sockets_per_user"
    # Sockets live long: a client retrying sooner would most likely be refused again.
    default_retry_after_s = 5


class Overloaded(LimitReached):
    status = 503
    code = "overloaded"
    close_code = CloseCode.TRY_AGAIN_LATER
    default_message = "The gateway is busy; try again in a moment."
    default_reason = "runs"


class StartupError(Exception):
    """Something `setting` (a field of `adk_gateway.config.Settings`) names keeps the gateway from
    starting; the message says what and, where it helps, how to fix it."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting
