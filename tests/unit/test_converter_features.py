"""Unit tests for what a real ADK agent's events become (issue 32), in adk_gateway.core.converter:
agent names, message metadata, grounding, shared state, long-running tools, sign-ins and
artifacts; and how `adk_gateway.agents.events` reads them from ADK's events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.adk.auth.auth_tool import AuthConfig
from google.adk.events import Event, EventActions
from google.genai import types

from adk_gateway.agents.events import agent_event
from adk_gateway.core import chunks as c
from adk_gateway.core import events as ev
from adk_gateway.core.approval import CallState
from adk_gateway.core.converter import SIGN_IN_FAILED, MessageConverter, Mode
from adk_gateway.core.effects import ArtifactSaved, CallAnnounced, SignInRequested
from adk_gateway.core.kinds import CREDENTIAL_TOOL, ToolKind
from tests.unit.test_writer import check_message

USAGE = ev.Usage(11, 3, 14)


def kinds(name: str) -> ToolKind:
    return {"ask_for_approval": ToolKind(long_running=True), "show": ToolKind(browser=True)}.get(name, ToolKind())


def model(event_id: str, *parts: ev.Part, author: str = "root", partial: bool = False, **fields: Any) -> ev.AgentEvent:
    return ev.AgentEvent(id=event_id, author=author, role="model", parts=parts, partial=partial, **fields)


def responses(*parts: ev.FunctionResponse, author: str = "root", **fields: Any) -> ev.AgentEvent:
    return ev.AgentEvent(id="r", author=author, role="user", parts=parts, **fields)


def run(events: Iterable[ev.AgentEvent], conv: MessageConverter | None = None,
        finish: bool = True) -> tuple[list[c.Chunk], list[Any], MessageConverter]:
    conv = conv or MessageConverter("msg-1", tools=kinds)
    out = conv.start()
    effects: list[Any] = []
    for event in events:
        result = conv.convert(event)
        out += result.chunks
        effects += result.effects
    if finish:
        out += conv.finish()
    return out, effects, conv


def wires(chunks: Iterable[c.Chunk]) -> list[dict[str, Any]]:
    return [chunk.to_wire() for chunk in chunks]


def types_of(chunks: Iterable[c.Chunk]) -> list[str]:
    return [w["type"] for w in wires(chunks)]


# --- which agent speaks ------------------------------------------------------------------------------


def test_every_step_whose_author_changes_names_its_agent() -> None:
    chunks, _, conv = run([
        model("e1", ev.Text("Hi"), author="root"),
        model("e2", ev.FunctionCall("t1", "transfer_to_agent", {"agent_name": "weather"}), author="root"),
        responses(ev.FunctionResponse("t1", "transfer_to_agent", {"result": None}), author="root"),
        model("e3", ev.Text("Sunny"), author="weather"),
        model("e4", ev.Text("More"), author="weather"),
    ])
    check_message(chunks)
    wire = wires(chunks)
    assert [w["data"]["name"] for w in wire if w["type"] == "data-agent"] == ["root", "weather"]
    # Each names its step's agent right after the step opens, before its content.
    for index, w in enumerate(wire):
        if w["type"] == "data-agent":
            assert wire[index - 1]["type"] == "start-step"
    assert wire[-1]["messageMetadata"]["agent"] == "weather"
    assert conv.agent == "weather"


def test_a_continuation_by_the_same_agent_names_no_one_again() -> None:
    conv = MessageConverter("msg-1", tools=kinds, agent="root")
    chunks, _, _ = run([model("e1", ev.Text("again"), author="root")], conv)
    assert "data-agent" not in types_of(chunks)
    assert wires(chunks)[-1]["messageMetadata"] == {"agent": "root"}


# --- message metadata ---------------------------------------------------------------------------------


def test_usage_counts_each_model_call_once_from_its_final_response() -> None:
    # As Gemini streams through ADK: the last partial carries the usage, the aggregate repeats it;
    # a model may also report it on every chunk.
    events = [
        model("e1", ev.Text("Par"), partial=True, usage=ev.Usage(11, 1, 12)),
        model("e1", ev.Text("is"), partial=True, usage=USAGE, model="gemini-2.5-flash-001"),
        model("e1", ev.Text("Paris"), usage=USAGE, model="gemini-2.5-flash-001"),
        model("e2", ev.Text("!"), partial=True, usage=ev.Usage(20, 1, 21)),
        model("e2", ev.Text("!"), usage=ev.Usage(20, 1, 21), model="gemini-2.5-pro"),
    ]
    conv = MessageConverter("msg-1", tools=kinds, created_at=1_700_000_000_000)
    chunks, _, _ = run(events, conv)
    assert wires(chunks)[-1]["messageMetadata"] == {
        "usage": {"inputTokens": 31, "outputTokens": 4, "totalTokens": 35},
        "model": "gemini-2.5-pro", "createdAt": 1_700_000_000_000, "agent": "root",
    }


def test_a_continuation_reports_the_whole_messages_usage() -> None:
    conv = MessageConverter("msg-1", tools=kinds, agent="root",
                            usage={"inputTokens": 5, "outputTokens": 2, "totalTokens": 7})
    chunks, _, _ = run([model("e1", ev.Text("ok"), usage=USAGE)], conv)
    assert wires(chunks)[-1]["messageMetadata"]["usage"] == {"inputTokens": 16, "outputTokens": 5,
                                                             "totalTokens": 21}


# --- grounding ------------------------------------------------------------------------------------------

SOURCES = (ev.Source("example.com", "https://example.com/paris"), ev.Source("doc1.pdf"),
           ev.Source("wiki", "https://en.wikipedia.org/wiki/Paris"))
HTML = '<div class="gs">Search suggestions</div>'


def test_grounding_becomes_sources_and_search_suggestions_once_inside_their_step() -> None:
    grounded = {"sources": SOURCES, "search_suggestions": HTML}
    chunks, _, _ = run([
        model("e1", ev.Text("Paris is "), partial=True),
        model("e1", ev.Text("the capital."), partial=True, **grounded),  # ADK repeats the grounding ...
        model("e1", ev.Text("Paris is the capital."), **grounded),  # ... on the final response
        model("e2", ev.Text("More."), **grounded),  # and a later call cites the same again
    ])
    check_message(chunks)
    wire = wires(chunks)
    sources = [w for w in wire if w["type"].startswith("source-")]
    assert [(w["type"], w.get("url"), w["title"]) for w in sources] == [
        ("source-url", "https://example.com/paris", "example.com"),
        ("source-document", None, "doc1.pdf"),
        ("source-url", "https://en.wikipedia.org/wiki/Paris", "wiki"),
    ]
    assert sources[1]["mediaType"] == "text/plain"
    assert len({w["sourceId"] for w in sources}) == 3
    assert [w["data"] for w in wire if w["type"] == "data-search-suggestions"] == [{"html": HTML}]
    # All of it inside the first step: before its finish-step.
    first_end = types_of(chunks).index("finish-step")
    assert all(wire.index(w) < first_end for w in sources)


# --- shared state ---------------------------------------------------------------------------------------


def test_changes_to_the_keys_the_client_sees_become_one_data_state_part() -> None:
    conv = MessageConverter("msg-1", tools=kinds, client_state_keys=frozenset({"cart"}), client_state={"cart": []})
    chunks, _, _ = run([
        model("e1", ev.FunctionCall("a1", "add_to_cart", {"item": "apple"})),
        responses(ev.FunctionResponse("a1", "add_to_cart", {"ok": True}),
                  state_delta={"cart": [{"item": "apple"}], "secret": "x"}),
        model("e2", ev.Text("Added."), state_delta={"summary": "one apple"}),  # not a listed key: nothing
        responses(ev.FunctionResponse("a2", "add_to_cart", {"ok": True}), state_delta={"cart": ["a", "b"]}),
    ], conv)
    check_message(chunks)
    states = [w for w in wires(chunks) if w["type"] == "data-state"]
    assert states == [
        {"type": "data-state", "id": "state", "data": {"cart": [{"item": "apple"}]}},
        {"type": "data-state", "id": "state", "data": {"cart": ["a", "b"]}},
    ]
    assert not any("secret" in str(w) for w in wires(chunks))


def test_without_client_state_nothing_of_the_state_is_shown() -> None:
    chunks, _, _ = run([responses(ev.FunctionResponse("a1", "t", {}), state_delta={"cart": [1]})])
    assert "data-state" not in types_of(chunks)


# --- long-running tools ------------------------------------------------------------------------------


def test_a_long_running_call_waits_for_the_client_in_the_last_step_with_its_interim_result() -> None:
    chunks, effects, conv = run([
        model("e1", ev.Text("One moment. "), partial=True),
        model("e1", ev.Text("One moment. "), ev.FunctionCall("lr1", "ask_for_approval", {"amount": 50})),
        responses(ev.FunctionResponse("lr1", "ask_for_approval", {"status": "pending"})),
        # ADK calls the model again after the interim result:
        model("e2", ev.Text("Waiting for approval."), partial=True),
        model("e2", ev.Text("Waiting for approval.")),
    ])
    check_message(chunks)
    assert CallAnnounced("lr1", "ask_for_approval", {"amount": 50}, client=True) in effects
    wire = wires(chunks)
    last_step = len(wire) - 1 - types_of(chunks)[::-1].index("start-step")
    tail = wire[last_step:]
    assert [w["type"] for w in tail] == [
        "start-step", "text-start", "text-delta", "text-end", "tool-input-start", "tool-input-delta",
        "tool-input-available", "data-tool-status", "finish-step", "finish"]
    call = tail[6]
    assert call == {"type": "tool-input-available", "toolCallId": "lr1", "toolName": "ask_for_approval",
                    "input": {"amount": 50}}  # no providerExecuted: the client answers it
    assert tail[7] == {"type": "data-tool-status", "id": "tool-status-lr1",
                       "data": {"toolCallId": "lr1", "toolName": "ask_for_approval", "output": {"status": "pending"}}}
    assert not any(w["type"] == "tool-output-available" for w in wire)
    assert wire[-1]["finishReason"] == "tool-calls" and conv.awaiting_client


def test_a_long_running_call_without_an_interim_result() -> None:
    chunks, _, _ = run([model("e1", ev.FunctionCall("lr1", "ask_for_approval", {}))])
    check_message(chunks)
    assert "data-tool-status" not in types_of(chunks)
    assert types_of(chunks)[-3:] == ["tool-input-available", "finish-step", "finish"]


def test_a_stopped_run_still_shows_its_long_running_call() -> None:
    conv = MessageConverter("msg-1", tools=kinds)
    chunks, _, _ = run([model("e1", ev.FunctionCall("lr1", "ask_for_approval", {}))], conv, finish=False)
    chunks += conv.abort("stopped")
    check_message(chunks)
    assert "tool-input-available" in types_of(chunks) and chunks[-1] == c.Abort(reason="stopped")


# --- sign-ins -------------------------------------------------------------------------------------------

AUTH_CONFIG = {"authScheme": {"type": "oauth2"},
               "exchangedAuthCredential": {"authType": "oauth2", "oauth2": {"authUri": "https://idp/authorize"}}}


def sign_in_events() -> list[ev.AgentEvent]:
    return [
        model("e1", ev.FunctionCall("t1", "list_events", {"day": "today"})),
        ev.AgentEvent(id="e2", author="root", role="user", parts=(ev.FunctionCall(
            "cred-1", CREDENTIAL_TOOL, {"functionCallId": "t1", "authConfig": AUTH_CONFIG}),)),
        responses(ev.FunctionResponse("t1", "list_events", {"pending": True}), requested_sign_ins=frozenset({"t1"})),
    ]


def test_adk_asking_for_a_sign_in_is_an_effect_the_caller_shows_as_a_tool_part_the_client_answers() -> None:
    conv = MessageConverter("msg-1", tools=kinds)
    chunks, effects, _ = run(sign_in_events(), conv, finish=False)
    assert SignInRequested("cred-1", "t1", AUTH_CONFIG) in effects
    assert not any(w["type"].startswith("tool-output") for w in wires(chunks))  # the placeholder is hidden
    chunks += conv.sign_in("cred-1", {"authUri": "https://idp/authorize?state=s", "toolCallId": "t1"})
    chunks += conv.finish()
    check_message(chunks)
    asked = [w for w in wires(chunks) if w.get("toolCallId") == "cred-1"]
    assert asked[-1] == {"type": "tool-input-available", "toolCallId": "cred-1", "toolName": CREDENTIAL_TOOL,
                         "input": {"authUri": "https://idp/authorize?state=s", "toolCallId": "t1"}}
    assert wires(chunks)[-1]["finishReason"] == "tool-calls"


def test_a_tool_still_asking_after_a_sign_in_ends_with_an_error() -> None:
    # The continuation after the sign-in: ADK could not get the credential (a failed exchange), so
    # the re-run tool asks again, with no new request this response could show.
    chunks, _, _ = run([responses(ev.FunctionResponse("t1", "list_events", {"pending": True}),
                                  requested_sign_ins=frozenset({"t1"}))])
    assert {"type": "tool-output-error", "toolCallId": "t1", "errorText": SIGN_IN_FAILED,
            "providerExecuted": True} in wires(chunks)


# --- artifacts ------------------------------------------------------------------------------------------


def test_each_saved_artifact_version_is_an_effect_once() -> None:
    conv = MessageConverter("msg-1", tools=kinds)
    _, effects, _ = run([
        responses(ev.FunctionResponse("a1", "make_report", {"ok": 1}), artifact_delta={"report.txt": 0, "c.png": 0}),
        responses(ev.FunctionResponse("a2", "make_report", {"ok": 1}), artifact_delta={"report.txt": 1}),
        responses(ev.FunctionResponse("a3", "x", {}), artifact_delta={"report.txt": 1}),  # repeated: once
    ], conv, finish=False)
    assert [e for e in effects if isinstance(e, ArtifactSaved)] == [
        ArtifactSaved("report.txt", 0), ArtifactSaved("c.png", 0), ArtifactSaved("report.txt", 1)]
    chunks = conv.file("https://gw/api/chats/x/artifacts/report.txt/versions/0?sig", "text/plain")
    # (A file belongs to a step: here, where no model spoke yet, it opens one.)
    assert wires(chunks)[-1] == {"type": "file", "url": "https://gw/api/chats/x/artifacts/report.txt/versions/0?sig",
                                 "mediaType": "text/plain"}


# --- live turns share the rules ----------------------------------------------------------------------


def test_a_live_turn_names_its_agent_and_reports_its_usage() -> None:
    conv = MessageConverter("msg-1", mode=Mode.LIVE, tools=kinds, reported=lambda _id, _o: True)
    out = conv.convert(model("x1", ev.Text("hi"), author="voice")).chunks
    out += conv.convert(ev.AgentEvent(id="x2", author="voice", usage=USAGE, model="gemini-live")).chunks
    out += conv.finish("stop")
    check_message(out)
    wire = wires(out)
    assert wire[2] == {"type": "data-agent", "data": {"name": "voice"}}
    assert wire[-1]["messageMetadata"] == {"usage": {"inputTokens": 11, "outputTokens": 3, "totalTokens": 14},
                                           "agent": "voice"}
    assert CallState.OUTPUT_AVAILABLE  # (the live rules for calls are in test_writer and the live tests)


# --- reading ADK's events ------------------------------------------------------------------------------


def test_the_adapter_reads_grounding_state_artifacts_sign_ins_and_the_model() -> None:
    grounding = types.GroundingMetadata(
        grounding_chunks=[
            types.GroundingChunk(web=types.GroundingChunkWeb(uri="https://example.com/a", title="example.com")),
            types.GroundingChunk(retrieved_context=types.GroundingChunkRetrievedContext(
                uri="gs://corpus/doc1.pdf", title="doc1.pdf", text="...")),
            types.GroundingChunk(retrieved_context=types.GroundingChunkRetrievedContext(
                uri="https://docs.example.com/b", title="B")),
            types.GroundingChunk(maps=types.GroundingChunkMaps(uri="https://maps.google.com/?cid=1", title="Cafe")),
        ],
        search_entry_point=types.SearchEntryPoint(rendered_content=HTML),
    )
    auth = AuthConfig.model_validate(AUTH_CONFIG)
    event = Event(
        invocation_id="i", author="root", content=types.Content(role="model", parts=[types.Part(text="x")]),
        grounding_metadata=grounding, model_version="gemini-2.5-flash-001",
        actions=EventActions(state_delta={"cart": [1]}, artifact_delta={"report.txt": 2},
                             requested_auth_configs={"t1": auth}),
    )
    read = agent_event(event)
    assert read.sources == (ev.Source("example.com", "https://example.com/a"), ev.Source("doc1.pdf"),
                            ev.Source("B", "https://docs.example.com/b"),
                            ev.Source("Cafe", "https://maps.google.com/?cid=1"))
    assert read.search_suggestions == HTML
    assert read.state_delta == {"cart": [1]} and read.artifact_delta == {"report.txt": 2}
    assert read.requested_sign_ins == frozenset({"t1"})
    assert read.model == "gemini-2.5-flash-001"
    # A response that does not name its model: the agent's, when the host knows it.
    plain = Event(invocation_id="i", author="root", content=types.Content(role="model", parts=[types.Part(text="x")]))
    assert agent_event(plain, {"root": "gemini-2.5-flash"}).model == "gemini-2.5-flash"
    assert agent_event(plain).model is None and agent_event(plain).state_delta is None
