"""Faults across the local cluster (issue 34): real processes, the real `ai` 7 client.

One cluster (deploy/cluster.py: nginx, two gateways, PostgreSQL, Redis, on free ports, with
`--detach-on-disconnect`, as a resuming page runs it) takes one fault per test, and is made whole
again before the next (`deploy/cluster.py start NAME` for any piece that is down):

- `kill -9` of the gateway running a chat mid-stream: the client's resume through nginx reaches
  the other gateway and ends with a terminal `error` chunk within 10 s of the kill (the dead
  writer's heartbeat stops; nothing waits for key expiries); a new message on the chat is
  answered within 10 s; an approval asked on the killed gateway before the kill is answered on
  the other one afterwards and runs its tool once.
- Redis restarted mid-stream (down ~2 s): the stream goes on to its `finish` with every token, as
  does a resume following it from the other gateway; no `abort`, no `error`; resumes afterwards
  answer 204 or replay; nothing answers 5xx; both gateways work on without a restart (a stop is
  forwarded through Redis again).
- PostgreSQL stopped, then started: requests in between get a JSON 503 `store_unavailable` with
  `Retry-After` within 5 s, `/readyz` says 503, and everything works again afterwards, without a
  restart of the gateways.
- One approval answered by two clients on the two gateways at once: its tool runs once.

The bounds the issue states (10 s, 5 s) are measured and asserted; everything else waits on a
condition, bounded. How often a tool ran is counted in the session store itself: the tool's
own result events in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

import aiohttp
import pytest
import redis

from adk_gateway.services.redis_streams import LOST_WRITER_TEXT
from deploy.cluster import processes_of
from tests.e2e.support import node_setup_problem, problems, run_scenario, text_of, tool_parts
from tests.gateway_process import cluster_env, free_port

pytestmark = [pytest.mark.services, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "deploy" / "cluster.py"
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
KILL_BOUND_S = 10.0  # issue 34: the resume's `error`, and a new message answered, within 10 s of the kill
STORE_BOUND_S = 5.0  # issue 34: a JSON 503 within 5 s while PostgreSQL is down
T = TypeVar("T")


# --- the cluster --------------------------------------------------------------------------------


class Cluster:
    """A cluster of deploy/cluster.py on free ports, and what the tests ask of it."""

    def __init__(self) -> None:
        self.port = free_port()
        env = cluster_env(self.port)
        env["CLUSTER_STOP_TIMEOUT_S"] = "10"
        env["ADK_GATEWAY_DETACH_ON_DISCONNECT"] = "true"
        self.env = env
        self.url = f"http://127.0.0.1:{self.port}"
        self.state_dir = ROOT / ".state" / "cluster" / str(self.port)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(CLUSTER), *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def must(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"cluster {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((self.state_dir / "cluster.json").read_text())
        return state

    def service(self, name: str) -> dict[str, Any]:
        services: list[dict[str, Any]] = self.state()["services"]
        [service] = [s for s in services if s["name"] == name]
        return service

    def gateways(self) -> list[dict[str, Any]]:
        return [s for s in self.state()["services"] if s["kind"] == "gateway"]

    def heal(self) -> None:
        """Starts again whatever piece is not running (a test that failed half-way leaves some)."""
        for service in self.state()["services"]:
            if not processes_of(service):
                self.must("start", service["name"])

    def redis(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=int(self.service("redis")["port"]), decode_responses=True)

    def tool_runs(self, chat_id: str, tool: str = "process_payment") -> int:
        """How often `tool` ran in the chat: its own results in the session's events (ADK's refusal
        that asks for a confirmation is a result too, without the tool's `status`)."""
        postgres = self.service("postgres")
        ran = f'@.name == "{tool}" && @.response.status == "completed"'
        query = (f"SELECT count(*) FROM events WHERE session_id = '{chat_id}' "
                 f"AND event_data @? '$.content.parts[*].function_response ? ({ran})'")
        done = subprocess.run([str(Path(postgres["bin_dir"]) / "psql"), "-h", "127.0.0.1", "-p", str(postgres["port"]),
                               "-U", "postgres", "-d", "adk", "-At", "-c", query],
                              capture_output=True, text=True, timeout=30, check=True)
        return int(done.stdout.strip())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    cluster = Cluster()
    try:
        cluster.must("up")
        yield cluster
    finally:
        cluster.run("down")
        shutil.rmtree(cluster.state_dir, ignore_errors=True)


@pytest.fixture
def whole(cluster: Cluster) -> Cluster:
    cluster.heal()
    return cluster


