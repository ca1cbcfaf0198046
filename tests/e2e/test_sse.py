"""The AI SDK's own chat client (ai 6 and ai 7, DefaultChatTransport over SSE) against the gateway."""

from __future__ import annotations

import json
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

KINDS = ["sse6", "sse7"]
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
BGM_OUTPUT = {"now_playing": 2, "status": "ok"}


def compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def chat(url: str, kind: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return run_scenario({"kind": kind, "baseUrl": url, "steps": list(steps), **extra})


def send(text: str) -> dict[str, Any]:
    return {"type": "send", "text": text}


def approve(approved: bool = True, **match: Any) -> dict[str, Any]:
    return {"type": "approve", "approved": approved, **match}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_echo(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send("/echo hello world"))
    assistant = single_turn(result)
    assert text_of(assistant) == "hello world"
    assert result["counts"]["posts"] == 1
    [request] = result["requests"]
    assert request["chunkTypes"][0] == "start"
    assert request["chunkTypes"][-1] == "finish"
    assert request["finishReason"] == "stop"


def test_sse_framing(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send("/echo framing"))
    assert_clean(result)
    [request] = result["requests"]
    assert request["httpStatus"] == 200
    assert request["headers"]["content-type"].startswith("text/event-stream")
    assert request["headers"]["cache-control"] == "no-cache"
    assert request["headers"]["x-accel-buffering"] == "no"
    assert request["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert request["sseFields"] == ["data"]  # no event: or id: lines
    assert request["sawDone"] is True


def test_stream(gateway_url: str, kind: str) -> None:
    assistant = single_turn(chat(gateway_url, kind, send("/stream 5")))
    assert text_of(assistant) == "tok0 tok1 tok2 tok3 tok4 "


def test_server_tool(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send('/tool get_weather {"location": "Paris"}'))
    assistant = single_turn(result)
    [part] = tool_parts(assistant, "get_weather")
    assert part["state"] == "output-available"
    assert part["providerExecuted"] is True
    assert part["input"] == {"location": "Paris"}
    lines = text_of(assistant).splitlines()
    assert any(line.startswith("get_weather -> ") for line in lines), lines
    assert result["counts"]["posts"] == 1


def test_think(gateway_url: str, kind: str) -> None:
    assistant = single_turn(chat(gateway_url, kind, send("/think why")))
    kinds = [p["type"] for p in assistant["parts"]]
    reasoning = next(p for p in assistant["parts"] if p["type"] == "reasoning")
    assert reasoning["text"] == "why"
    assert kinds.index("reasoning") < kinds.index("text")
    assert text_of(assistant) == "done"


def test_image(gateway_url: str, kind: str) -> None:
    assistant = single_turn(chat(gateway_url, kind, send("/image")))
    [file_part] = [p for p in assistant["parts"] if p["type"] == "file"]
    assert file_part["mediaType"] == "image/png"
    assert file_part["url"].startswith("data:image/png;base64,")


def test_model_error(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send("/error boom"))
    assert_clean(result)
    assert result["status"] == "error"
    assert "boom" in result["error"]
    assert "Traceback" not in result["error"]
    assert result["counts"]["posts"] == 1
    assert result["finishes"][-1]["isError"] is True


def test_approve(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send(PAYMENT), approve(toolName="process_payment"))
    assistant = single_turn(result)
    assert result["counts"]["posts"] == 2
    first, second = result["requests"]
    assert first["finishReason"] == "tool-calls"
    assert "tool-approval-request" in first["chunkTypes"]
    assert second["trigger"] == "submit-message"
    assert second["lastMessageRole"] == "assistant"
    assert second["messageId"] == assistant["id"]
    assert_continuations_keep_id(result)
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-available"
    assert part["approval"]["approved"] is True
    assert "process_payment -> " in text_of(assistant)


def test_deny(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url, kind, send(PAYMENT), approve(False, toolName="process_payment", reason="no thanks")
    )
    assistant = single_turn(result)
    assert result["counts"]["posts"] == 2
    assert_continuations_keep_id(result)
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-denied"
    assert "tool-output-denied" in result["requests"][1]["chunkTypes"]
    assert "rejected" in text_of(assistant)


def test_two_calls_one_step_mixed(gateway_url: str, kind: str) -> None:
    text = (
        '/tool process_payment {"amount": 5, "recipient": "bob"}\n'
        '/tool process_payment {"amount": 7, "recipient": "eve"}'
    )
    # After the first answer, the remaining pending approval is index 0 again.
    result = chat(gateway_url, kind, send(text), approve(True), approve(False))
    assistant = single_turn(result)
    assert result["counts"]["posts"] == 2
    assert_continuations_keep_id(result)
    parts = tool_parts(assistant, "process_payment")
    assert [p["input"]["recipient"] for p in parts] == ["bob", "eve"]
    assert [p["state"] for p in parts] == ["output-available", "output-denied"]
    lines = [line for line in text_of(assistant).splitlines() if line.startswith("process_payment -> ")]
    assert len(lines) == 2, lines
    assert "rejected" not in lines[0]
    assert "rejected" in lines[1]


def test_two_sequential_approvals(gateway_url: str, kind: str) -> None:
    text = (
        '/tool process_payment {"amount": 1, "recipient": "ann"}\n'
        "/then\n"
        '/tool process_payment {"amount": 2, "recipient": "ben"}'
    )
    result = chat(gateway_url, kind, send(text), approve(), approve())
    assistant = single_turn(result)
    assert result["counts"]["posts"] == 3
    assert_continuations_keep_id(result)
    # Intermediate responses carry no text; all text comes in the final one.
    for request in result["requests"][:-1]:
        assert not any(t.startswith("text-") for t in request["chunkTypes"]), request["chunkTypes"]
        assert request["finishReason"] == "tool-calls"
    parts = tool_parts(assistant, "process_payment")
    assert [p["state"] for p in parts] == ["output-available", "output-available"]
    lines = [line for line in text_of(assistant).splitlines() if line.startswith("process_payment -> ")]
    assert len(lines) == 2, text_of(assistant)


def test_browser_tool_with_approval(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url,
        kind,
        send('/tool change_bgm {"track": 2}'),
        approve(toolName="change_bgm"),
        browserTools={"change_bgm": {"output": BGM_OUTPUT}},
    )
    assistant = single_turn(result)
    assert result["counts"]["posts"] <= 3
    assert not result["loop"]
    assert_continuations_keep_id(result)
    assert [c["action"] for c in result["toolCalls"]].count("ran") == 1, result["toolCalls"]
    [part] = tool_parts(assistant, "change_bgm")
    assert part["state"] == "output-available"
    assert part.get("providerExecuted") is not True
    assert part["output"] == BGM_OUTPUT
    text = text_of(assistant)
    assert "change_bgm -> " in text
    assert compact(BGM_OUTPUT) in text


def test_browser_tool_denied(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url,
        kind,
        send('/tool change_bgm {"track": 2}'),
        approve(False, toolName="change_bgm"),
        browserTools={"change_bgm": {"output": BGM_OUTPUT}},
    )
    assistant = single_turn(result)
    assert result["counts"]["posts"] == 2
    assert "ran" not in [c["action"] for c in result["toolCalls"]]
    [part] = tool_parts(assistant, "change_bgm")
    assert part["state"] == "output-denied"
    assert "rejected" in text_of(assistant)


def test_stop_then_next_message(gateway_url: str, kind: str) -> None:
    result = chat(
        gateway_url,
        kind,
        send("/stream 200 20"),
        {"type": "stopAfter", "chunks": 6, "text": "tok1 "},
        {"type": "send", "text": "/echo after stop", "wait": False},  # at once
    )
    assert_clean(result)
    assert result["status"] == "ready"
    assert result["finishes"][0]["isAbort"] is True
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    partial = text_of(result["messages"][1])
    assert partial.startswith("tok0 ")
    assert len(partial.split()) < 200
    assert text_of(result["messages"][3]) == "after stop"
    assert result["counts"]["posts"] == 2


def test_resume_without_active_stream(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, {"type": "resume"})
    assert_clean(result)
    assert result["status"] == "ready"
    assert result["messages"] == []
    [request] = result["requests"]
    assert request["kind"] == "get"
    assert request["httpStatus"] == 204


def test_regenerate(gateway_url: str, kind: str) -> None:
    result = chat(gateway_url, kind, send("/echo once more"), {"type": "regenerate"})
    assistant = single_turn(result)
    assert text_of(assistant) == "once more"
    assert [r["trigger"] for r in result["requests"]] == ["submit-message", "regenerate-message"]


def test_ai7_with_v7_header(gateway_url: str) -> None:
    result = chat(gateway_url, "sse7", send("/echo hello world"), headers={"x-ai-sdk-major": "7"})
    assistant = single_turn(result)
    assert text_of(assistant) == "hello world"
    assert result["counts"]["posts"] == 1
