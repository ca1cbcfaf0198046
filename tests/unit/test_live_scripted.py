"""The scripted live connection, driven directly (no ADK runner)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable

import pytest
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from adk_gateway.agents.script import tiny_png
from adk_gateway.agents.scripted import ScriptedLlm
from adk_gateway.agents.scripted_live import ScriptedLiveConnection
from adk_gateway.core.pcm import chunk_bytes, duration_ms, tone
from tests.audio import dominant_frequency

TIMEOUT = 5.0
IN_MIME = "audio/pcm;rate=16000"


def user_text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def audio_of(responses: list[LlmResponse]) -> bytes:
    return b"".join(
        p.inline_data.data or b""
        for r in responses
        for p in (r.content.parts if r.content else None) or ()
        if p.inline_data is not None
    )


def texts(responses: list[LlmResponse], *, partial: bool) -> list[str]:
    return [
        p.text
        for r in responses
        if bool(r.partial) is partial
        for p in (r.content.parts if r.content else None) or ()
        if p.text is not None and not p.thought
    ]


class Reader:
    """Reads `receive()` in the background so tests can wait for responses."""

    def __init__(self, conn: ScriptedLiveConnection) -> None:
        self.conn = conn
        self.responses: list[LlmResponse] = []
        self.changed = asyncio.Event()
        self.ended = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for response in self.conn.receive():
                self.responses.append(response)
                self.changed.set()
        finally:
            self.ended.set()

    async def until(self, predicate: Callable[[LlmResponse], bool], start: int = 0) -> int:
        """Index of the first response (from `start`) matching `predicate`, waiting for it."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                for index in range(start, len(self.responses)):
                    if predicate(self.responses[index]):
                        return index
                self.changed.clear()
                await self.changed.wait()

    async def close(self) -> None:
        await self.conn.close()
        async with asyncio.timeout(TIMEOUT):
            await self.task


@pytest.fixture
async def conn() -> AsyncGenerator[ScriptedLiveConnection, None]:
    connection = ScriptedLiveConnection(chunk_delay_s=0.005)
    yield connection
    await connection.close()


async def speak(conn: ScriptedLiveConnection, millis: int, *, frame_ms: int = 20) -> None:
    await conn.send_realtime(types.ActivityStart())
    for frame in chunk_bytes(tone(300, millis / 1000, rate=16000), frame_ms, 16000):
        await conn.send_realtime(types.Blob(mime_type=IN_MIME, data=frame))
    await conn.send_realtime(types.ActivityEnd())


def is_done(response: LlmResponse) -> bool:
    return bool(response.turn_complete)


