"""The import contract (pyproject.toml, `[tool.importlinter]`): the layers hold in the tree, and a
wrong arrow is caught. The second test copies the packages, adds one import that breaks a layer
and one that breaks the pure core, and expects `lint-imports` to name both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("gateway", "transports", "agents")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # The checked tree comes first on the path, ahead of the editable install of the checkout.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.fixture
def copied_tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_the_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_the_copy_is_what_gets_checked(copied_tree: Path) -> None:
    result = lint_imports(copied_tree)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_import_breaks_it(copied_tree: Path) -> None:
    # The core reaching up into a service, and an agent module reaching into a transport.
    approval = copied_tree / "gateway" / "core" / "approval" / "book.py"
    approval.write_text(approval.read_text() + "\nfrom gateway.services import registry  # noqa\n")
    tools = copied_tree / "agents" / "tools.py"
    tools.write_text(tools.read_text() + "\nimport transports.sse  # noqa\n")

    result = lint_imports(copied_tree)

    assert result.returncode != 0
    assert "app > transports > services > agents > core BROKEN" in result.stdout
    assert "gateway.core.approval.book -> gateway.services.registry" in result.stdout
    assert "agents.tools -> transports.sse" in result.stdout
