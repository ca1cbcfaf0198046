"""The pieces behind the cluster's fault tests (issue 34), each on its own against a real store.

- A dead writer is noticed by its heartbeat (`alive`, 4 s by default; shorter here), long before
  its keys expire: remote followers end with an `error`, and a resume meanwhile still replays
  what Redis has, then ends the same way.
- A mirror whose write fails (Redis away) writes the run again, from its first chunk, once Redis
  answers: a remote follower gets every chunk exactly once, in order, to the end.
- A chat lease whose key Redis lost (a restart) is taken again by its holder, not reported lost;
  a lease another instance holds now is; a lease store that does not answer is a 503.
- A session store that refuses connections is `StoreUnavailable` (503), not the driver's error.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from adk_gateway.agents.adk import GuardedSessionService, session_service_from_uri
from adk_gateway.core.errors import StoreUnavailable
from adk_gateway.services.leases import RedisLeases
from adk_gateway.services.redis_streams import LOST_WRITER_TEXT, RedisStreamStore, RemoteStreamLog
from adk_gateway.services.streams import StreamLog
from tests.gateway_process import free_port

pytestmark = pytest.mark.services


async def _collect(log: StreamLog) -> list[dict[str, Any]]:
    return [chunk async for _, chunk in log.follow(0)]


async def _lookup_until(store: RedisStreamStore, key: tuple[str, str]) -> StreamLog:
    async with asyncio.timeout(5):
        while (found := await store.lookup(key)) is None:
            await asyncio.sleep(0.01)
    return found


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisStreamStore, RedisStreamStore]]:
    """A writer and a reader; keys live 30 s while a run goes on, a beat lasts 0.5 s."""
    options: dict[str, Any] = {"retention_s": 30.0, "max_bytes": 64 * 1024, "prefix": f"test:{uuid.uuid4().hex[:8]}",
                               "heartbeat_s": 0.1, "alive_s": 0.5, "block_s": 0.2}
    writer, reader = RedisStreamStore(redis_url, **options), RedisStreamStore(redis_url, **options)
    yield writer, reader
    await writer.aclose()
    await reader.aclose()


async def test_a_dead_writer_is_noticed_by_its_heartbeat_not_by_its_keys_expiring(
        pair: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    writer, reader = pair
    key = ("u", f"dead-{uuid.uuid4().hex[:6]}")
    log = StreamLog(key=key, max_bytes=writer.max_bytes)
    writer.add(log)
    log.append({"type": "start"})
    log.append({"type": "text-delta", "id": "t", "delta": "half"})
    remote = await _lookup_until(reader, key)
    follow = asyncio.ensure_future(_collect(remote))
    async with asyncio.timeout(5):
        while len(remote.chunks) < 2:
            await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    for task in list(writer._tasks):  # the writing process "dies": nothing beats any more
        task.cancel()
    died = loop.time()
    chunks = await asyncio.wait_for(follow, 5)
    assert chunks[-1] == {"type": "error", "errorText": LOST_WRITER_TEXT}
    assert loop.time() - died < 0.5 + 0.2 + 1.0  # a beat's life, a read's block, and slack; not 30 s
    # Its keys are still there (they would last 30 s): a resume replays them, then ends the same way.
    again = await reader.lookup(key)
    assert isinstance(again, RemoteStreamLog) and again is not remote
    replayed = await asyncio.wait_for(_collect(again), 5)
    assert replayed == [{"type": "start"}, {"type": "text-delta", "id": "t", "delta": "half"},
                        {"type": "error", "errorText": LOST_WRITER_TEXT}]


class _FlakyStore(RedisStreamStore):
    """A writer whose next write fails once, as if Redis went away (and came back empty)."""

    fail_next = False

    async def _write(self, mirror: Any, batch: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            # What a restart leaves: nothing of the run.
            await self.redis.delete(mirror.keys.chunks, mirror.keys.meta, mirror.keys.current, mirror.keys.alive)
            raise RedisConnectionError("Redis went away")
        await super()._write(mirror, batch)


async def test_a_mirror_writes_its_run_again_once_redis_is_back(redis_url: str) -> None:
    options: dict[str, Any] = {"retention_s": 30.0, "max_bytes": 64 * 1024, "prefix": f"test:{uuid.uuid4().hex[:8]}",
                               "heartbeat_s": 0.1, "alive_s": 2.0, "block_s": 0.2}
    writer, reader = _FlakyStore(redis_url, **options), RedisStreamStore(redis_url, **options)
    try:
        key = ("u", f"flaky-{uuid.uuid4().hex[:6]}")
        log = StreamLog(key=key, max_bytes=writer.max_bytes)
        writer.add(log)
        log.append({"type": "start"})
        remote = await _lookup_until(reader, key)
        follow = asyncio.ensure_future(_collect(remote))
        deltas = [{"type": "text-delta", "id": "t", "delta": f"tok{i} "} for i in range(30)]
        for delta in deltas[:10]:
            log.append(delta)
        async with asyncio.timeout(5):
            while len(remote.chunks) < 11:
                await asyncio.sleep(0.01)
        writer.fail_next = True
        for delta in deltas[10:]:
            log.append(delta)
            await asyncio.sleep(0.005)
        log.append({"type": "finish"})
        log.close()
        chunks = await asyncio.wait_for(follow, 10)
        assert chunks == [{"type": "start"}, *deltas, {"type": "finish"}]
        assert not writer.fail_next and writer._mirrors[key].done
        # The run is in Redis again, whole: a later resume replays it from its start.
        later = await reader.lookup(key)
        assert isinstance(later, RemoteStreamLog)
        assert await asyncio.wait_for(_collect(later), 5) == chunks
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_a_lease_redis_lost_is_taken_again_and_one_taken_elsewhere_is_lost(redis_url: str) -> None:
    leases = RedisLeases(redis_url, ttl_ms=300)
    key = ("alice", f"retake-{uuid.uuid4().hex[:8]}")
    lost = asyncio.Event()
    try:
        held = await leases.acquire(key, on_lost=lost.set)
        assert held is not None
        token = await leases.redis.get(leases._name(key))
        await leases.redis.delete(leases._name(key))  # a Redis restart loses it
        async with asyncio.timeout(5):
            while await leases.redis.get(leases._name(key)) != token:
                await asyncio.sleep(0.02)
        assert not lost.is_set()
        assert await leases.acquire(key, on_lost=lambda: None) is None  # still ours, still exclusive
        await leases.redis.set(leases._name(key), "another-instance", px=5000)
        async with asyncio.timeout(5):
            await lost.wait()
        await held.release()
        assert await leases.redis.get(leases._name(key)) == "another-instance"
        await leases.redis.delete(leases._name(key))
    finally:
        await leases.aclose()


async def test_stores_that_cannot_be_reached_are_store_unavailable() -> None:
    nowhere = free_port()
    leases = RedisLeases(f"redis://127.0.0.1:{nowhere}/0")
    try:
        with pytest.raises(StoreUnavailable) as refused:
            await leases.acquire(("alice", "chat"), on_lost=lambda: None)
        assert refused.value.status == 503 and refused.value.headers() == {"Retry-After": "1"}
    finally:
        await leases.aclose()
    sessions = GuardedSessionService(session_service_from_uri(f"postgresql://postgres@127.0.0.1:{nowhere}/adk"),
                                     timeout_s=5)
    with pytest.raises(StoreUnavailable) as unavailable:
        await sessions.get_session(app_name="a", user_id="u", session_id="s")
    assert unavailable.value.error_code == "store_unavailable"
    assert "ConnectionRefusedError" in (unavailable.value.detail or "")
    # What the store answers about a session is not an outage.
    with pytest.raises(ValueError, match="not found"):
        await GuardedSessionService(session_service_from_uri("memory://")).append_event(
            await GuardedSessionService(session_service_from_uri("memory://")).create_session(
                app_name="a", user_id="u"), _event())


def _event() -> Any:
    from google.adk.events import Event

    return Event(author="user", invocation_id="i")
