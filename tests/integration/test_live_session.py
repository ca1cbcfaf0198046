"""`LiveSession` against ADK `run_live` with the demo agent on the scripted model (offline)."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool
from google.genai import types

from adk_gateway.agents.adk import AgentHost
from adk_gateway.agents.demo import build_demo_agent
from adk_gateway.agents.events import agent_event
from adk_gateway.agents.script import tiny_png
from adk_gateway.agents.scripted_live import ScriptedLiveConnection
from adk_gateway.agents.tools import APPROVALS_STATE_KEY, PLUGIN_NAME, PermissionPlugin
from adk_gateway.core.approval import REJECTED_TEXT, ApprovalRefused, LiveApproval, permanently_denied_text
from adk_gateway.core.chunks import adapt_wire
from adk_gateway.core.events import AgentEvent
from adk_gateway.core.pcm import PcmFormatError, chunk_bytes, duration_ms, tone
from adk_gateway.metrics import Metrics
from adk_gateway.services.live import ENDED_TEXT, TIMEOUT_TEXT, LiveSession
from adk_gateway.services.streams import Follower, FollowerOverrun, StreamLog
from tests.audio import dominant_frequency

TIMEOUT = 10.0
Wire = dict[str, Any]

# --- chunk validation ------------------------------------------------------------------------------

REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "start": {},
    "start-step": {},
    "finish-step": {},
    "finish": {"finishReason": str},
    "error": {"errorText": str},
    "abort": {},
    "text-start": {"id": str},
    "text-delta": {"id": str, "delta": str},
    "text-end": {"id": str},
    "reasoning-start": {"id": str},
    "reasoning-delta": {"id": str, "delta": str},
    "reasoning-end": {"id": str},
    "tool-input-start": {"toolCallId": str, "toolName": str},
    "tool-input-delta": {"toolCallId": str, "inputTextDelta": str},
    "tool-input-available": {"toolCallId": str, "toolName": str},
    "tool-approval-request": {"approvalId": str, "toolCallId": str},
    "tool-output-available": {"toolCallId": str},
    "tool-output-error": {"toolCallId": str, "errorText": str},
    "tool-output-denied": {"toolCallId": str},
    "file": {"url": str, "mediaType": str},
    "data-agent": {"data": dict},
    "data-pcm": {"data": dict},
    "data-transcription": {"data": dict},
}
V6_REASONS = {"stop", "length", "content-filter", "tool-calls", "error", "other"}


def _no_none(value: Any, path: str = "") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert item is not None, f"{path}.{key} is None"
            _no_none(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_none(item, f"{path}[{index}]")


def validate_chunk(wire: Wire, major: int) -> None:
    kind = wire.get("type")
    assert kind in REQUIRED, f"unknown chunk type {kind!r}"
    _no_none(wire, kind)
    json.dumps(wire)  # plain JSON
    for name, expected in REQUIRED[kind].items():
        assert isinstance(wire.get(name), expected), f"{kind}.{name}: {wire.get(name)!r}"
    if kind == "finish":
        allowed = V6_REASONS | ({"interrupted"} if major >= 7 else set())
        assert wire["finishReason"] in allowed
    if kind == "data-pcm":
        data = wire["data"]
        assert set(data) == {"content", "sampleRate", "channels", "bitDepth"}
        assert (data["sampleRate"], data["channels"], data["bitDepth"]) == (24000, 1, 16)
        assert base64.b64decode(data["content"], validate=True)
        assert wire.get("transient") is True
    if kind == "data-transcription":
        data = wire["data"]
        assert data["role"] == "user" and isinstance(data["text"], str) and isinstance(data["finished"], bool)
        assert isinstance(wire.get("id"), str)


def split_turns(chunks: list[Wire]) -> list[list[Wire]]:
    """The complete UI messages in `chunks` (every chunk must belong to one)."""
    turns: list[list[Wire]] = []
    current: list[Wire] | None = None
    for wire in chunks:
        if wire["type"] == "start":
            assert current is None, "start inside an open message"
            current = [wire]
            continue
        assert current is not None, f"{wire['type']} outside a message"
        current.append(wire)
        if wire["type"] == "finish":
            turns.append(current)
            current = None
    return turns


def validate_turn(turn: list[Wire]) -> None:
    """start … finish with balanced, non-nested steps and well-formed text/reasoning parts."""
    assert turn[0]["type"] == "start" and isinstance(turn[0].get("messageId"), str)
    assert turn[-1]["type"] == "finish"
    in_step = False
    open_parts: set[str] = set()
    for wire in turn[1:-1]:
        kind = wire["type"]
        assert kind not in ("start", "finish")
        if kind == "start-step":
            assert not in_step, "nested start-step"
            in_step = True
        elif kind == "finish-step":
            assert in_step, "finish-step without start-step"
            assert not open_parts, "finish-step with an open text part"
            in_step = False
        elif kind in ("text-start", "reasoning-start"):
            assert in_step and wire["id"] not in open_parts
            open_parts.add(wire["id"])
        elif kind in ("text-delta", "reasoning-delta"):
            assert wire["id"] in open_parts
        elif kind in ("text-end", "reasoning-end"):
            assert wire["id"] in open_parts
            open_parts.remove(wire["id"])
        elif kind == "data-pcm":
            assert in_step
    assert not in_step and not open_parts


def text_of(turn: list[Wire]) -> str:
    return "".join(w["delta"] for w in turn if w["type"] == "text-delta")


def pcm_of(turn: list[Wire]) -> bytes:
    return b"".join(base64.b64decode(w["data"]["content"]) for w in turn if w["type"] == "data-pcm")


# --- harness ---------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """The client of a LiveSession: `deliver` follows the session's log, adapted to the client's
    `ai` version, and `emit` validates and keeps every chunk; tests wait on conditions."""

    major: int = 6
    chunks: list[Wire] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    on_chunk: Callable[[Wire], None] | None = None
    follower: Follower | None = None

    async def deliver(self, log: StreamLog) -> None:
        with log.attach(0) as follower:
            self.follower = follower
            while True:
                entry = follower.take()
                if entry is not None:
                    wire = adapt_wire(entry.wire(), self.major)
                    if wire is not None:
                        await self.emit(wire)
                elif log.closed:
                    return
                else:
                    await log.changed()

    async def emit(self, wire: Wire) -> None:
        validate_chunk(wire, self.major)
        self.chunks.append(wire)
        self.changed.set()
        if self.on_chunk is not None:
            self.on_chunk(wire)

    async def until(self, predicate: Callable[[Wire], bool], start: int = 0) -> int:
        async with asyncio.timeout(TIMEOUT):
            while True:
                for index in range(start, len(self.chunks)):
                    if predicate(self.chunks[index]):
                        return index
                self.changed.clear()
                await self.changed.wait()

    async def turns(self, count: int) -> list[list[Wire]]:
        """Waits until `count` complete turns were emitted and returns them, validated."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                if sum(1 for w in self.chunks if w["type"] == "finish") >= count:
                    turns = split_turns(self.chunks[: self._finish_index(count) + 1])
                    for turn in turns:
                        validate_turn(turn)
                    return turns
                self.changed.clear()
                await self.changed.wait()

    def _finish_index(self, count: int) -> int:
        seen = 0
        for index, wire in enumerate(self.chunks):
            if wire["type"] == "finish":
                seen += 1
                if seen == count:
                    return index
        raise AssertionError("not enough turns")

    def of_type(self, kind: str) -> list[Wire]:
        return [w for w in self.chunks if w["type"] == kind]


