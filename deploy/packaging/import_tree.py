"""Lays the package out as it installs, for the tools that read source files rather than import
them: build/import-tree/adk_gateway holds a link to every entry of gateway/, and `transports` and
`agents` links to those folders (pyproject.toml's package-dir mapping, which an editable install
applies when importing, but mypy and import-linter do not follow).

    python deploy/packaging/import_tree.py     # `make` runs it; idempotent, cheap

mypy finds it through `mypy_path` (pyproject.toml); `lint-imports` with it on PYTHONPATH (the
Makefile and tests/unit/test_import_contract.py set that).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "import-tree"
PACKAGE = TREE / "adk_gateway"
MAPPED = {"transports": ROOT / "transports", "agents": ROOT / "agents"}
SKIPPED = {"__pycache__", "page"}  # (page: the built chat page the wheel carries; no Python)


def lay_out() -> Path:
    """(Re)creates the tree; returns the folder to put on the path."""
    if PACKAGE.exists():
        shutil.rmtree(PACKAGE)
    PACKAGE.mkdir(parents=True)
    for entry in sorted((ROOT / "gateway").iterdir()):
        if entry.name not in SKIPPED and entry.name not in MAPPED:
            (PACKAGE / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        (PACKAGE / name).symlink_to(folder)
    return TREE


if __name__ == "__main__":
    tree = lay_out()
    if "-q" not in sys.argv:
        print(tree)
