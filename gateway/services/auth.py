"""Who is calling: one `Authenticator` per process, chosen by `--auth`.

How it works
------------
Every request under `/api/` is authenticated once, by the door (`adk_gateway.transports.admission`), before its
handler does anything else; the resulting `Identity` is stored on the request (`IDENTITY`; a
WebSocket's handler keeps it itself, for the socket's life) and is the only source of the user
id that chats are keyed by. Handlers never read a user from headers, frames or bodies
themselves.

- `none` (`AnonymousAuth`): no credential. The user is the `--user-header` value (or, for
  `POST /api/chat`, a `userId` body field), else `anonymous`. For local development only: the
  settings refuse it on a non-loopback host unless `--allow-anonymous`.
- `jwt` (`JwtAuth`): `Authorization: Bearer <JWT>`, verified by PyJWT: HS256 with the shared
  secret, RS256/ES256 with a key from the JWKS URL picked by the token's `kid`. The user is `sub`.
  The key set is cached (`JwksCache`): a `kid` it holds is served from the cache at once, also
  after the cache's time is up (the set is then fetched again in the background, so a key server
  that hangs never delays a known key); a `kid` it does not hold fetches the set again. Fetches
  are single-flight and held back for a cool-down after the last one (after a failure too), so
  random `kid`s cannot make the gateway hammer the key server. A key set larger than 64 KiB or
  behind a redirect is refused.
- `api-keys` (`ApiKeyAuth`): `Authorization: Bearer <key>`, looked up in a `KEY USER` file that is
  re-read when it changes (so keys rotate without a restart). Every key is compared in constant
  time, and all of them are always compared.

A user id is at most 256 characters with no control, format or separator characters and no lone
surrogates (`clean_user_id`), in every mode: such a `sub`, key file user or `x-user-id` is refused
(401), so a user id never changes how a log line reads or breaks its JSON. `anonymous`, the user of
`--auth none` requests that name none, is never a verified user: a token or key naming it is
refused, so it cannot share, or escape, the per-user caps as the unauthenticated crowd.

The WebSocket handshake may carry the credential as `?access_token=` instead (browsers cannot set
handshake headers); log lines show a URL's query parameter names, never their values
(`redact_target`, `redact`).
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import hashlib
import hmac
import json
import os
import re
import time
import unicodedata
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final
from urllib.parse import parse_qsl, unquote_plus

import jwt
import jwt.warnings
import structlog

from adk_gateway.config import MIN_HS256_SECRET_BYTES, is_loopback
from adk_gateway.core.errors import StartupError, Unauthorized

if TYPE_CHECKING:
    from adk_gateway.config import Settings

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
    "clean_user_id",
    "query_token",
    "redact",
    "redact_query",
    "redact_target",
]

log = structlog.get_logger("adk_gateway.services.auth")

# PyJWT warns on every decode with a short HMAC key; the gateway says it once, at start.
warnings.filterwarnings("ignore", category=jwt.warnings.InsecureKeyLengthWarning)

ANONYMOUS: Final = "anonymous"
MAX_USER_ID_CHARS: Final = 256
ASYMMETRIC_ALGORITHMS: Final = {"RS256": "RSA", "ES256": "EC"}
# Control, format (U+202E...), line and paragraph separators, lone surrogates (what a non-UTF-8
# header byte becomes): a user id with one is refused.
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})

# --- what log lines may show ------------------------------------------------------------------------

REDACTED: Final = "[redacted]"
# A query in free text (a URL in a library's message, an exception's repr): from `?` to the next
# blank or quote, when it has a `=` or a percent-escape (so prose such as "why?" stays as it is).
_QUERY_IN_TEXT = re.compile(r"\?([^\s\"'<>`#?]*[=%][^\s\"'<>`#?]*)")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,40}")
_TOKEN_IN_TEXT = re.compile(r"(access(?:_|%5f)token(?:=|%3d))[^&\s\"']+|(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
# A JWT anywhere (header and payload are base64url JSON objects, so both start with `eyJ`).
_JWT_IN_TEXT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")


def redact_query(query: str) -> str:
    """A query string as a log line may show it: each parameter's name, decoded, with its value
    `[redacted]`; a name that is not a plain word (`access_token%3D<token>` decodes to one with the
    token in it) is `[redacted]` whole. Every value goes, whatever its name or case: on this
    gateway's URLs each one is a credential (a socket's token, an artifact link's signature, a
    sign-in's code and state)."""
    shown: list[str] = []
    for field in query.split("&"):
        if not field:
            continue
        name, has_value, _ = field.partition("=")
        decoded = unquote_plus(name)
        if not _PLAIN_NAME.fullmatch(decoded):
            shown.append(REDACTED)
        else:
            shown.append(f"{decoded}={REDACTED}" if has_value else decoded)
    return "&".join(shown)


