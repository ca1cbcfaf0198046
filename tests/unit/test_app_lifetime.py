"""The app's shutdown and cleanup run every step, also after one has failed, and then raise every
failure together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from structlog.testing import capture_logs

from adk_gateway.app import make_app, run_steps
from adk_gateway.config import Settings
from adk_gateway.keys import AUTH, HOST, REGISTRY, SERVICE


async def test_run_steps_runs_every_step_and_returns_each_failure() -> None:
    ran: list[str] = []

    def step(name: str, fails: bool = False) -> tuple[str, Callable[[], Awaitable[None]]]:
        async def run() -> None:
            ran.append(name)
            if fails:
                raise RuntimeError(name)

        return name, run

    with capture_logs() as logs:
        errors = await run_steps(step("a"), step("b", fails=True), step("c"), step("d", fails=True))
    assert ran == ["a", "b", "c", "d"]
    assert [str(error) for error in errors] == ["b", "d"]
    assert [(entry["event"], entry["step"]) for entry in logs] == [("step_failed", "b"), ("step_failed", "d")]


async def test_cleanup_runs_every_step_and_raises_the_drains_and_its_own_failures() -> None:
    app = make_app(Settings(model="scripted"))
    app.freeze()  # as aiohttp's runner does, without a socket
    await app.startup()
    closed: list[str] = []

    async def fails(name: str) -> None:
        closed.append(name)
        raise RuntimeError(name)

    def fails_now(name: str) -> None:
        closed.append(name)
        raise RuntimeError(name)

    async def host_closed() -> None:
        closed.append("host")

    app[SERVICE].streams.end_resumes = lambda: fails_now("resumes")  # type: ignore[method-assign]
    app[SERVICE].streams.aclose = lambda: fails("streams")  # type: ignore[method-assign]
    app[HOST].aclose = host_closed  # type: ignore[method-assign]
    app[AUTH].aclose = lambda: fails("auth")  # type: ignore[method-assign]

    with capture_logs() as logs:
        await app.shutdown()  # the drain records its failure, runs its later steps, lets the cleanup run
    assert closed == ["resumes"]
    assert [entry.get("step") for entry in logs if entry["event"] == "step_failed"] == ["end resumes"]
    assert any(entry["event"] == "drain_done" for entry in logs)
    with pytest.raises(ExceptionGroup) as raised:
        await app.cleanup()
    # Every step ran, in order, although the ones before failed.
    assert closed == ["resumes", "streams", "host", "auth"]
    assert [str(error) for error in raised.value.exceptions] == ["resumes", "streams", "auth"]
    assert app[REGISTRY].counts() == {"connections": 0, "runs": 0}
