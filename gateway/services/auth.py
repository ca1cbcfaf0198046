"""Who is calling: one `Authenticator` per process, chosen by `--auth`.

How it works
------------
Every request under `/api/` is authenticated once, by the door (`transports.door`), before its
handler does anything else; the resulting `Identity` is stored on the request (`IDENTITY`; a
WebSocket's handler keeps it itself, for the socket's life) and is the only source of the user
id that chats are keyed by. Handlers never read a user from headers, frames or bodies
themselves.

- `none` (`AnonymousAuth`): no credential. The user is the `--user-header` value (or, for
  `POST /api/chat`, a `userId` body field), else `anonymous`. For local development only: the
  settings refuse it on a non-loopback host unless `--allow-anonymous`.
- `jwt` (`JwtAuth`): `Authorization: Bearer <JWT>`, verified by PyJWT: HS256 with the shared
  secret, RS256/ES256 with a key from the JWKS URL picked by the token's `kid`. The user is `sub`.
  The key set is cached (`JwksCache`) and fetched again when a token names a `kid` it does not
  hold; such refetches are single-flight and, after one that still misses, held back for a
  cool-down, so random `kid`s cannot make the gateway hammer the key server.
- `api-keys` (`ApiKeyAuth`): `Authorization: Bearer <key>`, looked up in a `KEY USER` file that is
  re-read when it changes (so keys rotate without a restart). Every key is compared in constant
  time, and all of them are always compared.

The WebSocket handshake may carry the credential as `?access_token=` instead (browsers cannot set
handshake headers); `redact()` keeps it out of every log line.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import hmac
import os
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

import jwt
import jwt.warnings
import structlog

from gateway.core.errors import Unauthorized

if TYPE_CHECKING:
    from gateway.config import Settings

__all__ = [
    "ANONYMOUS",
    "AnonymousAuth",
    "ApiKeyAuth",
    "ApiKeyFileError",
    "Authenticator",
    "Identity",
    "JwksCache",
    "JwtAuth",
    "bearer_token",
    "build_authenticator",
    "redact",
]

log = structlog.get_logger("gateway.services.auth")

# PyJWT warns on every decode with a short HMAC key; the gateway says it once, at start.
warnings.filterwarnings("ignore", category=jwt.warnings.InsecureKeyLengthWarning)

ANONYMOUS: Final = "anonymous"
MAX_USER_ID_CHARS: Final = 256
MIN_HS256_SECRET_BYTES: Final = 32
ASYMMETRIC_ALGORITHMS: Final = {"RS256": "RSA", "ES256": "EC"}
_TOKEN_IN_TEXT = re.compile(r"(access_token=)[^&\s\"']+|(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with query-string tokens and bearer credentials replaced by `[redacted]`."""
    return _TOKEN_IN_TEXT.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", text)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential of an `Authorization: Bearer …` header; None when there is none."""
    raw = headers.get("Authorization") or headers.get("authorization")
    if not raw:
        return None
    scheme, _, value = raw.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _clean_user_id(raw: object) -> str | None:
    if not isinstance(raw, str):
        return None
    value = raw.strip()
    if not value or len(value) > MAX_USER_ID_CHARS or any(ord(ch) < 0x20 for ch in value):
        return None
    return value


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller of one request or socket."""

    user_id: str
    verified: bool  # False: `--auth none`, the caller only said who they are
    expires_at: float | None = None  # the credential's `exp` (Unix time), when it has one


class Authenticator(abc.ABC):
    """Turns a credential into an `Identity`, or refuses it with `Unauthorized`."""

    mode: ClassVar[str]
    requires_credential: ClassVar[bool] = True

    @abc.abstractmethod
    async def verify(self, token: str) -> Identity:
        """The identity a credential proves. Raises `Unauthorized` when it proves none."""

    async def aclose(self) -> None:  # noqa: B027 - most authenticators hold nothing
        """Releases what the authenticator holds (HTTP sessions)."""


class AnonymousAuth(Authenticator):
    """`--auth none`: whoever the client says it is."""

    mode = "none"
    requires_credential = False

    def __init__(self, user_header: str = "x-user-id") -> None:
        self.user_header = user_header

    def claimed(self, headers: Mapping[str, str], body: Mapping[str, Any] | None = None) -> Identity:
        """The user a request names: the user header, else a `userId` body field, else anonymous."""
        user = _clean_user_id(headers.get(self.user_header))
        if user is None and body is not None:
            user = _clean_user_id(body.get("userId"))
        return Identity(user or ANONYMOUS, verified=False)

    async def verify(self, token: str) -> Identity:
        raise Unauthorized("This gateway does not check credentials.", detail="auth none got a credential")


class JwksCache:
    """The key set at a JWKS URL, by `kid`; see the module docstring for when it is fetched."""

    def __init__(self, url: str, *, ttl_s: float = 300.0, miss_cooldown_s: float = 10.0,
                 timeout_s: float = 5.0) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self.miss_cooldown_s = miss_cooldown_s
        self.timeout_s = timeout_s
        self.fetches = 0
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._last_miss_fetch = float("-inf")
        self._inflight: asyncio.Future[None] | None = None
        self._session: Any = None  # aiohttp.ClientSession, made on first use

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key for `kid` (a token without `kid`: the set's only key). Raises `Unauthorized`."""
        now = time.monotonic()
        fetched_now = self._fetched_at is None or now - self._fetched_at >= self.ttl_s
        if fetched_now:
            await self._refresh()
        found = self._lookup(kid)
        if found is None and not fetched_now and time.monotonic() - self._last_miss_fetch >= self.miss_cooldown_s:
            self._last_miss_fetch = time.monotonic()
            await self._refresh()
            found = self._lookup(kid)
        if found is None:
            raise Unauthorized("The access token is not valid.", detail=f"no JWKS key with kid {kid!r}",
                               token_sent=True)
        return found

    def _lookup(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        # Single flight: concurrent callers wait for the fetch already under way.
        if self._inflight is not None:
            await asyncio.shield(self._inflight)
            return
        self._inflight = asyncio.get_running_loop().create_future()
        try:
            await self._fetch()
            self._inflight.set_result(None)
        except BaseException as exc:
            self._inflight.set_result(None)  # waiters use whatever keys are held
            if isinstance(exc, Exception):
                log.warning("jwks_fetch_failed", url=self.url, error=repr(exc))
            else:
                raise
        finally:
            self._inflight = None

    async def _fetch(self) -> None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        async with self._session.get(self.url, headers={"Accept": "application/json"}) as response:
            response.raise_for_status()
            data = await response.json(content_type=None)
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in data.get("keys", []) if isinstance(data, dict) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError as exc:  # an unsupported or broken key: skip it, keep the rest
                log.info("jwks_key_skipped", kid=entry.get("kid"), error=str(exc))
                continue
            keys[key.key_id] = key
        self.fetches += 1
        self._keys = keys
        self._fetched_at = time.monotonic()
        log.info("jwks_fetched", url=self.url, keys=len(keys))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class JwtAuth(Authenticator):
    """`--auth jwt`: a signed JWT whose `sub` is the user."""

    mode = "jwt"

    def __init__(
        self,
        *,
        secret: str = "",
        jwks: JwksCache | None = None,
        audience: str = "",
        issuer: str = "",
        leeway_s: float = 30.0,
    ) -> None:
        if not secret and jwks is None:
            raise ValueError("JwtAuth needs a secret or a JWKS URL")
        self.secret = secret
        self.jwks = jwks
        self.audience = audience or None
        self.issuer = issuer or None
        self.leeway_s = leeway_s

    async def verify(self, token: str) -> Identity:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized("The access token is not valid.", detail=f"malformed: {exc}", token_sent=True) from None
        algorithm = header.get("alg")
        key: Any
        if algorithm == "HS256" and self.secret:
            key = self.secret
        elif algorithm in ASYMMETRIC_ALGORITHMS and self.jwks is not None:
            kid = header.get("kid")
            jwk = await self.jwks.key(kid if isinstance(kid, str) else None)
            if jwk.key_type != ASYMMETRIC_ALGORITHMS[algorithm]:
                raise Unauthorized("The access token is not valid.", token_sent=True,
                                   detail=f"alg {algorithm} does not fit the {jwk.key_type} key {kid!r}")
            key = jwk.key
        else:
            raise Unauthorized("The access token is not valid.", token_sent=True,
                               detail=f"algorithm {algorithm!r} is not accepted")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["sub"], "verify_aud": self.audience is not None},
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise Unauthorized("The access token is not valid.", detail=f"{type(exc).__name__}: {exc}",
                               token_sent=True) from None
        user = _clean_user_id(claims.get("sub"))
        if user is None:
            raise Unauthorized("The access token is not valid.", detail="'sub' is not a usable user id",
                               token_sent=True)
        exp = claims.get("exp")
        expires_at = float(exp) + self.leeway_s if isinstance(exp, int | float) else None
        return Identity(user, verified=True, expires_at=expires_at)

    async def aclose(self) -> None:
        if self.jwks is not None:
            await self.jwks.aclose()


