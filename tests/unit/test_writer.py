"""Unit tests for adk_gateway.core.writer (`MessageWriter`) and the live turns written through it.

The property test drives a writer with any sequence of calls and checks the chunks against the
AI SDK's reading rules: one `start` first, one end last and nothing after it, steps balanced and
never nested, every text or reasoning part opened once and closed before anything else, ids
unique, no `null` in optional fields.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.core import chunks as c
from adk_gateway.core import events as ev
from adk_gateway.core.approval import REJECTED_TEXT, interrupt_result
from adk_gateway.core.converter import MessageConverter, Mode
from adk_gateway.core.effects import CallAnnounced
from adk_gateway.core.kinds import ToolKind
from adk_gateway.core.writer import MessageWriter

Wire = dict[str, Any]
ENDS = frozenset({"finish", "error", "abort"})


def writer(**options: Any) -> tuple[MessageWriter, list[c.Chunk]]:
    out: list[c.Chunk] = []
    return MessageWriter(out.append, **options), out


def wires(chunks: list[c.Chunk]) -> list[Wire]:
    return [chunk.to_wire() for chunk in chunks]


def check_message(chunks: list[c.Chunk], *, started: bool = False) -> None:
    """Raises AssertionError where the chunks break the AI SDK's reading rules (see the docstring)."""
    wire = wires(chunks)
    for w in wire:
        json.dumps(w)
        nulls = {k for k, v in w.items() if v is None}
        assert nulls <= {"input", "output", "data", "messageMetadata"}, w
    if not started:
        assert wire and wire[0]["type"] == "start", wire[:1]
    assert sum(w["type"] == "start" for w in wire) == (0 if started else 1)
    in_step = False
    open_part: tuple[str, str] | None = None  # (family, id)
    seen_ids: set[str] = set()
    ended = False
    for index, w in enumerate(wire):
        kind = w["type"]
        assert not ended, f"{kind} after the end"
        family = kind.split("-")[0]
        if family in ("text", "reasoning") and kind.endswith(("-start", "-delta", "-end")):
            if kind.endswith("-start"):
                assert in_step, f"{kind} outside a step"
                assert open_part is None, f"{kind} while {open_part} is open"
                assert w["id"] not in seen_ids, f"id reused: {w}"
                seen_ids.add(w["id"])
                open_part = (family, w["id"])
            else:
                assert open_part == (family, w["id"]), f"{kind} for {w['id']} while {open_part} is open"
                if kind.endswith("-end"):
                    open_part = None
            continue
        if kind not in ("data-pcm", "data-note", "data-transcription"):
            assert open_part is None, f"{kind} while {open_part} is open"
        if kind == "start-step":
            assert not in_step, "nested start-step"
            in_step = True
        elif kind == "finish-step":
            assert in_step, "finish-step outside a step"
            in_step = False
        elif kind in ("tool-input-start", "file"):
            assert in_step, f"{kind} outside a step"
        elif kind == "finish":
            assert not in_step, "finish with a step open"
        # An `error` ends the message unless a `finish` follows (a live turn's error is not final).
        if kind in ENDS and (kind != "error" or index == len(wire) - 1):
            ended = True


# --- the writer --------------------------------------------------------------------------------------


def test_a_message_with_text_reasoning_and_a_tool() -> None:
    w, out = writer(message_id="m", scope="e1")
    w.reasoning("let me ")
    w.reasoning("think")
    w.text("Paying")
    announced = w.tool_call("c1", "process_payment", {"amount": 5, "at": object}, provider_executed=True)
    w.approval_request("apr-1", "c1")
    w.finish_step()
    w.tool_output("c1", {"ok": True}, provider_executed=True)
    w.text("done")
    w.add_usage(ev.Usage(1, 2, 3))
    w.add_usage(ev.Usage(output_tokens=1))
    w.finish("stop")
    check_message(out)
    assert [x["type"] for x in wires(out)] == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-delta", "reasoning-end",
        "text-start", "text-delta", "text-end", "tool-input-start", "tool-input-delta", "tool-input-available",
        "tool-approval-request", "finish-step", "tool-output-available", "start-step", "text-start",
        "text-delta", "text-end", "finish-step", "finish",
    ]
    assert out[0] == c.Start(messageId="m")
    assert out[2] == c.ReasoningStart(id="reasoning-e1-1")
    assert announced == {"amount": 5, "at": str(object)}  # plain JSON, as the client gets it
    assert out[10] == c.ToolInputDelta(toolCallId="c1", inputTextDelta=json.dumps(announced, separators=(",", ":")))
    assert out[-1] == c.Finish(finishReason="stop",
                               messageMetadata={"usage": {"inputTokens": 1, "outputTokens": 3, "totalTokens": 3}})


