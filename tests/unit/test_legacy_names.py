"""`agents.scripted` and `agents.tools`, the import names of earlier versions, still work for an
agent written against them — unless the user's own `agents` package is on the path, which wins.
Each case runs in a fresh interpreter (the names are process-wide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

INSTALL = "from adk_gateway.agents.legacy_names import install_legacy_names; install_legacy_names(); "


def run(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", INSTALL + code], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # (after the log lines naming the new names)


def test_the_old_names_reach_the_packages_modules(tmp_path: Path) -> None:
    out = run("import agents.scripted, agents.tools, adk_gateway.agents.tools as new; "
              "from google.adk.models.registry import LLMRegistry; "
              "print(agents.tools.BrowserTool is new.BrowserTool, LLMRegistry.resolve('scripted').__name__)",
              tmp_path)
    assert out == "True ScriptedLlm"


def test_a_users_own_agents_package_comes_first(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("OWNER = 'the user'\n")
    assert run("import agents; print(agents.OWNER)", tmp_path) == "the user"