async def test_utterance_is_transcribed_and_answered_with_a_tone(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await speak(conn, 3000)
    end = await reader.until(is_done)
    responses = reader.responses[: end + 1]

    first = responses[0]
    assert first.input_transcription is not None
    assert first.input_transcription.text == "[3000 ms of audio]"
    assert first.input_transcription.finished is True

    partial_words = [r.output_transcription.text for r in responses if r.output_transcription and r.partial]
    assert "".join(w or "" for w in partial_words) == "heard 3000 ms of audio"
    finished = [r.output_transcription for r in responses if r.output_transcription and not r.partial]
    assert [t.text for t in finished] == ["heard 3000 ms of audio"]
    assert finished[0].finished is True

    blobs = [p.inline_data for r in responses for p in (r.content.parts if r.content else None) or ()
             if p.inline_data is not None]
    assert len(blobs) == 5
    assert {b.mime_type for b in blobs} == {"audio/pcm;rate=24000"}
    assert all(r.partial for r in responses if r.content)
    pcm = audio_of(responses)
    assert duration_ms(pcm, 24000) == 500
    assert dominant_frequency(pcm, 24000) == pytest.approx(440, abs=2)
    assert responses[-1].finish_reason == types.FinishReason.STOP
    assert responses[-1].usage_metadata is not None
    await reader.close()


async def test_audio_outside_an_utterance_and_empty_utterances_get_no_answer(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_realtime(types.Blob(mime_type=IN_MIME, data=tone(300, 0.5, rate=16000)))
    await conn.send_realtime(types.ActivityStart())
    await conn.send_realtime(types.ActivityEnd())
    await conn.send_content(user_text("/echo next"))
    end = await reader.until(is_done)
    # The first thing the model says is the answer to the text: nothing was heard before it.
    assert all(r.input_transcription is None and r.output_transcription is None for r in reader.responses)
    assert texts(reader.responses[: end + 1], partial=False) == ["next"]
    await reader.close()


async def test_audio_stream_end_finishes_an_utterance(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_realtime(types.ActivityStart())
    await conn.send_realtime(types.Blob(mime_type=IN_MIME, data=tone(300, 0.25, rate=16000)))
    await conn.send_realtime(types.LiveClientRealtimeInput(audio_stream_end=True))
    await reader.until(is_done)
    assert reader.responses[0].input_transcription is not None
    assert reader.responses[0].input_transcription.text == "[250 ms of audio]"
    await reader.close()


async def test_the_utterance_length_follows_the_blob_rate(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_realtime(types.ActivityStart())
    await conn.send_realtime(types.Blob(mime_type="audio/pcm;rate=8000", data=tone(300, 0.5, rate=8000)))
    await conn.send_realtime(types.ActivityEnd())
    await reader.until(is_done)
    assert reader.responses[0].input_transcription is not None
    assert reader.responses[0].input_transcription.text == "[500 ms of audio]"
    await reader.close()


@pytest.mark.parametrize(
    ("text", "deltas"),
    [("/echo hi there", ["hi ", "there"]), ("hello", ["You ", "said: ", "hello"])],
)
async def test_text_is_answered_like_the_non_live_model(
    conn: ScriptedLiveConnection, text: str, deltas: list[str]
) -> None:
    reader = Reader(conn)
    await conn.send_content(user_text(text))
    end = await reader.until(is_done)
    responses = reader.responses[: end + 1]
    assert texts(responses, partial=True) == deltas
    assert texts(responses, partial=False) == ["".join(deltas)]
    assert audio_of(responses) == b""
    await reader.close()


async def test_tool_steps_wait_for_function_responses(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    script = '/tool get_weather {"location": "Paris"}\n/then\n/tool get_location {}'
    await conn.send_content(user_text(script))

    def calls_in(response: LlmResponse) -> list[types.FunctionCall]:
        return [p.function_call for p in (response.content.parts if response.content else None) or ()
                if p.function_call is not None]

    first = await reader.until(lambda r: bool(calls_in(r)))
    assert [(c.name, c.args) for c in calls_in(reader.responses[first])] == [("get_weather", {"location": "Paris"})]
    assert not reader.responses[first].turn_complete

    weather = {"location": "Paris", "condition": "sunny"}
    await conn.send_content(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name="get_weather", id="adk-1", response=weather))]))
    second = await reader.until(lambda r: bool(calls_in(r)), first + 1)
    assert [c.name for c in calls_in(reader.responses[second])] == ["get_location"]

    await conn.send_content(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name="get_location", id="adk-2", response={"city": "Oslo"}))]))
    end = await reader.until(is_done, second + 1)
    [answer] = texts(reader.responses[second + 1 : end + 1], partial=False)
    compact = json.dumps(weather, sort_keys=True, separators=(",", ":"))
    assert answer == f"get_weather -> {compact}\nget_location -> {{\"city\":\"Oslo\"}}"
    await reader.close()


async def test_barge_in_stops_the_answer_within_one_chunk(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await speak(conn, 1000)
    first_audio = await reader.until(lambda r: bool(r.content and r.content.parts and r.content.parts[0].inline_data))
    await conn.send_realtime(types.ActivityStart())
    cut = await reader.until(lambda r: bool(r.interrupted), first_audio)
    after_barge_in = reader.responses[first_audio + 1 : cut]
    assert len([r for r in after_barge_in if r.content]) <= 1
    # The new utterance is heard and answered; nothing of the cut answer comes after the marker.
    await conn.send_realtime(types.Blob(mime_type=IN_MIME, data=tone(300, 0.2, rate=16000)))
    await conn.send_realtime(types.ActivityEnd())
    end = await reader.until(is_done, cut)
    tail = reader.responses[cut + 1 : end + 1]
    assert tail[0].input_transcription is not None
    assert tail[0].input_transcription.text == "[200 ms of audio]"
    assert all(not r.turn_complete for r in reader.responses[:cut])
    await reader.close()


async def test_barge_in_while_waiting_for_a_tool_abandons_the_turn(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_content(user_text('/tool get_weather {"location": "Rome"}'))
    await reader.until(lambda r: bool(r.content))
    assert conn.answering
    await conn.send_realtime(types.ActivityStart())
    cut = await reader.until(lambda r: bool(r.interrupted))
    assert not conn.answering
    # The late tool result gets no answer; the next question does.
    await conn.send_content(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name="get_weather", id="adk-1", response={"ok": True}))]))
    await conn.send_realtime(types.ActivityEnd())
    await conn.send_content(user_text("/echo after"))
    end = await reader.until(is_done, cut)
    assert texts(reader.responses[cut + 1 : end + 1], partial=False) == ["after"]
    await reader.close()


