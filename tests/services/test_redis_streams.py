"""The Redis stream store: a run on one gateway is resumed on another that shares the Redis."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from adk_gateway.app import make_app
from adk_gateway.config import Settings
from adk_gateway.keys import REGISTRY
from adk_gateway.services.redis_streams import INCOMPLETE_TEXT, LOST_WRITER_TEXT, RedisStreamStore, RemoteStreamLog
from adk_gateway.services.streams import StreamLog

from .conftest import chat_body, read_sse

pytestmark = pytest.mark.services

USER = "anonymous"


def _client(settings: Settings) -> TestClient[Any, Any]:
    return TestClient(TestServer(make_app(settings)))


async def _eventually_204(client: TestClient[Any, Any], path: str, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while True:
        response = await client.get(path)
        if response.status == 204:
            return
        response.close()
        assert time.monotonic() < deadline, f"{path} still answers {response.status}"
        await asyncio.sleep(0.05)


async def test_resume_on_another_instance(redis_url: str) -> None:
    settings = Settings(stream_store=redis_url, detach_on_disconnect=True)
    chat_id = f"redis-{uuid.uuid4().hex[:8]}"
    resume_path = f"/api/chat/{chat_id}/stream"
    async with _client(settings) as a, _client(settings) as b:
        # Nothing active yet, anywhere.
        assert (await b.get(resume_path)).status == 204

        # A long run on A; its client reads the first chunks and goes away (the run goes on).
        response = await a.post("/api/chat", json=chat_body(chat_id, "/stream 40 25"))
        assert response.status == 200
        first = await read_sse(response, until=lambda read: "text-delta" in read.types())
        response.close()
        run = a.app[REGISTRY].active_run((USER, chat_id))
        assert run is not None, "the detached run should still be going"

        # B has never seen this chat: it replays from Redis, from the first chunk, then live.
        resumed = await b.get(resume_path)
        assert resumed.status == 200
        assert resumed.headers["Content-Type"].startswith("text/event-stream")
        assert not run.done.is_set(), "the resume began after the run ended: the test proves nothing"
        replay = await read_sse(resumed)
        assert replay.done
        assert replay.chunks[0] == first.chunks[0]  # `start`, with the same message id
        assert replay.chunks[: len(first.chunks)] == first.chunks
        assert replay.text() == "".join(f"tok{i} " for i in range(40))
        assert replay.chunks[-1]["type"] == "finish" and replay.chunks[-1]["finishReason"] == "stop"
        assert run.done.is_set()
        local = run.log.chunks
        assert replay.chunks == local, "B's replay differs from what A logged"

        # Delivered in full (by B): neither instance offers it again.
        await _eventually_204(b, resume_path)
        await _eventually_204(a, resume_path)


async def test_resume_on_the_same_instance_uses_its_own_log(redis_url: str) -> None:
    settings = Settings(stream_store=redis_url, detach_on_disconnect=True)
    chat_id = f"redis-{uuid.uuid4().hex[:8]}"
    async with _client(settings) as a:
        response = await a.post("/api/chat", json=chat_body(chat_id, "/stream 10 20"))
        await read_sse(response, until=lambda read: "text-delta" in read.types())
        response.close()
        resumed = await a.get(f"/api/chat/{chat_id}/stream")
        assert resumed.status == 200
        replay = await read_sse(resumed)
        assert replay.done and replay.text() == "".join(f"tok{i} " for i in range(10))
        await _eventually_204(a, f"/api/chat/{chat_id}/stream")


# --- the store on its own --------------------------------------------------------------------------


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[tuple[RedisStreamStore, RedisStreamStore]]:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"retention_s": 30.0, "max_bytes": 64 * 1024, "prefix": prefix,
                               "lease_s": 0.6, "block_s": 0.2, "grace_s": 5.0}
    writer, reader = RedisStreamStore(redis_url, **options), RedisStreamStore(redis_url, **options)
    yield writer, reader
    await writer.aclose()
    await reader.aclose()


async def _collect(log: StreamLog, start: int = 0) -> list[tuple[int, dict[str, Any]]]:
    return [item async for item in log.follow(start)]


async def _lookup_until(store: RedisStreamStore, key: tuple[str, str]) -> StreamLog:
    for _ in range(100):
        found = await store.lookup(key)
        if found is not None:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError("the run never appeared in Redis")


async def test_remote_follow_from_a_sequence(stores: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    writer, reader = stores
    key = ("u", "chat:with/odd {chars}")
    log = StreamLog(key=key, max_bytes=writer.max_bytes)
    log.replay_prefix = [{"type": "tool-input-available", "toolCallId": "c1", "toolName": "t", "input": {}}]
    writer.add(log)
    for i in range(5):
        log.append({"type": "text-delta", "id": "t", "delta": f"{i}"})
    remote = await _lookup_until(reader, key)
    assert isinstance(remote, RemoteStreamLog)
    assert remote.replay_prefix == log.replay_prefix
    tail = asyncio.ensure_future(_collect(remote, start=3))
    await asyncio.sleep(0.05)
    log.append({"type": "finish"})
    log.close()
    items = await asyncio.wait_for(tail, 5)
    assert [seq for seq, _ in items] == [3, 4, 5]
    assert items[-1][1] == {"type": "finish"}


async def test_writer_lost_ends_remote_followers(stores: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    writer, reader = stores
    key = ("u", f"lost-{uuid.uuid4().hex[:6]}")
    log = StreamLog(key=key, max_bytes=writer.max_bytes)
    writer.add(log)
    log.append({"type": "start"})
    remote = await _lookup_until(reader, key)
    # The writing process "dies": its tasks stop, nothing refreshes the lease.
    for task in list(writer._tasks):
        task.cancel()
    items = await asyncio.wait_for(_collect(remote), 5)
    assert items[0][1] == {"type": "start"}
    assert items[-1][1] == {"type": "error", "errorText": LOST_WRITER_TEXT}
    assert await reader.lookup(key) is None


async def test_lease_keeps_a_long_run_alive(stores: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    writer, reader = stores  # lease_s=0.6: without refreshes the keys would be gone after 0.6 s
    key = ("u", f"long-{uuid.uuid4().hex[:6]}")
    log = StreamLog(key=key, max_bytes=writer.max_bytes)
    writer.add(log)
    log.append({"type": "start"})
    await asyncio.sleep(1.5)
    remote = await reader.lookup(key)
    assert isinstance(remote, RemoteStreamLog)
    tail = asyncio.ensure_future(_collect(remote))
    await asyncio.sleep(0.3)
    log.append({"type": "finish"})
    log.close()
    assert [chunk for _, chunk in await asyncio.wait_for(tail, 5)] == [{"type": "start"}, {"type": "finish"}]


async def test_finished_mirrors_are_let_go_by_a_sweep_at_most_once_a_second(redis_url: str) -> None:
    """A run's start sweeps the mirrors of finished runs past their retention, but not more often
    than once a second: a scan of every mirror on every start would cost each turn in proportion
    to the runs of the last `retention_s`."""
    ahead = [0.0]  # how far the store's clock runs ahead of `StreamLog.closed_at`'s
    writer = RedisStreamStore(redis_url, retention_s=10.0, max_bytes=2048, prefix=f"test:{uuid.uuid4().hex[:8]}",
                              clock=lambda: time.monotonic() + ahead[0])

    async def finished(chat: str) -> None:
        log = StreamLog(key=("u", chat), max_bytes=writer.max_bytes)
        writer.add(log)
        log.append({"type": "start"})
        log.close()
        await asyncio.wait({m.task for m in writer._mirrors.values() if m.task is not None}, timeout=5)

    try:
        await finished("a")  # its start swept (nothing to let go); the next sweep is a second away
        ahead[0] = 10.5  # "a" is past its retention, and so is every run finished from now on
        await finished("b")
        assert set(writer._mirrors) == {("u", "b")}
        ahead[0] += 0.5  # within a second of the last sweep: "b" stays, though past its retention
        await finished("c")
        assert set(writer._mirrors) == {("u", "b"), ("u", "c")}
        ahead[0] += 0.6
        await finished("d")
        assert set(writer._mirrors) == {("u", "d")}
    finally:
        await writer.aclose()


async def test_overflow_and_retention(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    writer = RedisStreamStore(redis_url, retention_s=0.3, max_bytes=2048, prefix=prefix)
    reader = RedisStreamStore(redis_url, retention_s=0.3, max_bytes=2048, prefix=prefix)
    try:
        # Over the byte budget: not resumable anywhere.
        big = StreamLog(key=("u", "big"), max_bytes=2048)
        writer.add(big)
        for _ in range(40):
            big.append({"type": "text-delta", "id": "t", "delta": "x" * 100})
        big.close()
        await asyncio.wait({m.task for m in writer._mirrors.values() if m.task is not None}, timeout=5)
        assert await reader.lookup(("u", "big")) is None

        # A finished, undelivered run stays resumable for retention_s, then is gone.
        small = StreamLog(key=("u", "small"), max_bytes=2048)
        writer.add(small)
        small.append({"type": "start"})
        small.close()
        await asyncio.wait({m.task for m in writer._mirrors.values() if m.task is not None}, timeout=5)
        found = await reader.lookup(("u", "small"))
        assert isinstance(found, RemoteStreamLog)
        assert [chunk for _, chunk in await _collect(found)] == [{"type": "start"}]
        await asyncio.sleep(0.4)
        assert await reader.lookup(("u", "small")) is None
        client = aioredis.Redis.from_url(redis_url)
        try:
            assert await client.ttl(f"{prefix}:{{u:small}}:current") == -2  # gone
        finally:
            await client.aclose()
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_stop_on_another_instance(redis_url: str) -> None:
    """`POST /api/chat/{id}/stop` on B stops the run that A is running (through Redis pub/sub)."""
    settings = Settings(stream_store=redis_url, detach_on_disconnect=True)
    chat_id = f"redis-stop-{uuid.uuid4().hex[:8]}"
    async with _client(settings) as a, _client(settings) as b:
        response = await a.post("/api/chat", json=chat_body(chat_id, "/stream 400 25"))
        assert response.status == 200
        await read_sse(response, until=lambda read: "text-delta" in read.types())
        response.close()
        run = a.app[REGISTRY].active_run((USER, chat_id))
        assert run is not None, "the detached run should still be going"

        stop = await b.post(f"/api/chat/{chat_id}/stop", json={})
        assert await stop.json() == {"stopped": False, "forwarded": True}
        async with asyncio.timeout(5):
            await run.done.wait()
        assert a.app[REGISTRY].active_run((USER, chat_id)) is None
        assert run.log.chunks[-1] == {"type": "abort", "reason": "stopped"}
        # The chat is free again on A.
        again = await a.post("/api/chat", json=chat_body(chat_id, "/echo again"))
        assert again.status == 200
        assert "again" in (await read_sse(again)).text()


# --- bounds ----------------------------------------------------------------------------------------


async def _stream_bytes(redis_url: str, key: str) -> tuple[int, list[str]]:
    """The bytes of chunk JSON a Redis stream holds, and its entry ids."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        entries = await client.xrange(key)
    finally:
        await client.aclose()
    return sum(len(fields["c"].encode()) for _id, fields in entries if "c" in fields), [i for i, _f in entries]


