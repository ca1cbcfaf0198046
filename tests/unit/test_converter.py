"""Unit tests for adk_gateway.core.converter: hand-built ADK events, adapted by `adk_gateway.agents.events`, -> UI
message chunks (a chat's `MessageConverter`; live turns are in tests/unit/test_writer.py and the
live integration tests)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from google.adk.events import Event, EventActions
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_gateway.agents.events import agent_event, finish_reason_name
from adk_gateway.core import chunks as c
from adk_gateway.core import events as ev
from adk_gateway.core.approval import (
    REJECTED_TEXT,
    AwaitClient,
    CallState,
    RunInBrowser,
    ToolOutcome,
    interrupt_result,
)
from adk_gateway.core.converter import (
    MAX_ERROR_TEXT,
    ConversionResult,
    MessageConverter,
    map_finish_reason,
    message_replay_chunks,
    result_outcome,
    safe_error_text,
)
from adk_gateway.core.effects import CallAnnounced, NeedsApproval
from adk_gateway.core.kinds import CONFIRMATION_TOOL, PLACEHOLDER_ERROR, ToolKind

AGENT = "demo_agent"
KINDS = {
    "change_bgm": ToolKind(browser=True, needs_approval=True),
    "show_toast": ToolKind(browser=True, needs_approval=False),
}


def kinds(name: str) -> ToolKind:
    return KINDS.get(name, ToolKind())


def chat_converter(message_id: str | None = None, *, refused: frozenset[str] = frozenset(),
                   **options: Any) -> MessageConverter:
    """A chat's converter for the demo's tools, as the chat service makes it (a refused tool is
    shown as a server tool). Unless told otherwise, the message is the demo agent's already (a
    continuation of it): no step names its agent, as none changes it (see the agent tests)."""
    options.setdefault("agent", AGENT)
    return MessageConverter(message_id, tools=lambda name: ToolKind() if name in refused else kinds(name), **options)


def finished(reason: str, **metadata: Any) -> c.Finish:
    """The `finish` of a message of the demo agent."""
    return c.Finish(finishReason=reason, messageMetadata={**metadata, "agent": AGENT})  # type: ignore[arg-type]


def asked(effects: Iterable[Any]) -> list[Any]:
    """The effects the chat acts on: calls the client answers, and ADK's confirmations."""
    return [e for e in effects if not (isinstance(e, CallAnnounced) and not e.client)]


# --- event builders --------------------------------------------------------------------------


def model_event(
    event_id: str,
    *parts: types.Part,
    partial: bool | None = None,
    finish: types.FinishReason | None = None,
    usage: tuple[int, int] | None = None,
) -> Event:
    usage_md = (
        types.GenerateContentResponseUsageMetadata(
            prompt_token_count=usage[0], candidates_token_count=usage[1], total_token_count=sum(usage)
        )
        if usage
        else None
    )
    return Event(
        id=event_id,
        invocation_id="inv-1",
        author=AGENT,
        content=types.Content(role="model", parts=list(parts)),
        partial=partial,
        finish_reason=finish,
        usage_metadata=usage_md,
    )


def text(value: str, thought: bool = False) -> types.Part:
    return types.Part(text=value, thought=thought or None)


def call(name: str, call_id: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=args))


def confirmation(conf_id: str, original_id: str, original_name: str = "process_payment") -> types.Part:
    return types.Part(
        function_call=types.FunctionCall(
            id=conf_id,
            name=CONFIRMATION_TOOL,
            args={
                "originalFunctionCall": {"id": original_id, "name": original_name, "args": {"amount": 5}},
                "toolConfirmation": {"hint": "approve?", "confirmed": False},
            },
        )
    )


def response_event(*responses: tuple[str, str, dict[str, Any]], requested: Iterable[str] = ()) -> Event:
    parts = [
        types.Part(function_response=types.FunctionResponse(id=call_id, name=name, response=payload))
        for call_id, name, payload in responses
    ]
    actions = EventActions(
        requested_tool_confirmations={cid: ToolConfirmation(hint="approve?") for cid in requested}
    )
    return Event(
        invocation_id="inv-1", author=AGENT, content=types.Content(role="user", parts=parts), actions=actions
    )


