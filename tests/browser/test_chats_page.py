"""The chat page's sidebar and server-kept chats (`/api/chats`) in headless Chromium, on two
browser contexts ("devices") of the same user.

tests/browser/chats_page.mjs drives the page once against a gateway of its own (the demo agent,
--detach-on-disconnect, no auth: both contexts are 'anonymous') and reports what it saw; the tests
below judge each part of that report:

- a new chat is listed after its first turn, its first text its title; every request of the chat
  carries only its last message (a `message`, no `messages`, over SSE; one message in a WebSocket
  `send` frame), continuations after an approval included;
- rename with the keyboard; a second context opening the chat's URL shows the same messages (the
  visible text of each and its tool parts' states), continues it, and the first sees that after a
  reload; a pending approval asked on one is answered on the other with exactly one request;
- delete (asked first): gone from the list, and the deleted chat's URL opens a new chat with a
  notice (the 404 handled); on a phone the sidebar hides behind a "Chats" button; axe-core.

Screenshots go to tests/browser/artifacts/chats-page/ (their paths are printed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import page_driver
from tests.browser.page_driver import run_page
from tests.gateway_process import running_gateway

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

TITLE = "Payments with Bob"


class PageRun(page_driver.PageRun):
    """The report of one chats_page.mjs run."""

    def report(self, *keys: str) -> str:
        steps = self.result.get("steps", {})
        shown = {"steps": {k: steps.get(k) for k in keys}, "failures": self.result.get("failures")}
        return f"{json.dumps(shown, indent=1, ensure_ascii=False)}\nstderr:\n{self.stderr[-6000:]}"

    def step(self, name: str) -> dict[str, Any]:
        steps = self.result.get("steps", {})
        if name not in steps or "seconds" not in steps[name]:
            pytest.fail(f"the page run did not finish the step {name}:\n{self.report(name)}", pytrace=False)
        return steps[name]


@pytest.fixture(scope="module")
def chats_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway of this module's own: its list of chats holds only the chats made here."""
    log = tmp_path_factory.mktemp("chats-gateway") / "gateway.log"
    with running_gateway("--detach-on-disconnect", log=log, name="chats page gateway") as url:
        yield url


