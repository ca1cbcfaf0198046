"""What the gateway knows about tools, shared by the core and the ADK integration (`agents/`).

`agents/` describes each tool with a `ToolKind`; the converters read it to announce a call as
server-run or browser-run. ADK's confirmation protocol is named here by its wire strings, so the
core can recognise it in events without importing ADK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["CONFIRMATION_TOOL", "CREDENTIAL_TOOL", "PLACEHOLDER_ERROR", "ToolInfo", "ToolKind"]

# The function ADK calls to ask for a confirmation (its call carries `originalFunctionCall`).
CONFIRMATION_TOOL: Final = "adk_request_confirmation"
# The function ADK calls to ask the user to sign in for a tool (end-user OAuth2): its call carries
# `functionCallId` (the tool's call) and `authConfig` (the sign-in to do).
CREDENTIAL_TOOL: Final = "adk_request_credential"
# ADK's stand-in response for a call waiting for its confirmation; never shown to a client.
PLACEHOLDER_ERROR: Final = "This tool call requires confirmation, please approve or reject."


@dataclass(frozen=True, slots=True)
class ToolKind:
    """How the gateway treats a tool: where it runs, whether the gateway asks first, and whether
    its result comes from the client later (a long-running tool the browser does not run: the
    app answers it with `addToolOutput`)."""

    browser: bool = False
    long_running: bool = False
    # Only browser tools are asked about by the gateway; server tools ask through ADK.
    needs_approval: bool = False


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as `GET /api/apps` lists it: what a page builds its suggestions from."""

    name: str
    description: str  # the first line of the tool's description ("" when it has none)
    needs_approval: bool  # the user is asked before it runs (ADK's confirmation or a browser tool's)
    browser: bool  # it runs in the browser
    long_running: bool  # its result comes later, from the client
    # The JSON Schema of its arguments, as the model is told them (an object schema; none: no arguments).
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def wire(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "needsApproval": self.needs_approval,
                "runsInBrowser": self.browser, "longRunning": self.long_running, "parameters": dict(self.parameters)}
