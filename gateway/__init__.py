"""adk-gateway: serve Google ADK agents to Vercel AI SDK chat frontends over SSE and WebSocket.

The names a user imports, stable across versions:

    from adk_gateway import BrowserTool      # a tool that runs in the browser (agents/tools.py)
    from adk_gateway import ScriptedLlm      # the offline `scripted` model (importing registers it)
    from adk_gateway import make_app, Settings, load_settings   # the aiohttp app, to embed

Everything else is the gateway's own and may change. The command is `adk-gateway` (or
`python -m adk_gateway`). The names are imported on first use, so `import adk_gateway` stays cheap
and importing one module of the package does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_gateway.agents.scripted import ScriptedLlm
    from adk_gateway.agents.tools import BrowserTool
    from adk_gateway.app import make_app
    from adk_gateway.config import Settings, load_settings

__all__ = ["BrowserTool", "ScriptedLlm", "Settings", "load_settings", "make_app"]

_WHERE = {
    "BrowserTool": "adk_gateway.agents.tools",
    "ScriptedLlm": "adk_gateway.agents.scripted",
    "Settings": "adk_gateway.config",
    "load_settings": "adk_gateway.config",
    "make_app": "adk_gateway.app",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'adk_gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