def convert(conv: MessageConverter, event: Event) -> ConversionResult:
    return conv.convert(agent_event(event))


def run(events: Sequence[Event], conv: MessageConverter | None = None, **finish: Any) -> tuple[
    list[c.Chunk], list[Any]
]:
    conv = conv or chat_converter("msg-1")
    out: list[c.Chunk] = []
    effects: list[Any] = []
    for event in events:
        result = convert(conv, event)
        out += result.chunks
        effects += result.effects
    out += conv.finish(**finish)
    return out, asked(effects)


def wires(chunks: Iterable[c.Chunk]) -> list[dict[str, Any]]:
    return [chunk.to_wire() for chunk in chunks]


def types_of(chunks: Iterable[c.Chunk]) -> list[str]:
    return [chunk.to_wire()["type"] for chunk in chunks]


def texts(chunks: Iterable[c.Chunk], kind: type[c.Chunk] = c.TextDelta) -> str:
    return "".join(ch.delta for ch in chunks if isinstance(ch, kind))  # type: ignore[attr-defined]


# --- an ordering checker: the AI SDK client's rules --------------------------------------------


def check_order(chunks: Sequence[c.Chunk], known_tools: Iterable[str] = ()) -> None:
    """Raises AssertionError where the AI SDK's `processUIMessageStream` would reject the stream.

    `known_tools`: tool call ids already in the continued message (from earlier responses).
    """
    wire = wires(chunks)
    assert wire, "no chunks"
    assert wire[0]["type"] == "start", wire[0]
    ends = {"finish", "error"}
    assert wire[-1]["type"] in ends, wire[-1]
    assert sum(1 for w in wire if w["type"] in ends) == 1, [w["type"] for w in wire]
    open_ids: dict[str, set[str]] = {"text": set(), "reasoning": set()}
    closed_ids: set[str] = set()
    in_step = False
    tools: set[str] = set(known_tools)
    for w in wire:
        kind = w["type"]
        for field_name, value in w.items():
            if value is None:
                assert field_name in {"input", "output", "data", "messageMetadata"}, (field_name, w)
        if kind == "start-step":
            assert not in_step, "nested start-step"
            in_step = True
        elif kind == "finish-step":
            assert in_step, "finish-step outside a step"
            assert not open_ids["text"] and not open_ids["reasoning"], f"finish-step with open parts {open_ids}"
            in_step = False
        elif kind.endswith("-start") and kind.split("-")[0] in open_ids:
            family = kind.split("-")[0]
            assert in_step, f"{kind} outside a step"
            assert w["id"] not in open_ids[family] and w["id"] not in closed_ids, f"id reused {w}"
            open_ids[family].add(w["id"])
        elif kind.endswith(("-delta", "-end")) and kind.split("-")[0] in open_ids:
            family = kind.split("-")[0]
            assert w["id"] in open_ids[family], f"{kind} without an open start: {w}"
            if kind.endswith("-end"):
                open_ids[family].discard(w["id"])
                closed_ids.add(w["id"])
        elif kind in ("tool-input-start", "tool-input-available"):
            tools.add(w["toolCallId"])
        elif kind in ("tool-input-delta", "tool-approval-request") or kind.startswith("tool-output"):
            assert w["toolCallId"] in tools, f"{kind} for an unknown call {w}"
    assert not in_step or wire[-1]["type"] == "error", "a step left open"


# --- text and reasoning ------------------------------------------------------------------------


def test_partial_text_streams_with_stable_ids_and_skips_the_final_text() -> None:
    events = [
        model_event("e1", text("Hel"), partial=True),
        model_event("e1", text("lo "), partial=True),
        model_event("e1", text("world"), partial=True),
        model_event("e1", text("Hello world"), finish=types.FinishReason.STOP),
    ]
    chunks, effects = run(events)
    check_order(chunks)
    assert types_of(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]
    assert chunks[0] == c.Start(messageId="msg-1")
    ids = {ch.id for ch in chunks if isinstance(ch, c.TextStart | c.TextDelta | c.TextEnd)}
    assert len(ids) == 1
    assert texts(chunks) == "Hello world"  # the aggregated final text is not repeated
    assert effects == []
    assert chunks[-1] == finished("stop")


