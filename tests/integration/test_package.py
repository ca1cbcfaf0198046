"""The package as a user installs it: a wheel built from the checkout, installed in a fresh
virtualenv outside it, serves the built chat page at `/` and answers `/api/chat`; in a project of
the user's own with packages named `agents` and `gateway` on the path, it serves the user's agent.

The wheel is built as pip builds it (an isolated build with the project's own backend, which puts
web/dist in the package). The fresh virtualenv borrows the already installed dependencies through
a path entry (so the test needs no download of ADK), but not the checkout: its editable install is
a `.pth` hook of the project's virtualenv, which a plain path entry does not run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from tests.gateway_process import ROOT, start_gateway_process, stop_process


def site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "web" / "dist" / "index.html").is_file():
        pytest.fail("web/dist is not built: `make test` builds it first")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)],
                   check=True, timeout=300)
    [built] = out.glob("adk_gateway-*.whl")
    return built


def test_the_wheel_carries_the_page_and_every_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "adk_gateway/page/index.html" in names
    assert any(re.fullmatch(r"adk_gateway/page/assets/index-[\w-]+\.js", name) for name in names)
    assert not any(name.endswith(".map") for name in names)
    for module in ("adk_gateway/core/approval/book.py", "adk_gateway/services/chat.py",
                   "adk_gateway/loadtest/cli.py", "adk_gateway/transports/sse.py", "adk_gateway/agents/demo.py"):
        assert module in names
    # One top-level import package: nothing a user's own `gateway` or `agents` could shadow.
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"adk_gateway"}, tops


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed; its folder."""
    env_dir = tmp_path_factory.mktemp("fresh")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    # The dependencies, from the project's virtualenv; not the checkout.
    (site_packages(env_dir) / "dependencies.pth").write_text(str(site_packages(Path(sys.prefix))) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    return env_dir


def test_an_installed_wheel_serves_the_page_and_chats(installed: Path, tmp_path: Path) -> None:
    env_dir = installed
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import adk_gateway; print(adk_gateway.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(site_packages(env_dir))), where

    gateway = start_gateway_process(log=tmp_path / "gateway.log", command=[str(env_dir / "bin" / "adk-gateway")],
                                    cwd=tmp_path)
    try:
        with urllib.request.urlopen(f"{gateway.url}/", timeout=10) as response:
            page = response.read().decode()
        [script] = re.findall(r'<script type="module"[^>]* src="(/static/assets/index-[\w-]+\.js)"', page)
        with urllib.request.urlopen(f"{gateway.url}{script}", timeout=10) as response:
            assert response.status == 200
            assert len(response.read()) > 10_000

        body = json.dumps({"id": "chat-wheel", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "/echo from the wheel"}]}]}).encode()
        request = urllib.request.Request(f"{gateway.url}/api/chat", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            stream = response.read().decode()
        chunks = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
        assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "from the wheel"
        assert chunks[-1]["type"] == "finish"
    finally:
        stop_process(gateway.proc)


USER_AGENT = """\
from google.adk.agents import LlmAgent

from gateway import GREETING  # the user's own `gateway` package, on PYTHONPATH


def get_forecast(city: str) -> dict:
    \"\"\"Tells the forecast of a city.

    Args:
        city: The city.
    \"\"\"
    return {"city": city, "forecast": "sunny", "greeting": GREETING}


root_agent = LlmAgent(name="weather", model="scripted", instruction="You tell the weather.", tools=[get_forecast])
"""


def test_a_project_with_its_own_agents_and_gateway_packages_is_served(installed: Path, tmp_path: Path) -> None:
    """The project holds packages named `agents` and `gateway` (usual names in ADK projects), on
    PYTHONPATH as the README says for one's own modules: the gateway's own names cannot clash."""
    project = tmp_path / "project"
    (project / "gateway").mkdir(parents=True)
    (project / "gateway" / "__init__.py").write_text('GREETING = "from the user\'s gateway package"\n')
    weather = project / "agents" / "weather"
    weather.mkdir(parents=True)
    (project / "agents" / "__init__.py").write_text("")
    (weather / "__init__.py").write_text("from . import agent\n")
    (weather / "agent.py").write_text(USER_AGENT)
    env = {"PATH": f"{installed / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(project)}
    gateway = start_gateway_process("--agent", "./agents/weather", log=tmp_path / "gateway.log", env=env,
                                    command=[str(installed / "bin" / "adk-gateway")], cwd=project)
    try:
        body = json.dumps({"id": "chat-project", "messages": [{"id": "u1", "role": "user", "parts": [
            {"type": "text", "text": '/tool get_forecast {"city": "Oslo"}'}]}]}).encode()
        request = urllib.request.Request(f"{gateway.url}/api/chat", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            stream = response.read().decode()
    finally:
        stop_process(gateway.proc)
    chunks = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    [output] = [c["output"] for c in chunks if c["type"] == "tool-output-available"]
    assert output == {"city": "Oslo", "forecast": "sunny", "greeting": "from the user's gateway package"}
    assert chunks[-1]["type"] == "finish"
