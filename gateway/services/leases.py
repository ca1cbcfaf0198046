"""One run per chat across instances: a lease per chat, held while its run lives.

How it works
------------
The registry keeps one run per chat inside a process. Behind a round-robin proxy two instances
can get requests for the same chat at once, so before a run starts its chat's lease is taken from
an engine every instance shares, and given back when the run has ended:

- `RedisLeases` (chosen when the stream store is Redis): `SET lease-key token NX PX ttl`. The
  holder renews it every third of the TTL (the heartbeat: 1 s, for a 3 s TTL) with a
  compare-and-set script, and releases it with a compare-and-delete, so an instance never extends
  or frees a lease another instance holds now (the random token fences it). The short TTL is how a
  dead instance (`kill -9`, a lost host) is noticed: its chats are free again at most `ttl` after
  its last heartbeat, with nobody waiting for longer expiries.
  Redis trouble is not a loss. A renewal that fails (Redis unreachable) is tried again at the next
  beat; a renewal that finds the key gone (Redis restarted and lost it, or it expired while Redis
  was out of reach) takes it again with the same token, unless another instance holds it by then.
  Only then is the lease lost: the holder's `on_lost` is called (the registry ends the run with an
  `error` chunk that says so). Taking a lease while Redis does not answer raises
  `StoreUnavailable` (503 `store_unavailable` + `Retry-After`), never an unexpected error.
- `PostgresLeases` (chosen when only the session store is PostgreSQL): a session-level advisory
  lock, `pg_try_advisory_lock(key)`, on a connection held for the run; the server frees it if the
  instance dies.
- `LocalLeases`: one process, where the registry already decides; always granted.

`acquire()` never waits: a chat leased elsewhere is busy (409 `chat_busy`, after the registry's
usual short grace, which the caller applies by retrying).
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import secrets
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote

import structlog

from adk_gateway.core.errors import StoreUnavailable
from adk_gateway.services.streams import ChatKey

__all__ = ["LEASE_TTL_MS", "Lease", "Leases", "LocalLeases", "PostgresLeases", "RedisLeases", "leases_for"]

log = structlog.get_logger("adk_gateway.services.leases")

# A chat lease's time to live in Redis; its holder renews it every third of that (the heartbeat).
# A dead holder's chats are free again within this long; a live holder whose event loop or Redis
# link stalls for longer keeps its lease unless another instance claimed the chat meanwhile.
LEASE_TTL_MS: Final = 3_000
UNREACHABLE_TEXT: Final = "The gateway's shared store (Redis) is not reachable; try again."
PG_UNREACHABLE_TEXT: Final = "The session store is not available; try again."

# Renew a held lease (1), take it again if it is gone, e.g. after a Redis restart (2), or say that
# another holder has it (0).
_RENEW: Final = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end
if not holder then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0
"""
_RELEASE: Final = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


class Lease:
    """A held lease; `release()` gives it back (idempotent)."""

    def __init__(self, key: ChatKey, release: Callable[[], Any] | None = None,
                 keeper: asyncio.Task[None] | None = None) -> None:
        self.key = key
        self._release = release
        self._keeper = keeper
        self.released = False

    @property
    def shared(self) -> bool:
        """Held in a shared engine (so releasing it means I/O)."""
        return self._release is not None or self._keeper is not None

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        if self._release is not None:
            try:
                await self._release()
            except Exception as exc:  # the lease expires on its own; a run must not fail for it
                log.warning("lease_release_failed", chat_id=self.key[1], error=repr(exc))


class Leases(abc.ABC):
    """Where chat leases are kept."""

    @abc.abstractmethod
    async def acquire(self, key: ChatKey, on_lost: Callable[[], None]) -> Lease | None:
        """The chat's lease, or None when another instance holds it. `on_lost` is called if the
        lease is lost while held (the caller stops the run)."""

    async def aclose(self) -> None:  # noqa: B027 - most keep nothing open
        """Releases connections."""


class LocalLeases(Leases):
    async def acquire(self, key: ChatKey, on_lost: Callable[[], None]) -> Lease | None:
        return Lease(key)