def test_browser_calls_are_not_provider_executed() -> None:
    w, out = writer()
    w.tool_call("c1", "get_location", {}, provider_executed=False)
    w.tool_error("c1", "no", provider_executed=False)
    assert all("providerExecuted" not in x for x in wires(out))


def test_nothing_is_written_after_the_end() -> None:
    for end in ("finish", "error", "abort"):
        w, out = writer()
        w.text("a")
        if end == "finish":
            w.finish("stop")
        elif end == "error":
            w.error("bad")
        else:
            w.abort("stopped")
        written = len(out)
        w.text("b")
        w.tool_denied("c1")
        w.data("note", {})
        w.finish("stop")
        w.error("again")
        assert len(out) == written and w.ended
        check_message(out)


def test_a_final_error_closes_the_parts_but_keeps_the_step() -> None:
    # The client stops reading at `error`: a chat response's error ends it where it stands.
    w, out = writer()
    w.text("partial")
    w.error("boom")
    assert [x["type"] for x in wires(out)] == ["start", "start-step", "text-start", "text-delta", "text-end", "error"]
    assert w.errored


def test_a_finish_that_is_not_sent_gives_way_to_an_error() -> None:
    """The chat's record could not be saved: the `finish` written for it is not sent, and the
    message ends with the failure's `error` instead."""
    w, out = writer()
    w.text("answer")
    w.finish("stop")
    sent = [x for x in wires(out) if x["type"] not in ("finish-step", "finish")]
    w.unsend_end()
    w.error("store down")
    assert w.ended and w.errored
    assert [x["type"] for x in wires(out)][-1] == "error"
    assert [x["type"] for x in sent][-1] == "text-end"


def test_an_error_that_is_not_final_leaves_the_message_open() -> None:
    w, out = writer()
    w.text("partial")
    w.error("boom", final=False)
    w.finish("error")
    check_message(out)
    assert [x["type"] for x in wires(out)][-3:] == ["error", "finish-step", "finish"]
    assert not w.errored


def test_data_streams_beside_an_open_text_part() -> None:
    w, out = writer()
    w.text("hel")
    w.data("pcm", {"content": "AA=="}, transient=True)
    w.text("lo")
    w.finish("stop")
    check_message(out)
    kinds = [x["type"] for x in wires(out)]
    assert kinds.count("text-start") == 1 and kinds.index("data-pcm") < kinds.index("text-end")
    assert wires(out)[4] == {"type": "data-pcm", "data": {"content": "AA=="}, "transient": True}


def test_a_continued_message_does_not_start_again() -> None:
    w, out = writer(message_id="m", started=True)
    w.tool_denied("c1")
    w.finish("stop")
    assert [x["type"] for x in wires(out)] == ["tool-output-denied", "finish"]


# --- property: any sequence of calls is a well-formed message --------------------------------------