class ApiKeyFileError(ValueError):
    """The API keys file cannot be read or has a bad line (the message never shows a key)."""


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def read_api_keys(path: Path) -> list[tuple[bytes, str]]:
    """(sha256 of the key, user) for each `KEY USER` line; `#` comments and blank lines skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApiKeyFileError(f"cannot read {path}: {exc.__class__.__name__}") from None
    entries: list[tuple[bytes, str]] = []
    seen: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        user = _clean_user_id(fields[1]) if len(fields) == 2 else None
        if user is None:
            raise ApiKeyFileError(f"{path} line {number}: expected 'KEY USER'")
        digest = _digest(fields[0])
        if digest in seen:
            raise ApiKeyFileError(f"{path} line {number}: this key is already listed")
        seen.add(digest)
        entries.append((digest, user))
    return entries


class ApiKeyAuth(Authenticator):
    """`--auth api-keys`: static keys from a file, each naming its user."""

    mode = "api-keys"
    RECHECK_S: ClassVar[float] = 1.0

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._entries = read_api_keys(self.path)  # raises at start: a bad file stops the gateway
        self._stamp = self._file_stamp()
        self._checked_at = time.monotonic()

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self.RECHECK_S:
            return
        self._checked_at = now
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._entries = read_api_keys(self.path)
        except ApiKeyFileError as exc:
            log.error("api_keys_reload_failed", error=str(exc))  # the keys read last stay in force
            return
        log.info("api_keys_reloaded", keys=len(self._entries))

    async def verify(self, token: str) -> Identity:
        self._reload_if_changed()
        offered = _digest(token)
        user: str | None = None
        for digest, owner in self._entries:
            # No early exit: the time taken does not tell which key, or how many, matched.
            if hmac.compare_digest(digest, offered):
                user = owner
        if user is None:
            raise Unauthorized("The API key is not valid.", detail="unknown API key", token_sent=True)
        return Identity(user, verified=True)


def build_authenticator(settings: Settings) -> Authenticator:
    """The authenticator `--auth` names. Raises `ApiKeyFileError` for an unreadable keys file."""
    if settings.auth == "jwt":
        if settings.auth_jwt_secret and len(settings.auth_jwt_secret.encode()) < MIN_HS256_SECRET_BYTES:
            log.warning("weak_jwt_secret", detail=f"the HS256 secret has fewer than {MIN_HS256_SECRET_BYTES} bytes "
                        "(RFC 7518 §3.2); anyone who guesses it can sign tokens for any user")
        jwks = None
        if settings.auth_jwks_url:
            jwks = JwksCache(settings.auth_jwks_url, ttl_s=settings.auth_jwks_cache_s,
                             miss_cooldown_s=min(10.0, settings.auth_jwks_cache_s))
        return JwtAuth(secret=settings.auth_jwt_secret, jwks=jwks, audience=settings.auth_jwt_audience,
                       issuer=settings.auth_jwt_issuer, leeway_s=settings.auth_jwt_leeway_s)
    if settings.auth == "api-keys":
        return ApiKeyAuth(settings.auth_api_keys_file)
    return AnonymousAuth(settings.user_header)
