"""Settings for the whole test run.

Hypothesis explores new examples on every local run (and keeps the failing ones in .hypothesis/).
With CI set, as CI runs `make test`, it draws its examples from a fixed seed instead: a
submission lands or not on its own merit, not on a draw; the properties are the same.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
