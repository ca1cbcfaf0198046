"""Stream resumption with the real clients: `chat.resumeStream()`, as `useChat({resume: true})` calls it on mount.

One client (`main`) sends; a second client of the same chat (`b`, a new Chat instance: a reloaded
page, started with the messages the first one had at that moment) resumes while the response
streams. The resume must replay the whole response from its first chunk and follow it live, so
that the second client ends with exactly the first one's answer — over SSE (GET
/api/chat/{id}/stream) for ai 6 and ai 7, and over the WebSocket (`resume` frame) with ai 7's
stock transport and the shipped ai 6 port.

To keep the suite fast, the scenarios of one test run at once (one driver process each, in
threads) in a module fixture; each test then asserts on its own scenario's result.

A second gateway (module fixture) serves the demo agent with a slow `process_payment`
(tests/e2e/slow_agent.py) and runs with --detach-on-disconnect: there a continuation (the answer
to an approval) can be resumed while it streams, and an SSE stop is a disconnect that leaves
the run going.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.gateway_process import running_gateway

from .support import assert_clean, problems, run_scenario, single_turn, text_of, tool_parts

pytestmark = pytest.mark.e2e

KINDS = ["sse6", "sse7", "ws", "ws6"]
STREAM = "/stream 40 50"  # 40 deltas, 50 ms apart: about 2 s
FULL_TEXT = "".join(f"tok{i} " for i in range(40))
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'


# --- the second gateway --------------------------------------------------------------------


@pytest.fixture(scope="module")
def resume_gateway_url(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway serving tests.e2e.slow_agent with --detach-on-disconnect (always started here)."""
    del gateway_url  # depends on it only for its Node setup check
    with running_gateway(
        "--agent",
        "tests.e2e.slow_agent:root_agent",
        "--detach-on-disconnect",
        log=tmp_path_factory.mktemp("resume-gateway") / "gateway.log",
        name="the resume gateway",
    ) as url:
        yield url


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def spec(
    url: str, kind: str, *steps: dict[str, Any], peers: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A scenario: the steps with a main client and the given peers, all on one new chat."""
    scenario: dict[str, Any] = {
        "kind": kind,
        "baseUrl": url,
        "chatId": f"resume-{kind}-{uuid.uuid4().hex[:10]}",
        "steps": list(steps),
        "peers": peers if peers is not None else {"b": {"messagesFrom": "main"}},
        **extra,
    }
    if kind in ("sse7", "ws"):  # an ai 7 app announces itself, also on the resume request
        scenario.setdefault("headers", {"x-ai-sdk-major": "7"})
    return scenario


def run_all(scenarios: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Runs the scenarios at once (one driver process each); their results by key."""
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        futures = {key: pool.submit(run_scenario, scenario) for key, scenario in scenarios.items()}
        return {key: future.result() for key, future in futures.items()}


def clean(results: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    result = results[key]
    assert_clean(result)
    return result


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def resume(client: str = "b") -> dict[str, Any]:
    return {"type": "resume", "client": client}


def peer(result: dict[str, Any], name: str = "b") -> dict[str, Any]:
    assert name in result.get("peers", {}), problems(result)
    peer_result: dict[str, Any] = result["peers"][name]
    return peer_result


def the_resume(client: dict[str, Any]) -> dict[str, Any]:
    """The client's only request, which must be a resume."""
    requests: list[dict[str, Any]] = client["requests"]
    assert len(requests) == 1, [r["kind"] for r in requests]
    assert requests[0]["kind"] in ("get", "ws-resume"), requests[0]["kind"]
    return requests[0]


def assert_replayed(request: dict[str, Any]) -> None:
    """The resume was answered with a stream (not 204 / no-active) that ended normally."""
    if request["kind"] == "get":
        assert request["httpStatus"] == 200, request
        assert request["sawDone"] is True
        assert request["end"] == "eof"
    else:
        assert request["end"] == "end", request


def assert_nothing_to_resume(request: dict[str, Any]) -> None:
    if request["kind"] == "get":
        assert request["httpStatus"] == 204, request
    else:
        assert request["end"] == "no-active", request
    assert request["chunkTypes"] == []


def assistants(client: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in client["messages"] if m["role"] == "assistant"]


# --- the scenarios, run at once per group ----------------------------------------------------

WAIT_5_CHUNKS = {"type": "waitChunks", "chunks": 5}
CROSS = [("sse7", "ws"), ("ws", "sse7"), ("ws6", "sse6")]
EMPTY_KINDS = ["sse6", "ws"]


@pytest.fixture(scope="module")
def active(gateway_url: str) -> dict[str, dict[str, Any]]:
    scenarios = {kind: spec(gateway_url, kind, send(STREAM), WAIT_5_CHUNKS, resume()) for kind in KINDS}
    for kind in EMPTY_KINDS:
        scenarios[f"empty-{kind}"] = spec(gateway_url, kind, send(STREAM), WAIT_5_CHUNKS, resume(), peers={"b": {}})
    for kind, resumer in CROSS:
        scenarios[f"{kind}-{resumer}"] = spec(
            gateway_url,
            kind,
            send(STREAM),
            WAIT_5_CHUNKS,
            resume(),
            peers={"b": {"kind": resumer, "messagesFrom": "main"}},
        )
    return run_all(scenarios)


@pytest.fixture(scope="module")
def finished(gateway_url: str) -> dict[str, dict[str, Any]]:
    return run_all(
        {kind: spec(gateway_url, kind, send("/echo all done"), {"type": "waitIdle"}, resume()) for kind in KINDS}
    )


@pytest.fixture(scope="module")
def continuations(resume_gateway_url: str) -> dict[str, dict[str, Any]]:
    steps = (
        send(PAYMENT),
        {"type": "approve", "approved": True},
        {"type": "waitChunks", "chunks": 1},  # the continuation has started: its slow tool is running
        resume(),
    )
    return run_all({kind: spec(resume_gateway_url, kind, *steps) for kind in KINDS})


@pytest.fixture(scope="module")
def stopped(resume_gateway_url: str) -> dict[str, dict[str, Any]]:
    steps = (send(STREAM), {"type": "stopAfter", "chunks": 6}, resume())
    return run_all({kind: spec(resume_gateway_url, kind, *steps) for kind in ("sse6", "sse7")})


# --- an active stream ----------------------------------------------------------------------


def test_resume_replays_an_active_stream_in_full(active: dict[str, dict[str, Any]], kind: str) -> None:
    result = clean(active, kind)
    answer = single_turn(result)
    assert text_of(answer) == FULL_TEXT
    [sent] = result["requests"]

    b = peer(result)
    assert b["status"] == "ready", problems(b)
    assert b["error"] is None
    assert [m["role"] for m in b["messages"]] == ["user", "assistant"]
    [resumed] = assistants(b)
    assert resumed["id"] == answer["id"]
    assert text_of(resumed) == FULL_TEXT
    request = the_resume(b)
    assert_replayed(request)
    # The whole response from its first chunk, then live: the same chunks the sender got.
    assert request["chunks"][0] == {"type": "start", "messageId": answer["id"]}
    assert request["chunks"] == sent["chunks"]
    assert b["finishes"] == [{"isAbort": False, "isDisconnect": False, "isError": False, "finishReason": "stop"}]


@pytest.mark.parametrize("kind", EMPTY_KINDS)
def test_resume_into_an_empty_chat(active: dict[str, dict[str, Any]], kind: str) -> None:
    """A page reloaded with no stored messages gets the answer as its only message."""
    result = clean(active, f"empty-{kind}")
    answer = single_turn(result)
    b = peer(result)
    assert b["status"] == "ready", problems(b)
    assert [m["role"] for m in b["messages"]] == ["assistant"]
    assert b["messages"][0]["id"] == answer["id"]
    assert text_of(b["messages"][0]) == FULL_TEXT
    assert_replayed(the_resume(b))


@pytest.mark.parametrize(("kind", "resumer"), CROSS)
def test_resume_over_the_other_transport(active: dict[str, dict[str, Any]], kind: str, resumer: str) -> None:
    """A run started over SSE resumes over the socket, and the other way round."""
    result = clean(active, f"{kind}-{resumer}")
    answer = single_turn(result)
    b = peer(result)
    assert b["status"] == "ready", problems(b)
    [resumed] = assistants(b)
    assert (resumed["id"], text_of(resumed)) == (answer["id"], FULL_TEXT)
    request = the_resume(b)
    assert request["kind"] == ("get" if resumer.startswith("sse") else "ws-resume")
    assert_replayed(request)


def test_resume_with_nothing_active_changes_nothing(finished: dict[str, dict[str, Any]], kind: str) -> None:
    """After the response was received in full, a resume answers 204 / no-active."""
    result = clean(finished, kind)
    answer = single_turn(result)
    b = peer(result)
    assert b["status"] == "ready"
    assert b["error"] is None
    assert b["messages"] == result["messages"]
    assert text_of(answer) == "all done"
    assert_nothing_to_resume(the_resume(b))
    assert b["finishes"] == []


# --- resume mode (--detach-on-disconnect) ----------------------------------------------------


def test_resume_of_a_continuation_mid_stream(continuations: dict[str, dict[str, Any]], kind: str) -> None:
    """The answer to an approval, resumed while its slow tool runs: the replay rebuilds the
    message it continues, so the tool output finds its call (no "No tool invocation found")."""
    result = clean(continuations, kind)
    answer = single_turn(result)
    [part] = tool_parts(answer, "process_payment")
    assert part["state"] == "output-available"
    assert text_of(answer).startswith("process_payment -> ")
    continuation = result["requests"][1]
    assert continuation["lastMessageRole"] == "assistant"

    b = peer(result)
    assert b["status"] == "ready", problems(b)
    assert b["error"] is None, b["error"]
    assert [m["role"] for m in b["messages"]] == ["user", "assistant"]
    [resumed] = assistants(b)
    assert resumed["id"] == answer["id"]
    [resumed_part] = tool_parts(resumed, "process_payment")
    assert resumed_part["state"] == "output-available", resumed_part
    assert resumed_part["toolCallId"] == part["toolCallId"]
    assert resumed_part["output"] == part["output"]
    assert text_of(resumed) == text_of(answer)
    request = the_resume(b)
    assert_replayed(request)
    types = request["chunkTypes"]
    assert types[0] == "start"
    assert request["chunks"][0].get("messageId") in (None, answer["id"])
    # The rebuilt call comes before its live output.
    assert types.index("tool-input-available") < types.index("tool-output-available"), types
    assert b["finishes"][-1]["isError"] is False
    assert len(b["requests"]) == 1  # no automatic send after the resume


@pytest.mark.parametrize("kind", ["sse6", "sse7"])
def test_stop_is_a_disconnect_in_resume_mode(stopped: dict[str, dict[str, Any]], kind: str) -> None:
    """With --detach-on-disconnect an SSE stop leaves the run going; a reloaded page resumes it."""
    result = clean(stopped, kind)
    assert result["status"] == "ready"
    assert result["finishes"][0]["isAbort"] is True
    [stop_request] = result["requests"]
    assert stop_request["stoppedAfterChunks"] >= 6
    assert stop_request["chunkTypes"][-1] != "finish"

    b = peer(result)
    assert b["status"] == "ready", problems(b)
    [resumed] = assistants(b)
    assert resumed["id"] == stop_request["chunks"][0]["messageId"]
    assert text_of(resumed) == FULL_TEXT
    request = the_resume(b)
    assert_replayed(request)
    assert request["chunks"][: len(stop_request["chunks"])] == stop_request["chunks"]
    # What the stopped client kept (the chat may not have processed every chunk it received
    # before the abort) is the start of the same answer.
    for partial in assistants(result):
        assert partial["id"] == resumed["id"]
        assert FULL_TEXT.startswith(text_of(partial)) and text_of(partial) != FULL_TEXT