@dataclass
class Live:
    session: LiveSession
    recorder: Recorder
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.session.stop()
        async with asyncio.timeout(TIMEOUT):
            await self.task


@dataclass
class Harness:
    host: AgentHost
    tool_calls: list[tuple[str, dict[str, Any]]]
    lives: list[Live] = field(default_factory=list)

    def start(self, chat_id: str = "chat-1", *, major: int = 6, **options: Any) -> Live:
        recorder = Recorder(major=major)
        session = LiveSession(self.host, user_id="user-1", chat_id=chat_id, **options)
        live = Live(session, recorder, asyncio.get_running_loop().create_task(session.run(recorder.deliver)))
        self.lives.append(live)
        return live


def _counting(tool: FunctionTool, calls: list[tuple[str, dict[str, Any]]]) -> None:
    original = tool.func

    @functools.wraps(original)
    async def counted(**kwargs: Any) -> Any:
        calls.append((tool.name, kwargs))
        result = original(**kwargs)
        return await result if asyncio.iscoroutine(result) else result

    tool.func = counted


@pytest.fixture
async def harness(monkeypatch: pytest.MonkeyPatch) -> AsyncGenerator[Harness, None]:
    monkeypatch.setattr(ScriptedLiveConnection, "default_chunk_delay_s", 0.01)
    agent = build_demo_agent("scripted")
    calls: list[tuple[str, dict[str, Any]]] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool) and tool.name in ("get_weather", "process_payment"):
            _counting(tool, calls)
    host = AgentHost(agent, InMemorySessionService(), max_llm_calls=25)  # type: ignore[no-untyped-call]
    h = Harness(host, calls)
    yield h
    for live in h.lives:
        live.session.stop()
    for live in h.lives:
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(live.task, return_exceptions=True)
    await host.aclose()


