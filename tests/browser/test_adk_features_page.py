"""The chat page (web/) with real ADK agents' features, in headless Chromium.

One gateway serves tests/adk_apps (seven ADK apps on an offline model that streams as Gemini does)
with `--client-state cart --detach-on-disconnect`; the sign-in app signs in at a local OAuth2 server
(tests/oauth_server.py). tests/browser/adk_features_page.mjs drives the page once, in one browser,
and reports what it saw; the tests below judge each part of that report:

- the app picker ("App") lists the apps, and every request names the app picked;
- over SSE: grounding (sources, and Google's search suggestions in a sandboxed iframe), artifacts
  (an image shown, a text file to download), agent labels after a transfer, the shared state panel,
  a long-running tool answered from the page, a tool sign-in through a popup, and one cancelled;
- over the WebSocket: the long-running tool and the sign-in again;
- axe-core on those states, and a phone-sized viewport.

Screenshots of each feature go to tests/browser/artifacts/adk-features/ (their paths are printed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.page_driver import PageRun, run_page
from tests.gateway_process import ROOT, running_gateway
from tests.oauth_server import OAuthServer, running_oauth_server

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

APPS = ["artifacts_app", "grounding_app", "long_running_app", "sequential_app", "sign_in_app", "state_app",
        "transfer_app"]
FEATURE_APPS = {"grounding": "grounding_app", "artifacts": "artifacts_app", "transfer": "transfer_app",
                "state": "state_app", "long_running": "long_running_app", "sign_in": "sign_in_app",
                "sign_in_cancelled": "sign_in_app"}
LONG_RUNNING_DONE = "Done: $250.00 reimbursed for a team dinner."
CALENDAR_ANSWER = "You have 2 events today: Standup at 09:00, Design review at 14:00."


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with running_oauth_server() as server:
        yield server


@pytest.fixture(scope="module")
def apps_gateway_url(tmp_path_factory: pytest.TempPathFactory, oauth: OAuthServer) -> Iterator[str]:
    env = {**os.environ, "ADK_TEST_OAUTH_URL": oauth.url}
    log = tmp_path_factory.mktemp("adk-features-gateway") / "gateway.log"
    args = ("--agent", str(ROOT / "tests" / "adk_apps"), "--client-state", "cart", "--detach-on-disconnect")
    with running_gateway(*args, log=log, env=env, name="ADK apps gateway") as url:
        yield url


@pytest.fixture(scope="module")
def page_run(apps_gateway_url: str, oauth: OAuthServer, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    workdir = tmp_path_factory.mktemp("adk-features-page")
    config = {"url": apps_gateway_url, "oauthUrl": oauth.url}
    return run_page("adk_features_page.mjs", "adk-features", config, workdir, served_from=apps_gateway_url)


def test_the_run_is_clean(page_run: PageRun) -> None:
    result = page_run.result
    assert result.get("ok") and page_run.returncode == 0, page_run.report("console")
    assert not [line for line in result["console"] if " error:" in line], page_run.report("console")
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"


def test_the_app_picker_lists_the_apps_and_each_request_names_the_one_picked(page_run: PageRun) -> None:
    picker = page_run.section("picker")
    report = page_run.report("picker", "sse", "ws")
    assert picker["options"] == APPS and picker["initial"] == "artifacts_app", report
    for kind, features in (("sse", FEATURE_APPS), ("ws", ["long_running", "sign_in"])):
        for name in features:
            apps = page_run.section(kind, name, "apps")
            assert apps and set(apps) == {FEATURE_APPS[name]}, f"{kind} {name}\n{report}"
    assert page_run.section("ws", "appKept") == "sign_in_app", report  # a transport switch keeps the app


def test_grounding_shows_sources_and_sandboxed_search_suggestions(page_run: PageRun) -> None:
    seen = page_run.section("sse", "grounding")
    report = page_run.report("sse")
    assert seen["text"] == "Paris is the capital of France." and seen["requests"] == 1, report
    assert seen["links"] == [
        {"text": "wikipedia.org", "href": "https://en.wikipedia.org/wiki/Paris", "target": "_blank"},
        {"text": "britannica.com", "href": "https://www.britannica.com/place/Paris", "target": "_blank"},
    ], report
    assert seen["linkHosts"] == ["en.wikipedia.org", "www.britannica.com"], report
    assert seen["documents"] == ["france.pdf"], report
    # Google's search suggestions: shown, in a frame sandboxed without scripts or same origin.
    assert seen["suggestionsVisible"] and seen["suggestionsHeight"] >= 30, report
    tokens = seen["sandbox"].split()
    assert "allow-scripts" not in tokens and "allow-same-origin" not in tokens, report
    assert set(tokens) == {"allow-popups", "allow-popups-to-escape-sandbox"}, report
    assert seen["srcdocHasBase"] and seen["chips"] == ["capital of France"], report
    assert seen["scriptsRun"] is False, report


def test_artifacts_show_the_image_and_link_the_file(page_run: PageRun, apps_gateway_url: str) -> None:
    seen = page_run.section("sse", "artifacts")
    report = page_run.report("sse")
    assert seen["text"].endswith("Saved report.txt (version 0). Saved chart.png (version 0)."), report
    assert seen["imageWidth"] > 0 and seen["imageAlt"] == "chart.png", report
    assert "report.txt" in seen["linkText"] and seen["download"] == "report.txt", report
    assert seen["fileType"] == "text/plain", report
    assert f"http://{seen['fileHost']}" == apps_gateway_url, report
    assert seen["fileStatus"] == 200 and seen["fileBody"] == "Q3 sales\nRevenue: 42\nCosts: 17\n", report


def test_a_transfer_labels_each_agent(page_run: PageRun) -> None:
    seen = page_run.section("sse", "transfer")
    report = page_run.report("sse")
    assert seen["text"].endswith("It is sunny and 22°C in Paris.") and seen["requests"] == 1, report
    assert seen["agents"] == ["coordinator", "weather"], report
    assert seen["labels"] == ["Agent: coordinator", "Agent: weather"], report


def test_the_state_panel_shows_the_cart(page_run: PageRun) -> None:
    seen = page_run.section("sse", "state")
    report = page_run.report("sse")
    assert seen["panelBefore"] == 0, report  # no state yet: no panel
    assert seen["text"] == "Added 2 apples. Cart: 2 apples.", report
    assert seen["panelVisible"], report
    assert seen["entries"] == [{"key": "cart", "value": [{"item": "apples", "quantity": 2}]}], report


@pytest.mark.parametrize("kind", ["sse", "ws"])
def test_a_long_running_tool_is_answered_from_the_page(page_run: PageRun, kind: str) -> None:
    seen = page_run.section(kind, "long_running")
    report = page_run.report(kind)
    assert seen["state"] == "Waiting for an answer" and seen["requestsWhileWaiting"] == 1, report
    assert seen["input"] == {"purpose": "a team dinner", "amount": 250}, report
    assert seen["status"]["status"] == "pending", report
    assert seen["prefilled"] == {"status": "approved"}, report
    # The answer went back as the call's output, once: 2 requests for the turn, no loop.
    assert seen["sentState"] == "output-available" and seen["sentOutput"] == {"status": "approved"}, report
    assert seen["requests"] == 2, report
    assert seen["text"].endswith(LONG_RUNNING_DONE), report
    assert seen["finalState"] == "output-available" and seen["formGone"], report


@pytest.mark.parametrize("kind", ["sse", "ws"])
def test_a_tool_sign_in_goes_through_a_popup(page_run: PageRun, oauth: OAuthServer, kind: str) -> None:
    seen = page_run.section(kind, "sign_in")
    report = page_run.report(kind)
    assert seen["heading"] == "Sign-in for list_calendar_events", report
    assert seen["calendarWhileWaiting"] == "Waiting for sign-in", report
    # The popup went to the provider, was sent back to the gateway's callback, and closed itself.
    assert seen["visitedOAuth"] and seen["callbackStatus"] == 200, report
    assert seen["text"] == CALENDAR_ANSWER and seen["requests"] == 2, report
    assert seen["finalState"] == "output-available" and seen["signedInShown"], report
    assert seen["calendarState"] == "output-available", report
    # Both sign-ins (SSE and WebSocket) got a token for the code the callback received.
    issued = [r for r in oauth.token_requests if r.get("status") == 200]
    assert len(issued) >= 2 and all(r["form"]["redirect_uri"].endswith("/api/oauth/callback") for r in issued)


def test_a_cancelled_sign_in_ends_the_call_in_an_error(page_run: PageRun) -> None:
    seen = page_run.section("sse", "sign_in_cancelled")
    report = page_run.report("sse")
    assert seen["sent"] == {"state": "output-error", "errorText": "Sign-in was not completed."}, report
    assert seen["finalState"] == "output-error" and seen["error"] == "Sign-in was not completed.", report
    assert seen["text"] == "I could not sign in to your calendar. Please try again." and seen["requests"] == 2, report


@pytest.mark.parametrize("state", ["grounding", "state", "long-running", "sign-in", "phone"])
def test_accessibility(page_run: PageRun, state: str) -> None:
    violations = page_run.section("axe", state)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, json.dumps(serious, indent=1)


def test_phone_viewport(page_run: PageRun) -> None:
    phone = page_run.section("phone")
    report = page_run.report("phone")
    assert phone["overflowPx"] <= 0 and phone["answerVisible"] and phone["pickerVisible"], report
    assert phone["text"].endswith(LONG_RUNNING_DONE), report
