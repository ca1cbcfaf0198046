"""Unit tests for `adk-gateway loadtest`'s pieces that need no server: flags, checks, the client's
message folding, WAV input, the progress decision, and what the package imports."""

from __future__ import annotations

import ast
import io
import math
import os
import struct
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import pytest

from adk_gateway.__main__ import main as gateway_main
from adk_gateway.loadtest import cli
from adk_gateway.loadtest.clients import SSEParser, answer_tools, fold_chunks
from adk_gateway.loadtest.config import LoadConfig, TargetRefused, check_target, redact
from adk_gateway.loadtest.report import BarProgress, progress_wanted
from adk_gateway.loadtest.scenarios import AUDIO_RATE, load_wav

ROOT = Path(__file__).resolve().parents[2]


def config(*argv: str) -> LoadConfig:
    return cli.config_from_args(cli.build_parser().parse_args(list(argv)))


# --- the command line ------------------------------------------------------------------------------


def test_help_documents_the_modes_and_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        gateway_main(["loadtest", "--help"])  # through `adk-gateway`, as a user types it
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: adk-gateway loadtest")
    for words in ("fixed concurrency", "fixed arrival rate", "--rate R", "--concurrency", "--max-in-flight",
                  "--requests", "--duration", "--timeout", "dropped", "--json", "--no-progress", "--token",
                  "--allow-remote"):
        assert words in text, words
    for scenario in ("echo", "stream", "approval", "browser-tool", "idle", "live"):
        assert f"\n  {scenario} " in text, scenario


def test_the_gateway_command_itself_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    # Anything but `loadtest` first is the gateway's own flags (a wrong one stops it before serving).
    assert gateway_main(["--port", "not-a-port"]) == 2
    assert "adk-gateway: invalid settings: --port / ADK_GATEWAY_PORT" in capsys.readouterr().err
    assert gateway_main(["--scripted-latency-dist", "zipf"]) == 2
    assert "--scripted-latency-dist" in capsys.readouterr().err


def test_the_default_request_count_follows_the_mode() -> None:
    assert config().requests == 100
    assert config("--rate", "20", "--duration", "3").requests == 60
    assert config("--rate", "0.5", "--duration", "1").requests == 1
    assert config("--scenario", "idle", "-c", "40").requests == 40
    assert config("--rate", "20", "-n", "7").requests == 7
    assert config("--rate", "20").mode == "rate" and config().mode == "concurrency"


def test_flags_become_the_config() -> None:
    cfg = config("--transport", "ws", "--scenario", "browser-tool", "-c", "3", "--header", "x-a: 1",
                 "--tool-output", '{"lat": 1}', "--user", "u1", "--timeout", "2.5")
    assert (cfg.transport, cfg.scenario, cfg.concurrency, cfg.timeout_s) == ("ws", "browser-tool", 3, 2.5)
    assert cfg.headers == {"x-a": "1"} and cfg.tool_output == {"lat": 1} and cfg.user == "u1"
    with pytest.raises(ValueError, match="NAME:VALUE"):
        config("--header", "nocolon")
    with pytest.raises(ValueError, match="--tool-output"):
        config("--tool-output", "{nope")


def test_each_scenario_has_its_prompt() -> None:
    assert config().prompt_text() == "/echo hello from the load generator"
    assert config("--prompt", "/echo x").prompt_text() == "/echo x"
    assert config("--scenario", "stream", "--tokens", "7").prompt_text() == "/stream 7"
    assert config("--scenario", "stream", "--tokens", "7", "--tokens-per-s", "50", "--ttft-ms", "120",
                  "--latency-dist", "exp").prompt_text() == "/latency ttft=120 tps=50 dist=exp /stream 7"
    assert config("--scenario", "approval").prompt_text().startswith("/tool process_payment ")
    assert config("--scenario", "browser-tool").prompt_text() == "/tool get_location {}"
    # idle over SSE: a model silent for longer than the test (and its timeout)
    assert config("--scenario", "idle", "--duration", "10", "--timeout", "5").prompt_text() == (
        "/latency ttft=15000 /echo idle")