def speak(session: LiveSession, seconds: float, *, rate: int = 16000, freq: float = 300) -> None:
    session.activity_start()
    for frame in chunk_bytes(tone(freq, seconds, rate=rate), 20, rate):
        session.send_audio(frame)
    session.activity_end()


def stall_after_first_audio(recorder: Recorder) -> asyncio.Event:
    """The client stops reading after its first audio chunk, until the returned event is set."""
    release = asyncio.Event()
    emit = recorder.emit

    async def stalled(wire: Wire) -> None:
        await emit(wire)
        if wire["type"] == "data-pcm":
            await release.wait()

    recorder.emit = stalled  # type: ignore[method-assign]
    return release


def approval_requests(chunks: list[Wire]) -> list[Wire]:
    return [w for w in chunks if w["type"] == "tool-approval-request"]


def is_type(kind: str) -> Callable[[Wire], bool]:
    return lambda wire: wire["type"] == kind


PAYMENT = '/tool process_payment {"amount":5,"recipient":"bob"}'

# --- audio -----------------------------------------------------------------------------------------


async def test_an_utterance_is_answered_with_transcript_and_tone(harness: Harness) -> None:
    live = harness.start()
    speak(live.session, 3.0)
    [turn] = await live.recorder.turns(1)

    assert text_of(turn) == "heard 3000 ms of audio"
    [said] = [w for w in turn if w["type"] == "data-transcription"]
    assert said["data"] == {"role": "user", "text": "[3000 ms of audio]", "finished": True}
    pcm = pcm_of(turn)
    assert duration_ms(pcm, 24000) == 500
    assert dominant_frequency(pcm, 24000) == pytest.approx(440, abs=3)
    assert len([w for w in turn if w["type"] == "data-pcm"]) == 5
    assert turn[-1]["finishReason"] == "stop"
    assert turn[-1]["messageMetadata"]["usage"]["totalTokens"] > 0
    await live.stop()


async def test_every_turn_is_a_new_message(harness: Harness) -> None:
    live = harness.start()
    speak(live.session, 0.5)
    await live.recorder.turns(1)
    speak(live.session, 0.7)
    await live.recorder.turns(2)
    live.session.send_text("/echo third")
    turns = await live.recorder.turns(3)
    assert [text_of(t) for t in turns] == ["heard 500 ms of audio", "heard 700 ms of audio", "third"]
    ids = [t[0]["messageId"] for t in turns]
    assert len(set(ids)) == 3
    # Part ids never leak from one turn into the next.
    part_ids = [{w["id"] for w in t if w["type"] == "text-start"} for t in turns]
    assert not (part_ids[0] & part_ids[1]) and not (part_ids[1] & part_ids[2])
    await live.stop()


async def test_input_at_48khz_is_resampled(harness: Harness) -> None:
    live = harness.start(input_rate=48000)
    speak(live.session, 1.0, rate=48000)
    [turn] = await live.recorder.turns(1)
    heard = text_of(turn)
    assert heard.startswith("heard ") and heard.endswith(" ms of audio")
    # The stateful resampler holds back a few ms (its filter delay) until more audio comes.
    assert 990 <= int(heard.split()[1]) <= 1000
    await live.stop()