async def test_the_redis_stream_is_capped_in_bytes_and_live_remote_readers_keep_up(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"retention_s": 30.0, "max_bytes": 4096, "prefix": prefix, "block_s": 0.2}
    writer, reader = RedisStreamStore(redis_url, **options), RedisStreamStore(redis_url, **options)
    try:
        key = ("u", f"capped-{uuid.uuid4().hex[:6]}")
        log = StreamLog(key=key, max_bytes=writer.max_bytes)
        writer.add(log)
        log.append({"type": "start"})
        remote = await _lookup_until(reader, key)
        tail = asyncio.ensure_future(_collect(remote))
        sent = [{"type": "text-delta", "id": "t", "delta": f"{i:04d}" + "x" * 200} for i in range(100)]
        for wire in sent:  # 20 KiB, at a pace the mirror and the remote reader keep up with
            log.append(wire)
            await asyncio.sleep(0.002)
        log.append({"type": "finish"})
        log.close()
        items = await asyncio.wait_for(tail, 10)
        # The remote reader saw every chunk, in order, although neither log kept them all.
        assert [chunk for _, chunk in items] == [{"type": "start"}, *sent, {"type": "finish"}]
        assert [seq for seq, _ in items] == list(range(102))
        assert log.overflowed and remote.overflowed
        mirror = writer._mirrors[key]
        assert mirror.task is not None
        await asyncio.wait({mirror.task}, timeout=5)
        held, ids = await _stream_bytes(redis_url, mirror.keys.chunks)
        assert held <= 4096 + len(json.dumps(sent[-1], separators=(",", ":")))
        assert ids[0] != "0-1" and ids[-1] == "0-103"  # trimmed from the start; the end entry is last
        # Over its budget: not resumable, from either process.
        assert await reader.lookup(key) is None
        assert await writer.lookup(key) is None
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_concurrent_resumes_share_one_reader(stores: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    writer, reader = stores
    key = ("u", f"shared-{uuid.uuid4().hex[:6]}")
    log = StreamLog(key=key, max_bytes=writer.max_bytes)
    writer.add(log)
    for i in range(3):
        log.append({"type": "text-delta", "id": "t", "delta": str(i)})
    first = await _lookup_until(reader, key)
    second = await reader.lookup(key)
    assert second is first
    tails = [asyncio.ensure_future(_collect(first)), asyncio.ensure_future(_collect(first, start=2))]

    def pullers() -> list[asyncio.Task[Any]]:
        return [t for t in reader._readers if t.get_name().startswith("redis-pull:") and not t.done()]

    for _ in range(100):
        if first.followers == 2 and first.end == 3:
            break
        await asyncio.sleep(0.01)
    assert len(pullers()) == 1, "one XREAD loop for the stream, however many follow it here"
    third = await reader.lookup(key)
    assert third is first
    log.append({"type": "finish"})
    log.close()
    everything, tail = await asyncio.wait_for(asyncio.gather(*tails), 5)
    assert [seq for seq, _ in everything] == [0, 1, 2, 3]
    assert [seq for seq, _ in tail] == [2, 3]
    assert not pullers()


class _GatedStore(RedisStreamStore):
    """A store whose writes to Redis wait for a gate: Redis slower than the run."""

    gate: asyncio.Event

    async def _write(self, mirror: Any, batch: Any) -> None:
        await self.gate.wait()
        await super()._write(mirror, batch)


async def test_a_mirror_that_falls_behind_past_the_budget_ends_remote_readers(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"retention_s": 30.0, "max_bytes": 2048, "prefix": prefix, "block_s": 0.2}
    writer, reader = _GatedStore(redis_url, **options), RedisStreamStore(redis_url, **options)
    writer.gate = asyncio.Event()
    writer.gate.set()
    try:
        key = ("u", f"behind-{uuid.uuid4().hex[:6]}")
        log = StreamLog(key=key, max_bytes=writer.max_bytes)
        writer.add(log)
        log.append({"type": "start"})
        remote = await _lookup_until(reader, key)
        tail = asyncio.ensure_future(_collect(remote))
        await asyncio.sleep(0.05)
        writer.gate.clear()  # Redis stalls; the run goes on
        for _ in range(40):
            log.append({"type": "text-delta", "id": "t", "delta": "x" * 100})
        mirror = writer._mirrors[key]
        assert mirror.follower.overrun
        assert log.kept_bytes <= 2048 + 200, "the local log kept chunks for a writer that fell behind"
        writer.gate.set()
        items = await asyncio.wait_for(tail, 10)
        assert items[-1][1] == {"type": "error", "errorText": INCOMPLETE_TEXT}
        assert await reader.lookup(key) is None
    finally:
        await writer.aclose()
        await reader.aclose()
