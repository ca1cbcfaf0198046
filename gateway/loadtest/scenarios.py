"""What one request of each scenario does.

- ``echo``, ``stream``, ``approval``, ``browser-tool``: a chat turn (`chat_turn`). The client acts
  as `useChat` with automatic continuation: when an answer ends waiting (`finish{tool-calls}`), it
  approves every approval request and gives every browser tool call `--tool-output`, then posts
  the message again, until the turn ends. The round trip is the request.
- ``live``: one spoken turn over the WebSocket's live extension (`live_turn`): a WAV file sent in
  real time, frame by frame, then the answer; measures the time from the end of the utterance to
  the first audio out.
- ``idle``: a connection held open for the whole test (`hold`): a WebSocket with nothing sent, or
  an SSE stream whose model stays silent; counts the ones still open at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import uuid
import wave
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from adk_gateway.loadtest.clients import (
    Client,
    Json,
    Sample,
    SSEParser,
    Tracker,
    adk_request,
    answer_tools,
    classify,
    fold_chunks,
    request_frames,
    request_over,
    user_message,
)
from adk_gateway.loadtest.config import LoadConfig

__all__ = ["AUDIO_RATE", "Iteration", "Prepared", "chat_turn", "hold", "iteration_for", "live_turn", "load_wav"]

AUDIO_RATE = 16_000  # what the live extension takes: PCM16 little-endian mono
_BYTES_PER_MS = AUDIO_RATE * 2 // 1000


def _fail(sample: Sample, kind: str, detail: str) -> None:
    sample.ok, sample.error, sample.detail = False, kind, detail


# --- chat turns ------------------------------------------------------------------------------


async def chat_turn(client: Client, sample: Sample) -> None:
    """One turn of the client's chat (a fresh chat with `--chat fresh`), answered as a browser
    answers it; the turn's requests all count in `sample`."""
    cfg = client.cfg
    if cfg.chat == "fresh":
        client.new_chat()
    sample.chat_id = client.chat_id
    prompt = cfg.prompt_text()
    if cfg.transport == "adk":
        sample.posts += 1
        client.adk_session = await adk_request(client.http, client.base, cfg.adk_app, client.user,
                                               client.adk_session, prompt, sample)
        return
    try:
        await _answered_turn(client, sample, prompt, time.perf_counter())
    finally:
        if cfg.transport == "ws" and cfg.ws_connection == "request":
            await client.close()


async def _answered_turn(client: Client, sample: Sample, prompt: str, started: float) -> None:
    cfg = client.cfg
    messages = [*client.history, user_message(prompt)]
    body: Json = {"id": client.chat_id, "messages": messages, "trigger": "submit-message"}
    assistant: Json | None = None
    for round_trip in range(1, cfg.max_round_trips + 1):
        chunks: list[Json] = []
        await client.exchange(body, sample, started=started, keep=chunks)
        if not sample.ok or sample.aborted:
            return
        if assistant is None:
            assistant = {"id": sample.message_id or f"a-{uuid.uuid4().hex[:16]}", "role": "assistant", "parts": []}
            messages.append(assistant)
        fold_chunks(assistant, chunks)
        if sample.finish_reason != "tool-calls":
            break
        if round_trip == cfg.max_round_trips:
            _fail(sample, "too_many_round_trips", f"still waiting for tools after {round_trip} requests")
            return
        approvals, outputs = answer_tools(assistant, cfg.tool_output)
        if not approvals and not outputs:
            _fail(sample, "tool_calls_unanswered", "the answer waits for tool calls a browser cannot answer")
            return
        sample.approvals += approvals
        sample.tool_outputs += outputs
        body = {**body, "messages": messages, "messageId": assistant["id"]}
    if assistant is None:
        return
    failed_tools = [p for p in assistant["parts"] if p.get("state") == "output-error"]
    if failed_tools:
        _fail(sample, "tool_error", str(failed_tools[0].get("errorText", ""))[:200])
    elif cfg.scenario == "approval" and not sample.approvals:
        _fail(sample, "no_approval_request", "the answer asked for no approval")
    elif cfg.scenario == "browser-tool" and not sample.tool_outputs:
        _fail(sample, "no_browser_tool_call", "the answer called no browser tool")
    if sample.ok:
        client.history = messages


# --- live ------------------------------------------------------------------------------------


