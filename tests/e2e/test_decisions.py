"""Standing decisions with the real AI SDK client (ai 6 and ai 7 over SSE): always allow, never
allow, and deny-and-stop (the approval's `reason`: "always", "never", "stop")."""

from __future__ import annotations

from typing import Any

import pytest

from .support import assert_clean, assert_continuations_keep_id, problems, run_scenario, text_of, tool_parts

pytestmark = pytest.mark.e2e

PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
PAYMENT_AGAIN = '/tool process_payment {"amount": 7, "recipient": "eve"}'
BGM_OUTPUT = {"now_playing": 2, "status": "ok"}
V7 = {"x-ai-sdk-major": "7"}


def chat(url: str, kind: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return run_scenario({"kind": kind, "baseUrl": url, "steps": list(steps), **extra})


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def approve(approved: bool = True, **match: Any) -> dict[str, Any]:
    return {"type": "approve", "approved": approved, **match}


def two_turns(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    assert_clean(result)
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"], f"{roles}\n{problems(result)}"
    return result["messages"][1], result["messages"][3]


@pytest.fixture(params=["sse6", "sse7", "sse7+v7"])
def client(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """(driver kind, transport headers): ai 6, ai 7 with the ai 6 chunk set, ai 7 with the v7 set."""
    kind, _, v7 = str(request.param).partition("+")
    return kind, (V7 if v7 else {})


def test_always_allow_skips_the_question_next_time(gateway_url: str, client: tuple[str, dict[str, str]]) -> None:
    kind, headers = client
    result = chat(
        gateway_url, kind,
        send(PAYMENT), approve(True, toolName="process_payment", reason="always"),
        send(PAYMENT_AGAIN),
        headers=headers,
    )
    first, second = two_turns(result)
    assert result["counts"]["posts"] == 3  # question, approval, second call
    assert_continuations_keep_id(result)
    [asked] = tool_parts(first, "process_payment")
    assert asked["state"] == "output-available"
    assert asked["approval"] == {"id": asked["approval"]["id"], "approved": True, "reason": "always"}
    [part] = tool_parts(second, "process_payment")
    assert part["state"] == "output-available"
    assert "approval" not in part  # no question
    assert part["output"]["recipient"] == "eve" and part["output"]["status"] == "completed"
    assert "tool-approval-request" not in result["requests"][2]["chunkTypes"]
    assert result["requests"][2]["finishReason"] == "stop"
    assert "process_payment -> " in text_of(second)


def test_never_allow_refuses_the_next_call_without_asking(
    gateway_url: str, client: tuple[str, dict[str, str]]
) -> None:
    kind, headers = client
    result = chat(
        gateway_url, kind,
        send(PAYMENT), approve(False, toolName="process_payment", reason="never"),
        send(PAYMENT_AGAIN),
        headers=headers,
    )
    first, second = two_turns(result)
    assert result["counts"]["posts"] == 3
    [denied] = tool_parts(first, "process_payment")
    assert denied["state"] == "output-denied"
    assert denied["approval"]["approved"] is False
    [part] = tool_parts(second, "process_payment")
    assert part["state"] == "output-error"
    assert part["errorText"] == "Permission to use process_payment has been permanently denied"
    assert "approval" not in part
    assert part.get("providerExecuted") is True
    assert "tool-approval-request" not in result["requests"][2]["chunkTypes"]
    assert "permanently denied" in text_of(second)


def test_deny_and_stop_ends_the_turn(gateway_url: str, client: tuple[str, dict[str, str]]) -> None:
    kind, headers = client
    result = chat(
        gateway_url, kind, send(PAYMENT), approve(False, toolName="process_payment", reason="stop"),
        headers=headers,
    )
    assert_clean(result)
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"], problems(result)
    assert result["counts"]["posts"] == 2
    assert result["status"] == "ready"
    assert_continuations_keep_id(result)
    assistant = result["messages"][1]
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-denied"
    assert part["approval"]["reason"] == "stop"
    index = assistant["parts"].index(part)
    assert not any(p["type"] in ("text", "reasoning") for p in assistant["parts"][index:]), assistant["parts"]
    second = result["requests"][1]
    assert second["chunkTypes"] == ["start", "tool-output-denied", "finish"]
    assert second["finishReason"] == ("interrupted" if headers else "stop")
    assert result["finishes"][-1]["isError"] is False


def test_always_allow_browser_tool(gateway_url: str, client: tuple[str, dict[str, str]]) -> None:
    kind, headers = client
    steps = [
        send('/tool change_bgm {"track": 1}'),
        approve(True, toolName="change_bgm", reason="always"),
        send('/tool change_bgm {"track": 2}'),
    ]
    result = chat(gateway_url, kind, *steps, headers=headers, browserTools={"change_bgm": {"output": BGM_OUTPUT}})
    first, second = two_turns(result)
    assert not result["loop"]
    ran = [c for c in result["toolCalls"] if c["action"] == "ran"]
    assert len(ran) == 2, result["toolCalls"]
    for message in (first, second):
        [part] = tool_parts(message, "change_bgm")
        assert part["state"] == "output-available" and part["output"] == BGM_OUTPUT
    [first_part] = tool_parts(first, "change_bgm")
    assert first_part["approval"]["approved"] is True
    [second_part] = tool_parts(second, "change_bgm")
    assert "approval" not in second_part  # never asked: run at once by the client that said "always"
    assert "change_bgm -> " in text_of(second)
    second_turn = result["requests"][3:]
    assert "tool-approval-request" not in second_turn[0]["chunkTypes"]
    assert len(second_turn) == 2  # the call, then its output: no question, never a loop