@pytest.mark.parametrize(("argv", "message"), [
    (["--scenario", "live"], "needs --transport ws"),
    (["--scenario", "live", "--transport", "ws"], "needs --wav"),
    (["--scenario", "approval", "--transport", "adk", "--adk-app", "a"], "echo and stream scenarios"),
    (["--rate", "0"], "--rate"),
    (["--rate", "5", "--max-in-flight", "0"], "--max-in-flight"),
    (["-c", "0"], "at least 1"),
    (["--token", "two words"], "--token"),
    (["--transport", "adk", "--adk-app", "demo", "--token", "t"], "--token"),
])
def test_wrong_flags_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(*argv).validate()


def test_a_remote_target_is_refused_before_any_request() -> None:
    err = io.StringIO()
    assert cli.main(["--url", "http://example.com", "-n", "1"], stdout=io.StringIO(), stderr=err) == 2
    assert "--allow-remote" in err.getvalue()
    assert gateway_main(["loadtest", "--url", "http://10.1.2.3:8080"]) == 2


@pytest.mark.parametrize("url", ["http://localhost:8080", "http://127.0.0.1:1", "http://127.9.9.9", "http://[::1]:80"])
def test_loopback_targets_are_allowed(url: str) -> None:
    check_target(url)


@pytest.mark.parametrize("url", ["http://example.com", "http://10.0.0.1:8080", "http://[2001:db8::1]/", "ftp://localhost"])
def test_other_targets_are_refused(url: str) -> None:
    with pytest.raises(TargetRefused):
        check_target(url)
    if not url.startswith("ftp"):
        check_target(url, allow_remote=True)


def test_redact_hides_query_and_bearer_credentials() -> None:
    text = "401, url='ws://127.0.0.1:1/api/chat/ws?access_token=abc.def&x=1' Authorization: Bearer k3y"
    assert redact(text) == (
        "401, url='ws://127.0.0.1:1/api/chat/ws?access_token=[redacted]&x=1' Authorization: Bearer [redacted]"
    )


def test_sse_parser_handles_split_lines_crlf_comments_and_multiline_data() -> None:
    parser = SSEParser()
    events = list(parser.feed(b": stream-open\r\n\r\ndata: {\"a\""))
    events += list(parser.feed(b":1}\r\n\r\ndata:x\ndata: y\n\ndata: [DONE]\n\n"))
    assert events == ['{"a":1}', "x\ny", "[DONE]"]


# --- what the client posts back ------------------------------------------------------------------


def test_a_browser_tool_round_trip_is_folded_and_answered_as_the_ai_sdk_does() -> None:
    message: dict[str, Any] = {"id": "client-id", "role": "assistant", "parts": []}
    fold_chunks(message, [
        {"type": "start", "messageId": "m1"}, {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "get_location"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "get_location", "input": {}},
        {"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c1"},
        {"type": "finish-step"}, {"type": "finish", "finishReason": "tool-calls"},
    ])
    assert message["id"] == "m1"
    assert message["parts"][1] == {"type": "tool-get_location", "toolCallId": "c1", "state": "approval-requested",
                                   "input": {}, "approval": {"id": "a1"}}
    assert answer_tools(message, {"lat": 1}) == (1, 0)
    assert message["parts"][1]["approval"] == {"id": "a1", "approved": True}

    # The approval's answer re-announces the call: the browser runs it and posts the output.
    fold_chunks(message, [{"type": "start"}, {"type": "tool-input-available", "toolCallId": "c1",
                                              "toolName": "get_location", "input": {}},
                          {"type": "finish", "finishReason": "tool-calls"}])
    assert answer_tools(message, {"lat": 1}) == (0, 1)
    assert message["parts"][1]["state"] == "output-available" and message["parts"][1]["output"] == {"lat": 1}
    assert message["parts"][1]["approval"]["approved"] is True

    fold_chunks(message, [{"type": "start-step"}, {"type": "text-start", "id": "t"},
                          {"type": "text-delta", "id": "t", "delta": "get_location -> "},
                          {"type": "text-delta", "id": "t", "delta": "{}"}, {"type": "text-end", "id": "t"}])
    assert message["parts"][-1] == {"type": "text", "text": "get_location -> {}", "state": "done"}
    assert answer_tools(message, {}) == (0, 0)  # nothing left to answer


def test_server_tools_are_not_answered_by_the_client() -> None:
    message: dict[str, Any] = {"id": "m", "role": "assistant", "parts": []}
    fold_chunks(message, [{"type": "tool-input-available", "toolCallId": "c", "toolName": "get_weather",
                           "input": {}, "providerExecuted": True},
                          {"type": "tool-output-error", "toolCallId": "c", "errorText": "boom"}])
    assert message["parts"][0]["state"] == "output-error"
    assert answer_tools(message, {}) == (0, 0)


