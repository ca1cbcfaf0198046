"""`make cluster-up`, the real AI SDK clients through its nginx, `make cluster-down`.

The cluster (deploy/cluster.py) runs on ports of its own (CLUSTER_PORT and the others set to free
ports), so a cluster someone keeps on 8088 is left alone; its state folder is
.state/cluster/<CLUSTER_PORT>/ and is removed afterwards. Through nginx's round robin, an
approval's answer or a resume may reach another gateway than the one that started the run; that
works because both gateways share PostgreSQL (pending approvals live in the ADK session) and Redis
(resumable streams). A last test starts a cluster whose gateways cannot start: `up` must say why
and leave nothing running.

`make` runs with `-o` for the venv stamp, the web build and system-deps: `make test` has just made
them, and a test must not reinstall the virtualenv or run apt-get.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from deploy.cluster import processes_of
from tests.e2e.support import (
    assert_clean,
    node_setup_problem,
    problems,
    run_scenario,
    single_turn,
    text_of,
    tool_parts,
)
from tests.gateway_process import cluster_env, free_port

pytestmark = [pytest.mark.services, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
STREAM = "/stream 40 50"  # 40 deltas, 50 ms apart: about 2 s
FULL_TEXT = "".join(f"tok{i} " for i in range(40))
KINDS = ["sse6", "ws"]
PREREQUISITES = [".venv/.installed", "web/dist/index.html", "system-deps"]
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def make(target: str, env: dict[str, str], timeout: float = 150) -> subprocess.CompletedProcess[str]:
    skip = [arg for prerequisite in PREREQUISITES for arg in ("-o", prerequisite)]
    return subprocess.run(["make", "--no-print-directory", *skip, target], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def live(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an exited process nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    """A cluster started with `make cluster-up`; yields its env, URL, state and the output of `up`."""
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    port = free_port()
    env = cluster_env(port)
    state = ROOT / ".state" / "cluster" / str(port)
    try:
        started = make("cluster-up", env)
        assert started.returncode == 0, f"make cluster-up failed:\n{started.stdout}\n{started.stderr}"
        yield {"env": env, "url": started.stdout.strip().splitlines()[-1], "state": state, "port": port,
               "ports": [int(env[name]) for name in ("CLUSTER_PORT", "CLUSTER_POSTGRES_PORT", "CLUSTER_REDIS_PORT")]
               + [int(gateway) for gateway in env["CLUSTER_GATEWAY_PORTS"].split(",")], "up": started.stdout}
    finally:
        make("cluster-down", env)
        shutil.rmtree(state, ignore_errors=True)


def spec(url: str, kind: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    scenario: dict[str, Any] = {"kind": kind, "baseUrl": url, "chatId": f"cluster-{kind}-{uuid.uuid4().hex[:10]}",
                                "steps": list(steps), **extra}
    if kind == "ws":  # an ai 7 app announces itself
        scenario["headers"] = {"x-ai-sdk-major": "7"}
    return scenario


def metric_total(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


def test_cluster_serves_approvals_and_resumes_through_nginx(cluster: dict[str, Any]) -> None:
    url = cluster["url"]
    assert url == f"http://127.0.0.1:{cluster['port']}", cluster["up"]
    for name in ("postgres", "redis", "gateway-1", "gateway-2", "nginx"):
        assert re.search(rf"^\s+{name}\s+127\.0\.0\.1:\d+\s+pid \d+\s+ready", cluster["up"], re.M), cluster["up"]

    status = make("cluster-status", cluster["env"])
    assert status.returncode == 0, status.stdout + status.stderr
    assert len(re.findall(r"running\s+answers", status.stdout)) == 5, status.stdout

    scenarios: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        scenarios[f"approval-{kind}"] = spec(url, kind, {"type": "send", "text": PAYMENT},
                                             {"type": "approve", "approved": True, "toolName": "process_payment"})
        scenarios[f"resume-{kind}"] = spec(url, kind, {"type": "send", "text": STREAM},
                                           {"type": "waitChunks", "chunks": 5}, {"type": "resume", "client": "b"},
                                           peers={"b": {"messagesFrom": "main"}})
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        futures = {key: pool.submit(run_scenario, scenario) for key, scenario in scenarios.items()}
        results = {key: future.result() for key, future in futures.items()}

    for kind in KINDS:
        approval = results[f"approval-{kind}"]
        answer = single_turn(approval)
        [part] = tool_parts(answer, "process_payment")
        assert part["state"] == "output-available", problems(approval)
        assert part["output"]["recipient"] == "bob" and part["output"]["status"] == "completed"
        assert "process_payment -> " in text_of(answer), problems(approval)

        resumed = results[f"resume-{kind}"]
        assert text_of(single_turn(resumed)) == FULL_TEXT
        b = resumed["peers"]["b"]
        assert_clean(b)
        [request] = b["requests"]
        if request["kind"] == "get":
            assert request["httpStatus"] == 200 and request["sawDone"], request
        else:
            assert request["kind"] == "ws-resume" and request["end"] == "end", request
        assert text_of(b["messages"][-1]) == FULL_TEXT, problems(b)

    # Both gateways took part (nginx's round robin), each on the shared stores.
    state = json.loads((cluster["state"] / "cluster.json").read_text())
    gateways = [s for s in state["services"] if s["kind"] == "gateway"]
    assert len(gateways) == 2
    for gateway in gateways:
        with NO_PROXY.open(f"http://127.0.0.1:{gateway['port']}/metrics", timeout=5) as response:
            served = metric_total(response.read().decode(), "adk_gateway_requests_total")
        assert served > 0, f"{gateway['name']} served no chat request"


def test_cluster_down_leaves_no_process(cluster: dict[str, Any]) -> None:
    state = json.loads((cluster["state"] / "cluster.json").read_text())
    pids = {pid for service in state["services"] for pid in processes_of(service)}
    # nginx's workers and PostgreSQL's backends count too.
    assert len(pids) > len(state["services"]), pids
    assert all(live(pid) for pid in pids)

    first = make("cluster-down", cluster["env"])
    assert first.returncode == 0, first.stdout + first.stderr
    assert [pid for pid in pids if live(pid)] == [], first.stdout
    assert [port for port in cluster["ports"] if listening(port)] == []
    assert not (cluster["state"] / "cluster.json").exists()

    again = make("cluster-down", cluster["env"])  # safe to run twice
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no cluster" in again.stdout

    status = make("cluster-status", cluster["env"])
    assert status.returncode != 0 and "no cluster" in status.stdout, status.stdout


def test_cluster_up_that_fails_says_why_and_leaves_nothing() -> None:
    """A gateway that cannot start: `up` exits 1 with the end of its log and stops what it started."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADK_GATEWAY_", "CLUSTER_"))}
    env.update({"CLUSTER_PORT": str(port), "CLUSTER_POSTGRES_PORT": str(free_port()),
                "CLUSTER_REDIS_PORT": str(free_port()), "CLUSTER_GATEWAY_PORTS": f"{free_port()},{free_port()}",
                "ADK_GATEWAY_AUTH": "bogus"})
    state = ROOT / ".state" / "cluster" / str(port)
    try:
        failed = make("cluster-up", env)
        assert failed.returncode != 0, failed.stdout
        assert "gateway-1 exited at start" in failed.stderr, failed.stderr
        assert "ADK_GATEWAY_AUTH" in failed.stderr  # the gateway's own line, from its log
        assert not (state / "cluster.json").exists()
        leftovers = [line for line in subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True,
                                                     check=True).stdout.splitlines()
                     if str(state) in line and not line.startswith("Z")]
        assert leftovers == []
        ports = [int(env[k]) for k in ("CLUSTER_PORT", "CLUSTER_POSTGRES_PORT", "CLUSTER_REDIS_PORT")]
        ports += [int(p) for p in env["CLUSTER_GATEWAY_PORTS"].split(",")]
        assert [p for p in ports if listening(p)] == []
    finally:
        make("cluster-down", env)
        shutil.rmtree(state, ignore_errors=True)
