"""Unit tests for the batched validation of long histories in gateway.requests."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.requests import (
    MESSAGE_BATCH,
    ChatRequest,
    SendFrame,
    ValidationError,
    validate_chat_request,
    validate_frame,
)


def messages(count: int) -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
             "parts": [{"type": "text", "text": f"text {i}"}]} for i in range(count)]


async def test_a_long_history_validates_to_the_same_request() -> None:
    body = {"id": "c", "messages": messages(MESSAGE_BATCH * 3 + 7), "trigger": "regenerate-message", "extra": 1}
    assert await validate_chat_request(body) == ChatRequest.model_validate(body)


async def test_an_error_deep_in_a_long_history_keeps_its_location() -> None:
    history = messages(MESSAGE_BATCH * 3)
    history[MESSAGE_BATCH * 2 + 5]["role"] = "tool"
    with pytest.raises(ValidationError) as failed:
        await validate_chat_request({"id": "c", "messages": history})
    assert failed.value.errors()[0]["loc"] == ("messages", MESSAGE_BATCH * 2 + 5, "role")


async def test_a_send_frame_with_a_long_history() -> None:
    frame = {"type": "send", "requestId": "r", "id": "c", "messages": messages(MESSAGE_BATCH + 1)}
    parsed = await validate_frame(frame)
    assert isinstance(parsed, SendFrame) and len(parsed.messages) == MESSAGE_BATCH + 1
    request = parsed.chat_request()
    assert request.messages == parsed.messages and request.id == "c"