# --- helpers ------------------------------------------------------------------------------------


def eventually(what: str, probe: Callable[[], T | None], *, within_s: float = 30.0, every_s: float = 0.05) -> T:
    """Polls `probe` until it answers something (not None), for at most `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s:g} s")
        time.sleep(every_s)


def get(url: str, timeout: float = 10.0) -> tuple[int, dict[str, str], str]:
    async def fetch() -> tuple[int, dict[str, str], str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
                session.get(url) as response:
            return response.status, dict(response.headers), await response.text()
    return asyncio.run(fetch())


def post(url: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[int, dict[str, str], str]:
    async def send() -> tuple[int, dict[str, str], str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
                session.post(url, json=body) as response:
            return response.status, dict(response.headers), await response.text()
    return asyncio.run(send())


def metric(port: int, name: str) -> float:
    status, _, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


def running_on(cluster: Cluster) -> dict[str, Any] | None:
    """The gateway with a run in progress (one chat runs at a time in these tests)."""
    busy = [g for g in cluster.gateways() if metric(int(g["port"]), "adk_gateway_active_runs") >= 1]
    return busy[0] if len(busy) == 1 else None


def chunks_in_redis(cluster: Cluster, chat_id: str) -> int:
    """How many chunks of the chat's current run are in Redis (what a resume would replay)."""
    client = cluster.redis()
    try:
        keys = [k for k in client.scan_iter(match=f"adk-gateway:stream:{{anonymous:{chat_id}}}:*:chunks")]
        return max((int(cast("int", client.xlen(k))) for k in keys), default=0)
    finally:
        client.close()


def all_ready(cluster: Cluster) -> None:
    """Waits (bounded) until every gateway's /readyz answers 200."""
    for gateway in cluster.gateways():
        url = f"http://127.0.0.1:{gateway['port']}/readyz"

        def ready(url: str = url) -> bool | None:
            return True if get(url)[0] == 200 else None

        eventually(f"{gateway['name']} is ready", ready)


def reading_from_redis(cluster: Cluster) -> bool:
    """Whether some gateway follows a run in Redis (a blocked XREAD: a remote resume)."""
    client = cluster.redis()
    try:
        return any(c.get("cmd") == "xread" for c in cast("list[dict[str, Any]]", client.client_list()))
    finally:
        client.close()


def spec(url: str, chat_id: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "sse7", "baseUrl": url, "chatId": chat_id, "steps": list(steps), "timeoutMs": 60000, **extra}


def new_chat(name: str) -> str:
    return f"fault-{name}-{uuid.uuid4().hex[:10]}"


def chat_body(chat_id: str, text: str) -> dict[str, Any]:
    return {"id": chat_id, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]}


def read_sse(url: str, *, until_s: float) -> tuple[int, list[dict[str, Any]], float]:
    """GETs an SSE resume; its status, its chunks and when (monotonic) the last one came."""
    async def read() -> tuple[int, list[dict[str, Any]], float]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=until_s)) as session, \
                session.get(url) as response:
            chunks = await _sse_chunks(response)
            return response.status, chunks, time.monotonic()
    return asyncio.run(read())


def assistant_text(result: dict[str, Any]) -> str:
    return text_of(result["messages"][-1]) if result["messages"] and result["messages"][-1]["role"] == "assistant" \
        else ""


def nginx_5xx(cluster: Cluster, chat_ids: list[str]) -> list[str]:
    log = (cluster.state_dir / "logs" / "nginx-access.log").read_text(errors="replace")
    return [line for line in log.splitlines()
            if any(chat in line for chat in chat_ids) and re.search(r'" 5\d\d ', line)]


# --- kill -9 ------------------------------------------------------------------------------------