async def test_bad_frames_raise_pcm_format_error(harness: Harness) -> None:
    live = harness.start()
    with pytest.raises(PcmFormatError):
        live.session.send_audio(b"")
    with pytest.raises(PcmFormatError):
        live.session.send_audio(b"\x00\x01\x02")
    with pytest.raises(PcmFormatError):
        live.session.send_audio(b"\x00" * (64 * 1024 + 2))
    # The session is unharmed.
    live.session.send_text("/echo fine")
    [turn] = await live.recorder.turns(1)
    assert text_of(turn) == "fine"
    await live.stop()


async def test_hands_free_ends_an_utterance_after_silence(harness: Harness) -> None:
    live = harness.start(hands_free=True, vad_silence_ms=700)
    frames = chunk_bytes(tone(300, 1.0, rate=16000) + bytes(2 * 16000), 20, 16000)
    for frame in frames:
        live.session.send_audio(frame)
    [turn] = await live.recorder.turns(1)
    heard = text_of(turn)
    millis = int(heard.split()[1])
    # 1 s of speech (its onset replayed from the pre-roll) plus the 700 ms of silence that ended it.
    assert 1650 <= millis <= 1750, heard
    assert dominant_frequency(pcm_of(turn), 24000) == pytest.approx(440, abs=3)
    await live.stop()


async def test_hands_free_silence_starts_nothing(harness: Harness) -> None:
    live = harness.start(hands_free=True)
    for frame in chunk_bytes(bytes(2 * 16000), 20, 16000):
        live.session.send_audio(frame)
    live.session.send_text("/echo only text")
    [turn] = await live.recorder.turns(1)
    # The first turn is the text's: the silence never opened an utterance.
    assert text_of(turn) == "only text"
    assert not [w for w in turn if w["type"] == "data-transcription"]
    await live.stop()


# --- barge-in --------------------------------------------------------------------------------------


@pytest.mark.parametrize("major", [6, 7])
async def test_interrupt_stops_the_audio_within_one_chunk(harness: Harness, major: int) -> None:
    live = harness.start(major=major)
    recorder = live.recorder
    marks: dict[str, int] = {}

    def interrupt_after_first_pcm(wire: Wire) -> None:
        if wire["type"] == "data-pcm" and "at" not in marks:
            marks["at"] = len(recorder.chunks)
            live.session.interrupt()

    recorder.on_chunk = interrupt_after_first_pcm
    speak(live.session, 1.0)
    [turn] = await recorder.turns(1)
    after = recorder.chunks[marks["at"] : len(turn) + recorder.chunks.index(turn[0])]
    assert len([w for w in after if w["type"] == "data-pcm"]) <= 1
    assert turn[-1]["finishReason"] == ("interrupted" if major >= 7 else "stop")
    assert duration_ms(pcm_of(turn), 24000) < 500

    # The session goes on, and nothing of the cut answer leaks into the next turn.
    live.session.send_text("/echo next")
    turns = await recorder.turns(2)
    assert text_of(turns[1]) == "next"
    assert not [w for w in turns[1] if w["type"] == "data-pcm"]
    assert sum(1 for w in recorder.chunks if w["type"] == "data-pcm") <= 2
    await live.stop()


async def test_interrupt_drops_audio_a_slow_client_has_not_received(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ScriptedLiveConnection, "default_chunk_delay_s", 0.0)
    live = harness.start()
    recorder = live.recorder
    release = stall_after_first_audio(recorder)
    speak(live.session, 1.0)
    await recorder.until(is_type("data-pcm"))
    # Once the model's whole answer waits in the log behind the stalled client:
    log, follower = live.session.log, recorder.follower
    async with asyncio.timeout(TIMEOUT):
        while not any(w["type"] == "finish" for w in log.chunks):
            await log.changed()
    assert follower is not None
    assert sum(1 for w in log.chunks[follower.position:] if w["type"] == "data-pcm") == 4
    live.session.interrupt()
    release.set()
    [turn] = await recorder.turns(1)
    assert len([w for w in turn if w["type"] == "data-pcm"]) == 1
    assert text_of(turn) == "heard 1000 ms of audio"  # text is kept; only the unsent audio goes
    await live.stop()