def test_non_streamed_final_text_is_emitted_once() -> None:
    chunks, _ = run([model_event("e1", text("All at once."), finish=types.FinishReason.STOP)])
    check_order(chunks)
    assert texts(chunks) == "All at once."
    assert types_of(chunks).count("text-start") == 1
    assert types_of(chunks).count("text-delta") == 1


def test_thoughts_become_reasoning_parts_before_text() -> None:
    events = [
        model_event("e1", text("let me ", thought=True), partial=True),
        model_event("e1", text("think", thought=True), partial=True),
        model_event("e1", text("done"), partial=True),
        model_event("e1", text("let me think", thought=True), text("done")),
    ]
    chunks, _ = run(events)
    check_order(chunks)
    assert types_of(chunks) == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-delta", "reasoning-end",
        "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]
    assert texts(chunks, c.ReasoningDelta) == "let me think"
    assert texts(chunks) == "done"


def test_empty_text_parts_open_nothing() -> None:
    chunks, _ = run([model_event("e1", text(""))])
    assert types_of(chunks) == ["start", "start-step", "finish-step", "finish"]


# --- files -------------------------------------------------------------------------------------


def test_inline_image_becomes_a_file_chunk_with_a_data_url() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    image = types.Part(inline_data=types.Blob(mime_type="image/png", data=png))
    chunks, _ = run([model_event("e1", text("Here:"), image)])
    check_order(chunks)
    files = [ch for ch in chunks if isinstance(ch, c.File)]
    assert files == [c.File(url="data:image/png;base64," + base64.b64encode(png).decode(), mediaType="image/png")]
    order = types_of(chunks)
    assert order.index("text-end") < order.index("file")  # the text part is closed first


def test_file_uri_becomes_a_file_chunk() -> None:
    part = types.Part(file_data=types.FileData(file_uri="https://example.com/a.pdf", mime_type="application/pdf"))
    chunks, _ = run([model_event("e1", part)])
    assert [ch for ch in chunks if isinstance(ch, c.File)] == [
        c.File(url="https://example.com/a.pdf", mediaType="application/pdf")
    ]


# --- tools -------------------------------------------------------------------------------------


def test_server_tool_call_is_provider_executed() -> None:
    events = [
        model_event("e1", call("get_weather", "call-1", location="Paris")),
        response_event(("call-1", "get_weather", {"temp": 20})),
        model_event("e2", text("get_weather -> {}")),
    ]
    chunks, effects = run(events)
    check_order(chunks)
    assert effects == []
    wire = wires(chunks)
    assert wire[2:5] == [
        {"type": "tool-input-start", "toolCallId": "call-1", "toolName": "get_weather", "providerExecuted": True},
        {"type": "tool-input-delta", "toolCallId": "call-1", "inputTextDelta": '{"location":"Paris"}'},
        {
            "type": "tool-input-available", "toolCallId": "call-1", "toolName": "get_weather",
            "input": {"location": "Paris"}, "providerExecuted": True,
        },
    ]
    assert {"type": "tool-output-available", "toolCallId": "call-1", "output": {"temp": 20},
            "providerExecuted": True} in wire
    assert chunks[-1] == finished("stop")


def test_browser_tool_with_approval_is_not_provider_executed_and_the_client_answers_it() -> None:
    conv = chat_converter("m")
    chunks, effects = run([model_event("e1", call("change_bgm", "call-7", track=2))], conv)
    check_order(chunks)
    starts = [w for w in wires(chunks) if w["type"] in ("tool-input-start", "tool-input-available")]
    assert len(starts) == 2 and all("providerExecuted" not in w for w in starts)
    assert effects == [CallAnnounced("call-7", "change_bgm", {"track": 2}, client=True)]
    assert conv.awaiting_client
    assert chunks[-1] == finished("tool-calls")