async def test_new_text_interrupts_a_playing_answer(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_content(user_text("/stream 50 20"))
    await reader.until(lambda r: bool(r.content))
    await conn.send_content(user_text("/echo now"))
    cut = await reader.until(lambda r: bool(r.interrupted))
    end = await reader.until(is_done, cut)
    assert texts(reader.responses[cut:end + 1], partial=False) == ["now"]
    assert len(texts(reader.responses[:cut], partial=True)) < 50
    await reader.close()


async def test_images_are_described(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    png = tiny_png()
    blob = types.Blob(mime_type="image/png", data=png)
    await conn.send_content(types.Content(role="user", parts=[types.Part(inline_data=blob)]))
    end = await reader.until(is_done)
    assert texts(reader.responses[: end + 1], partial=False) == [f"saw an image (image/png, {len(png)} bytes)"]
    await reader.close()


async def test_errors_and_bad_scripts_are_model_errors(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await conn.send_content(user_text("/error boom"))
    first = await reader.until(lambda r: r.error_code is not None)
    assert reader.responses[first].error_message == "boom"
    await conn.send_content(user_text("/tool get_weather {not json"))
    second = await reader.until(lambda r: r.error_code is not None, first + 1)
    assert reader.responses[second].error_code == "SCRIPT_ERROR"
    await reader.close()


async def test_text_modality_answers_utterances_with_text() -> None:
    request = LlmRequest(live_connect_config=types.LiveConnectConfig(response_modalities=[types.Modality.TEXT]))
    conn = ScriptedLiveConnection(request)
    reader = Reader(conn)
    await speak(conn, 400)
    end = await reader.until(is_done)
    responses = reader.responses[: end + 1]
    assert audio_of(responses) == b""
    assert texts(responses, partial=False) == ["heard 400 ms of audio"]
    await reader.close()


async def test_without_transcription_configs_only_audio_is_sent() -> None:
    request = LlmRequest(live_connect_config=types.LiveConnectConfig(
        response_modalities=[types.Modality.AUDIO], input_audio_transcription=None, output_audio_transcription=None))
    conn = ScriptedLiveConnection(request, chunk_delay_s=0)
    reader = Reader(conn)
    await speak(conn, 400)
    end = await reader.until(is_done)
    responses = reader.responses[: end + 1]
    assert all(r.input_transcription is None and r.output_transcription is None for r in responses)
    assert duration_ms(audio_of(responses), 24000) == 500
    await reader.close()


async def test_receive_after_close_returns_without_yielding(conn: ScriptedLiveConnection) -> None:
    reader = Reader(conn)
    await speak(conn, 2000)
    await reader.until(lambda r: bool(r.content))
    await reader.close()  # closes mid-answer: the running receive() ends too
    assert reader.ended.is_set()
    assert not any(r.turn_complete for r in reader.responses)
    again = [r async for r in conn.receive()]
    assert again == []
    await conn.send_content(user_text("/echo ignored"))
    assert [r async for r in conn.receive()] == []


async def test_scripted_llm_connect_opens_and_closes_a_connection() -> None:
    llm = ScriptedLlm()
    async with llm.connect(LlmRequest()) as opened:
        assert isinstance(opened, ScriptedLiveConnection)
        assert not opened.closed
    assert opened.closed
    assert [r async for r in opened.receive()] == []


async def test_barge_in_while_the_caller_handles_the_last_response(conn: ScriptedLiveConnection) -> None:
    # ADK runs the tool between two reads, so the barge-in lands while the call is "being yielded".
    stream = conn.receive()
    await conn.send_content(user_text('/tool get_weather {"location": "Rome"}'))
    async with asyncio.timeout(TIMEOUT):
        first = await anext(stream)
    assert first.content is not None and first.content.parts and first.content.parts[0].function_call
    await conn.send_realtime(types.ActivityStart())
    async with asyncio.timeout(TIMEOUT):
        second = await anext(stream)
    assert second.interrupted is True
    await conn.close()
    assert [r async for r in stream] == []


async def test_no_interrupted_marker_after_a_completed_turn(conn: ScriptedLiveConnection) -> None:
    stream = conn.receive()
    await conn.send_content(user_text("/echo done"))
    async with asyncio.timeout(TIMEOUT):
        while not (await anext(stream)).turn_complete:
            pass
    assert not conn.answering
    await conn.send_realtime(types.ActivityStart())  # nothing left to interrupt
    await conn.send_realtime(types.ActivityEnd())
    await conn.send_content(user_text("/echo again"))
    async with asyncio.timeout(TIMEOUT):
        following = await anext(stream)
    assert following.interrupted is None
    assert following.content is not None and following.content.parts
    assert following.content.parts[0].text == "again"
    await conn.close()
