"""One error tree. Clients get `code` and a short `message`; logs get the detail.

    GatewayError                      status  code
    ├── BadRequest                    400     bad_request (or a more precise code)
    │   └── PayloadTooLarge           413     payload_too_large
    ├── Unauthorized                  401     unauthorized (with WWW-Authenticate: Bearer)
    ├── ApprovalInvalid               403     approval_invalid
    ├── OriginRefused                 403     origin_refused
    ├── UnsupportedMediaType          415     unsupported_media_type
    ├── ChatBusy                      409     chat_busy
    ├── ContinuationRefused           409     continuation_refused
    ├── NotFound                      404     not_found
    ├── AgentFailed                   500     agent_failed
    └── ServiceUnavailable            503     unavailable
"""

from __future__ import annotations

from typing import Any, ClassVar

from aiohttp import WSCloseCode

__all__ = [
    "AgentFailed",
    "ApprovalInvalid",
    "BadRequest",
    "ChatBusy",
    "ContinuationRefused",
    "GatewayError",
    "NotFound",
    "OriginRefused",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "Unauthorized",
    "UnsupportedMediaType",
]


class GatewayError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    close_code: ClassVar[int] = WSCloseCode.INTERNAL_ERROR
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
    close_code = WSCloseCode.POLICY_VIOLATION
    default_message = "The request is malformed."


class PayloadTooLarge(BadRequest):
    status = 413
    code = "payload_too_large"
    close_code = WSCloseCode.MESSAGE_TOO_BIG
    default_message = "The request body is too large."


class Unauthorized(GatewayError):
    """No credential, or one that does not verify. `token_sent` picks the RFC 6750 challenge."""

    status = 401
    code = "unauthorized"
    close_code = WSCloseCode.POLICY_VIOLATION
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
    close_code = WSCloseCode.UNSUPPORTED_DATA
    default_message = "POST bodies must be application/json."


class ApprovalInvalid(GatewayError):
    status = 403
    code = "approval_invalid"
    close_code = WSCloseCode.POLICY_VIOLATION
    default_message = "This approval was not issued for this chat, or was already answered."


class OriginRefused(GatewayError):
    status = 403
    code = "origin_refused"
    close_code = WSCloseCode.POLICY_VIOLATION
    default_message = "This origin may not open the chat socket."


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


class AgentFailed(GatewayError):
    status = 500
    code = "agent_failed"
    default_message = "The agent failed."


class ServiceUnavailable(GatewayError):
    status = 503
    code = "unavailable"
    close_code = WSCloseCode.TRY_AGAIN_LATER
    default_message = "The gateway is not ready."
