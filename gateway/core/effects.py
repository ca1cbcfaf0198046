"""What a `MessageConverter` asks its caller to do: the effects of converting an event.

The converter writes every chunk itself; what needs more than the core has — the approval book of
the chat or the live session, the artifact store and its signed links, a sign-in's state — comes
back as one of these, for the caller to act on (and to hand the result back to the converter,
the one writer of the message's chunks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ArtifactSaved", "CallAnnounced", "Effect", "NeedsApproval", "SignInRequested"]


@dataclass(frozen=True, slots=True)
class CallAnnounced:
    """A tool call was shown. `client`: the client answers it (a browser tool, or a long-running
    tool whose result comes later); the caller's approval book decides what follows."""

    tool_call_id: str
    tool_name: str
    input: Any
    client: bool


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    """ADK asks to confirm a server tool's call (`confirmation_id`: its confirmation call)."""

    tool_call_id: str
    tool_name: str
    confirmation_id: str | None


@dataclass(frozen=True, slots=True)
class SignInRequested:
    """ADK asks the user to sign in for a tool: `tool_call_id` is ADK's `adk_request_credential`
    call, `for_call_id` the tool's own call, `auth_config` what ADK asks for (the caller shows it
    with `MessageConverter.sign_in`)."""

    tool_call_id: str
    for_call_id: str
    auth_config: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ArtifactSaved:
    """A tool saved an artifact version (the caller shows it with `MessageConverter.file`)."""

    name: str
    version: int


Effect = CallAnnounced | NeedsApproval | SignInRequested | ArtifactSaved
