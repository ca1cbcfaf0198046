"""Unit tests for adk_gateway.agents.scripted: the offline model's script for every row of the contract table."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.agents.script import Plan, ScriptError, ToolCall, plan_for_text, tiny_png
from adk_gateway.agents.scripted import _calls_and_responses, _split_turn, _summary

# --- /echo ----------------------------------------------------------------------------------------


def test_echo_one_delta_per_word_spaces_kept() -> None:
    plan = plan_for_text("/echo hello  big world ")
    assert plan.deltas == ("hello  ", "big ", "world")  # the message is stripped first
    assert "".join(plan.deltas) == "hello  big world"
    assert plan == Plan(deltas=plan.deltas)


def test_echo_without_text() -> None:
    assert plan_for_text("/echo").deltas == ()


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(alphabet=st.characters(blacklist_categories=["Zs", "Cc", "Zl", "Zp"]), min_size=1),
                      min_size=1, max_size=6))
def test_echo_deltas_join_to_the_text(words: list[str]) -> None:
    body = " ".join(words)
    plan = plan_for_text(f"/echo {body}")
    assert "".join(plan.deltas) == body
    assert len(plan.deltas) == len(body.split())


# --- /stream --------------------------------------------------------------------------------------


def test_stream_n() -> None:
    plan = plan_for_text("/stream 3")
    assert plan.deltas == ("tok0 ", "tok1 ", "tok2 ")
    assert plan.delay_s == 0.0


def test_stream_n_ms() -> None:
    plan = plan_for_text("/stream 200 20")
    assert len(plan.deltas) == 200 and plan.deltas[-1] == "tok199 "
    assert plan.delay_s == pytest.approx(0.02)


def test_stream_zero() -> None:
    assert plan_for_text("/stream 0").deltas == ()


@pytest.mark.parametrize("text", ["/stream x", "/stream 3 y", "/stream -1", "/stream 3 -5", "/stream 100001"])
def test_stream_bad_arguments(text: str) -> None:
    with pytest.raises(ScriptError):
        plan_for_text(text)


# --- /tool and /then ------------------------------------------------------------------------------


def test_tool_one_call() -> None:
    plan = plan_for_text('/tool get_weather {"location": "Paris"}')
    assert plan.steps == ((ToolCall("get_weather", {"location": "Paris"}),),)
    assert plan.deltas == ()


def test_tool_several_calls_in_one_step_and_no_arguments() -> None:
    plan = plan_for_text('/tool a {"x": 1}\n/tool b\n  /tool a {"x": 2}  ')
    assert plan.steps == ((ToolCall("a", {"x": 1}), ToolCall("b", {}), ToolCall("a", {"x": 2})),)


def test_then_separates_steps() -> None:
    plan = plan_for_text('/tool a {}\n/then\n/tool b {"n": 1}\n/tool c {}\n\n/then\n/then\n/tool d {}')
    assert plan.steps == (
        (ToolCall("a", {}),),
        (ToolCall("b", {"n": 1}), ToolCall("c", {})),
        (ToolCall("d", {}),),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/tool", "needs a tool name"),
        ("/tool a {not json", "not JSON"),
        ("/tool a [1, 2]", "JSON object"),
        ("/tool a {}\nhello", "expected a /tool or /then line"),
    ],
)
def test_tool_errors(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        plan_for_text(text)


# --- /think, /image, /error -----------------------------------------------------------------------


def test_think() -> None:
    assert plan_for_text("/think why not") == Plan(thought="why not", deltas=("done",))


def test_image() -> None:
    plan = plan_for_text("/image")
    assert plan.image is True
    assert "".join(plan.deltas) == "Here is an image."


def test_error() -> None:
    assert plan_for_text("/error boom bang").error == "boom bang"
    assert plan_for_text("/error").error == "scripted failure"


# --- keyword rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "call"),
    [
        ("What's the weather in Paris?", ToolCall("get_weather", {"location": "Paris"})),
        ("weather in New York.", ToolCall("get_weather", {"location": "New York"})),
        ("weather please", ToolCall("get_weather", {"location": "Tokyo"})),
        ("Pay 25.5 to bob", ToolCall("process_payment", {"amount": 25.5, "recipient": "bob"})),
        ("please pay", ToolCall("process_payment", {"amount": 10.0, "recipient": "alice"})),
        ("play music track 3", ToolCall("change_bgm", {"track": 3})),
        ("change the BGM", ToolCall("change_bgm", {"track": 1})),
        ("what is my location", ToolCall("get_location", {})),
        ("Where am I?", ToolCall("get_location", {})),
    ],
)
def test_keyword_rules(text: str, call: ToolCall) -> None:
    assert plan_for_text(text).steps == ((call,),)


def test_anything_else_is_echoed() -> None:
    plan = plan_for_text("  hello there ")
    assert "".join(plan.deltas) == "You said: hello there"
    assert plan.steps == ()


def test_unknown_command_falls_back_to_you_said() -> None:
    assert "".join(plan_for_text("/nope x").deltas) == "You said: /nope x"


# --- the summary line -------------------------------------------------------------------------------


def fc(name: str) -> types.FunctionCall:
    return types.FunctionCall(name=name, args={})


def test_summary_sorted_keys_compact_separators() -> None:
    calls = [fc("get_weather"), fc("process_payment")]
    responses: list[dict[str, Any]] = [
        {"temperature_c": 20, "condition": "sunny", "location": "Paris"},
        {"error": "This tool call is rejected."},
    ]
    assert _summary(calls, responses) == (
        'get_weather -> {"condition":"sunny","location":"Paris","temperature_c":20}\n'
        'process_payment -> {"error":"This tool call is rejected."}'
    )


def test_summary_nested_and_unicode() -> None:
    line = _summary([fc("t")], [{"b": {"z": 1, "a": [1, 2]}, "a": "é"}])
    name, _, payload = line.partition(" -> ")
    assert name == "t"
    assert payload.replace("\\u00e9", "é") == '{"a":"é","b":{"a":[1,2],"z":1}}'
    assert json.loads(line.split(" -> ", 1)[1]) == {"a": "é", "b": {"a": [1, 2], "z": 1}}


# --- reading the request ----------------------------------------------------------------------------


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def model_calls(*names: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(function_call=fc(n)) for n in names])


def responses(*pairs: tuple[str, dict[str, Any]]) -> types.Content:
    return types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(name=n, response=r)) for n, r in pairs],
    )


def test_split_turn_finds_the_last_user_text() -> None:
    contents = [user("/echo one"), types.Content(role="model", parts=[types.Part(text="one")]),
                user("/tool a {}"), model_calls("a"), responses(("a", {"ok": 1}))]
    text, turn = _split_turn(contents)
    assert text == "/tool a {}"
    assert turn == contents[3:]
    assert _split_turn([]) == ("", [])


def test_calls_and_responses_pairs_by_name_and_position() -> None:
    turn = [
        model_calls("pay", "pay", "adk_request_confirmation"),
        responses(("pay", {"error": "placeholder"}), ("pay", {"error": "placeholder"})),
        responses(("pay", {"status": "ok"})),  # the real result replaces the placeholder
        responses(("adk_request_confirmation", {"confirmed": True})),
        model_calls("w"),
        responses(("w", {"t": 1})),
    ]
    steps, calls, answers = _calls_and_responses(turn)
    assert steps == 2
    assert [c.name for c in calls] == ["pay", "pay", "w"]
    assert answers == [{"status": "ok"}, {"error": "placeholder"}, {"t": 1}]


def test_tiny_png_is_a_valid_png() -> None:
    data = tiny_png(4, 3)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (4, 3)
    crc = struct.unpack(">I", data[16 + length : 20 + length])[0]
    assert crc == zlib.crc32(data[12 : 16 + length]) & 0xFFFFFFFF
    assert data.endswith(b"IEND\xaeB`\x82")


def test_keyword_rules_fire_only_for_tools_the_agent_has() -> None:
    """The offline model answers the agent it serves: another agent's "weather in Paris" is
    echoed, not a call of a `get_weather` it does not have; `/tool` calls whatever it is told."""
    assert plan_for_text("What's the weather in Paris?", tools={"lookup_order"}) == Plan(
        deltas=("You ", "said: ", "What's ", "the ", "weather ", "in ", "Paris?"))
    weather = plan_for_text("What's the weather in Paris?", tools={"get_weather"})
    assert weather.steps == ((ToolCall("get_weather", {"location": "Paris"}),),)
    assert plan_for_text("pay 5 to bob", tools=set()).steps == ()
    assert plan_for_text("/tool lookup_order {\"id\": 7}", tools={"lookup_order"}).steps == (
        (ToolCall("lookup_order", {"id": 7}),),)
    assert plan_for_text("What's the weather in Paris?").steps  # no tool list: the demo's rules