class RedisLeases(Leases):
    def __init__(self, url: str, *, ttl_ms: int = LEASE_TTL_MS, prefix: str = "adkgw:lease") -> None:
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        self.redis: Any = aioredis.Redis.from_url(url, decode_responses=True)
        self._unreachable: tuple[type[BaseException], ...] = (RedisError, OSError)
        self.ttl_ms = ttl_ms
        self.prefix = prefix
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    def _name(self, key: ChatKey) -> str:
        return f"{self.prefix}:{{{quote(key[0], safe='')}:{quote(key[1], safe='')}}}"

    async def acquire(self, key: ChatKey, on_lost: Callable[[], None]) -> Lease | None:
        name, token = self._name(key), secrets.token_hex(16)
        try:
            taken = await self.redis.set(name, token, nx=True, px=self.ttl_ms)
        except self._unreachable as exc:
            log.warning("lease_store_unreachable", chat_id=key[1], error=repr(exc))
            raise StoreUnavailable(UNREACHABLE_TEXT, detail=f"lease: {exc!r}") from None
        if not taken:
            return None

        async def keep() -> None:
            failing = False
            while True:
                await asyncio.sleep(self.ttl_ms / 3000)
                try:
                    renewed = await self._renew(keys=[name], args=[token, self.ttl_ms])
                except Exception as exc:
                    if not failing:  # once per outage, not once a beat
                        log.warning("lease_renew_failed", chat_id=key[1], error=repr(exc))
                    failing = True
                    continue  # the next beat tries again; Redis losing the key is not a loss (below)
                if not renewed:
                    log.error("lease_lost", chat_id=key[1])
                    on_lost()
                    return
                if failing or renewed == 2:
                    log.info("lease_renewed_again", chat_id=key[1], retaken=renewed == 2)
                failing = False

        async def release() -> None:
            await self._release(keys=[name], args=[token])

        keeper = asyncio.get_running_loop().create_task(keep(), name=f"lease:{key[1]}")
        return Lease(key, release, keeper)

    async def aclose(self) -> None:
        await self.redis.aclose()


class PostgresLeases(Leases):
    def __init__(self, url: str) -> None:
        self.url = url.replace("postgresql+asyncpg://", "postgresql://", 1)
        self._pool: Any = None

    async def _connections(self) -> Any:
        if self._pool is None:
            import asyncpg

            self._pool = await asyncpg.create_pool(self.url, min_size=0, max_size=64)
        return self._pool

    @staticmethod
    def lock_id(key: ChatKey) -> int:
        digest = hashlib.blake2b(f"{key[0]}\x00{key[1]}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    async def acquire(self, key: ChatKey, on_lost: Callable[[], None]) -> Lease | None:
        import asyncpg

        unreachable = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
        try:
            pool = await self._connections()
            connection = await pool.acquire()
        except unreachable as exc:
            log.warning("lease_store_unreachable", chat_id=key[1], error=repr(exc))
            raise StoreUnavailable(PG_UNREACHABLE_TEXT, detail=f"lease: {exc!r}") from None
        lock = self.lock_id(key)
        try:
            granted = await connection.fetchval("SELECT pg_try_advisory_lock($1)", lock)
        except unreachable as exc:
            await pool.release(connection)
            log.warning("lease_store_unreachable", chat_id=key[1], error=repr(exc))
            raise StoreUnavailable(PG_UNREACHABLE_TEXT, detail=f"lease: {exc!r}") from None
        except BaseException:
            await pool.release(connection)
            raise
        if not granted:
            await pool.release(connection)
            return None

        async def release() -> None:
            try:
                await connection.execute("SELECT pg_advisory_unlock($1)", lock)
            finally:
                await pool.release(connection)

        return Lease(key, release)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()


def leases_for(session_store: str, stream_store: str) -> Leases:
    """Redis when the streams are shared there, else PostgreSQL advisory locks when the sessions
    are, else one process."""
    if stream_store.startswith(("redis://", "rediss://")):
        return RedisLeases(stream_store)
    if session_store.startswith(("postgresql://", "postgresql+asyncpg://")):
        return PostgresLeases(session_store)
    return LocalLeases()
