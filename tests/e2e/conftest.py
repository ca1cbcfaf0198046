"""Fixtures for the end-to-end tests: a real gateway process on a free port.

Set ADK_GATEWAY_E2E_URL to run the tests against a gateway that is already running
instead of starting one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway_process import external_or_running_gateway

from .support import node_setup_problem


@pytest.fixture(scope="session")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)

    with external_or_running_gateway(tmp_path_factory, "gateway") as url:
        yield url