def test_browser_tool_without_approval_is_a_call_the_client_answers() -> None:
    chunks, effects = run([model_event("e1", call("show_toast", "call-8", text="hi"))])
    assert effects == [CallAnnounced("call-8", "show_toast", {"text": "hi"}, client=True)]
    assert chunks[-1] == finished("tool-calls")


def test_refused_browser_tool_is_announced_as_server_run() -> None:
    conv = chat_converter("m", refused=frozenset({"change_bgm"}))
    events = [
        model_event("e1", call("change_bgm", "call-7", track=2)),
        response_event(("call-7", "change_bgm", {"error": "Permission to use change_bgm has been permanently denied"})),
    ]
    chunks, effects = run(events, conv)
    check_order(chunks)
    assert effects == []
    wire = wires(chunks)
    announced = [w for w in wire if w["type"] in ("tool-input-start", "tool-input-available")]
    assert len(announced) == 2 and all(w.get("providerExecuted") is True for w in announced)
    assert {"type": "tool-output-error", "toolCallId": "call-7",
            "errorText": "Permission to use change_bgm has been permanently denied", "providerExecuted": True} in wire


def test_adk_confirmation_is_an_effect_never_a_tool_part() -> None:
    events = [
        model_event("e1", call("process_payment", "call-1", amount=5)),
        model_event("e-conf", confirmation("conf-1", "call-1")),
        response_event(("call-1", "process_payment", {"error": PLACEHOLDER_ERROR}), requested=["call-1"]),
    ]
    chunks, effects = run(events)
    check_order(chunks)
    assert effects == [NeedsApproval("call-1", "process_payment", "conf-1")]
    wire = wires(chunks)
    assert not any(CONFIRMATION_TOOL in json.dumps(w) for w in wire)
    assert not any(w["type"].startswith("tool-output") for w in wire)  # placeholder hidden
    assert types_of(chunks).count("start-step") == 1  # the confirmation event is not a step
    assert chunks[-1] == finished("tool-calls")


def test_confirmation_mixed_into_a_model_event() -> None:
    chunks, effects = run([model_event("e1", call("process_payment", "call-1"), confirmation("conf-1", "call-1"))])
    assert effects == [NeedsApproval("call-1", "process_payment", "conf-1")]
    assert [w["toolName"] for w in wires(chunks) if w["type"] == "tool-input-available"] == ["process_payment"]


def test_placeholder_is_hidden_even_without_requested_confirmations() -> None:
    events = [
        model_event("e1", call("process_payment", "call-1")),
        response_event(("call-1", "process_payment", {"error": PLACEHOLDER_ERROR})),
    ]
    chunks, _ = run(events)
    assert not any(t.startswith("tool-output") for t in types_of(chunks))


def test_rejection_becomes_tool_output_denied() -> None:
    # A continuation: the denied call's response arrives before any model step.
    events = [
        response_event(("call-1", "process_payment", {"error": REJECTED_TEXT})),
        model_event("e2", text("process_payment -> rejected")),
    ]
    chunks, _ = run(events)
    assert types_of(chunks)[:3] == ["start", "tool-output-denied", "start-step"]
    assert chunks[1] == c.ToolOutputDenied(toolCallId="call-1")


def test_the_interrupt_result_is_a_denial_as_in_live_mode() -> None:
    # "Deny and stop" and a barge-in end a call with the interrupt result: one rule, shown as denied.
    chunks, _ = run([response_event(("call-1", "process_payment", {"error": interrupt_result()}))])
    assert c.ToolOutputDenied(toolCallId="call-1") in chunks
    assert not any(isinstance(chunk, c.ToolOutputError) for chunk in chunks)


def test_tool_error_response_becomes_tool_output_error() -> None:
    chunks, _ = run([response_event(("call-1", "get_weather", {"error": "no such city"}))])
    assert c.ToolOutputError(toolCallId="call-1", errorText="no such city", providerExecuted=True) in chunks