words = st.text(max_size=4)
call_ids = st.sampled_from(["c1", "c2", "c3"])
operations = st.one_of(
    st.tuples(st.just("start")),
    st.tuples(st.just("start_step")),
    st.tuples(st.just("finish_step")),
    st.tuples(st.just("text"), words),
    st.tuples(st.just("reasoning"), words),
    st.tuples(st.just("end_text")),
    st.tuples(st.just("end_reasoning")),
    st.tuples(st.just("close_parts")),
    st.tuples(st.just("tool_call"), call_ids, st.booleans()),
    st.tuples(st.just("tool_input_available"), call_ids),
    st.tuples(st.just("approval_request"), call_ids),
    st.tuples(st.just("tool_output"), call_ids, st.booleans()),
    st.tuples(st.just("tool_error"), call_ids, st.booleans()),
    st.tuples(st.just("tool_denied"), call_ids),
    st.tuples(st.just("file")),
    st.tuples(st.just("data"), st.booleans()),
    st.tuples(st.just("error"), st.booleans()),
    st.tuples(st.just("abort")),
    st.tuples(st.just("finish")),
)


def apply(w: MessageWriter, op: tuple[Any, ...]) -> None:
    name, *args = op
    if name in ("text", "reasoning"):
        getattr(w, name)(args[0])
    elif name == "tool_call":
        w.tool_call(args[0], "t", {"x": 1}, provider_executed=args[1])
    elif name == "tool_input_available":
        w.tool_input_available(args[0], "t", {})
    elif name == "approval_request":
        w.approval_request("apr", args[0])
    elif name in ("tool_output", "tool_error"):
        getattr(w, name)(args[0], "out", provider_executed=args[1])
    elif name == "tool_denied":
        w.tool_denied(args[0])
    elif name == "file":
        w.file("https://example.com/f", "text/plain")
    elif name == "data":
        w.data("note", {"n": 1}, transient=args[0])
    elif name == "error":
        w.error("bad", final=args[0])
    elif name == "abort":
        w.abort()
    elif name == "finish":
        w.finish("stop")
    else:
        getattr(w, name)()


@settings(max_examples=400, deadline=None)
@given(ops=st.lists(operations, max_size=40), started=st.booleans())
def test_any_sequence_of_calls_is_a_well_formed_message(ops: list[tuple[Any, ...]], started: bool) -> None:
    w, out = writer(message_id="m", started=started)
    expected_text = ""
    for op in ops:
        if op[0] == "text" and not w.ended:
            expected_text += op[1]
        apply(w, op)
    w.finish("stop")  # every message ends
    check_message(out, started=started)
    kinds = [x["type"] for x in wires(out)]
    assert kinds[-1] in ENDS and sum(kind in ("finish", "abort") for kind in kinds) <= 1
    if kinds[-1] == "finish":
        assert kinds.count("start-step") == kinds.count("finish-step")
    assert "".join(x["delta"] for x in wires(out) if x["type"] == "text-delta") == expected_text


# --- live turns ---------------------------------------------------------------------------------------


class Turn:
    """A live turn's converter whose chunks are kept in order, as the live session logs them."""

    def __init__(self) -> None:
        self.conv = MessageConverter("msg-1", mode=Mode.LIVE, tools=lambda name: ToolKind(browser=name == "show"))
        self.out: list[c.Chunk] = []
        self.effects: list[Any] = []

    def feed(self, *events: ev.AgentEvent) -> None:
        for event in events:
            result = self.conv.convert(event)
            self.out += result.chunks
            self.effects += result.effects

    def __call__(self, chunks: list[c.Chunk]) -> None:
        self.out += chunks


def model(*parts: ev.Part, partial: bool = False, said: ev.Transcription | None = None,
          usage: ev.Usage | None = None) -> ev.AgentEvent:
    return ev.AgentEvent(author="agent", role="model", parts=parts, partial=partial, output_transcription=said,
                         usage=usage)


def test_a_spoken_answer_streams_its_transcript_and_audio() -> None:
    live = Turn()
    pcm = b"\x01\x00" * 4
    live.feed(
        model(said=ev.Transcription("hel", False)),
        model(ev.InlineData("audio/pcm;rate=24000", pcm), partial=True),
        model(said=ev.Transcription("lo", False), usage=ev.Usage(1, 1, 2)),
        model(said=ev.Transcription("hello", True)),  # the aggregated copy: ends the part
    )
    live(live.conv.finish("stop"))
    check_message(live.out)
    wire = wires(live.out)
    assert [x["type"] for x in wire] == ["start", "start-step", "data-agent", "text-start", "text-delta", "data-pcm",
                                         "text-delta", "text-end", "finish-step", "finish"]
    assert wire[5]["data"] == {"content": base64.b64encode(pcm).decode(), "sampleRate": 24000, "channels": 1,
                               "bitDepth": 16}
    assert wire[5]["transient"] is True
    assert wire[-1]["messageMetadata"] == {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                                           "agent": "agent"}
    assert live.conv.model_output


