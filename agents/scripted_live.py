"""Scripted live (audio) connection for the offline model. Filled in by the live-mode work."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any


class ScriptedLiveConnection:
    @classmethod
    def open(cls, llm_request: Any) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError("live mode is not available yet")