def test_user_events_are_ignored() -> None:
    event = Event(invocation_id="i", author="user", content=types.Content(role="user", parts=[text("hi")]))
    chunks, _ = run([event])
    assert types_of(chunks) == ["start", "finish"]


# --- errors --------------------------------------------------------------------------------------


def test_error_event_is_one_safe_line_and_nothing_follows() -> None:
    conv = chat_converter("m")
    first = convert(conv, model_event("e1", text("partial "), partial=True)).chunks
    failure = Event(
        invocation_id="i", author=AGENT, error_code="MODEL_ERROR",
        error_message="boom\nTraceback (most recent call last):\n  File \"/srv/x.py\", line 1",
    )
    err = convert(conv, failure).chunks
    later = convert(conv, model_event("e2", text("after"))).chunks
    fin = conv.finish()
    assert conv.errored
    assert types_of(err) == ["text-end", "error"]
    [error] = [ch for ch in err if isinstance(ch, c.Error)]
    assert error.errorText == "boom"  # the first line only: no traceback, no paths
    assert later == [] and fin == []
    check_order([*first, *err])


def test_error_code_only() -> None:
    chunks, _ = run([Event(invocation_id="i", author=AGENT, error_code="RESOURCE_EXHAUSTED")])
    assert chunks[-1] == c.Error(errorText="RESOURCE_EXHAUSTED")


def test_error_method_closes_parts_and_ends_the_response() -> None:
    conv = MessageConverter("m")
    convert(conv, model_event("e1", text("a"), partial=True))
    out = conv.error("The agent failed while answering.")
    assert types_of(out) == ["text-end", "error"]
    assert conv.error("again") == [] and conv.finish() == []


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (None, "The agent failed."),
        ("", "The agent failed."),
        ("  \n\t ", "The agent failed."),
        ("a\nb\r\nc\td", "a"),
        ("x\ty  z", "x y z"),
        ("Traceback (most recent call last):\n  File \"/srv/x.py\"", "The agent failed."),
        ("failed in /srv/app/agent.py line 3", "failed in … line 3"),
        ("x" * 1000, "x" * (MAX_ERROR_TEXT - 1) + "…"),
    ],
)
def test_safe_error_text(message: str | None, expected: str) -> None:
    assert safe_error_text(message) == expected
    assert len(safe_error_text(message)) <= MAX_ERROR_TEXT


# --- finish reasons, steps and usage -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (None, "stop"),
        (types.FinishReason.STOP, "stop"),
        (types.FinishReason.MAX_TOKENS, "length"),
        (types.FinishReason.SAFETY, "content-filter"),
        (types.FinishReason.RECITATION, "content-filter"),
        (types.FinishReason.PROHIBITED_CONTENT, "content-filter"),
        (types.FinishReason.MALFORMED_FUNCTION_CALL, "error"),
        (types.FinishReason.OTHER, "other"),
        (types.FinishReason.FINISH_REASON_UNSPECIFIED, "other"),
        ("max_tokens", "length"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_map_finish_reason(reason: Any, expected: str) -> None:
    assert map_finish_reason(finish_reason_name(reason)) == expected


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (types.FinishReason.STOP, "stop"),
        (types.FinishReason.MAX_TOKENS, "length"),
        (types.FinishReason.SAFETY, "content-filter"),
        (types.FinishReason.LANGUAGE, "other"),
    ],
)
def test_finish_reason_of_the_last_model_event(reason: types.FinishReason, expected: str) -> None:
    chunks, _ = run([model_event("e1", text("x"), finish=reason)])
    assert chunks[-1] == finished(expected)


def test_awaiting_client_beats_the_model_finish_reason() -> None:
    chunks, _ = run([model_event("e1", call("change_bgm", "c1", track=1), finish=types.FinishReason.STOP)])
    assert chunks[-1] == finished("tool-calls")


def test_explicit_finish_reason_and_metadata() -> None:
    chunks, _ = run([model_event("e1", text("x"))], reason="length", metadata={"finishDetail": "max_llm_calls"})
    assert chunks[-1] == finished("length", finishDetail="max_llm_calls")


