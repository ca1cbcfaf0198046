"""A checkout anywhere (issue 34): the local cluster from a folder only its owner may enter.

As root, PostgreSQL runs as `postgres` and nginx's workers as `nobody`; neither may enter a
checkout under a folder of mode 0700 (`mktemp -d`, root's home). deploy/cluster.py then puts
their files (the database and its log, nginx's temporary folders) in a folder of the cluster's
own under /var/tmp (CLUSTER_RUNTIME_DIR), owned by them and recorded in cluster.json; `down`
deletes it. A copy of the code (deploy/ and the packages; the gateways import the copy, as they
run with the copy as their working folder) in such a folder starts, serves a chat whose body
nginx's workers buffer to disk, and stops without leaving anything behind. When even
CLUSTER_RUNTIME_DIR cannot hold that folder, `up` says so in one line and starts nothing.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.cluster import processes_of
from tests.gateway_process import free_port

pytestmark = [pytest.mark.services, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def closed_checkout() -> Iterator[Path]:
    """A copy of what the cluster runs, in a folder of mode 0700."""
    outer = Path(tempfile.mkdtemp(prefix="adkgw-closed-"))
    assert outer.stat().st_mode & 0o777 == 0o700
    checkout = outer / "adk-gateway"
    for part in ("deploy", "gateway", "agents", "transports"):
        shutil.copytree(ROOT / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    try:
        yield checkout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def cluster_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADK_GATEWAY_", "CLUSTER_"))}
    env.pop("GOOGLE_API_KEY", None)
    env.update({"CLUSTER_PORT": str(free_port()), "CLUSTER_POSTGRES_PORT": str(free_port()),
                "CLUSTER_REDIS_PORT": str(free_port()), "CLUSTER_GATEWAY_PORTS": f"{free_port()},{free_port()}",
                "CLUSTER_STOP_TIMEOUT_S": "10", **extra})
    return env


def cluster(checkout: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(checkout / "deploy" / "cluster.py"), command], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=150, check=False)


def post_chat(url: str, chat_id: str, text: str) -> tuple[int, str]:
    body = {"id": chat_id, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]}
    request = urllib.request.Request(f"{url}/api/chat", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with NO_PROXY.open(request, timeout=30) as response:
        return int(response.status), response.read().decode()


def owner_of(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


def test_the_cluster_starts_from_a_folder_only_its_owner_may_enter(closed_checkout: Path) -> None:
    env = cluster_env()
    state_dir = closed_checkout / ".state" / "cluster" / env["CLUSTER_PORT"]
    up = cluster(closed_checkout, env, "up")
    state: dict[str, Any] = {}
    try:
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
        state = json.loads((state_dir / "cluster.json").read_text())
        services = {s["name"]: s for s in state["services"]}
        data = Path(services["postgres"]["data"])
        if AS_ROOT:
            runtime = Path(state["runtime"])
            assert runtime.parent == Path("/var/tmp") and runtime.name.startswith("adk-gateway-cluster-"), runtime
            # One line says why the files are not in the checkout, and where they are.
            assert f"cannot enter {state_dir}: its files go to {runtime}" in up.stdout, up.stdout
            assert data.is_relative_to(runtime) and owner_of(data.parent) == "postgres", data
            nginx_temp = runtime / "nginx"
            assert owner_of(nginx_temp) == "nobody"
            conf = (state_dir / "nginx" / "nginx.conf").read_text()
            assert f'client_body_temp_path "{nginx_temp}/client_body"' in conf, conf
            assert (state_dir / "logs" / "postgres.log").resolve() == Path(services["postgres"]["log"])
        else:
            assert "runtime" not in state and data.is_relative_to(state_dir)

        # A chat through nginx whose body (a 64 KiB message) its worker buffers in its temp folder,
        # answered by a gateway on PostgreSQL.
        long_text = "x" * 65536
        status, body = post_chat(state["url"], "anywhere-1", f"/echo {long_text}")
        assert status == 200 and body.rstrip().endswith("data: [DONE]") and long_text in body, body[-300:]
        if AS_ROOT:
            assert (nginx_temp / "client_body").is_dir()
    finally:
        down = cluster(closed_checkout, env, "down")
    assert down.returncode == 0, f"{down.stdout}\n{down.stderr}"
    assert [s["name"] for s in state.get("services", []) if processes_of(s)] == []
    if AS_ROOT:
        assert not Path(state["runtime"]).exists(), "down leaves the runtime folder behind"
        assert "deleted" in down.stdout, down.stdout


@pytest.mark.skipif(not AS_ROOT, reason="only root runs pieces of the cluster as other users")
def test_a_cluster_that_cannot_place_its_files_says_why_in_one_line(closed_checkout: Path) -> None:
    nowhere = closed_checkout.parent / "no-such-folder"
    env = cluster_env(CLUSTER_RUNTIME_DIR=str(nowhere))
    state_dir = closed_checkout / ".state" / "cluster" / env["CLUSTER_PORT"]
    up = cluster(closed_checkout, env, "up")
    try:
        assert up.returncode == 1, up.stdout
        [line] = up.stderr.strip().splitlines()
        assert line.startswith("cluster up: PostgreSQL runs as `postgres`, which cannot enter"), line
        assert str(nowhere) in line and "set CLUSTER_RUNTIME_DIR" in line, line
        assert not (state_dir / "cluster.json").exists()
        assert not nowhere.exists()
    finally:
        cluster(closed_checkout, env, "down")