# --- live input ----------------------------------------------------------------------------------


def write_wav(path: Path, *, rate: int, channels: int = 1, width: int = 2, seconds: float = 0.1) -> Path:
    frames = int(rate * seconds)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        if width == 2:
            samples = [int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(frames)]
            wav.writeframes(b"".join(struct.pack("<" + "h" * channels, *([s] * channels)) for s in samples))
        else:
            wav.writeframes(b"\x80" * frames * channels * width)
    return path


def test_a_16k_mono_wav_is_sent_as_it_is(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "a.wav", rate=AUDIO_RATE)
    with wave.open(str(path)) as wav:
        assert load_wav(path) == wav.readframes(wav.getnframes())


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (44100, 2), (48000, 1)])
def test_other_rates_are_resampled_and_stereo_mixed_down(tmp_path: Path, rate: int, channels: int) -> None:
    pcm = load_wav(write_wav(tmp_path / "a.wav", rate=rate, channels=channels, seconds=0.25))
    assert len(pcm) % 2 == 0
    assert len(pcm) // 2 == pytest.approx(AUDIO_RATE * 0.25, abs=2)
    assert max(abs(v) for (v,) in struct.iter_unpack("<h", pcm)) == pytest.approx(8000, rel=0.05)


def test_a_wav_that_is_not_pcm16_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="16-bit"):
        load_wav(write_wav(tmp_path / "u8.wav", rate=16000, width=1))
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(ValueError, match="not a WAV"):
        load_wav(tmp_path / "text.wav")
    err = io.StringIO()
    argv = ["--scenario", "live", "--transport", "ws", "--wav", str(tmp_path / "text.wav")]
    assert cli.main(argv, stdout=io.StringIO(), stderr=err) == 2
    assert "not a WAV" in err.getvalue()


# --- the progress bar ------------------------------------------------------------------------------


def test_progress_goes_to_a_terminal_only() -> None:
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert progress_wanted(terminal, environ={"TERM": "xterm"})
            assert not progress_wanted(terminal, disabled=True, environ={"TERM": "xterm"})  # --no-progress
            assert not progress_wanted(terminal, environ={"TERM": "dumb"})
    finally:
        os.close(leader)
        os.close(follower)
    reader, writer = os.pipe()
    try:
        with open(writer, "w", closefd=False) as pipe:
            assert not progress_wanted(pipe, environ={"TERM": "xterm"})
    finally:
        os.close(reader)
        os.close(writer)
    assert not progress_wanted(io.StringIO(), environ={"TERM": "xterm"})


def test_the_bar_counts_requests_and_disappears_at_the_end() -> None:
    from rich.console import Console

    from adk_gateway.loadtest.clients import Sample

    out = io.StringIO()
    bar = BarProgress(Console(file=out, force_terminal=True, force_interactive=True, width=100))
    bar.begin(total=3, duration_s=10)
    bar.finished(Sample(index=0, chat_id="c", ok=True))
    bar.finished(Sample(index=1, chat_id="c", error="timeout"))
    bar.finished(Sample(index=2, chat_id="c", dropped=True))
    bar.tick(elapsed=2.0, in_flight=4)
    assert bar._stats() == "ok 1 · failed 1 · dropped 1 · in flight 4 · 0.5 ok/s"
    assert bar.bar.tasks[0].completed == 3 and bar.bar.tasks[1].completed == 2
    bar.end()
    shown = out.getvalue()
    assert "requests" in shown and "3/3" in shown
    assert "\x1b[2K" in shown  # the bar's lines are erased when it stops (transient)


# --- a client ------------------------------------------------------------------------------------

FORBIDDEN = ("adk_gateway.services", "adk_gateway.app", "adk_gateway.transports", "adk_gateway.agents", "google")


def test_the_package_imports_nothing_of_the_server() -> None:
    for path in sorted((ROOT / "gateway" / "loadtest").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"


def test_importing_the_command_loads_no_server_module() -> None:
    code = ("import sys, adk_gateway.loadtest.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'google' "
            "or m.startswith(('adk_gateway.services', 'adk_gateway.app', 'adk_gateway.transports', "
            "'adk_gateway.agents'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                            check=True)
    assert result.stdout.strip() == "[]"