async def test_a_client_that_falls_behind_is_cut_and_memory_stays_bounded(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ScriptedLiveConnection, "default_chunk_delay_s", 0.0)
    cap = 16 * 1024  # less than one answer's audio
    log = StreamLog(key=("user-1", "chat-slow"), max_bytes=cap)
    session = LiveSession(harness.host, user_id="user-1", chat_id="chat-slow", log=log)
    recorder = Recorder()
    release = stall_after_first_audio(recorder)
    task = asyncio.get_running_loop().create_task(session.run(recorder.deliver))
    speak(session, 1.0)
    await recorder.until(is_type("data-pcm"))
    async with asyncio.timeout(TIMEOUT):
        while recorder.follower is None or not recorder.follower.overrun:
            await log.changed()
    largest = max(len(json.dumps(w, separators=(",", ":"))) for w in recorder.chunks)  # an audio chunk
    assert log.peak_bytes <= cap + largest  # what the client has not read is let go, not kept
    assert log.kept_bytes <= cap
    release.set()
    with pytest.raises(FollowerOverrun):
        async with asyncio.timeout(TIMEOUT):
            await task


async def test_speaking_over_the_model_barges_in(harness: Harness) -> None:
    live = harness.start(major=7)
    speak(live.session, 1.0)
    await live.recorder.until(is_type("data-pcm"))
    speak(live.session, 0.4)
    turns = await live.recorder.turns(2)
    assert turns[0][-1]["finishReason"] == "interrupted"
    assert text_of(turns[1]) == "heard 400 ms of audio"
    assert duration_ms(pcm_of(turns[1]), 24000) == 500
    await live.stop()


async def test_interrupt_with_nothing_playing_is_harmless(harness: Harness) -> None:
    live = harness.start()
    live.session.interrupt()
    live.session.send_text("/echo still here")
    [turn] = await live.recorder.turns(1)
    assert text_of(turn) == "still here"
    await live.stop()


# --- text and images -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "answer"), [("/echo hi", "hi"), ("hello there", "You said: hello there")])
async def test_text_in_live(harness: Harness, text: str, answer: str) -> None:
    live = harness.start()
    live.session.send_text(text)
    [turn] = await live.recorder.turns(1)
    assert text_of(turn) == answer
    assert [w["type"] for w in turn][:2] == ["start", "start-step"]
    await live.stop()


async def test_an_image_is_described(harness: Harness) -> None:
    live = harness.start()
    png = tiny_png()
    live.session.send_image("image/png", png)
    [turn] = await live.recorder.turns(1)
    assert text_of(turn) == f"saw an image (image/png, {len(png)} bytes)"
    await live.stop()


