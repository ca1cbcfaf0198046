"""Resumable streams shared through Redis, so a resume works on any gateway process.

Why: behind a load balancer the request that runs a chat (on process A) and the resume that
follows it after a reload or a network change (`GET /api/chat/{chatId}/stream`, or a WebSocket
`resume` frame) can land on different processes. The in-memory store only knows its own
process's runs; this store keeps every run's chunks in Redis as well.

How it works
------------
The run itself does not change: `ChatService` still appends wire chunks to an in-process
`StreamLog`, and the request that started the run still follows that log directly (no Redis
round trip on the hot path). Redis is written *through* and read by *other* processes:

- Writer (the process that runs the chat). `add(log)` keeps the log locally (a `MemoryStreamStore`
  with the same retention rules) and starts a *mirror* task: one more follower of the log
  (attached at once, so the log keeps its chunks for it) that copies each chunk's JSON, as the
  log serialised it, to a Redis stream, one entry per chunk (`XADD`, entry id `0-<sequence+1>`),
  pipelining whatever accumulated while the previous write was in flight. The mirror never
  blocks the run: `append()` stays synchronous and in memory, the mirror catches up one round
  trip later. When the log closes, the mirror adds an end entry (`end=1`), marks the run closed
  and gives its keys their retention TTL. A finished mirror is let go once its run is past
  `retention_s`, by a sweep that a run's start makes at most once a second.
- Bytes. The Redis stream is capped like the local log, by a running byte count: the mirror
  remembers the size of every entry still in it and, once they pass `max_bytes`, trims the
  oldest (`XTRIM MINID`, exact) down to the newest `max_bytes` (at least one entry), and flags
  the run `overflowed` (no longer resumable). A mirror that falls behind past the local log's
  budget (Redis too slow) is overrun: it writes a `lost` entry, flags the run and stops; remote
  readers end with an `error` chunk.
- Reader (any process). `lookup(key)` asks Redis which run is the chat's current one and reads
  its flags. If that run is this process's own, the local log is returned; otherwise a
  `RemoteStreamLog`: a `StreamLog` whose chunks are filled by a puller task that reads the
  Redis stream from its first entry (`XREAD BLOCK`, so it waits for live entries without
  polling) until the end entry. Because it *is* a `StreamLog`, `deliver()`, followers, the
  replay prefix of a continuation, the byte cap and the sequence numbers behave exactly as for
  a local log. Concurrent resumes of one run in one process share one `RemoteStreamLog` (the
  store keeps them in a weak map by run): one XREAD loop per stream per process, fanned out to
  its local followers. The puller lives while someone follows the log. (`resumable(key)`, the
  synchronous protocol method, can only answer from this process's own logs; resume endpoints
  must use `lookup` to see other processes' runs.)
- `delivered`: when any process delivers a run's end to a client, the run is flagged
  `delivered` in Redis (through `StreamLog.when_delivered`), so no process offers it for resume
  again, as the memory store does. `overflowed` (over `max_bytes`, so Redis trimmed its start)
  is flagged the same way: the run is then not resumable (a logged reason, then 204 / `no-active`).

Keys (all of one chat share a hash tag, so every script touches one cluster slot)::

    {prefix}:{<user>:<chat>}:current        string: the chat's current run id
    {prefix}:{<user>:<chat>}:<run>:chunks   stream: one entry per chunk (`c`: its JSON), then `end`
                                            (or `lost`: the writer fell behind)
    {prefix}:{<user>:<chat>}:<run>:meta     hash: user, chat, run, closed, delivered,
                                            overflowed, beats, prefix (the replay prefix, JSON)
    {prefix}:{<user>:<chat>}:<run>:alive    string: the writer's heartbeat (short TTL)

User and chat ids are percent-encoded in keys. While a run is going, its keys carry a TTL of
`lease_s` (30 s), and its writer *beats* every `heartbeat_s` (1 s): one pipelined script per
beat for all the process's running runs sets each run's `alive` key for `alive_s` (4 s) and
refreshes the other keys. A writer that dies (`kill -9`, a lost host) stops beating, so `alive`
is gone at most `alive_s` after its last beat; a remote follower checks it whenever `XREAD
BLOCK` (at most `heartbeat_s`) times out and ends with an `error` chunk ("the server running it
went away") within about `alive_s + heartbeat_s` of the death, not after the keys' expiry. A
resume of the dead run meanwhile still replays what Redis has, then ends the same way. (Meta
written without `beats`, by an older gateway, is judged by its keys alone, as before.) When the
run ends, `alive` is deleted, `current` expires after `retention_s` (as long as it still names
this run: a newer run of the chat is never touched) and the run's stream and flags `grace_s`
later, so followers that are mid-read still get the end.

Stops. `POST /api/chat/{id}/stop` on a process that does not run the chat publishes the chat on
the `{prefix}:stop` channel; every process listens (`listen_for_stops`) and the one running it
stops it. (A socket's `abort` names a request of that socket, so it is always local.)

Redis going away (a restart loses every key: the server keeps no data) never fails a run, and
nothing waits for it:

- The mirror that fails to write logs it, lets go of the log (the run is never held back by it,
  and the log keeps its chunks anyway while under its cap), and waits for Redis to answer again
  (backing off up to a second). Then it writes the run again from its first chunk, with the same
  entry ids (what a failed write left half-done is deleted first), so the run is resumable again
  and remote followers go on from where they were. A run that overflowed meanwhile is rewritten
  from its oldest kept chunk and flagged `overflowed` (not offered; followers end with an
  `error`). A run that ended and was delivered, or is past `retention_s`, is not rewritten.
- The beat that fails is tried again at the next beat; `alive` comes back with the first beat
  after Redis does.
- A remote follower whose read fails retries until Redis answers again, for up to `alive_s`
  (then an `error` chunk saying the store is unreachable). A run whose keys have vanished (Redis
  lost them) is given `alive_s` for its writer to write them again before its followers end.
- `lookup` falls back to this process's own logs; the stop listener subscribes again.

Limits: one Redis server, reached with `redis.asyncio.Redis.from_url` (the keys are cluster-slot
safe, but no cluster or Sentinel client is set up); one run per chat across processes is the
chat lease's (`adk_gateway.services.leases`), not this store's.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
import uuid
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import quote

import redis.asyncio as aioredis
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adk_gateway.services.streams import ChatKey, Follower, FollowerOverrun, LogEntry, MemoryStreamStore, StreamLog

__all__ = ["RedisStreamStore", "RemoteStreamLog"]

log = structlog.get_logger("adk_gateway.services.redis_streams")

BATCH: Final = 256  # chunks per pipelined write
READ_COUNT: Final = 512  # entries per XREAD
LOST_WRITER_TEXT: Final = "The stream was interrupted: the server running it went away."
SHUTDOWN_TEXT: Final = "This server is shutting down: resume the stream again."
INCOMPLETE_TEXT: Final = "The stream can no longer be resumed completely."
READ_FAILED_TEXT: Final = "The stream could not be read."
UNREACHABLE_TEXT: Final = "The stream was interrupted: the shared store (Redis) is not reachable. Resume it again."
HEARTBEAT_S: Final = 1.0  # how often a writer beats (sets its runs' `alive` keys)
ALIVE_S: Final = 4.0  # how long a beat lasts: a writer silent this long is gone
RETRY_MAX_S: Final = 1.0  # the longest pause between tries to reach Redis again

# A writer's beat for one running run: its `alive` key for another `alive` ms, and its keys' TTL
# refreshed, unless it has ended (an ended run is never extended). Keys that are gone (Redis lost
# them) stay gone here: the run's mirror writes them again.
_LEASE = """
if redis.call('HGET', KEYS[3], 'closed') == '1' then return 0 end
redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

