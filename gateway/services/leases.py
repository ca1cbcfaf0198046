"""One run per chat across instances: a lease per chat, held while its run lives.

How it works
------------
The registry keeps one run per chat inside a process. Behind a round-robin proxy two instances
can get requests for the same chat at once, so before a run starts its chat's lease is taken from
an engine every instance shares, and given back when the run has ended:

- `RedisLeases` (chosen when the stream store is Redis): `SET lease-key token NX PX ttl`. The
  holder renews it every third of the TTL with a compare-and-set script, and releases it with a
  compare-and-delete, so an instance never extends or frees a lease another instance holds now
  (the random token fences it). A lease that cannot be renewed (Redis lost it, or another instance
  took it after an expiry) is reported lost, and the run is stopped.
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

from gateway.services.streams import ChatKey

__all__ = ["Lease", "Leases", "LocalLeases", "PostgresLeases", "RedisLeases", "leases_for"]

log = structlog.get_logger("gateway.services.leases")

_RENEW: Final = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
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
    def __init__(self, url: str, *, ttl_ms: int = 15_000, prefix: str = "adkgw:lease") -> None:
        import redis.asyncio as aioredis

        self.redis: Any = aioredis.Redis.from_url(url, decode_responses=True)
        self.ttl_ms = ttl_ms
        self.prefix = prefix
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    def _name(self, key: ChatKey) -> str:
        return f"{self.prefix}:{{{quote(key[0], safe='')}:{quote(key[1], safe='')}}}"

    async def acquire(self, key: ChatKey, on_lost: Callable[[], None]) -> Lease | None:
        name, token = self._name(key), secrets.token_hex(16)
        if not await self.redis.set(name, token, nx=True, px=self.ttl_ms):
            return None

        async def keep() -> None:
            while True:
                await asyncio.sleep(self.ttl_ms / 3000)
                try:
                    renewed = await self._renew(keys=[name], args=[token, self.ttl_ms])
                except Exception as exc:
                    log.warning("lease_renew_failed", chat_id=key[1], error=repr(exc))
                    continue  # try again; the lease still has two thirds of its time
                if not renewed:
                    log.error("lease_lost", chat_id=key[1])
                    on_lost()
                    return

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
        pool = await self._connections()
        connection = await pool.acquire()
        lock = self.lock_id(key)
        try:
            granted = await connection.fetchval("SELECT pg_try_advisory_lock($1)", lock)
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