def test_each_new_model_event_id_is_a_new_step() -> None:
    events = [
        model_event("e1", text("a"), partial=True),
        model_event("e1", call("get_weather", "c1", location="x")),
        response_event(("c1", "get_weather", {"ok": 1})),
        model_event("e2", text("b"), partial=True),
        model_event("e2", text("b")),
        model_event("e3", text("c")),
    ]
    chunks, _ = run(events)
    check_order(chunks)
    order = types_of(chunks)
    assert order.count("start-step") == 3 and order.count("finish-step") == 3
    # Every step ends before the next begins.
    depth = 0
    for kind in order:
        depth += {"start-step": 1, "finish-step": -1}.get(kind, 0)
        assert depth in (0, 1)
    assert texts(chunks) == "abc"


def test_usage_is_summed_into_finish_metadata() -> None:
    events = [
        model_event("e1", call("get_weather", "c1", location="x"), usage=(10, 2)),
        response_event(("c1", "get_weather", {"ok": 1})),
        model_event("e2", text("b"), partial=True),
        model_event("e2", text("b"), usage=(15, 5)),
    ]
    chunks, _ = run(events)
    assert chunks[-1] == finished("stop", usage={"inputTokens": 25, "outputTokens": 7, "totalTokens": 32})


def test_start_is_sent_once() -> None:
    conv = MessageConverter("m")
    assert conv.start() == [c.Start(messageId="m")]
    assert conv.start() == []
    assert MessageConverter().start() == [c.Start()]
    assert c.Start().to_wire() == {"type": "start"}


def test_pre_step_function_responses_then_steps() -> None:
    events = [
        response_event(("c1", "process_payment", {"status": "completed"})),
        model_event("e9", text("process_payment -> ok")),
    ]
    chunks, _ = run(events)
    check_order(chunks, known_tools=["c1"])
    assert types_of(chunks)[:3] == ["start", "tool-output-available", "start-step"]
    with pytest.raises(AssertionError, match="unknown call"):
        check_order(chunks)  # the checker does catch an output for a call the message lacks


# --- property: arbitrary streams of text and thoughts obey the SDK's ordering rules ---------------

piece = st.tuples(st.booleans(), st.text(min_size=1, max_size=8))


@st.composite
def model_calls(draw: st.DrawFn) -> list[tuple[str, list[tuple[bool, str]], bool]]:
    count = draw(st.integers(min_value=0, max_value=5))
    calls = []
    for n in range(count):
        partials = draw(st.lists(piece, max_size=6))
        final = draw(st.booleans()) if partials else True
        calls.append((f"ev{n}", partials, final))
    return calls


def events_for(calls: list[tuple[str, list[tuple[bool, str]], bool]], final_pieces: dict[str, list[tuple[bool, str]]]
               ) -> list[Event]:
    events = []
    for event_id, partials, final in calls:
        for thought, value in partials:
            events.append(model_event(event_id, text(value, thought), partial=True))
        if final:
            pieces = partials or final_pieces[event_id]
            thought_text = "".join(v for t, v in pieces if t)
            plain_text = "".join(v for t, v in pieces if not t)
            parts = [text(thought_text, True)] if thought_text else []
            parts += [text(plain_text)] if plain_text else []
            events.append(model_event(event_id, *(parts or [text("")]), finish=types.FinishReason.STOP))
    return events


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=model_calls(), finals=st.lists(st.lists(piece, min_size=1, max_size=3), min_size=5, max_size=5))
def test_streams_obey_the_sdk_ordering_rules(
    calls: list[tuple[str, list[tuple[bool, str]], bool]], finals: list[list[tuple[bool, str]]]
) -> None:
    final_pieces = {f"ev{n}": finals[n] for n in range(5)}
    chunks, _ = run(events_for(calls, final_pieces))
    check_order(chunks)
    # Nothing is lost or repeated: streamed calls give their partials, others their final text.
    expected_text = expected_thought = ""
    for event_id, partials, _final in calls:
        pieces = partials or final_pieces[event_id]
        if not partials:
            # A non-streamed final event carries its thought first, then its text.
            pieces = [p for p in pieces if p[0]] + [p for p in pieces if not p[0]]
        expected_text += "".join(v for t, v in pieces if not t)
        expected_thought += "".join(v for t, v in pieces if t)
    assert texts(chunks) == expected_text
    assert texts(chunks, c.ReasoningDelta) == expected_thought
    assert types_of(chunks).count("start-step") == len(calls)
    for chunk in chunks:
        wire = chunk.to_wire()
        assert all(v is not None or k in type(chunk).always_present for k, v in wire.items()), wire


