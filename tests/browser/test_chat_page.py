"""The chat page (web/, React on `useChat`) in headless Chromium, over SSE and over the WebSocket.

tests/browser/chat_page.mjs drives the page once, in one browser, against one gateway
(--detach-on-disconnect) and reports what it saw; the tests below judge each part of that report:

- per transport: echo; a payment allowed once, denied (with the keyboard), denied-and-stopped,
  "always" and "never" (each with a second payment that is not asked about); get_location with a
  mocked position; a stopped /stream; a reload during /stream that resumes and completes it;
- live voice with Chromium's fake microphone (a WAV made here): push-to-talk, the answer's tone
  heard through the page's AnalyserNode, barge-in, an approval in a live turn, hands-free;
- markdown, reasoning and images; axe-core; a phone-sized viewport.

Screenshots of each state go to tests/browser/artifacts/chat-page/ (their paths are printed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.page_driver import PageRun, run_page, write_voice_wav

# One run of the page script serves every test here; under load it may take a few minutes.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

POSITION = {"latitude": 48.8566, "longitude": 2.3522, "accuracy": 12}
PAYMENT_OUTPUT_KEYS = {"amount", "recipient", "status", "transaction_id"}


@pytest.fixture(scope="module")
def page_run(browser_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    workdir = tmp_path_factory.mktemp("chat-page")
    wav = write_voice_wav(workdir / "voice.wav")
    config = {"url": browser_gateway_url, "wav": str(wav), "position": POSITION}
    return run_page("chat_page.mjs", "chat-page", config, workdir, served_from=browser_gateway_url)


def test_the_run_is_clean(page_run: PageRun) -> None:
    result = page_run.result
    assert result.get("ok") and page_run.returncode == 0, page_run.report("console")
    assert not [line for line in result["console"] if line.startswith("error:")], page_run.report("console")
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"


@pytest.mark.parametrize("kind", ["sse", "ws"])
def test_chat_over_each_transport(page_run: PageRun, kind: str) -> None:
    run = page_run.section("runs", kind)
    report = page_run.report("runs")

    assert run["echo"] == {"text": "hello browser", "requests": 1}, report

    approve = run["approve"]
    assert approve["requests"] == 2 and approve["decision"] == "Allowed once", report
    assert approve["output"]["status"] == "completed" and set(approve["output"]) == PAYMENT_OUTPUT_KEYS, report
    assert approve["text"].startswith("process_payment -> {"), report

    deny = run["deny"]
    assert deny["requests"] == 2 and deny["decision"] == "Denied" and deny["tabs"] > 0, report
    assert deny["text"] == 'process_payment -> {"error":"This tool call is rejected."}', report

    # Deny and stop: the turn ends at the denial (no text after it), with the interruption shown.
    stop = run["deny_stop"]
    assert stop["requests"] == 2 and stop["text"] == "" and stop["lastPart"] == "interrupted", report
    assert "interrupted" in stop["interrupted"], report

    always = run["always"]
    assert always["secondRequests"] == 1 and always["secondAsked"] == 0, report
    assert always["secondState"] == "output-available", report
    assert always["secondOutput"]["recipient"] == "eve" and always["secondOutput"]["status"] == "completed", report

    never = run["never"]
    assert never["firstDecision"] == "Never allowed", report
    assert never["secondRequests"] == 1 and never["secondAsked"] == 0, report
    assert never["secondError"] == "Permission to use process_payment has been permanently denied", report
    assert "permanently denied" in never["secondText"], report

    # A browser tool: the user's message, the approval, the output (3 requests, never a loop).
    location = run["location"]
    assert location["requests"] == 3 and location["output"] == POSITION, report
    assert location["text"] == f"get_location -> {json.dumps(POSITION, sort_keys=True, separators=(',', ':'))}", report

    stopped = run["stop"]
    assert stopped["tokens"] < 200 and stopped["unchangedAfterStop"], report
    assert stopped["nextText"] == "after stop" and stopped["requests"] == 2, report
    # SSE needs the stop endpoint (a disconnect is not a stop with --detach-on-disconnect).
    assert stopped["stopPosts"] == (1 if kind == "sse" else 0), report

    resumed = run["resume"]
    assert resumed["complete"] and resumed["transportAfterReload"] == kind, report
    if kind == "sse":
        assert 200 in resumed["resumeGets"], report
    else:
        assert resumed["resumeFrames"] >= 1, report

    if kind == "sse":
        error = run["error_retry"]
        assert "the model is down" in error["error"] and error["retryTrigger"] == "regenerate-message", report
        assert error["messagesAfterRetry"] == error["expectedMessages"] and error["requests"] == 2, report
    else:
        bgm = run["bgm"]
        assert "now playing track 2" in bgm["nowPlaying"] and bgm["requests"] == 3, report
        assert bgm["text"] == 'change_bgm -> {"playing":2}', report


def test_live_voice(page_run: PageRun) -> None:
    live = page_run.section("live")
    report = page_run.report("live")

    # Push-to-talk: the gateway heard what the page sent, and its tone played through the page.
    assert live["sentMs"] >= 1000 and abs(live["heardMs"] - live["sentMs"]) <= 20, report
    assert live["transcription"] == f"You said: [{live['heardMs']} ms of audio]", report
    assert live["playing"]["level"] > 0.02 and abs(live["playing"]["peakHz"] - 440) <= 25, report
    assert live["silenceAfterMs"] < 2000, report
    assert live["keyboardSentMs"] >= 500 and abs(live["keyboardHeardMs"] - live["keyboardSentMs"]) <= 20, report

    # Barge-in (speaking, then Interrupt) while an answer plays: silent at once (the analyser's
    # window and a frame or two; more on a busy machine), before the queued audio would have
    # ended. The utterance that barged in was heard.
    for way in ("bargeInBySpeech", "bargeInByButton"):
        timing = live[way]
        assert timing["queuedMs"] >= 100, report
        assert timing["silentAfterMs"] < 300 and timing["silentAfterMs"] < timing["queuedMs"], report
    assert re.fullmatch(r"You said: \[\d+ ms of audio\]", live["bargeInTranscription"]), report
    sent = set(live["liveFrames"])
    assert {"live-start", "live-activity-start", "live-activity-end", "live-interrupt"} <= sent, report

    assert live["approvalFrames"] == 1 and live["approvalOutput"]["status"] == "completed", report

    # Hands-free: the page streams the microphone; the gateway finds the utterances.
    assert live["handsFreeActivityFrames"] == 0 and live["handsFreeAudioFrames"] > 25, report
    assert live["handsFreeHeardMs"] > 0, report
    assert live["handsFreePlaying"]["level"] > 0.02 and abs(live["handsFreePlaying"]["peakHz"] - 440) <= 25, report
    assert live["voiceErrors"] == 0, report


def test_markdown_reasoning_and_images(page_run: PageRun) -> None:
    rendering = page_run.section("rendering")
    report = page_run.report("rendering")
    assert rendering["strong"] == ["bold"] and rendering["code"] == ["code"], report
    assert rendering["rawElements"] == 0, report  # raw HTML is not rendered
    assert rendering["links"] == ["https://example.com/"], report  # the javascript: link is plain text
    assert rendering["reasoningOpen"] is False and "the sky is blue" in rendering["reasoningText"], report
    assert rendering["imageWidth"] > 0 and rendering["imageAlt"], report


@pytest.mark.parametrize("state", ["desktop", "voice", "phone"])
def test_accessibility(page_run: PageRun, state: str) -> None:
    violations = page_run.section("axe", state)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, json.dumps(serious, indent=1)


def test_phone_viewport(page_run: PageRun) -> None:
    phone = page_run.section("phone")
    report = page_run.report("phone")
    assert phone["overflowPx"] <= 0 and phone["buttonsVisible"], report
    assert phone["text"].startswith("process_payment -> {"), report