def test_a_gateway_killed_mid_stream_is_noticed_in_seconds(whole: Cluster) -> None:
    cluster = whole
    chat_id, approval_chat = new_chat("kill"), new_chat("kill-approval")
    after = "after the kill"
    # The client: a long answer through nginx, cut by the kill; then a page reloaded with what it
    # had (peer b) resumes it through nginx, and sends the next message once that has ended.
    scenario = spec(cluster.url, chat_id,
                    {"type": "send", "text": "/stream 400 50"},
                    {"type": "waitChunks", "chunks": 20},
                    {"type": "waitIdle"},
                    {"type": "resume", "client": "b"},
                    {"type": "send", "client": "b", "text": f"/echo {after}"},
                    peers={"b": {"messagesFrom": "main"}})
    with ThreadPoolExecutor(max_workers=1) as pool:
        client = pool.submit(run_scenario, scenario)
        owner = eventually("a gateway runs the chat", lambda: running_on(cluster))
        # Past the client's 20 chunks (Redis trails the client by a round trip).
        eventually("the answer is under way", lambda: True if chunks_in_redis(cluster, chat_id) >= 40 else None)
        assert not client.done(), problems(client.result())
        # An approval asked on the gateway about to die, before it dies.
        asked = run_scenario(spec(f"http://127.0.0.1:{owner['port']}", approval_chat,
                                  {"type": "send", "text": PAYMENT}))
        [pending] = tool_parts(asked["messages"][-1], "process_payment")
        assert pending["state"] == "approval-requested", problems(asked)

        os.kill(int(owner["pid"]), signal.SIGKILL)
        killed = time.monotonic()
        # A resume of our own through nginx, to time the end the client sees.
        status, chunks, ended = read_sse(f"{cluster.url}/api/chat/{chat_id}/stream", until_s=30)
        error_s = ended - killed
        # The client's next message, answered by the other gateway: it records the answer before
        # it sends its end, so the record shows when it was answered.
        survivor = next(g for g in cluster.gateways() if g["name"] != owner["name"])
        record = f"http://127.0.0.1:{survivor['port']}/api/chats/{chat_id}"
        answered_s = eventually("the next message is answered", lambda: time.monotonic() - killed
                                if after in get(record)[2] else None, every_s=0.1)
        result = client.result()

    assert status == 200 and chunks[0]["type"] == "start", (status, chunks[:3])
    assert chunks[-1] == {"type": "error", "errorText": LOST_WRITER_TEXT}, chunks[-3:]
    assert error_s <= KILL_BOUND_S, f"the resume ended {error_s:.1f} s after the kill"
    assert answered_s <= KILL_BOUND_S, f"the next message was answered {answered_s:.1f} s after the kill"
    # The client: the cut answer, then b's resume (a replay of what Redis had, then the `error`),
    # then b's next message, answered by the other gateway (no 409 `chat_busy`).
    b = result["peers"]["b"]
    assert result["requests"][0]["kind"] == "post" and not result["requests"][0]["sawDone"], problems(result)
    resume, answer = b["requests"]
    assert resume["kind"] == "get" and resume["httpStatus"] == 200, problems(b)
    assert resume["chunkTypes"][0] == "start" and resume["chunkTypes"][-1] == "error", resume["chunkTypes"]
    assert "abort" not in resume["chunkTypes"]
    assert resume["chunks"][-1]["errorText"] == LOST_WRITER_TEXT
    assert answer["kind"] == "post" and answer["httpStatus"] == 200 and answer["sawDone"], problems(b)
    assert assistant_text(b) == after, problems(b)
    assert b["validationErrors"] == [] and not b["driverErrors"], problems(b)

    # The approval asked before the kill: answered through nginx (the other gateway), the tool runs once.
    answered = run_scenario(spec(cluster.url, approval_chat,
                                 {"type": "approve", "approved": True, "toolName": "process_payment"},
                                 messages=asked["messages"]))
    [part] = tool_parts(answered["messages"][-1], "process_payment")
    assert part["state"] == "output-available" and part["output"]["status"] == "completed", problems(answered)
    assert cluster.tool_runs(approval_chat) == 1

    cluster.must("start", owner["name"])  # whole again
    print(f"\nkill -9: the resume's error {error_s:.2f} s, the next message answered {answered_s:.2f} s after it")


# --- Redis restarted ------------------------------------------------------------------------------


def stream_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(str(c.get("delta", "")) for c in chunks if c.get("type") == "text-delta")


