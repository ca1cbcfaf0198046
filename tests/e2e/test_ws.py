"""WebSocket: ai 7's stock WebSocketChatTransport (`ws`) and the shipped ai 6 port (`ws6`)."""

from __future__ import annotations

from typing import Any

import pytest

from .support import (
    assert_clean,
    assert_continuations_keep_id,
    run_scenario,
    single_turn,
    text_of,
    tool_parts,
)

pytestmark = pytest.mark.e2e

PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
BGM_OUTPUT = {"now_playing": 2, "status": "ok"}


@pytest.fixture(params=["ws", "ws6"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def chat(url: str, kind: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    scenario: dict[str, Any] = {"kind": kind, "baseUrl": url, "steps": list(steps), **extra}
    if kind == "ws":  # the ai 7 client may receive the v7 chunk set
        scenario.setdefault("headers", {"x-ai-sdk-major": "7"})
    result = run_scenario(scenario)
    ws_requests = [r for r in result.get("requests", []) if r["kind"].startswith("ws-")]
    assert len(ws_requests) == len(result.get("requests", [])), "a WS chat made HTTP requests"
    return result


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def test_echo(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send("/echo hello world"))
    assistant = single_turn(result)
    assert text_of(assistant) == "hello world"
    assert result["counts"]["wsSends"] == 1
    [request] = result["requests"]
    assert request["end"] == "end"
    assert request["finishReason"] == "stop"


def test_stream(gateway_url: str, kind: str) -> None:
    assistant = single_turn(chat(gateway_url, kind, send("/stream 5")))
    assert text_of(assistant) == "tok0 tok1 tok2 tok3 tok4 "


def test_approve(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send(PAYMENT), {"type": "approve", "approved": True})
    assistant = single_turn(result)
    assert result["counts"]["wsSends"] == 2
    assert result["requests"][1]["messageId"] == assistant["id"]
    assert_continuations_keep_id(result)
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-available"
    assert "process_payment -> " in text_of(assistant)


def test_deny(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send(PAYMENT), {"type": "approve", "approved": False})
    assistant = single_turn(result)
    assert result["counts"]["wsSends"] == 2
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-denied"
    assert "rejected" in text_of(assistant)


def test_browser_tool(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url,
        kind,
        send('/tool change_bgm {"track": 2}'),
        {"type": "approve", "toolName": "change_bgm", "approved": True},
        browserTools={"change_bgm": {"output": BGM_OUTPUT}},
    )
    assistant = single_turn(result)
    assert result["counts"]["wsSends"] <= 3
    assert not result["loop"]
    assert [c["action"] for c in result["toolCalls"]].count("ran") == 1, result["toolCalls"]
    [part] = tool_parts(assistant, "change_bgm")
    assert part["state"] == "output-available"
    assert part["output"] == BGM_OUTPUT
    assert "change_bgm -> " in text_of(assistant)


def test_abort(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url,
        kind,
        send("/stream 200 20"),
        {"type": "stopAfter", "chunks": 6, "text": "tok1 "},
        {"type": "send", "text": "/echo after abort", "wait": False},  # at once
    )
    assert_clean(result)
    assert result["status"] == "ready"
    assert result["finishes"][0]["isAbort"] is True
    assert result["requests"][0]["abortSent"] is True
    partial = text_of(result["messages"][1])
    assert partial.startswith("tok0 ")
    assert len(partial.split()) < 200
    assert text_of(result["messages"][-1]) == "after abort"
    assert len(result["messages"]) == 4


def test_resume_without_active_stream(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, {"type": "resume"})
    assert_clean(result)
    assert result["status"] == "ready"
    assert result["messages"] == []
    [request] = result["requests"]
    assert request["kind"] == "ws-resume"
    assert request["end"] == "no-active"
