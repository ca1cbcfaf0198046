"""Fixtures for the end-to-end tests: a real gateway process on a free port.

Set ADK_GATEWAY_E2E_URL to run the tests against a gateway that is already running
instead of starting one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.gateway_process import ROOT, external_or_running_gateway, running_gateway
from tests.oauth_server import OAuthServer, running_oauth_server

from .support import node_setup_problem


@pytest.fixture(scope="session")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)

    with external_or_running_gateway(tmp_path_factory, "gateway") as url:
        yield url


@pytest.fixture(scope="session")
def oauth() -> Iterator[OAuthServer]:
    """A local OAuth2 server for the tool sign-ins of tests/adk_apps."""
    with running_oauth_server() as server:
        yield server


@pytest.fixture(scope="session")
def apps_url(tmp_path_factory: pytest.TempPathFactory, oauth: OAuthServer) -> Iterator[str]:
    """A gateway serving tests/adk_apps (ADK features written as ADK's samples write them), the
    cart shared with the client (`--client-state cart`)."""
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    env = {**os.environ, "ADK_TEST_OAUTH_URL": oauth.url}
    log = tmp_path_factory.mktemp("adk-apps") / "gateway.log"
    with running_gateway("--agent", str(ROOT / "tests" / "adk_apps"), "--client-state", "cart", log=log,
                         env=env) as url:
        yield url
