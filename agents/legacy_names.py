"""The import names of earlier versions (`agents.scripted`, `agents.tools`), for agents written
against them, served by this package's modules — only where no package of the user's has the name.

Earlier versions installed three top-level packages, `gateway`, `transports` and `agents`, and
told agent authors to `import agents.scripted` (the offline model) and `from agents.tools import
BrowserTool`. Those names now belong to the user: a project's own `agents` package is found
first. This finder sits last on `sys.meta_path`, so it answers only when nothing else on the path
has the name, and then hands out a module that forwards to `adk_gateway.agents.<name>` (the
module itself is never renamed). Each old name logs once which name to use now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any, Final

import structlog

__all__ = ["install_legacy_names"]

log = structlog.get_logger("adk_gateway.agents")

ALIASES: Final = {
    "agents": "adk_gateway.agents",
    "agents.scripted": "adk_gateway.agents.scripted",
    "agents.tools": "adk_gateway.agents.tools",
}


class _Forward(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"The earlier name of {self.target}.")
        target = importlib.import_module(self.target)

        def forward(name: str) -> Any:
            return getattr(target, name)

        module.__getattr__ = forward  # type: ignore[method-assign]
        if spec.name == "agents":
            module.__path__ = []  # a package, so `agents.scripted` can be found below it
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ != "agents":  # (the package comes with each of its modules)
            log.warning("old_import_name", name=module.__name__, use=self.target)


class LegacyNames(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        aliased = ALIASES.get(fullname)
        if aliased is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Forward(aliased), is_package=fullname == "agents")


def install_legacy_names() -> None:
    """Puts the finder last on `sys.meta_path` (once)."""
    if not any(isinstance(finder, LegacyNames) for finder in sys.meta_path):
        sys.meta_path.append(LegacyNames())