@pytest.fixture(scope="module")
def page_run(chats_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    workdir = tmp_path_factory.mktemp("chats-page")
    return run_page("chats_page.mjs", "chats-page", {"url": chats_gateway_url}, workdir, report_as=PageRun)


def test_the_run_is_clean(page_run: PageRun) -> None:
    result = page_run.result
    assert result.get("ok") and page_run.returncode == 0, page_run.report() + json.dumps(result.get("console"))
    # The one console error allowed: Chromium's line for the deleted chat's expected 404.
    errors = [line for line in result["console"] if " error: " in line]
    assert all("status of 404" in line for line in errors) and len(errors) <= 1, errors
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"


def test_a_new_chat_is_listed_after_its_first_turn_with_its_first_text(page_run: PageRun) -> None:
    first = page_run.step("first")
    report = page_run.report("first")
    assert first["text"] == "hello from A" and first["listedBefore"] is False, report
    assert first["listed"] == [{"id": first["chatId"], "title": "/echo hello from A", "current": True}], report
    assert first["landmark"] == 1, report  # a navigation landmark with a list item per chat


def test_sse_requests_carry_the_last_message_only(page_run: PageRun) -> None:
    approval = page_run.step("approval")
    report = page_run.report("approval")
    assert approval["text"].startswith("process_payment -> {"), report
    assert approval["ids"] == [page_run.step("first")["chatId"]], report
    bodies = approval["bodies"]
    # The first message, the payment, the approval's continuation: each body its last message only.
    assert [(b["role"], b["text"], b["trigger"]) for b in bodies] == [
        ("user", "/echo hello from A", "submit-message"),
        ("user", '/tool process_payment {"amount": 5, "recipient": "bob"}', "submit-message"),
        ("assistant", "", "submit-message"),
    ], report
    assert all(b["hasMessage"] and not b["hasMessages"] for b in bodies), report
    assert bodies[2]["tools"] == ["process_payment:approval-responded"], report


def test_websocket_send_frames_carry_one_message(page_run: PageRun) -> None:
    seen = page_run.step("continueB")
    report = page_run.report("continueB")
    assert seen["text"] == "hello from B", report
    assert seen["frames"] == [{"messages": 1, "role": "user", "text": "/echo hello from B", "bodyMessageIsIt": True,
                               "trigger": "submit-message"}], report


def test_rename_with_the_keyboard(page_run: PageRun) -> None:
    seen = page_run.step("rename")
    report = page_run.report("rename")
    assert seen["renameName"] == "Rename “/echo hello from A”", report
    assert seen["inputFocused"] and seen["inputLabel"] == "New title for “/echo hello from A”", report
    assert seen["patchStatus"] == 200 and seen["patchBody"] == {"title": TITLE}, report
    assert seen["title"] == TITLE and seen["focusBack"], report


def test_a_second_context_opens_the_chat_from_its_url(page_run: PageRun) -> None:
    seen = page_run.step("second")
    report = page_run.report("rename", "second")
    assert seen["loads"] == [200] and seen["transport"] == "ws", report
    assert seen["same"] and len(seen["snapshot"]) == 4, report
    payment = seen["snapshot"][3]
    assert payment["tools"] == ["process_payment:output-available"] and "Allowed once" in payment["visible"], report
    chat_id = page_run.step("first")["chatId"]
    assert seen["listed"] == [{"id": chat_id, "title": TITLE, "current": True}], report


def test_the_first_context_shows_the_continuation_after_a_reload(page_run: PageRun) -> None:
    seen = page_run.step("reloadA")
    report = page_run.report("continueB", "reloadA")
    assert seen["same"] and seen["chatId"] == page_run.step("first")["chatId"], report
    assert [m["text"] for m in seen["snapshot"]][-2:] == ["/echo hello from B", "hello from B"], report


def test_a_pending_approval_is_answered_on_the_other_context(page_run: PageRun) -> None:
    seen = page_run.step("pending")
    report = page_run.report("pending")
    assert seen["askedInA"] == "approval-requested", report
    assert seen["stateInB"] == "approval-requested" and seen["buttonsInB"], report
    assert json.dumps(seen["snapshotB"]) == json.dumps(seen["snapshotA"]), report
    # Exactly one request continues the chat: the assistant's message with the answer.
    assert seen["continuations"] == [{"hasMessage": True, "hasMessages": False, "role": "assistant", "text": "",
                                      "tools": ["process_payment:approval-responded"],
                                      "trigger": "submit-message"}], report
    assert seen["output"]["status"] == "completed" and seen["output"]["recipient"] == "carol", report
    assert seen["text"].startswith("process_payment -> {"), report
    assert seen["stateInAAfter"] == "output-available" and seen["sameAfter"], report


def test_delete_asks_first_and_the_deleted_chats_url_opens_a_new_chat(page_run: PageRun) -> None:
    seen = page_run.step("delete")
    report = page_run.report("delete")
    chat_id = page_run.step("first")["chatId"]
    assert seen["cancelFocused"] and seen["question"] == f"Delete “{TITLE}”?", report
    assert seen["deleteStatus"] == 204, report
    assert seen["aChatAfter"] != chat_id and seen["aMessagesAfter"] == 0, report
    assert chat_id not in seen["aListedAfter"], report
    # The deleted chat's URL on the other context: 404, a notice, a new empty chat that works.
    assert seen["loadStatus"] == 404 and "was not found" in seen["notice"], report
    assert seen["bChatAfter"] not in (chat_id, None) and seen["bMessagesAfter"] == 0, report
    assert chat_id not in seen["bListedAfter"], report
    assert seen["textAfter"] == "after delete", report


def test_on_a_phone_the_sidebar_hides_behind_a_button(page_run: PageRun) -> None:
    seen = page_run.step("phone")
    report = page_run.report("phone")
    assert seen["toggleName"] == "Chats" and seen["expandedBefore"] == "false", report
    assert seen["sidebarVisibleBefore"] is False and seen["overflowPx"] <= 0, report
    assert seen["expandedOpen"] == "true" and seen["focusOnToggle"], report  # Escape closes, focus back
    assert seen["chatId"] == page_run.step("first")["chatId"], report  # a chat opened from it
    assert seen["sidebarVisibleAfter"] is False and seen["expandedAfter"] == "false", report


@pytest.mark.parametrize("state", ["desktop", "phone"])
def test_accessibility(page_run: PageRun, state: str) -> None:
    violations = page_run.result.get("axe", {}).get(state)
    if violations is None:
        pytest.fail(f"axe-core did not run on {state}:\n{page_run.report()}", pytrace=False)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, json.dumps(serious, indent=1)
