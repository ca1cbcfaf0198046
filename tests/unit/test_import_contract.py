"""The import contract (pyproject.toml, `[tool.importlinter]`): the layers hold in the tree, and a
wrong arrow is caught. import-linter reads the package as it installs (`adk_gateway`, with
`transports` and `agents` inside it): the checkout's is laid out by deploy/packaging/import_tree.py;
the other tests copy the folders into that layout, add one import that breaks a layer and one
that breaks the pure core, and expect `lint-imports` to name both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
sys.path.insert(0, str(ROOT / "deploy" / "packaging"))
import import_tree  # noqa: E402


def lint_imports(root: Path, tree: Path) -> subprocess.CompletedProcess[str]:
    # The laid-out package comes first on the path, ahead of the editable install of the checkout.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.fixture
def copied_tree(tmp_path: Path) -> Path:
    """The package copied as it installs: gateway/ as adk_gateway, transports and agents in it."""
    ignore = shutil.ignore_patterns("__pycache__", "page")
    shutil.copytree(ROOT / "gateway", tmp_path / "adk_gateway", ignore=ignore)
    for name in ("transports", "agents"):
        shutil.copytree(ROOT / name, tmp_path / "adk_gateway" / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_the_contract() -> None:
    result = lint_imports(ROOT, import_tree.lay_out())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_the_copy_is_what_gets_checked(copied_tree: Path) -> None:
    result = lint_imports(copied_tree, copied_tree)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_import_breaks_it(copied_tree: Path) -> None:
    # The core reaching up into a service, and an agent module reaching into a transport.
    approval = copied_tree / "adk_gateway" / "core" / "approval" / "book.py"
    approval.write_text(approval.read_text() + "\nfrom adk_gateway.services import registry  # noqa\n")
    tools = copied_tree / "adk_gateway" / "agents" / "tools.py"
    tools.write_text(tools.read_text() + "\nimport adk_gateway.transports.sse  # noqa\n")

    result = lint_imports(copied_tree, copied_tree)

    assert result.returncode != 0
    assert "app > transports > services > agents > core BROKEN" in result.stdout
    assert "adk_gateway.core.approval.book -> adk_gateway.services.registry" in result.stdout
    assert "adk_gateway.agents.tools -> adk_gateway.transports.sse" in result.stdout