async def test_a_model_error_ends_the_turn(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text("/error kaput")
    [turn] = await live.recorder.turns(1)
    assert [w["errorText"] for w in turn if w["type"] == "error"] == ["kaput"]
    assert turn[-1]["finishReason"] == "error"
    live.session.send_text("/echo ok")
    turns = await live.recorder.turns(2)
    assert text_of(turns[1]) == "ok"
    await live.stop()


# --- tools -----------------------------------------------------------------------------------------


async def test_server_tool_without_approval(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text('/tool get_weather {"location": "Paris"}')
    [turn] = await live.recorder.turns(1)
    kinds = [w["type"] for w in turn]
    assert "tool-approval-request" not in kinds
    [available] = [w for w in turn if w["type"] == "tool-input-available"]
    assert available["providerExecuted"] is True and available["input"] == {"location": "Paris"}
    [output] = [w for w in turn if w["type"] == "tool-output-available"]
    assert output["output"]["location"] == "Paris" and output["providerExecuted"] is True
    assert text_of(turn).startswith('get_weather -> {"condition":')
    assert harness.tool_calls == [("get_weather", {"location": "Paris"})]
    await live.stop()


async def test_live_approval_approved_runs_the_tool(harness: Harness) -> None:
    live = harness.start()
    recorder = live.recorder
    live.session.send_text(PAYMENT)
    request_at = await recorder.until(is_type("tool-approval-request"))
    step_end = await recorder.until(is_type("finish-step"), request_at)
    assert step_end == request_at + 1
    request = recorder.chunks[request_at]
    announced = [w for w in recorder.chunks[:request_at] if w["type"] == "tool-input-available"]
    assert [w["toolCallId"] for w in announced] == [request["toolCallId"]]
    assert announced[0]["providerExecuted"] is True
    assert harness.tool_calls == []  # held until the answer
    assert not recorder.of_type("finish")

    live.session.answer_approval(request["approvalId"], True, None)
    [turn] = await recorder.turns(1)
    [output] = [w for w in turn if w["type"] == "tool-output-available"]
    assert output["toolCallId"] == request["toolCallId"]
    assert output["output"]["status"] == "completed"
    assert text_of(turn).startswith('process_payment -> {"amount":5,"recipient":"bob","status":"completed"')
    assert harness.tool_calls == [("process_payment", {"amount": 5, "recipient": "bob"})]
    # The answer after the output reopens a step.
    kinds = [w["type"] for w in turn]
    assert kinds.index("tool-output-available") < len(kinds) - 1 - kinds[::-1].index("start-step")
    with pytest.raises(ApprovalRefused) as refused:
        live.session.answer_approval(request["approvalId"], True, None)
    assert refused.value.reason == "answered"
    await live.stop()


async def test_live_approval_denied_does_not_run_the_tool(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text(PAYMENT)
    request_at = await live.recorder.until(is_type("tool-approval-request"))
    request = live.recorder.chunks[request_at]
    live.session.answer_approval(request["approvalId"], False, None)
    [turn] = await live.recorder.turns(1)
    assert [w["toolCallId"] for w in turn if w["type"] == "tool-output-denied"] == [request["toolCallId"]]
    assert not [w for w in turn if w["type"] == "tool-output-available"]
    assert text_of(turn) == f'process_payment -> {{"error":"{REJECTED_TEXT}"}}'
    assert harness.tool_calls == []
    await live.stop()


async def test_live_approvals_are_counted_as_a_chat_runs_are(harness: Harness) -> None:
    metrics = Metrics()
    live = harness.start(metrics=metrics)

    def count(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(f"adk_gateway_{name}_total", labels) or 0.0

    live.session.send_text(PAYMENT)
    first = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    assert count("approvals_issued") == 1
    live.session.answer_approval(first["approvalId"], True, None)
    await live.recorder.turns(1)
    with pytest.raises(ApprovalRefused):
        live.session.answer_approval(first["approvalId"], True, None)  # a replay is not an answer

    live.session.send_text(PAYMENT)
    second_at = await live.recorder.until(is_type("tool-approval-request"), live.recorder.chunks.index(first) + 1)
    live.session.answer_approval(live.recorder.chunks[second_at]["approvalId"], False, None)
    await live.recorder.turns(2)
    assert count("approvals_issued") == 2
    assert count("approvals_answered", decision="allow-once") == 1
    assert count("approvals_answered", decision="deny") == 1
    await live.stop()


async def test_unknown_approval_ids_are_refused(harness: Harness) -> None:
    live = harness.start()
    with pytest.raises(ApprovalRefused) as refused:
        live.session.answer_approval("apr-made-up", True, None)
    assert refused.value.reason == "unknown"
    await live.stop()


async def test_approval_timeout_ends_the_call_as_an_error(harness: Harness) -> None:
    live = harness.start(approval_timeout_s=0.2)
    live.session.send_text(PAYMENT)
    request_at = await live.recorder.until(is_type("tool-approval-request"))
    request = live.recorder.chunks[request_at]
    [turn] = await live.recorder.turns(1)
    [error] = [w for w in turn if w["type"] == "tool-output-error"]
    assert error["toolCallId"] == request["toolCallId"] and error["errorText"] == TIMEOUT_TEXT
    assert harness.tool_calls == []
    with pytest.raises(ApprovalRefused):
        live.session.answer_approval(request["approvalId"], True, None)
    await live.stop()


async def test_always_is_remembered_for_the_chat(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text(PAYMENT)
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    live.session.answer_approval(request["approvalId"], True, "always")
    await live.recorder.turns(1)
    live.session.send_text('/tool process_payment {"amount":7,"recipient":"eve"}')
    turns = await live.recorder.turns(2)
    assert not [w for w in turns[1] if w["type"] == "tool-approval-request"]
    assert [w["output"]["recipient"] for w in turns[1] if w["type"] == "tool-output-available"] == ["eve"]
    assert len(harness.tool_calls) == 2
    await live.stop()
    session = await harness.host.get_session("user-1", "chat-1")
    assert session is not None
    assert session.state[APPROVALS_STATE_KEY]["permissions"] == {"process_payment": "always"}


async def test_never_refuses_without_asking(harness: Harness) -> None:
    await harness.host.create_session("user-1", "chat-1")
    await harness.host.save_state("user-1", "chat-1", {APPROVALS_STATE_KEY: {
        "calls": [], "permissions": {"process_payment": "never", "change_bgm": "never"}}})
    live = harness.start()
    live.session.send_text(PAYMENT + '\n/tool change_bgm {"track": 3}')
    [turn] = await live.recorder.turns(1)
    assert not [w for w in turn if w["type"] == "tool-approval-request"]
    errors = {w["errorText"] for w in turn if w["type"] == "tool-output-error"}
    assert errors == {permanently_denied_text("process_payment"), permanently_denied_text("change_bgm")}
    # A refused browser tool is announced as server-run, so the browser never runs it.
    assert all(w.get("providerExecuted") is True for w in turn if w["type"] == "tool-input-available")
    assert harness.tool_calls == []
    await live.stop()


async def test_browser_tool_with_approval_waits_for_the_browser(harness: Harness) -> None:
    live = harness.start()
    recorder = live.recorder
    live.session.send_text('/tool change_bgm {"track": 2}')
    request_at = await recorder.until(is_type("tool-approval-request"))
    request = recorder.chunks[request_at]
    assert recorder.chunks[request_at + 1]["type"] == "finish-step"
    first = [w for w in recorder.chunks if w["type"] == "tool-input-available"]
    assert "providerExecuted" not in first[0]
    live.session.answer_approval(request["approvalId"], True, None)
    again = await recorder.until(is_type("tool-input-available"), request_at)  # the signal to run it
    assert recorder.chunks[again]["toolCallId"] == request["toolCallId"]
    live.session.tool_output(request["toolCallId"], {"playing": 2})
    [turn] = await recorder.turns(1)
    [output] = [w for w in turn if w["type"] == "tool-output-available"]
    assert output["output"] == {"playing": 2} and "providerExecuted" not in output
    assert text_of(turn) == 'change_bgm -> {"playing":2}'
    await live.stop()


async def test_an_empty_browser_output_ends_the_call(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text('/tool change_bgm {"track": 2}')
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    live.session.answer_approval(request["approvalId"], True, None)
    live.session.tool_output(request["toolCallId"], {})
    [turn] = await live.recorder.turns(1)
    [output] = [w for w in turn if w["type"] == "tool-output-available"]
    # Wrapped: ADK takes an empty result of a held (long-running) tool for "no result yet".
    assert output["output"] == {"result": {}}
    assert text_of(turn) == 'change_bgm -> {"result":{}}'
    await live.stop()


async def test_browser_tool_error_reaches_the_model(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text("/tool get_location {}")
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    # Approval and output in one go: the output may arrive before ADK asks for it.
    live.session.answer_approval(request["approvalId"], True, None)
    live.session.tool_output(request["toolCallId"], None, "Permission denied by the browser")
    [turn] = await live.recorder.turns(1)
    [error] = [w for w in turn if w["type"] == "tool-output-error"]
    assert error["errorText"] == "Permission denied by the browser" and "providerExecuted" not in error
    assert text_of(turn) == 'get_location -> {"error":"Permission denied by the browser"}'
    await live.stop()


async def test_interrupt_while_an_approval_is_pending(harness: Harness) -> None:
    live = harness.start(major=7)
    live.session.send_text(PAYMENT)
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    live.session.interrupt()
    [turn] = await live.recorder.turns(1)
    assert [w["toolCallId"] for w in turn if w["type"] == "tool-output-denied"] == [request["toolCallId"]]
    assert turn[-1]["finishReason"] == "interrupted"
    with pytest.raises(ApprovalRefused):
        live.session.answer_approval(request["approvalId"], True, None)
    live.session.send_text("/echo moving on")
    turns = await live.recorder.turns(2)
    assert text_of(turns[1]) == "moving on"
    assert harness.tool_calls == []
    await live.stop()


async def test_a_call_held_after_its_turn_ended_writes_nothing_into_the_next(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model announces a call and ends its turn; only then does the plugin hold the call. The
    # next message does not know the call, so nothing about it (its question, or its end when
    # the session stops) is written there: the client's reader would refuse it.
    answers: list[LiveApproval] = []
    sessions: list[LiveSession] = []

    async def run_live(*_args: Any) -> AsyncGenerator[AgentEvent, None]:
        # (The host reads ADK's events into the core's: the session sees those.)
        call = types.FunctionCall(id="c1", name="process_payment", args={"amount": 5, "recipient": "bob"})
        yield agent_event(Event(author="demo_agent",
                                content=types.Content(role="model", parts=[types.Part(function_call=call)])))
        yield agent_event(Event(author="demo_agent", turn_complete=True))
        answers.append(await sessions[0].request_approval("c1", "process_payment", browser=False))

    monkeypatch.setattr(AgentHost, "run_live", run_live)
    live = harness.start()
    sessions.append(live.session)
    [turn] = await live.recorder.turns(1)
    assert [w["type"] for w in turn if w.get("toolCallId") == "c1"] == [
        "tool-input-start", "tool-input-delta", "tool-input-available"]
    await live.stop()
    assert answers == [LiveApproval(approved=False, error=ENDED_TEXT)]
    assert live.recorder.chunks == turn


# --- life cycle ------------------------------------------------------------------------------------


async def test_stop_releases_a_pending_approval_and_closes_the_turn(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text(PAYMENT)
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    await live.stop()
    [turn] = split_turns(live.recorder.chunks)
    validate_turn(turn)
    assert harness.tool_calls == []
    with pytest.raises(ApprovalRefused):
        live.session.answer_approval(request["approvalId"], True, None)
    plugin = harness.host.runner.plugin_manager.get_plugin(PLUGIN_NAME)
    assert isinstance(plugin, PermissionPlugin) and not plugin._live_gates


async def test_a_pending_approval_ends_as_an_error_when_the_session_ends(harness: Harness) -> None:
    live = harness.start()
    live.session.send_text(PAYMENT)
    request = live.recorder.chunks[await live.recorder.until(is_type("tool-approval-request"))]
    await live.stop()
    [turn] = split_turns(live.recorder.chunks)
    outcomes = [w for w in turn if w["type"].startswith("tool-output")]
    assert outcomes == [{"type": "tool-output-error", "toolCallId": request["toolCallId"], "errorText": ENDED_TEXT,
                         "providerExecuted": True}]  # once: ADK's own response for it is not shown again


async def test_the_gate_refuses_once_the_session_ended(harness: Harness) -> None:
    live = harness.start()
    await live.stop()
    answer = await live.session.request_approval("call-x", "process_payment", browser=False)
    assert answer.approved is False and answer.error == ENDED_TEXT
    assert await live.session.browser_output("call-y", "get_location") == {"error": ENDED_TEXT}


async def test_run_twice_is_refused(harness: Harness) -> None:
    live = harness.start()
    await live.stop()
    with pytest.raises(RuntimeError):
        await live.session.run()


async def test_an_emit_failure_ends_run_with_that_error(harness: Harness) -> None:
    recorder = Recorder()

    async def broken(_wire: Wire) -> None:
        raise ConnectionResetError("socket gone")

    recorder.emit = broken  # type: ignore[method-assign]
    session = LiveSession(harness.host, user_id="user-1", chat_id="chat-9")
    task = asyncio.get_running_loop().create_task(session.run(recorder.deliver))
    session.send_text("/echo hi")
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(TIMEOUT):
            await task


def _others(before: set[asyncio.Task[Any]]) -> Iterator[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return (t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done())


@pytest.mark.parametrize("moment", ["audio", "approval"])
async def test_cancelling_run_mid_turn_leaves_no_tasks(harness: Harness, moment: str) -> None:
    before = set(asyncio.all_tasks())
    for attempt in range(100):
        recorder = Recorder()
        session = LiveSession(harness.host, user_id="user-1", chat_id=f"chat-{moment}-{attempt}")
        task = asyncio.get_running_loop().create_task(session.run(recorder.deliver))
        if moment == "audio":
            speak(session, 0.5)
            await recorder.until(is_type("data-pcm"))
        else:
            session.send_text(PAYMENT)
            await recorder.until(is_type("tool-approval-request"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = list(_others(before))
        assert not left, f"attempt {attempt}: {[t.get_coro() for t in left]}"
        plugin = harness.host.runner.plugin_manager.get_plugin(PLUGIN_NAME)
        assert isinstance(plugin, PermissionPlugin) and not plugin._live_gates
    assert harness.tool_calls == []
