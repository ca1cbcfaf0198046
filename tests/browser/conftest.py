"""Fixtures for the browser tests: a real gateway process on a free port, serving web/dist.

Set ADK_GATEWAY_E2E_URL to run against a gateway that is already running instead of starting one
(as tests/e2e does). The gateway process comes from tests/gateway_process.py, which needs none of
tests/e2e's Node packages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway_process import external_or_running_gateway


@pytest.fixture(scope="session")
def browser_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with external_or_running_gateway(tmp_path_factory, "browser-gateway") as url:
        yield url
