"""Loading a user's own agent: module:attribute, an ADK agents folder, and clear errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent

from adk_gateway.agents.adk import AgentLoadError, load_agent

AGENT_SOURCE = textwrap.dedent(
    """
    from google.adk.agents import LlmAgent
    import adk_gateway.agents.scripted  # registers the offline model

    root_agent = LlmAgent(name="{name}", model="scripted")
    """
)


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    for name in ("beta_app", "alpha_app"):
        package = tmp_path / "agents_root" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("from . import agent\n")
        (package / "agent.py").write_text(AGENT_SOURCE.format(name=name))
    return tmp_path / "agents_root"


def test_demo_agent_has_the_four_tools() -> None:
    agent = load_agent("demo", "scripted")
    assert isinstance(agent, LlmAgent)
    names = {getattr(tool, "name", None) for tool in agent.tools}
    assert names == {"get_weather", "process_payment", "change_bgm", "get_location"}


def test_module_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agent_mod.py").write_text(AGENT_SOURCE.format(name="mine"))
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = load_agent("my_agent_mod:root_agent", "scripted")
    assert isinstance(agent, LlmAgent)
    assert agent.name == "mine"
    sys.modules.pop("my_agent_mod", None)


def test_agents_folder_takes_the_first_app(agents_dir: Path) -> None:
    agent = load_agent(str(agents_dir), "scripted")
    assert isinstance(agent, LlmAgent)
    assert agent.name == "alpha_app"


def test_agents_folder_with_app_name(agents_dir: Path) -> None:
    agent = load_agent(f"{agents_dir}::beta_app", "scripted")
    assert isinstance(agent, LlmAgent)
    assert agent.name == "beta_app"


def test_single_app_folder(agents_dir: Path) -> None:
    agent = load_agent(str(agents_dir / "beta_app"), "scripted")
    assert isinstance(agent, LlmAgent)
    assert agent.name == "beta_app"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:root_agent", "cannot import"),
        ("json:dumps", "not an ADK agent"),
        ("nonsense", "neither"),
    ],
)
def test_bad_specs_say_why(spec: str, message: str) -> None:
    with pytest.raises(AgentLoadError, match=message):
        load_agent(spec, "scripted")
