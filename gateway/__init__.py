"""adk-gateway: serve Google ADK agents to Vercel AI SDK chat frontends over SSE and WebSocket."""

from gateway.config import Settings, load_settings

__all__ = ["Settings", "load_settings", "make_app"]


def make_app(*args: object, **kwargs: object) -> object:
    from gateway.app import make_app as _make_app

    return _make_app(*args, **kwargs)  # type: ignore[arg-type]