def load_wav(path: str | Path) -> bytes:
    """A WAV file's audio as the live extension takes it: PCM16 mono at 16 kHz (stereo is mixed
    down, other rates resampled).

    Raises:
        ValueError: not a PCM16 WAV file, or one without audio.
    """
    try:
        with wave.open(str(path), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"{path}: not a WAV file ({exc})") from None
    if width != 2:
        raise ValueError(f"{path}: {8 * width}-bit samples; the live scenario needs 16-bit PCM")
    if channels not in (1, 2):
        raise ValueError(f"{path}: {channels} channels; the live scenario needs mono or stereo")
    if not frames:
        raise ValueError(f"{path}: no audio")
    import numpy as np

    from adk_gateway.core.pcm import float_to_pcm16, pcm16_to_float
    from adk_gateway.core.resample import resample

    samples = pcm16_to_float(frames)
    if channels == 2:
        samples = samples.reshape(-1, 2).mean(axis=1, dtype=np.float32)
    if rate != AUDIO_RATE:
        samples = resample(samples, rate, AUDIO_RATE)
    return float_to_pcm16(samples)


class _LiveReader:
    """Reads one live session's frames: the turn's chunks go to the tracker, audio is counted."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, request_id: str, tracker: Tracker) -> None:
        self.ws = ws
        self.request_id = request_id
        self.tracker = tracker
        self.sample = tracker.sample
        self.started = asyncio.Event()
        self.finished = asyncio.Event()
        self.utterance_ended: float | None = None

    async def run(self) -> None:
        try:
            await self._read()
        finally:
            self.started.set()
            self.finished.set()

    async def _read(self) -> None:
        async with contextlib.aclosing(request_frames(self.ws, self.sample, self.request_id)) as frames:
            async for frame in frames:
                kind = frame.get("type")
                if kind == "start":
                    self.started.set()
                elif kind == "chunk":
                    self._chunk(frame.get("chunk"))
                elif request_over(frame, self.tracker):
                    return

    def _chunk(self, chunk: Any) -> None:
        self.tracker.chunk(chunk)
        if not isinstance(chunk, dict):
            return
        if chunk.get("type") == "data-pcm":
            content = str((chunk.get("data") or {}).get("content", ""))
            self.sample.audio_bytes += len(content) * 3 // 4 - content[-2:].count("=")
            if self.sample.first_audio is None and self.utterance_ended is not None:
                self.sample.first_audio = time.perf_counter() - self.utterance_ended
        elif chunk.get("type") == "finish":
            self.finished.set()


async def live_turn(client: Client, sample: Sample, audio: bytes) -> None:
    """Opens a live session on the client's socket, speaks `audio` (PCM16 mono 16 kHz) in real
    time, waits for the whole answer, and stops the session."""
    cfg = client.cfg
    client.new_chat()
    sample.chat_id = client.chat_id
    started = time.perf_counter()
    opened = client.ws is None or client.ws.closed
    ws = await client.socket()
    if opened:
        sample.setup = time.perf_counter() - started
    request_id = f"live-{uuid.uuid4().hex[:16]}"
    tracker = Tracker(sample, started, None)
    reader = _LiveReader(ws, request_id, tracker)
    reading = asyncio.create_task(reader.run())
    sample.posts += 1

    async def send(kind: str, **fields: Any) -> None:
        await ws.send_str(json.dumps({"type": kind, "requestId": request_id, **fields}, separators=(",", ":")))

    try:
        await send("live-start", id=client.chat_id, sampleRate=AUDIO_RATE, headers=client.headers())
        await reader.started.wait()
        if reading.done():
            return
        await send("live-activity-start")
        frame_bytes = _BYTES_PER_MS * cfg.audio_frame_ms
        speaking = time.perf_counter()
        for number, offset in enumerate(range(0, len(audio), frame_bytes)):
            # Real time: frame N leaves N frame lengths after the first, as a microphone sends it.
            wait = speaking + number * cfg.audio_frame_ms / 1000 - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            if reading.done():
                return
            frame = audio[offset : offset + frame_bytes]
            await ws.send_bytes(frame)
            sample.audio_ms_sent += len(frame) // _BYTES_PER_MS
        reader.utterance_ended = time.perf_counter()
        await send("live-activity-end")
        await reader.finished.wait()
        if reading.done():
            return
        await send("live-stop")
        await reading
    finally:
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        elif not reading.cancelled() and (error := reading.exception()) is not None and sample.error is None:
            sample.error, sample.detail = classify(error)
        tracker.end()
        if sample.error in ("ws_closed", "ws_error") or not sample.ok:
            await client.close()


# --- idle ------------------------------------------------------------------------------------


async def _until_closed(ws: aiohttp.ClientWebSocketResponse) -> str:
    """Reads (and so answers the server's pings) until the socket closes; returns why."""
    async for _message in ws:
        pass
    return f"close code {ws.close_code}"


async def _until_eof(response: aiohttp.ClientResponse, sample: Sample, parser: SSEParser) -> str:
    async for data in response.content.iter_any():
        sample.bytes += len(data)
        sample.chunks += sum(1 for event in parser.feed(data) if event != "[DONE]")
    return "the stream ended"


async def _open_stream(client: Client, sample: Sample) -> tuple[aiohttp.ClientResponse, SSEParser] | None:
    """POSTs a turn whose model stays silent and reads until its first chunk: the stream is open."""
    cfg = client.cfg
    client.new_chat()
    sample.chat_id = client.chat_id
    body = {"id": client.chat_id, "messages": [user_message(cfg.prompt_text())], "trigger": "submit-message"}
    sample.posts += 1
    response = await client.http.post(client.base + cfg.sse_path, json=body, headers=client.http_headers())
    try:
        sample.status = response.status
        if response.status != 200:
            raw = await response.read()
            _fail(sample, f"http_{response.status}", raw[:200].decode("utf-8", "replace"))
            response.release()
            return None
        parser = SSEParser()
        while not sample.chunks:
            data = await response.content.readany()
            if not data:
                _fail(sample, "truncated", "the stream ended before it was held")
                response.close()
                return None
            sample.bytes += len(data)
            sample.chunks += sum(1 for event in parser.feed(data) if event != "[DONE]")
        return response, parser
    except BaseException:
        response.close()
        raise


async def hold(client: Client, sample: Sample, stop: asyncio.Event) -> None:
    """Opens one connection (within `--timeout`), holds it until `stop`, and counts it ok when it
    is still open then."""
    cfg = client.cfg
    started = time.perf_counter()
    sample.chat_id = client.chat_id
    response: aiohttp.ClientResponse | None = None
    watch: Callable[[], Awaitable[str]]
    async with asyncio.timeout(cfg.timeout_s):
        if cfg.transport == "ws":
            watch = functools.partial(_until_closed, await client.socket())
        else:
            opened = await _open_stream(client, sample)
            if opened is None:
                sample.total = time.perf_counter() - started
                return
            response, parser = opened
            watch = functools.partial(_until_eof, response, sample, parser)
    sample.setup = sample.ttfc = time.perf_counter() - started
    watching = asyncio.create_task(watch())
    stopping = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if watching in done:
            error = watching.exception()
            _fail(sample, "closed_early", repr(error)[:200] if error is not None else watching.result())
        else:
            sample.ok = True
    finally:
        for task in (watching, stopping):
            task.cancel()
        await asyncio.gather(watching, stopping, return_exceptions=True)
        if response is not None:
            response.close()  # the disconnect stops the silent run
        await client.close()
        sample.total = time.perf_counter() - started


# --- the scenarios as the runner calls them ----------------------------------------------------


Iteration = Callable[[Client, Sample, asyncio.Event], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A scenario ready to run: `run` does one request; `holds` says it lasts until the end of the
    test (and bounds only its opening by `--timeout`)."""

    run: Iteration
    holds: bool = False


def iteration_for(cfg: LoadConfig) -> Prepared:
    """The scenario of `cfg`, its inputs loaded (the live scenario's WAV file).

    Raises:
        ValueError: the WAV file cannot be used.
    """
    if cfg.scenario == "idle":
        return Prepared(hold, holds=True)
    if cfg.scenario == "live":
        audio = load_wav(cfg.wav or "")

        async def speak(client: Client, sample: Sample, _stop: asyncio.Event) -> None:
            await live_turn(client, sample, audio)

        return Prepared(speak)

    async def turn(client: Client, sample: Sample, _stop: asyncio.Event) -> None:
        await chat_turn(client, sample)

    return Prepared(turn)

