"""The chat page's voice panel in headless Chromium, with a microphone the page script controls.

tests/browser/voice_page.mjs drives the page once, in one browser, against two gateways: the
browser tests' gateway (the demo agent on the scripted model, which sends its 0.5 s spoken answer
in about 80 ms) and one serving tests/browser/voice_apps (a live model whose 3 s answer streams
while it plays). The tests below judge each part of its report:

- the panel says "on" and enables "Hold to talk" only once the microphone delivers audio, and a
  quick press-to-talk right then reaches the gateway whole;
- hands-free: a faint copy of the answer on the microphone (what echo cancellation leaves) does
  not cut it;
- hands-free barge-in, after the gateway has sent the whole answer and while it still streams it:
  the page's output is silent within 100 ms of the user's speech starting, the page sends
  `live-interrupt`, the transcript marks the answer interrupted, nothing more of it plays, and
  the utterance that barged in is heard; while it streams, the gateway ends the turn `interrupted`.

Screenshots go to tests/browser/artifacts/voice-page/ (their paths are printed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import page_driver
from tests.browser.page_driver import run_page
from tests.gateway_process import ROOT, running_gateway

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

BARGE_IN_SILENT_MS = 100


class PageRun(page_driver.PageRun):
    """The report of one voice_page.mjs run."""

    def step(self, name: str) -> dict[str, Any]:
        steps = self.result.get("steps", {})
        if name not in steps:
            pytest.fail(f"the page run did not get to {name}:\n{self.report('steps')}", pytrace=False)
        return steps[name]


@pytest.fixture(scope="module")
def paced_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("paced-voice-gateway") / "gateway.log"
    agents = ROOT / "tests" / "browser" / "voice_apps"
    with running_gateway("--agent", str(agents), log=log, name="paced voice gateway") as url:
        yield url


@pytest.fixture(scope="module")
def page_run(browser_gateway_url: str, paced_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    workdir = tmp_path_factory.mktemp("voice-page")
    config = {"url": browser_gateway_url, "pacedUrl": paced_gateway_url}
    return run_page("voice_page.mjs", "voice-page", config, workdir, served_from=browser_gateway_url,
                    report_as=PageRun)


def test_the_run_is_clean(page_run: PageRun) -> None:
    result = page_run.result
    assert result.get("ok") and page_run.returncode == 0, page_run.report("steps", "console")
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"
    serious = [v for v in result["axe"].get("voice", []) if v["impact"] in ("serious", "critical")]
    assert not serious, json.dumps(serious, indent=1)


def test_voice_is_on_only_once_the_microphone_delivers_audio(page_run: PageRun) -> None:
    seen = page_run.step("firstFrame")
    report = page_run.report("steps")
    # Asked for the microphone (the gateway's session has started), and opened but silent.
    for state in (seen["whileAsking"], seen["whileSilent"]):
        assert state["status"] == "connecting" and state["talk"] == "disabled", report
        assert "Voice is on" not in state["text"], report
    # "on" and "Hold to talk" come with the first frame, not before.
    assert seen["framesWhenOn"] >= 1 and seen["onAfterFirstFrameMs"] >= 0, report
    assert seen["framesWhenEnabled"] >= 1 and seen["enabledAfterFirstFrameMs"] >= 0, report
    assert seen["on"]["status"] == "on" and seen["on"]["talk"] == "enabled", report
    assert seen["on"]["text"].startswith("Voice is on"), report
    # A quick press-to-talk right away: all 400 ms of speech went out, and the gateway heard them.
    assert seen["quickVoicedMs"] >= 360, report
    assert seen["quickHeardMs"] == seen["quickSentMs"], report


def test_a_faint_echo_of_the_answer_does_not_cut_it(page_run: PageRun) -> None:
    seen = page_run.step("echo")
    report = page_run.report("steps")
    assert seen["interrupts"] == 0 and seen["interrupted"] is None, report
    assert seen["played"] >= 5 and seen["stopped"] == 0, report  # all of the 0.5 s answer, 100 ms a chunk
    assert seen["finishReason"] == "stop" and seen["heardMs"] > 0, report


@pytest.mark.parametrize("name", ["bargeInDone", "bargeInStreaming"])
def test_hands_free_barge_in(page_run: PageRun, name: str) -> None:
    seen = page_run.step(name)
    report = page_run.report("steps")
    # The answer was playing, with more than the budget still to play.
    assert seen["remainingMs"] >= 250, report
    # Silent within 100 ms of the user's speech starting; the page told the gateway at once.
    assert seen["silentAfterMs"] < BARGE_IN_SILENT_MS, report
    assert seen["stoppedAfterMs"] is not None and seen["stoppedAfterMs"] < BARGE_IN_SILENT_MS, report
    assert seen["interruptAfterMs"] is not None and seen["interruptAfterMs"] < BARGE_IN_SILENT_MS, report
    assert seen["interrupts"] == 1, report
    # The transcript marks the answer interrupted; nothing more of it played.
    assert seen["interrupted"] == "cut" and "Interrupted" in seen["note"], report
    assert seen["lateBuffers"] == 0, report
    # The utterance that barged in reached the model whole (800 ms of speech).
    assert seen["firstHeardMs"] >= 600 and seen["bargeInHeardMs"] >= 800, report
    if name == "bargeInDone":
        # The gateway had sent the whole answer: only the page could stop it.
        assert seen["finishBefore"] == "stop" and seen["finishReason"] == "stop", report
    else:
        # The gateway was still streaming it: it ends the turn interrupted once told.
        assert seen["finishBefore"] is None and seen["finishReason"] == "interrupted", report
        assert seen["finishAfterInterruptMs"] is not None and 0 <= seen["finishAfterInterruptMs"] < 1000, report
