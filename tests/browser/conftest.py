"""Fixtures for the browser tests: one gateway process for the chat page, run with
--detach-on-disconnect (a reload resumes the answer that is still running).

Set ADK_GATEWAY_E2E_URL to run against a gateway that is already running instead of starting one
(as tests/e2e does); it must run with --detach-on-disconnect and without auth. The gateway process
comes from tests/gateway_process.py, which needs none of tests/e2e's Node packages.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.gateway_process import EXTERNAL_URL_ENV, running_gateway


@pytest.fixture(scope="session")
def browser_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(EXTERNAL_URL_ENV)
    if external:
        yield external.rstrip("/")
        return
    log = tmp_path_factory.mktemp("browser-gateway") / "gateway.log"
    with running_gateway("--detach-on-disconnect", log=log, name="browser gateway") as url:
        yield url