# --- the core's own events: what the converter reads, and how ADK's become them ------------------


def test_the_converter_reads_core_events_built_by_hand() -> None:
    conv = chat_converter("m")
    stream = [
        ev.AgentEvent(id="e1", author=AGENT, role="model", parts=(ev.Text("Hi "),), partial=True),
        ev.AgentEvent(id="e1", author=AGENT, role="model", parts=(ev.Text("Hi "),
                      ev.FunctionCall("c1", "show_toast", {"text": "yo"})), finish_reason="STOP",
                      usage=ev.Usage(3, 4, 7)),
    ]
    chunks: list[c.Chunk] = []
    effects: list[Any] = []
    for event in stream:
        result = conv.convert(event)
        chunks += result.chunks
        effects += result.effects
    chunks += conv.finish()
    check_order(chunks)
    assert texts(chunks) == "Hi "
    assert asked(effects) == [CallAnnounced("c1", "show_toast", {"text": "yo"}, client=True)]
    assert chunks[-1] == finished("tool-calls", usage={"inputTokens": 3, "outputTokens": 4, "totalTokens": 7})


def test_adk_events_become_core_events() -> None:
    png = b"\x89PNG"
    event = Event(
        id="e7", invocation_id="i", author=AGENT, partial=True, turn_complete=True, interrupted=True,
        content=types.Content(role="model", parts=[
            text("a", thought=True), call("get_weather", "c1", location="x"),
            types.Part(function_response=types.FunctionResponse(id="c0", name="t", response={"ok": 1})),
            types.Part(inline_data=types.Blob(mime_type="image/png", data=png)),
            types.Part(file_data=types.FileData(file_uri="gs://b/f")),
            types.Part(executable_code=types.ExecutableCode(code="1", language=types.Language.PYTHON)),
        ]),
        finish_reason=types.FinishReason.MAX_TOKENS,
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=2, total_token_count=2),
        input_transcription=types.Transcription(text="hello", finished=True),
        output_transcription=types.Transcription(text="hi"),
        actions=EventActions(requested_tool_confirmations={"c1": ToolConfirmation(hint="?")}),
    )
    assert agent_event(event) == ev.AgentEvent(
        id="e7", invocation_id="i", author=AGENT, role="model",
        parts=(ev.Text("a", True), ev.FunctionCall("c1", "get_weather", {"location": "x"}),
               ev.FunctionResponse("c0", "t", {"ok": 1}), ev.InlineData("image/png", png),
               ev.FileData("gs://b/f", "application/octet-stream"), ev.Text("")),
        partial=True, turn_complete=True, interrupted=True, finish_reason="MAX_TOKENS",
        usage=ev.Usage(input_tokens=2, total_tokens=2), requested_confirmations=frozenset({"c1"}),
        input_transcription=ev.Transcription("hello", True), output_transcription=ev.Transcription("hi", False),
    )
    bare = agent_event(Event(invocation_id="i", author="user"))
    assert (bare.parts, bare.role, bare.usage, bare.requested_confirmations) == ((), None, None, frozenset())


# --- replays ----------------------------------------------------------------------------------------


