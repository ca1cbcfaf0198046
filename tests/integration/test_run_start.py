"""An answer's first chunks are logged when its run is started, before the run's task takes a step.

(A run cancelled before its first step closes its log: `tests/unit/test_registry_objects.py`.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from adk_gateway.app import Services, build_services
from adk_gateway.services.chat import RequestContext
from adk_gateway.services.registry import ChatRun
from adk_gateway.transports.chat_steps import read_chat_request

from .support import chat_body, new_id, settings, user_message


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    built = build_services(settings())
    yield built
    await built.aclose()


@asynccontextmanager
async def _started(services: Services) -> AsyncIterator[ChatRun]:
    """A streamed answer started through `ChatService.start` on a connection of its own, as a POST
    starts one; nothing is awaited between the start and the caller's first look."""
    body = chat_body(new_id("chat"), [user_message("/stream 5 0")])
    request = await read_chat_request(json.dumps(body).encode(), services.settings)
    async with services.registry.connection("sse") as conn:
        yield await services.chat.start(request, RequestContext(user_id="u", request_id="r"), conn)


async def test_the_start_chunk_is_logged_before_the_run_takes_a_step(services: Services) -> None:
    async with _started(services) as run:
        # Nothing was awaited since `start` returned: the run's task has not run yet, and the
        # handler already has the chunk to write.
        assert [chunk["type"] for chunk in run.log.chunks] == ["start"]
        await run.done.wait()
    types = [chunk["type"] for chunk in run.log.chunks]
    assert types[0] == "start" and types.count("start") == 1 and types[-1] == "finish"



async def test_the_first_chunk_of_the_answer_reaches_a_waiting_reader_before_the_run_goes_on(
    services: Services,
) -> None:
    # `/stream 5 0`: five text tokens with no wait between them, so nothing in the model lets the
    # run's task give way. A reader waiting on the log (a handler about to write) wakes with the
    # first token and only it: the run gives way once after the answer's first chunks.
    async with _started(services) as run:
        await run.log.changed()
        seen = [chunk["type"] for chunk in run.log.chunks]
        await run.done.wait()
    assert seen.count("text-delta") == 1, seen
    assert "finish" not in seen


async def test_a_stop_that_lands_where_the_run_gives_way_closes_the_agent_run(services: Services) -> None:
    # The stop cancels the run's task at its one yield after the first token, outside ADK's
    # generator: the generator is still closed at once (the model's clock is let go with it),
    # and the answer ends as stopped after that one token.
    host = services.chat.host
    async with _started(services) as run:
        await run.log.changed()
        assert run.key in host.bounds.clocks  # the agent run is open, waiting to go on
        await run.stop()
        assert run.key not in host.bounds.clocks
    types = [chunk["type"] for chunk in run.log.chunks]
    assert types.count("text-delta") == 1 and types[-1] == "abort", types
