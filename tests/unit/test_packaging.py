"""pyproject.toml lists every package the wheel must carry: each folder of gateway/, transports/
and agents/ that holds an `__init__.py`, under its import name (`adk_gateway...`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_under_its_import_name() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    assert mapping == {"adk_gateway": "gateway", "adk_gateway.transports": "transports",
                       "adk_gateway.agents": "agents"}
    found = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts or "page" in init.relative_to(ROOT / folder).parts:
                continue
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert set(setuptools["packages"]) == found