def test_a_redis_restart_mid_stream_stops_nothing(whole: Cluster) -> None:
    cluster = whole
    chat_id = new_chat("redis")
    full = "".join(f"tok{i} " for i in range(200))
    pids = {g["name"]: g["pid"] for g in cluster.gateways()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        client = pool.submit(run_scenario, spec(cluster.url, chat_id, {"type": "send", "text": "/stream 200 50"}))
        owner = eventually("a gateway runs the chat", lambda: running_on(cluster))
        other = next(g for g in cluster.gateways() if g["name"] != owner["name"])
        eventually("the answer is under way", lambda: True if chunks_in_redis(cluster, chat_id) >= 20 else None)
        # A resume on the other gateway, following the run through Redis across the restart.
        follower = pool.submit(read_sse, f"http://127.0.0.1:{other['port']}/api/chat/{chat_id}/stream", until_s=60)
        eventually("the follower reads the run from Redis", lambda: True if reading_from_redis(cluster) else None)

        cluster.must("stop", "redis")
        down_at = time.monotonic()
        # Requests while Redis is away: a resume, a new chat (nothing answers 5xx).
        during = [pool.submit(get, f"{cluster.url}/api/chat/{chat_id}/stream", 30),
                  pool.submit(post, f"{cluster.url}/api/chat", chat_body(new_chat("redis-during"), "/echo during"), 30)]
        time.sleep(max(0.0, 2.0 - (time.monotonic() - down_at)))  # the outage itself (~2 s), not a wait for anything
        cluster.must("start", "redis")
        # A page reloaded after the restart resumes the same answer through nginx.
        resumed = run_scenario(spec(cluster.url, chat_id, {"type": "resume"},
                                    messages=[{"id": "u1", "role": "user",
                                               "parts": [{"type": "text", "text": "/stream 200 50"}]}]))
        result = client.result()
        status, followed, _ = follower.result()
        answers = [future.result() for future in during]

    # The stream went on to its end, every token, with nothing the user did not ask for.
    [sent] = result["requests"]
    assert sent["httpStatus"] == 200 and sent["sawDone"], problems(result)
    assert "abort" not in sent["chunkTypes"] and "error" not in sent["chunkTypes"], sent["chunkTypes"]
    assert sent["chunkTypes"][-1] == "finish" and assistant_text(result) == full, problems(result)
    # The follower on the other gateway too (it retries while Redis is away; the run's mirror
    # writes the run again once Redis is back).
    assert status == 200 and "abort" not in [c["type"] for c in followed]
    assert followed[-1]["type"] == "finish" and stream_text(followed) == full, followed[-3:]
    # The resume after the restart: a replay (the run is in Redis again) or 204, never an error.
    [again] = resumed["requests"]
    assert again["httpStatus"] in (200, 204), problems(resumed)
    if again["httpStatus"] == 200:
        assert again["chunkTypes"][-1] == "finish" and assistant_text(resumed) == full, problems(resumed)
    for answer_status, headers, body in answers:
        assert answer_status in (200, 204, 503), (answer_status, body[:300])
        if answer_status == 503:
            assert json.loads(body)["error"]["code"] == "store_unavailable" and headers.get("Retry-After"), body
    assert nginx_5xx(cluster, [chat_id]) == []

    # The gateways reconnected by themselves: same processes, ready, a new chat answered, and a
    # stop reaches the gateway running a chat through Redis again.
    assert {g["name"]: g["pid"] for g in cluster.gateways()} == pids
    all_ready(cluster)
    fresh = run_scenario(spec(cluster.url, new_chat("redis-after"), {"type": "send", "text": "/echo after redis"}))
    assert assistant_text(fresh) == "after redis", problems(fresh)
    subscribed = cluster.redis()
    try:
        channel = "adk-gateway:stream:stop"
        eventually("both gateways listen for stops", lambda: True if dict(
            cast("list[tuple[str, int]]", subscribed.pubsub_numsub(channel))).get(channel, 0) >= 2 else None)
    finally:
        subscribed.close()
    stopped_chat = new_chat("redis-stop")
    with ThreadPoolExecutor(max_workers=1) as pool:
        stream = pool.submit(lambda: asyncio.run(
            _post_and_read(f"{cluster.url}/api/chat", chat_body(stopped_chat, "/stream 200 50"))))
        runner = eventually("a gateway runs the chat", lambda: running_on(cluster))
        # Stopped once its text shows, as a user does (a stop before the run's task has started
        # is another matter: see the report of issue 34).
        eventually("the answer is under way", lambda: True if chunks_in_redis(cluster, stopped_chat) >= 5 else None)
        elsewhere = next(g for g in cluster.gateways() if g["name"] != runner["name"])
        status, _, body = post(f"http://127.0.0.1:{elsewhere['port']}/api/chat/{stopped_chat}/stop", {})
        assert status == 200 and json.loads(body) == {"stopped": False, "forwarded": True}, body
        chunks = stream.result()
    assert chunks[-1]["type"] == "abort", chunks[-2:]  # the stop the user asked for, from the other gateway
    assert len(stream_text(chunks)) < len("".join(f"tok{i} " for i in range(200)))


async def _post_and_read(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session, \
            session.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        return await _sse_chunks(response)


async def _sse_chunks(response: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """The chunks of an SSE answer, up to `[DONE]` (or the end of the stream)."""
    chunks: list[dict[str, Any]] = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            break
        if line.startswith("data: "):
            chunks.append(json.loads(line[6:]))
    return chunks


# --- PostgreSQL stopped ---------------------------------------------------------------------------


def test_postgres_stopped_and_started_is_a_503_then_nothing(whole: Cluster) -> None:
    cluster = whole
    pids = {g["name"]: g["pid"] for g in cluster.gateways()}
    targets = [cluster.url, *(f"http://127.0.0.1:{g['port']}" for g in cluster.gateways())]
    cluster.must("stop", "postgres")
    try:
        for target in targets:
            for method, path in (("POST", "/api/chat"), ("GET", "/api/chats")):
                began = time.monotonic()
                if method == "POST":
                    status, headers, body = post(f"{target}{path}", chat_body(new_chat("pg-gap"), "/echo hi"))
                else:
                    status, headers, body = get(f"{target}{path}")
                took = time.monotonic() - began
                assert status == 503, (target, path, status, body[:300])
                assert headers["Content-Type"].startswith("application/json"), headers
                assert json.loads(body)["error"]["code"] == "store_unavailable", body
                assert int(headers["Retry-After"]) >= 1
                assert took <= STORE_BOUND_S, f"{method} {target}{path} took {took:.1f} s"
        for gateway in cluster.gateways():
            status, _, body = get(f"http://127.0.0.1:{gateway['port']}/readyz")
            assert status == 503 and json.loads(body)["status"] == "store_unreachable", body
        # The real clients, over SSE and the WebSocket: the answer is an error naming the store.
        gap = {kind: spec(cluster.url, new_chat(f"pg-gap-{kind}"), {"type": "send", "text": "/echo hi"}, kind=kind)
               for kind in ("sse7", "ws")}
        gap["ws"]["headers"] = {"x-ai-sdk-major": "7"}
        with ThreadPoolExecutor(max_workers=2) as pool:
            refused = dict(zip(gap, pool.map(run_scenario, gap.values()), strict=True))
        for kind, result in refused.items():
            assert result["status"] == "error" and "store" in (result["error"] or "").lower(), (kind, problems(result))
            assert len(result["messages"]) == 1, (kind, result["messages"])  # the user's; no answer
    finally:
        cluster.must("start", "postgres")

    all_ready(cluster)
    assert {g["name"]: g["pid"] for g in cluster.gateways()} == pids  # no restart
    for target in targets:
        status, _, body = post(f"{target}/api/chat", chat_body(new_chat("pg-back"), "/echo back"))
        assert status == 200 and '"delta":"back"' in body.replace(" ", ""), body[:500]
    chat_id = new_chat("pg-approval")
    result = run_scenario(spec(cluster.url, chat_id, {"type": "send", "text": PAYMENT},
                               {"type": "approve", "approved": True, "toolName": "process_payment"}))
    [part] = tool_parts(result["messages"][-1], "process_payment")
    assert part["state"] == "output-available", problems(result)
    assert cluster.tool_runs(chat_id) == 1


# --- one approval, two gateways -------------------------------------------------------------------


def test_one_approval_answered_on_both_gateways_at_once_runs_its_tool_once(whole: Cluster) -> None:
    cluster = whole
    one, two = (f"http://127.0.0.1:{g['port']}" for g in cluster.gateways())

    def race(chat_id: str) -> dict[str, Any]:
        # Asked through nginx; then two clients holding the same chat answer it at once, one on
        # each gateway.
        return run_scenario(spec(cluster.url, chat_id,
                                 {"type": "send", "text": PAYMENT}, {"type": "waitIdle"},
                                 {"type": "approve", "client": "b", "approved": True, "toolName": "process_payment"},
                                 {"type": "approve", "client": "c", "approved": True, "toolName": "process_payment"},
                                 peers={"b": {"messagesFrom": "main", "baseUrl": one},
                                        "c": {"messagesFrom": "main", "baseUrl": two}}))

    chats = [new_chat(f"race-{i}") for i in range(3)]
    with ThreadPoolExecutor(max_workers=len(chats)) as pool:
        results = list(pool.map(race, chats))
    for chat_id, result in zip(chats, results, strict=True):
        answers = [result["peers"][name] for name in ("b", "c")]
        ran = [a for a in answers
               if any(p["state"] == "output-available" for p in tool_parts(a["messages"][-1], "process_payment"))]
        assert len(ran) == 1, [problems(a) for a in answers]
        statuses = sorted(a["requests"][0]["httpStatus"] for a in answers)
        assert statuses[0] == 200 and statuses[1] in (200, 403, 409), statuses
        assert cluster.tool_runs(chat_id) == 1, chat_id
