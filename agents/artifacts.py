"""Where the agents' artifacts are kept: ADK's artifact services, from a URI as `adk api_server
--artifact_service_uri` takes it.

`artifact_service_from_uri` builds the store every app of the process shares: `memory://` (the
default) is `BoundedArtifactService`, ADK's in-memory store with a byte budget; a folder path (or
`file:///folder`) is ADK's `FileArtifactService`; every other URI (`gs://bucket`, schemes an
agents folder's services.py registers) goes through ADK's own service factory.

`BoundedArtifactService` keeps what ADK's in-memory store keeps, and counts the bytes of every
version it holds. Past `max_bytes` it drops the artifacts saved longest ago, each with all its
versions, never the one just saved: like the `memory://` session store, a process serving for
weeks holds a bounded amount. A link to a dropped artifact answers 404.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from google.adk.artifacts import BaseArtifactService, FileArtifactService, InMemoryArtifactService
from google.genai import types
from pydantic import PrivateAttr

__all__ = ["DEFAULT_MAX_BYTES", "ArtifactStoreError", "BoundedArtifactService", "artifact_service_from_uri",
           "part_bytes"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class ArtifactStoreError(ValueError):
    """The artifact store's URI names nothing this process can open; the message says why."""


def part_bytes(part: types.Part) -> tuple[bytes, str] | None:
    """An artifact version's bytes and media type (None: it holds neither bytes nor text)."""
    if part.inline_data is not None:
        return part.inline_data.data or b"", part.inline_data.mime_type or "application/octet-stream"
    if part.text is not None:
        return part.text.encode(), "text/plain; charset=utf-8"
    return None


class BoundedArtifactService(InMemoryArtifactService):
    """ADK's in-memory artifact store within a byte budget (see the module docstring)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    _sizes: OrderedDict[str, int] = PrivateAttr(default_factory=OrderedDict)
    _held: int = PrivateAttr(default=0)

    async def save_artifact(self, *, app_name: str, user_id: str, filename: str, artifact: Any,
                            session_id: str | None = None, custom_metadata: dict[str, Any] | None = None) -> int:
        version = await super().save_artifact(app_name=app_name, user_id=user_id, filename=filename,
                                              artifact=artifact, session_id=session_id,
                                              custom_metadata=custom_metadata)
        path = self._artifact_path(app_name, user_id, filename, session_id)
        saved = self.artifacts[path][-1].data
        held = part_bytes(saved)
        size = len(held[0]) if held is not None else 0
        self._sizes[path] = self._sizes.get(path, 0) + size
        self._sizes.move_to_end(path)
        self._held += size
        while self._held > self.max_bytes and len(self._sizes) > 1:
            oldest, freed = self._sizes.popitem(last=False)
            self.artifacts.pop(oldest, None)
            self._held -= freed
        return version

    async def delete_artifact(self, *, app_name: str, user_id: str, filename: str,
                              session_id: str | None = None) -> None:
        await super().delete_artifact(app_name=app_name, user_id=user_id, filename=filename, session_id=session_id)
        path = self._artifact_path(app_name, user_id, filename, session_id)
        self._held -= self._sizes.pop(path, 0)

    @property
    def held_bytes(self) -> int:
        return self._held


def artifact_service_from_uri(
    uri: str, *, max_bytes: int = DEFAULT_MAX_BYTES, agents_dir: Path | None = None
) -> BaseArtifactService:
    """The artifact store a URI names (see the module docstring).

    Raises:
        ArtifactStoreError: a scheme nothing here opens, or a store whose package is missing
            (`gs://` needs google-cloud-storage).
    """
    if uri.startswith("memory://"):
        return BoundedArtifactService(max_bytes=max_bytes)
    if "://" not in uri:
        folder = Path(uri).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return FileArtifactService(root_dir=folder)
    if uri.startswith("file://"):
        folder = Path(urlparse(uri).path)
        folder.mkdir(parents=True, exist_ok=True)
        return FileArtifactService(root_dir=folder)
    from google.adk.cli.utils.service_factory import create_artifact_service_from_options

    try:
        return create_artifact_service_from_options(
            base_dir=agents_dir or Path.cwd(), artifact_service_uri=uri, strict_uri=True, use_local_storage=False
        )
    except ImportError as exc:
        raise ArtifactStoreError(f"the artifact store {uri.split('://', maxsplit=1)[0]}:// needs a package that is not "
                                 f"installed ({exc}); for gs:// install google-cloud-storage") from None
    except ValueError as exc:
        raise ArtifactStoreError(f"unsupported artifact store {uri!r}: {exc}") from None