def redact_target(path: str, query: str) -> str:
    """A request's path and query (`redact_query`) for a log line."""
    return f"{redact(path)}?{redact_query(query)}" if query else redact(path)


def redact(text: str) -> str:
    """`text` with every URL query's values (`redact_query`), `access_token=` values (decoded or
    not, any case), bearer credentials and JWTs replaced by `[redacted]`."""
    if "?" in text:
        text = _QUERY_IN_TEXT.sub(lambda m: "?" + redact_query(m.group(1)), text)
    text = _TOKEN_IN_TEXT.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, text)
    return _JWT_IN_TEXT.sub(REDACTED, text) if "eyJ" in text else text


def query_token(query: str) -> str | None:
    """The `access_token` of a raw query string (its name and value decoded, as a browser's
    `URLSearchParams` writes them); None when it has none."""
    if "=" not in query:
        return None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "access_token" and value:
            return value
    return None


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential of an `Authorization: Bearer …` header; None when there is none."""
    raw = headers.get("Authorization") or headers.get("authorization")
    if not raw:
        return None
    scheme, _, value = raw.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def clean_user_id(raw: object) -> str | None:
    """`raw` as a user id (outer blanks stripped), or None when it cannot be one: not a string,
    empty, longer than 256 characters, or with a control, format or separator character or a
    lone surrogate anywhere."""
    if not isinstance(raw, str):
        return None
    if raw.isascii():
        if not raw.isprintable():  # C0 controls and DEL
            return None
    elif any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in raw):
        return None
    value = raw.strip()
    if not value or len(value) > MAX_USER_ID_CHARS:
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
        """The user a request names: the user header, else a `userId` body field, else anonymous.
        Raises `Unauthorized` when the one it names cannot be a user id (`clean_user_id`)."""
        for source, raw in ((self.user_header, headers.get(self.user_header)),
                            ("userId", body.get("userId") if body is not None else None)):
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            user = clean_user_id(raw)
            if user is None:
                raise Unauthorized("The user id is not usable: at most 256 characters, without control, format "
                                   "or separator characters.", detail=f"{source} is not a usable user id")
            return Identity(user, verified=False)
        return Identity(ANONYMOUS, verified=False)

    async def verify(self, token: str) -> Identity:
        raise Unauthorized("This gateway does not check credentials.", detail="auth none got a credential")


class JwksFetchFailed(Exception):
    """The key server's answer cannot be used (its status, a redirect, its size, its JSON)."""