# End a run: the end entry, the closed flag, and the retention TTLs (the pointer only if ours).
_END = """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('XADD', KEYS[2], ARGV[2], 'end', '1')
redis.call('HSET', KEYS[3], 'closed', '1')
redis.call('DEL', KEYS[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) else redis.call('DEL', KEYS[1]) end
end
return 1
"""

# Set a flag on a run that still exists (an expired run stays expired).
_FLAG = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], '1')
return 1
"""

# Forget the chat's current run if it is still this one.
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


@dataclass(frozen=True, slots=True)
class RunKeys:
    current: str
    chunks: str
    meta: str
    alive: str

    @staticmethod
    def chat_base(prefix: str, key: ChatKey) -> str:
        return f"{prefix}:{{{quote(key[0], safe='')}:{quote(key[1], safe='')}}}"

    @classmethod
    def of(cls, prefix: str, key: ChatKey, run_id: str) -> RunKeys:
        base = cls.chat_base(prefix, key)
        return cls(current=f"{base}:current", chunks=f"{base}:{run_id}:chunks", meta=f"{base}:{run_id}:meta",
                   alive=f"{base}:{run_id}:alive")


@dataclass(eq=False)
class _Mirror:
    """The write-through of one local run."""

    log: StreamLog
    follower: Follower
    run_id: str
    keys: RunKeys
    task: asyncio.Task[None] | None = None
    done: bool = False
    overflow_flagged: bool = False
    next_id: int = 1  # the next entry is 0-<next_id> (a chunk's id is 0-<sequence+1>)
    # (sequence, bytes) of the entries still in the Redis stream, oldest first, and their sum.
    sizes: deque[tuple[int, int]] = field(default_factory=deque)
    kept_bytes: int = 0


class RemoteStreamLog(StreamLog):
    """A run written by another process: a read-only `StreamLog` filled from Redis while followed."""

    def __init__(self, store: RedisStreamStore, key: ChatKey, run_id: str, keys: RunKeys,
                 replay_prefix: list[dict[str, Any]]) -> None:
        super().__init__(key=key, max_bytes=store.max_bytes)
        self.replay_prefix = replay_prefix
        self.run_id = run_id
        self.keys = keys
        self.failed = False
        self._store = store
        self._puller: asyncio.Task[None] | None = None
        # Where the puller is in the Redis stream (kept, so a later puller goes on from there).
        self._last_id = "0-0"
        self._expected = 1  # entry ids are 0-<sequence+1>; a gap means Redis trimmed the start
        self._vanished_at: float | None = None  # when the puller first found the run's keys gone

    def attach(self, start: int = 0, *, replay: bool = False, budget: int = 0) -> Follower:
        """A follower (see `StreamLog.attach`); the first one starts the puller."""
        follower = super().attach(start, replay=replay, budget=budget)
        if not self.closed and (self._puller is None or self._puller.done()):
            self._puller = self._store._spawn(self._pull(), f"redis-pull:{self.run_id}", reader=True)
        return follower

    def _detach(self, follower: Follower) -> None:
        super()._detach(follower)
        if not self.followers and self._puller is not None and not self._puller.done():
            self._puller.cancel()
            self._puller = None

    def _fail(self, text: str) -> None:
        if not self.closed:
            self.failed = True
            self.append({"type": "error", "errorText": text})
            self.close()

    async def _writer_gone(self, now: float) -> bool:
        """Whether the run's writer is gone: it beats and its `alive` key has expired, or the run's
        keys are gone and stay gone for `alive_s` (Redis lost them: its writer writes them again)."""
        store = self._store
        async with store.redis.pipeline(transaction=False) as pipe:
            pipe.exists(self.keys.alive)
            pipe.hmget(self.keys.meta, ["closed", "beats"])
            alive, (closed, beats) = await pipe.execute()
        if closed is None:
            if self._vanished_at is None:
                self._vanished_at = now
            return now - self._vanished_at >= store.alive_s
        self._vanished_at = None
        return closed != "1" and beats == "1" and not alive

    async def _pull(self) -> None:
        """Copies the run's Redis entries into this log, from the first one, until the end entry."""
        store = self._store
        block_ms = _ms(min(store.block_s, store.heartbeat_s))
        loop = asyncio.get_running_loop()
        unreachable_since: float | None = None
        spared_until = 0.0  # after Redis was out of reach, its writer gets `alive_s` to beat again
        try:
            while not self.closed:
                try:
                    reply = await store.redis.xread({self.keys.chunks: self._last_id}, count=READ_COUNT,
                                                    block=block_ms)
                    gone = not reply and loop.time() >= spared_until and await self._writer_gone(loop.time())
                except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                    now = loop.time()
                    if unreachable_since is None:
                        unreachable_since = now
                        log.warning("redis_stream_read_interrupted", chat_id=self.key[1], run_id=self.run_id,
                                    error=repr(exc))
                    if now - unreachable_since >= store.alive_s:
                        self._fail(UNREACHABLE_TEXT)
                        return
                    await asyncio.sleep(min(RETRY_MAX_S, store.heartbeat_s))
                    continue
                if unreachable_since is not None:
                    unreachable_since = None
                    spared_until = loop.time() + store.alive_s
                    log.info("redis_stream_read_resumed", chat_id=self.key[1], run_id=self.run_id)
                if gone:
                    log.warning("redis_stream_writer_lost", chat_id=self.key[1], run_id=self.run_id)
                    self._fail(LOST_WRITER_TEXT)
                    return
                for _name, entries in reply:
                    for entry_id, fields in entries:
                        entry = str(entry_id)
                        if int(entry.partition("-")[2]) != self._expected:
                            log.warning("redis_stream_incomplete", chat_id=self.key[1], run_id=self.run_id,
                                        entry_id=entry, expected=self._expected)
                            self._fail(INCOMPLETE_TEXT)
                            return
                        if "end" in fields:
                            self.close()
                            return
                        if "lost" in fields:
                            log.warning("redis_stream_incomplete", chat_id=self.key[1], run_id=self.run_id,
                                        entry_id=entry, reason="writer_overrun")
                            self._fail(INCOMPLETE_TEXT)
                            return
                        raw = str(fields["c"])
                        kind = json.loads(raw).get("type")  # also checks it is JSON
                        self.append_encoded(str(kind), raw.encode("utf-8"))
                        self._last_id, self._expected = entry, self._expected + 1
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError, ValueError, KeyError, AttributeError) as exc:
            log.warning("redis_stream_read_failed", chat_id=self.key[1], run_id=self.run_id, error=repr(exc))
            self._fail(READ_FAILED_TEXT)


