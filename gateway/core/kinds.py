"""What the gateway knows about tools, shared by the core and the ADK integration (`agents/`).

`agents/` describes each tool with a `ToolKind`; the converters read it to announce a call as
server-run or browser-run. ADK's confirmation protocol is named here by its wire strings, so the
core can recognise it in events without importing ADK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["CONFIRMATION_TOOL", "PLACEHOLDER_ERROR", "ToolKind"]

# The function ADK calls to ask for a confirmation (its call carries `originalFunctionCall`).
CONFIRMATION_TOOL: Final = "adk_request_confirmation"
# ADK's stand-in response for a call waiting for its confirmation; never shown to a client.
PLACEHOLDER_ERROR: Final = "This tool call requires confirmation, please approve or reject."


@dataclass(frozen=True, slots=True)
class ToolKind:
    """How the gateway treats a tool: where it runs and whether the gateway asks first."""

    browser: bool = False
    # Only browser tools are asked about by the gateway; server tools ask through ADK.
    needs_approval: bool = False