class JwksCache:
    """The key set at a JWKS URL, by `kid`; see the module docstring for when it is fetched.

    - A `kid` the set holds is answered at once; once the set is older than `ttl_s`, that answer
      also starts a fetch in the background (stale-while-revalidate).
    - A `kid` it does not hold (or no set yet) waits for a fetch, unless the last fetch made for
      such a `kid` started less than `miss_cooldown_s` ago, or the last fetch failed less than
      `failure_cooldown_s` ago: then it is refused at once.
    - One fetch at a time (single flight); a failed one keeps the keys held before.
    - The answer must be 200 (redirects are not followed) and at most `max_bytes`, read as it
      streams; the whole fetch is bounded by `timeout_s`.
    """

    def __init__(self, url: str, *, ttl_s: float = 300.0, miss_cooldown_s: float = 10.0,
                 failure_cooldown_s: float = 10.0, timeout_s: float = 5.0, max_bytes: int = 64 * 1024) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self.miss_cooldown_s = miss_cooldown_s
        self.failure_cooldown_s = failure_cooldown_s
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.fetches = 0  # fetches that brought a key set
        self.attempts = 0  # every fetch started, failed ones included
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._last_attempt = float("-inf")
        self._last_miss_attempt = float("-inf")
        self._last_failed = False
        self._fetch_task: asyncio.Task[None] | None = None
        self._session: Any = None  # aiohttp.ClientSession, made on first use

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key for `kid` (a token without `kid`: the set's only key). Raises `Unauthorized`."""
        now = time.monotonic()
        found = self._lookup(kid)
        if found is not None:
            if self._fetched_at is not None and now - self._fetched_at >= self.ttl_s and self._may_fetch(now):
                self._start_fetch(background=True)
            return found
        if self._fetch_task is not None or self._may_fetch(now, miss=self._fetched_at is not None):
            if self._fetch_task is None and self._fetched_at is not None:
                self._last_miss_attempt = now
            await asyncio.shield(self._start_fetch())
            found = self._lookup(kid)
        if found is None:
            raise Unauthorized("The access token is not valid.", detail=f"no JWKS key with kid {kid!r}"[:200],
                               token_sent=True)
        return found

    def _may_fetch(self, now: float, *, miss: bool = False) -> bool:
        """Not within the cool-down after a failed fetch; for a `kid` the set does not hold, not
        within `miss_cooldown_s` of the last fetch made for one either."""
        if self._last_failed and now - self._last_attempt < self.failure_cooldown_s:
            return False
        return not miss or now - self._last_miss_attempt >= self.miss_cooldown_s

    def _start_fetch(self, *, background: bool = False) -> asyncio.Task[None]:
        """The fetch under way, started now if there is none (single flight). A background fetch
        runs in a context of its own: its log lines carry no request's ids."""
        if self._fetch_task is None:
            context = contextvars.Context() if background else None
            self._fetch_task = asyncio.get_running_loop().create_task(self._fetch_once(), name="jwks-fetch",
                                                                      context=context)
        return self._fetch_task

    def _lookup(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _fetch_once(self) -> None:
        """One fetch; its failure is logged and keeps the keys held (waiters then use those)."""
        self._last_attempt = time.monotonic()
        self.attempts += 1
        try:
            keys = await self._fetch()
        except Exception as exc:
            self._last_failed = True
            log.warning("jwks_fetch_failed", url=self.url, error=repr(exc)[:300], keys_kept=len(self._keys))
        else:
            self.fetches += 1
            self._keys = keys
            self._fetched_at = time.monotonic()
            self._last_failed = False
            log.info("jwks_fetched", url=self.url, keys=len(keys))
        finally:
            self._fetch_task = None

    async def _fetch(self) -> dict[str | None, jwt.PyJWK]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        async with self._session.get(self.url, headers={"Accept": "application/json"},
                                     allow_redirects=False) as response:
            if response.status != 200:
                redirect = " (redirects are not followed)" if 300 <= response.status < 400 else ""
                raise JwksFetchFailed(f"the key server answered {response.status}{redirect}")
            if response.content_length is not None and response.content_length > self.max_bytes:
                raise JwksFetchFailed(f"the key set has {response.content_length} bytes, more than {self.max_bytes}")
            body = bytearray()
            async for piece in response.content.iter_chunked(16 * 1024):
                body += piece
                if len(body) > self.max_bytes:
                    raise JwksFetchFailed(f"the key set is larger than {self.max_bytes} bytes")
        try:
            data = json.loads(body)
        except ValueError:
            raise JwksFetchFailed("the key set is not JSON") from None
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in data.get("keys", []) if isinstance(data, dict) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError as exc:  # an unsupported or broken key: skip it, keep the rest
                log.info("jwks_key_skipped", kid=str(entry.get("kid"))[:100], error=str(exc))
                continue
            keys[key.key_id] = key
        return keys

    async def aclose(self) -> None:
        if self._fetch_task is not None:
            self._fetch_task.cancel()
            await asyncio.gather(self._fetch_task, return_exceptions=True)
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
        user = clean_user_id(claims.get("sub"))
        if user is None or user == ANONYMOUS:
            detail = "'sub' is not a usable user id" if user is None else "'sub' is 'anonymous', the unverified user"
            raise Unauthorized("The access token is not valid.", detail=detail, token_sent=True)
        return Identity(user, verified=True, expires_at=self._expiry(claims))

    def _expiry(self, claims: Mapping[str, Any]) -> float | None:
        """When the token stops being valid, as PyJWT validated its `exp` (`int()` of it: a numeric
        string counts) plus the leeway; None without `exp`."""
        if "exp" not in claims:
            return None
        try:
            return int(claims["exp"]) + self.leeway_s
        except (TypeError, ValueError, OverflowError):  # PyJWT refused such a token already
            raise Unauthorized("The access token is not valid.", detail="'exp' is not a number",
                               token_sent=True) from None

    async def aclose(self) -> None:
        if self.jwks is not None:
            await self.jwks.aclose()


class ApiKeyFileError(StartupError):
    """The API keys file cannot be read or has a bad line (the message never shows a key)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, setting="auth_api_keys_file")


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
        user = clean_user_id(fields[1]) if len(fields) == 2 else None
        if user is None:
            raise ApiKeyFileError(f"{path} line {number}: expected 'KEY USER' (a user id without control, format "
                                  f"or separator characters)")
        if user == ANONYMOUS:
            raise ApiKeyFileError(f"{path} line {number}: 'anonymous' is the name of the unverified user; give the "
                                  f"key's user another name")
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


def _loopback_url(url: str) -> bool:
    from urllib.parse import urlsplit

    return is_loopback(urlsplit(url).hostname or "")


def build_authenticator(settings: Settings) -> Authenticator:
    """The authenticator `--auth` names. Raises `ApiKeyFileError` for an unreadable keys file."""
    if settings.auth == "jwt":
        # A shorter secret only gets here with --allow-weak-jwt-secret (the settings refuse it otherwise).
        if settings.auth_jwt_secret and len(settings.auth_jwt_secret.encode()) < MIN_HS256_SECRET_BYTES:
            log.warning("weak_jwt_secret", detail=f"the HS256 secret has fewer than {MIN_HS256_SECRET_BYTES} bytes "
                        "(RFC 7518 §3.2); anyone who guesses it can sign tokens for any user")
        if settings.auth_jwks_url.startswith("http://"):
            log.warning("insecure_jwks_url", url=settings.auth_jwks_url,
                        detail="the key set is fetched over plain http" + (
                            " from this machine" if _loopback_url(settings.auth_jwks_url) else
                            " (--allow-insecure-jwks): anyone on the path can swap the keys"))
        jwks = None
        if settings.auth_jwks_url:
            jwks = JwksCache(settings.auth_jwks_url, ttl_s=settings.auth_jwks_cache_s,
                             miss_cooldown_s=min(10.0, settings.auth_jwks_cache_s))
        return JwtAuth(secret=settings.auth_jwt_secret, jwks=jwks, audience=settings.auth_jwt_audience,
                       issuer=settings.auth_jwt_issuer, leeway_s=settings.auth_jwt_leeway_s)
    if settings.auth == "api-keys":
        return ApiKeyAuth(settings.auth_api_keys_file)
    return AnonymousAuth(settings.user_header)