def test_a_message_is_replayed_part_by_part() -> None:
    parts: list[dict[str, Any]] = [
        {"type": "step-start"},
        {"type": "reasoning", "text": "hmm"},
        {"type": "text", "text": "Paying."},
        {"type": "tool-process_payment", "toolCallId": "c1", "state": "output-available", "input": {"amount": 5},
         "output": {"status": "completed"}, "providerExecuted": True, "approval": {"id": "apr-1", "approved": True}},
        {"type": "step-start"},
        {"type": "dynamic-tool", "toolName": "x", "toolCallId": "c2", "state": "output-denied", "input": {}},
        {"type": "data-note", "id": "n1", "data": {"a": 1}},
        {"type": "tool-broken"},  # no call id: nothing to rebuild
    ]
    replay = message_replay_chunks(parts)
    assert [w["type"] for w in replay] == [
        "start-step", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta", "text-end",
        "tool-input-available", "tool-approval-request", "tool-output-available", "finish-step",
        "start-step", "tool-input-available", "tool-output-denied", "data-note", "finish-step",
    ]
    assert replay[7] == {"type": "tool-input-available", "toolCallId": "c1", "toolName": "process_payment",
                         "input": {"amount": 5}, "providerExecuted": True}
    assert replay[8] == {"type": "tool-approval-request", "approvalId": "apr-1", "toolCallId": "c1"}
    assert replay[12] == {"type": "tool-input-available", "toolCallId": "c2", "toolName": "x", "input": {},
                          "dynamic": True}
    assert replay[14] == {"type": "data-note", "data": {"a": 1}, "id": "n1"}
    assert message_replay_chunks([]) == []


# --- what the approval book decides, as chunks --------------------------------------------------------


def test_show_writes_what_the_book_decides() -> None:
    conv = chat_converter("msg-1")
    conv.start()
    shown = conv.show([
        AwaitClient("c1", "apr-1"),
        AwaitClient("c2"),  # a browser tool "always" allowed: nothing to ask
        RunInBrowser("c3", "change_bgm", {"track": 2}),
        ToolOutcome("c4", CallState.OUTPUT_DENIED),
        ToolOutcome("c5", CallState.OUTPUT_ERROR, "The approval timed out."),
        ToolOutcome("c6", CallState.OUTPUT_ERROR, "The approval timed out.", browser=True),
    ])
    assert wires(shown) == [
        {"type": "tool-approval-request", "approvalId": "apr-1", "toolCallId": "c1"},
        {"type": "tool-input-available", "toolCallId": "c3", "toolName": "change_bgm", "input": {"track": 2}},
        {"type": "tool-output-denied", "toolCallId": "c4"},
        {"type": "tool-output-error", "toolCallId": "c5", "errorText": "The approval timed out.",
         "providerExecuted": True},
        {"type": "tool-output-error", "toolCallId": "c6", "errorText": "The approval timed out."},
    ]
    assert wires(conv.abort("stopped")) == [{"type": "abort", "reason": "stopped"}]
    assert conv.show([ToolOutcome("c7", CallState.OUTPUT_DENIED)]) == []  # after the end: nothing


@pytest.mark.parametrize(("payload", "outcome"), [
    ({"status": "ok"}, CallState.OUTPUT_AVAILABLE),
    ({"error": REJECTED_TEXT}, CallState.OUTPUT_DENIED),
    ({"error": interrupt_result()}, CallState.OUTPUT_DENIED),
    ({"error": "boom"}, CallState.OUTPUT_ERROR),
    ({"error": "boom", "detail": 1}, CallState.OUTPUT_AVAILABLE),
])
def test_result_outcome_says_how_a_result_is_shown(payload: dict[str, Any], outcome: CallState) -> None:
    assert result_outcome(payload) is outcome


def test_only_new_outcomes_are_shown() -> None:
    heard: list[tuple[str, CallState]] = []

    def reported(call_id: str, outcome: CallState) -> bool:
        heard.append((call_id, outcome))
        return call_id != "c1"  # c1 already ended (e.g. its approval expired)

    conv = chat_converter("msg-1", reported=reported)
    chunks, _ = run([response_event(("c1", "process_payment", {"error": REJECTED_TEXT}),
                                    ("c2", "get_weather", {"sky": "clear"}))], conv)
    assert heard == [("c1", CallState.OUTPUT_DENIED), ("c2", CallState.OUTPUT_AVAILABLE)]
    assert [w["toolCallId"] for w in wires(chunks) if w["type"].startswith("tool-output")] == ["c2"]