class RedisStreamStore:
    """A `StreamStore` whose runs can be resumed from every process that shares the Redis."""

    def __init__(
        self,
        url: str,
        *,
        retention_s: float,
        max_bytes: int,
        lease_s: float = 30.0,
        grace_s: float = 30.0,
        block_s: float = 5.0,
        heartbeat_s: float = HEARTBEAT_S,
        alive_s: float = ALIVE_S,
        prefix: str = "adk-gateway:stream",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.retention_s = retention_s
        self.max_bytes = max_bytes
        self.lease_s = lease_s
        self.grace_s = grace_s
        self.block_s = block_s
        # A beat at least three times per key TTL, and a beat never outlives the keys it vouches for.
        self.heartbeat_s = min(heartbeat_s, lease_s / 3)
        self.alive_s = min(alive_s, lease_s)
        self.prefix = prefix
        self.redis: aioredis.Redis = aioredis.Redis.from_url(url, decode_responses=True)
        self.clock = clock  # the clock of `StreamLog.closed_at`
        self._local = MemoryStreamStore(retention_s=retention_s, max_bytes=max_bytes, clock=clock)
        self._mirrors: dict[ChatKey, _Mirror] = {}
        self._next_sweep = 0.0
        # Other processes' runs being read here, by (chat, run): concurrent resumes share one.
        self._remote: weakref.WeakValueDictionary[tuple[ChatKey, str], RemoteStreamLog] = (
            weakref.WeakValueDictionary()
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._readers: set[asyncio.Task[Any]] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._lease = self.redis.register_script(_LEASE)
        self._end = self.redis.register_script(_END)
        self._flag = self.redis.register_script(_FLAG)
        self._drop = self.redis.register_script(_DROP)

    # --- the StreamStore protocol --------------------------------------------------------------

    def add(self, log: StreamLog) -> None:
        """Makes a new local run the chat's resumable stream, here and in Redis."""
        self._sweep()
        self._local.add(log)
        run_id = uuid.uuid4().hex
        # Attached now (the run has not started): the log keeps its chunks until they are in Redis.
        mirror = _Mirror(log=log, follower=log.attach(0), run_id=run_id,
                         keys=RunKeys.of(self.prefix, log.key, run_id))
        self._mirrors[log.key] = mirror
        mirror.task = self._spawn(self._mirror(mirror), f"redis-mirror:{run_id}")
        log.when_delivered(lambda _log: self._after_delivered(mirror))
        if self._refresher is None or self._refresher.done():
            self._refresher = self._spawn(self._refresh_leases(), "redis-leases", fresh_context=True)

    def end_resumes(self) -> None:
        """Shutdown: every resume this process serves of another process's run ends now, with an
        `error` chunk telling the client to resume again (any instance can serve it)."""
        for remote in list(self._remote.values()):
            remote._fail(SHUTDOWN_TEXT)

    def resumable(self, key: ChatKey) -> StreamLog | None:
        """This process's own resumable log (no Redis); `lookup` also finds other processes' runs."""
        return self._local.resumable(key)

    async def lookup(self, key: ChatKey) -> StreamLog | None:
        """The chat's resumable stream, whichever process runs it; None if there is none."""
        self._sweep()
        try:
            run_id = await self.redis.get(f"{RunKeys.chat_base(self.prefix, key)}:current")
            if run_id is None:
                return None
            keys = RunKeys.of(self.prefix, key, str(run_id))
            meta = await cast("Awaitable[dict[str, str]]", self.redis.hgetall(keys.meta))
        except (RedisError, OSError) as exc:
            log.warning("redis_lookup_failed", chat_id=key[1], error=repr(exc))
            return self._local.resumable(key)
        if not meta:
            return None
        if meta.get("overflowed") == "1":
            log.info("resume_refused", chat_id=key[1], reason="over_budget", max_bytes=self.max_bytes)
            return None
        if meta.get("closed") == "1" and meta.get("delivered") == "1":
            return None
        mirror = self._mirrors.get(key)
        if mirror is not None and mirror.run_id == run_id:
            return self._local.resumable(key)
        shared = self._remote.get((key, str(run_id)))
        if shared is not None and not shared.failed:
            if shared.overflowed:
                log.info("resume_refused", chat_id=key[1], reason="over_budget", max_bytes=self.max_bytes)
                return None
            return shared
        try:
            prefix = json.loads(meta.get("prefix") or "[]")
        except ValueError:
            prefix = []
        remote = RemoteStreamLog(self, key, str(run_id), keys, prefix if isinstance(prefix, list) else [])

        def flag_delivered(_log: StreamLog) -> None:
            self._spawn(self._set_flag(keys, "delivered"), f"redis-delivered:{run_id}")

        remote.when_delivered(flag_delivered)
        self._remote[(key, str(run_id))] = remote
        return remote

    def discard(self, log: StreamLog) -> None:
        self._local.discard(log)
        mirror = self._mirrors.get(log.key)
        if mirror is not None and mirror.log is log:
            del self._mirrors[log.key]
            self._spawn(self._drop_current(mirror), "redis-discard")

    async def aclose(self) -> None:
        """Closes local logs, lets mirrors write their end (briefly), then closes the client."""
        await self._local.aclose()
        if self._refresher is not None:
            self._refresher.cancel()
        for reader in list(self._readers):
            reader.cancel()
        pending = set(self._tasks) | set(self._readers)
        if pending:
            _, late = await asyncio.wait(pending, timeout=2.0)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1.0)
        self._mirrors.clear()
        await self.redis.aclose()

    # --- stops from other processes -------------------------------------------------------------

    @property
    def stop_channel(self) -> str:
        return f"{self.prefix}:stop"

    def listen_for_stops(self, on_stop: Callable[[ChatKey], None]) -> None:
        """Calls `on_stop(key)` for every chat another process was asked to stop."""
        self._spawn(self._stop_listener(on_stop), "redis-stop-listener", reader=True, fresh_context=True)

    async def broadcast_stop(self, key: ChatKey) -> int:
        """Asks every process to stop the chat's run; returns how many processes heard it."""
        try:
            heard = await self.redis.publish(self.stop_channel, json.dumps(list(key)))
        except (RedisError, OSError) as exc:
            log.warning("redis_stop_publish_failed", error=repr(exc))
            return 0
        return int(heard)

    async def _stop_listener(self, on_stop: Callable[[ChatKey], None]) -> None:
        failing = False
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.stop_channel)
                    if failing:
                        log.info("redis_stop_listener_resumed")
                        failing = False
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        try:
                            user, chat = json.loads(message["data"])
                        except (ValueError, TypeError):
                            continue
                        on_stop((str(user), str(chat)))
            except (RedisError, OSError) as exc:
                if not failing:  # once per outage, not once a try
                    log.warning("redis_stop_listener_failed", error=repr(exc))
                failing = True
                await asyncio.sleep(min(self.block_s, RETRY_MAX_S))  # back off, then subscribe again

    # --- health --------------------------------------------------------------------------------

    async def ping(self) -> bool:
        """True when Redis answers (for readiness checks)."""
        try:
            return bool(await self.redis.ping())
        except (RedisError, OSError):
            return False

    # --- writing -------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str, *, reader: bool = False,
               fresh_context: bool = False) -> asyncio.Task[None]:
        """Starts a store-owned task: writers (mirrors, flags) get a moment to finish at close,
        readers (pullers) are cancelled at once. `fresh_context`: a task of the whole store (the
        heartbeat, the stop listener), whose log lines must not carry the ids of the request that
        happened to start it."""
        tasks = self._readers if reader else self._tasks
        context = contextvars.Context() if fresh_context else None
        task = asyncio.get_running_loop().create_task(coro, name=name, context=context)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def _sweep(self) -> None:
        # At most once a second, as the local store sweeps its logs: a scan of every mirror on
        # every run's start would cost each turn in proportion to the runs of the last
        # `retention_s` (at 300 runs a second and the default 30 s, nine thousand).
        now = self.clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(1.0, self.retention_s)
        stale = [
            key
            for key, mirror in self._mirrors.items()
            if mirror.done and mirror.log.closed_at is not None and now - mirror.log.closed_at >= self.retention_s
        ]
        for key in stale:
            del self._mirrors[key]

    async def _mirror(self, mirror: _Mirror) -> None:
        stream_log, keys = mirror.log, mirror.keys
        again = False
        try:
            while True:
                try:
                    await self._begin(mirror, again=again)
                    await self._copy(mirror)
                    ended = await self._end(
                        keys=[keys.current, keys.chunks, keys.meta, keys.alive],
                        args=[mirror.run_id, f"0-{mirror.next_id}", int(self.retention_s * 1000),
                              _ms(self.retention_s + self.grace_s)],
                    )
                    if not ended:
                        log.warning("redis_stream_lease_lost", chat_id=stream_log.key[1], run_id=mirror.run_id)
                    return
                except (RedisError, OSError) as exc:
                    log.warning("redis_mirror_failed", chat_id=stream_log.key[1], run_id=mirror.run_id,
                                error=repr(exc))
                    if not await self._reconnect(mirror):
                        return
                    again = True
        finally:
            mirror.follower.detach()
            mirror.done = True

    async def _begin(self, mirror: _Mirror, *, again: bool) -> None:
        """Writes the run's flags and makes it the chat's current run. `again`: after Redis was out
        of reach (and may have lost everything): what a failed write left is deleted, so the run
        is written anew, and `current` is set only if no other run took it meanwhile."""
        stream_log, keys = mirror.log, mirror.keys
        lease_ms = _ms(self.lease_s)
        begin = self.redis.pipeline(transaction=True)
        if again:
            begin.delete(keys.chunks)
        begin.hset(keys.meta, mapping={
            "user": stream_log.key[0],
            "chat": stream_log.key[1],
            "run": mirror.run_id,
            "closed": "0",
            "delivered": "1" if stream_log.delivered else "0",
            "overflowed": "1" if mirror.overflow_flagged else "0",
            "beats": "1",
            "prefix": json.dumps(stream_log.replay_prefix, separators=(",", ":"), default=str),
        })
        begin.pexpire(keys.meta, lease_ms)
        begin.set(keys.alive, "1", px=_ms(self.alive_s))
        begin.set(keys.current, mirror.run_id, px=lease_ms, nx=again)
        await begin.execute()

    async def _reconnect(self, mirror: _Mirror) -> bool:
        """After a failed write: lets go of the log, waits until Redis answers, then follows the log
        again from its oldest chunk, to write the run anew. False when nothing is worth writing any
        more (the run ended and was delivered, or is past its retention)."""
        stream_log = mirror.log
        mirror.follower.detach()  # a mirror that cannot write never holds the run back
        pause = 0.1
        while True:
            closed_at = stream_log.closed_at
            if closed_at is not None and (stream_log.delivered or self.clock() - closed_at >= self.retention_s):
                log.info("redis_mirror_given_up", chat_id=stream_log.key[1], run_id=mirror.run_id)
                return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)
            if await self.ping():
                break
        start = stream_log.first
        mirror.follower = stream_log.attach(start)
        mirror.sizes.clear()
        mirror.kept_bytes = 0
        mirror.next_id = start + 1
        if start > 0 or stream_log.overflowed:
            mirror.overflow_flagged = True  # written by `_begin`: its start is lost, no process offers it
        log.info("redis_mirror_resumed", chat_id=stream_log.key[1], run_id=mirror.run_id, from_sequence=start)
        return True

    async def _copy(self, mirror: _Mirror) -> None:
        """Writes the log's chunks to Redis as they come, until the log is closed and written."""
        stream_log, follower = mirror.log, mirror.follower
        while True:
            batch: list[LogEntry] = []
            try:
                # Whatever accumulated while the previous write was in flight goes in one pipeline.
                while len(batch) < BATCH and (entry := follower.take()) is not None:
                    batch.append(entry)
            except FollowerOverrun:
                await self._lost(mirror, batch)
                return
            if batch:
                await self._write(mirror, batch)
            elif stream_log.closed:
                return
            else:
                await stream_log.changed()

    async def _write(self, mirror: _Mirror, batch: list[LogEntry]) -> None:
        keys = mirror.keys
        pipe = self.redis.pipeline(transaction=False)
        for entry in batch:
            pipe.xadd(keys.chunks, {"c": entry.data}, id=f"0-{entry.sequence + 1}")
            mirror.sizes.append((entry.sequence, len(entry.data)))
            mirror.kept_bytes += len(entry.data)
        mirror.next_id = batch[-1].sequence + 2
        # The byte cap: keep the newest `max_bytes` (and always the newest entry), like the log.
        trim_from: int | None = None
        while mirror.kept_bytes > self.max_bytes and len(mirror.sizes) > 1:
            _sequence, size = mirror.sizes.popleft()
            mirror.kept_bytes -= size
            trim_from = mirror.sizes[0][0]
        if trim_from is not None:
            pipe.xtrim(keys.chunks, minid=f"0-{trim_from + 1}", approximate=False)
        pipe.pexpire(keys.chunks, _ms(self.lease_s))
        if (trim_from is not None or mirror.log.overflowed) and not mirror.overflow_flagged:
            pipe.hset(keys.meta, "overflowed", "1")
            mirror.overflow_flagged = True
        await pipe.execute()

    async def _lost(self, mirror: _Mirror, batch: list[LogEntry]) -> None:
        """The mirror fell behind past the local log's budget (Redis too slow): what is written
        still goes in, then a `lost` entry ends it for remote readers; the run is not resumable."""
        if batch:
            await self._write(mirror, batch)
        log.warning("redis_mirror_overrun", chat_id=mirror.log.key[1], run_id=mirror.run_id,
                    budget_bytes=mirror.follower.budget)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(mirror.keys.chunks, {"lost": "1"}, id=f"0-{mirror.next_id}")
        pipe.hset(mirror.keys.meta, "overflowed", "1")
        await pipe.execute()
        mirror.overflow_flagged = True
        mirror.next_id += 1

    async def _refresh_leases(self) -> None:
        """The writer's heartbeat: every `heartbeat_s`, each running run's `alive` key is set for
        `alive_s` and its keys' TTL refreshed. A dead process's runs are noticed within `alive_s`
        (their keys expire after `lease_s`)."""
        failing = False
        while True:
            await asyncio.sleep(self.heartbeat_s)
            running = [m for m in self._mirrors.values() if not m.done]
            if not running:
                continue
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for m in running:
                        await self._lease(keys=[m.keys.current, m.keys.chunks, m.keys.meta, m.keys.alive],
                                          args=[m.run_id, _ms(self.lease_s), _ms(self.alive_s)], client=pipe)
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                if not failing:  # once per outage, not once a beat
                    log.warning("redis_lease_refresh_failed", runs=len(running), error=repr(exc))
                failing = True
                continue
            if failing:
                log.info("redis_lease_refresh_resumed", runs=len(running))
            failing = False

    def _after_delivered(self, mirror: _Mirror) -> None:
        async def flag() -> None:
            if mirror.task is not None:
                await asyncio.wait({mirror.task})  # the run's keys exist once the mirror has begun
            await self._set_flag(mirror.keys, "delivered")

        self._spawn(flag(), f"redis-delivered:{mirror.run_id}")

    async def _set_flag(self, keys: RunKeys, name: str) -> None:
        try:
            await self._flag(keys=[keys.meta], args=[name])
        except (RedisError, OSError) as exc:
            log.warning("redis_flag_failed", flag=name, error=repr(exc))

    async def _drop_current(self, mirror: _Mirror) -> None:
        try:
            await self._drop(keys=[mirror.keys.current], args=[mirror.run_id])
        except (RedisError, OSError) as exc:
            log.warning("redis_discard_failed", error=repr(exc))

