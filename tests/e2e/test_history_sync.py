"""The real AI SDK clients re-post each message exactly as before, so a chat that goes on never
rebuilds its session (the gateway's history sync costs what is new, not the chat's length)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from .support import assert_clean, problems, run_scenario, text_of

pytestmark = pytest.mark.e2e

PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
REBUILT = re.compile(r'^adk_gateway_sessions_rebuilt_total\{reason="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)


def rebuilt(url: str) -> float:
    """Sessions the gateway has rebuilt so far (all reasons)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:  # an external gateway with --metrics-token
        pytest.skip(f"/metrics answered {exc.code}")
    return sum(float(count) for _, count in REBUILT.findall(text))


@pytest.mark.parametrize(("kind", "headers"), [("sse6", {}), ("sse7", {"x-ai-sdk-major": "7"}), ("ws", {}),
                                               ("ws6", {})])
def test_a_long_chat_with_every_kind_of_part_is_never_rebuilt(gateway_url: str, kind: str,
                                                              headers: dict[str, str]) -> None:
    before = rebuilt(gateway_url)
    steps: list[dict[str, Any]] = [
        {"type": "send", "text": "/echo one"},
        {"type": "send", "text": "/think hmm"},
        {"type": "send", "text": PAYMENT},
        {"type": "approve", "approved": True},
        {"type": "send", "text": '/tool get_weather {"location": "Paris"}'},
        {"type": "send", "text": "/image"},
        {"type": "send", "text": "/echo two"},
        {"type": "send", "text": "/echo three"},
    ]
    result = run_scenario({"kind": kind, "baseUrl": gateway_url, "steps": steps, "headers": headers})
    assert_clean(result)
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant"] * 7, f"{roles}\n{problems(result)}"
    assert text_of(result["messages"][-1]) == "three"
    assert rebuilt(gateway_url) == before, "a chat that went on was rebuilt from its history"


def test_a_regenerate_is_counted_as_a_rebuild(gateway_url: str) -> None:
    before = rebuilt(gateway_url)
    steps = [{"type": "send", "text": "/echo one"}, {"type": "send", "text": "/echo two"}, {"type": "regenerate"}]
    result = run_scenario({"kind": "sse6", "baseUrl": gateway_url, "steps": steps})
    assert_clean(result)
    assert text_of(result["messages"][-1]) == "two"
    assert rebuilt(gateway_url) == before + 1
