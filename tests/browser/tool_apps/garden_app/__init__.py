from . import agent  # noqa: F401  (ADK loads the app from its package, as in ADK samples)