def test_streamed_text_is_not_repeated_by_its_aggregate() -> None:
    live = Turn()
    live.feed(
        model(ev.Text("th", thought=True), partial=True),
        model(ev.Text("ok "), partial=True),
        model(ev.Text("go"), partial=True),
        model(ev.Text("th", thought=True)),
        model(ev.Text("ok go")),
        model(ev.Text("whole")),  # not streamed: written at once
    )
    live(live.conv.finish("stop"))
    check_message(live.out)
    assert "".join(x["delta"] for x in wires(live.out) if x["type"] == "text-delta") == "ok gowhole"
    assert "".join(x["delta"] for x in wires(live.out) if x["type"] == "reasoning-delta") == "th"


def test_the_users_speech_is_one_part_per_utterance() -> None:
    live = Turn()
    live(live.conv.user_transcription(ev.Transcription("", False)))  # nothing yet: nothing written
    assert live.out == []
    for transcription in (ev.Transcription("he", False), ev.Transcription("y", False),
                          ev.Transcription("hey", True), ev.Transcription("again", True)):
        live(live.conv.user_transcription(transcription))
    parts = [x for x in wires(live.out) if x["type"] == "data-transcription"]
    assert [(p["id"], p["data"]["text"], p["data"]["finished"]) for p in parts] == [
        ("msg-1-user-0", "he", False), ("msg-1-user-0", "hey", False), ("msg-1-user-0", "hey", True),
        ("msg-1-user-1", "again", True),
    ]
    assert not live.conv.model_output


def test_tool_calls_and_results_are_shown_and_announced() -> None:
    live = Turn()
    live.feed(model(ev.FunctionCall("c1", "t", {}), partial=True))
    assert live.effects == []  # a call comes whole with the final event
    live.feed(model(ev.FunctionCall("c1", "t", {"a": 1}), ev.FunctionResponse("c1", "t", {"error": REJECTED_TEXT})))
    assert live.effects == [CallAnnounced("c1", "t", {"a": 1}, client=False)]
    assert live.conv.calls == ["c1"]
    live(live.conv.pause())
    live.feed(model(ev.FunctionCall(None, "show", {})))
    anonymous = live.effects[-1]
    assert (anonymous.tool_call_id, anonymous.tool_name, anonymous.client) == ("call-msg-1-1", "show", True)
    live.feed(model(ev.FunctionResponse("call-msg-1-1", "show", {"error": interrupt_result()})))
    live(live.conv.finish("stop"))
    check_message(live.out)
    assert [x for x in wires(live.out) if x["type"] == "tool-output-denied"] == [
        {"type": "tool-output-denied", "toolCallId": "c1"},
        {"type": "tool-output-denied", "toolCallId": "call-msg-1-1"},
    ]


def test_a_model_error_is_shown_and_the_turn_still_finishes() -> None:
    live = Turn()
    live.feed(model(ev.Text("par"), partial=True))
    live(live.conv.error("kaput\n  at /srv/secret/path.py"))
    live(live.conv.finish("error"))
    check_message(live.out)
    assert [x for x in wires(live.out) if x["type"] == "error"] == [{"type": "error", "errorText": "kaput"}]
    assert live.out[-1] == c.Finish(finishReason="error", messageMetadata={"agent": "agent"})


def test_a_turn_that_wrote_nothing_has_not_started() -> None:
    live = Turn()
    live.feed(model(usage=ev.Usage(1, 1, 2)))
    assert live.out == [] and not live.conv.started
