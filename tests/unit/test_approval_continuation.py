"""Unit tests for the chat side of adk_gateway.core.approval: asking, answering a continuation (checked,
then applied), outcomes the agent reports, and standing permissions. Pure: no ADK, no HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_gateway.core.approval import (
    REJECTED_TEXT,
    TERMINAL,
    TIMEOUT_TEXT,
    ApprovalBook,
    ApprovalRefused,
    AwaitClient,
    CallEvent,
    CallState,
    Confirmation,
    Continuation,
    Decision,
    FunctionResult,
    InvalidTransition,
    Permission,
    RunInBrowser,
    ToolOutcome,
    browser_result,
    interrupt_result,
)
from adk_gateway.core.errors import BadRequest
from adk_gateway.core.requests import ToolPart

NOW = 1_000.0


def part(call_id: str, state: str, *, approval: dict[str, Any] | None = None, **fields: Any) -> ToolPart:
    data: dict[str, Any] = {"type": "tool-x", "toolCallId": call_id, "state": state, **fields}
    if approval is not None:
        data["approval"] = approval
    return ToolPart.model_validate(data)


def responded(call_id: str, approval_id: str, approved: bool, reason: str | None = None) -> ToolPart:
    return part(call_id, "approval-responded", approval={"id": approval_id, "approved": approved, "reason": reason},
                input={"n": 1})


def server_call(book: ApprovalBook, call_id: str, approval_id: str, *, at: float = NOW) -> None:
    book.ask(call_id, "pay", browser=False, confirmation_id=f"conf-{call_id}", approval_id=approval_id, now=at)


def browser_call(book: ApprovalBook, call_id: str, approval_id: str, *, at: float = NOW) -> None:
    book.ask(call_id, "card", browser=True, confirmation_id=None, approval_id=approval_id, now=at)


def snapshot(book: ApprovalBook) -> ApprovalBook:
    return ApprovalBook.from_state(json.loads(json.dumps(book.to_state())))


def state_of(book: ApprovalBook, call_id: str) -> CallState:
    return book.calls[call_id].state


def apply(book: ApprovalBook, *parts: ToolPart, now: float = NOW, timeout_s: float = 0.0) -> Continuation:
    return book.answer(book.answers(parts), now=now, timeout_s=timeout_s)


# --- asking --------------------------------------------------------------------------------------


def test_ask_issues_an_approval_once() -> None:
    book = ApprovalBook()
    ask = book.ask("c1", "pay", browser=False, confirmation_id="conf-1", approval_id="a1", now=5.0)
    assert ask == AwaitClient("c1", "a1")
    record = book.calls["c1"]
    assert (record.state, record.approval_id, record.confirmation_id, record.issued_at) == (
        CallState.APPROVAL_REQUESTED, "a1", "conf-1", 5.0)
    # ADK announcing the same confirmation again is nothing new: no second approval id.
    assert book.ask("c1", "pay", browser=False, confirmation_id="conf-1", approval_id="a2", now=6.0) is None
    assert book.calls["c1"] == record


def test_an_always_allowed_browser_tool_is_not_asked() -> None:
    book = ApprovalBook(permissions={"card": Permission.ALWAYS, "pay": Permission.ALWAYS})
    assert book.ask("c1", "card", browser=True, confirmation_id=None, approval_id="a1", now=1.0) == AwaitClient("c1")
    assert book.calls["c1"].state is CallState.INPUT_AVAILABLE and book.find("a1") is None
    # A server tool asked about through ADK is asked even so (the plugin confirms "always" itself).
    assert book.ask("c2", "pay", browser=False, confirmation_id="k", approval_id="a2", now=1.0) == AwaitClient(
        "c2", "a2")


# --- checking a continuation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        ([responded("c1", "apr-forged", True)], "unknown"),
        ([responded("c2", "a1", True)], "mismatch"),
        ([responded("c1", "a1", True), responded("c1", "a1", False)], "answered"),
        ([part("b1", "output-available", output={"ok": True})], "unapproved"),
        ([part("b1", "output-available", output={}, approval={"id": "ab", "approved": False})], "unapproved"),
        ([part("b1", "output-available", output={}, approval={"id": "a1", "approved": True})], "mismatch"),
    ],
)
def test_refused_answers_change_nothing(parts: list[ToolPart], reason: str) -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    server_call(book, "c2", "a2")
    browser_call(book, "b1", "ab")
    before = snapshot(book)
    with pytest.raises(ApprovalRefused) as info:
        book.answers(parts)
    assert info.value.reason == reason
    assert book == before


def test_an_answered_approval_is_refused_as_answered() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    apply(book, responded("c1", "a1", True))
    before = snapshot(book)
    with pytest.raises(ApprovalRefused) as info:
        book.answers([responded("c1", "a1", True)])
    assert info.value.reason == "answered"
    assert book == before


def test_an_approval_part_without_an_answer_is_a_bad_request() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    with pytest.raises(BadRequest):
        book.answers([part("c1", "approval-responded", approval={"id": "a1"})])
    with pytest.raises(BadRequest):
        book.answers([part("c1", "approval-responded")])


def test_parts_that_answer_nothing_are_skipped() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    apply(book, responded("c1", "a1", True))
    book.reported("c1", CallState.OUTPUT_AVAILABLE)
    assert book.answers([
        part("c1", "output-available", output={"done": 1}),  # a server tool's finished call
        # a server tool the book never followed (it needed no approval)
        part("other", "output-available", output={}, providerExecuted=True),
        part("c9", "input-available"),
    ]) == []


@pytest.mark.parametrize("state", ["output-available", "output-error"])
def test_a_result_for_a_call_the_chat_never_asked_the_client_about_is_refused(state: str) -> None:
    # A forged toolCallId, or another chat's: a client-answered result (no providerExecuted) for a
    # call this book does not know.
    book = ApprovalBook()
    with pytest.raises(ApprovalRefused) as refused:
        book.answers([part("forged", state, output={"ok": True}, errorText="x")])
    assert refused.value.reason == "unknown"
    assert book.calls == {}


# --- applying it --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("approved", "reason", "decision"), [
    (True, None, Decision.ALLOW_ONCE), (False, None, Decision.DENY), (True, "always", Decision.ALLOW_ALWAYS),
    (False, "never", Decision.DENY_NEVER),
])
def test_a_server_tool_answer_becomes_adks_confirmation(
    approved: bool, reason: str | None, decision: Decision
) -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    result = apply(book, responded("c1", "a1", approved, reason))
    assert result == Continuation(replies=(Confirmation("conf-c1", confirmed=approved),), decisions=(decision,))
    record = book.calls["c1"]
    assert record.state is CallState.APPROVAL_RESPONDED and record.decision is decision
    assert book.permission("pay") is decision.permission
    # ADK runs it (or rejects it): the outcome it reports is new once.
    outcome = CallState.OUTPUT_AVAILABLE if approved else CallState.OUTPUT_DENIED
    assert book.reported("c1", outcome) is True
    assert book.calls["c1"].state is outcome
    assert book.reported("c1", CallState.OUTPUT_ERROR) is False
    assert book.calls["c1"].state is outcome


def test_a_denied_browser_tool_is_shown_denied_and_the_agent_hears_the_rejection() -> None:
    book = ApprovalBook()
    browser_call(book, "b1", "ab")
    result = apply(book, responded("b1", "ab", False))
    assert result.shown == (ToolOutcome("b1", CallState.OUTPUT_DENIED, browser=True),)
    assert result.replies == (FunctionResult("b1", "card", {"error": REJECTED_TEXT}),)
    assert book.calls["b1"].state is CallState.OUTPUT_DENIED


def test_an_approved_browser_tool_runs_in_the_browser_then_its_output_is_the_result() -> None:
    book = ApprovalBook()
    browser_call(book, "b1", "ab")
    go = apply(book, responded("b1", "ab", True))
    assert go.shown == (RunInBrowser("b1", "card", {"n": 1}),)
    assert go.replies == () and go.awaiting_client == ["b1"] and not go.interrupted
    assert state_of(book, "b1") is CallState.APPROVAL_RESPONDED
    # The next continuation carries the browser's output (and the same, now answered, approval).
    done = apply(book, part("b1", "output-available", output=[1, 2], approval={"id": "ab", "approved": True}))
    assert done.replies == (FunctionResult("b1", "card", {"result": [1, 2]}),)
    assert done.shown == () and done.decisions == ()
    assert state_of(book, "b1") is CallState.OUTPUT_AVAILABLE


def test_approval_and_output_in_one_message() -> None:
    book = ApprovalBook()
    browser_call(book, "b1", "ab")
    result = apply(book, part("b1", "output-error", errorText="no GPS",
                              approval={"id": "ab", "approved": True, "reason": "always"}))
    assert result.replies == (FunctionResult("b1", "card", {"error": "no GPS"}),)
    assert result.decisions == (Decision.ALLOW_ALWAYS,)
    assert book.calls["b1"].state is CallState.OUTPUT_ERROR
    assert book.permission("card") is Permission.ALWAYS


def test_a_browser_tool_that_needs_no_approval() -> None:
    book = ApprovalBook()
    book.track("b1", "where", browser=True)
    result = apply(book, part("b1", "output-available", output={"lat": 1}))
    assert result == Continuation(replies=(FunctionResult("b1", "where", {"lat": 1}),))
    assert book.calls["b1"].state is CallState.OUTPUT_AVAILABLE


def test_browser_result_rule() -> None:
    assert browser_result({"a": 1}, None) == {"a": 1}
    assert browser_result({}, None) == {}
    assert browser_result("text", None) == {"result": "text"}
    assert browser_result(None, None) == {"result": None}
    assert browser_result({"a": 1}, "broken") == {"error": "broken"}
    assert browser_result(None, None, failed=True) == {"error": "The browser tool failed."}


def test_an_answer_after_the_timeout_expires_the_call() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1", at=NOW - 10)
    browser_call(book, "b1", "ab", at=NOW - 10)
    server_call(book, "c2", "a2", at=NOW - 1)
    result = apply(book, responded("c1", "a1", True), responded("b1", "ab", True), responded("c2", "a2", True),
                   timeout_s=5.0)
    assert result.shown == (
        ToolOutcome("c1", CallState.OUTPUT_ERROR, TIMEOUT_TEXT),
        ToolOutcome("b1", CallState.OUTPUT_ERROR, TIMEOUT_TEXT, browser=True),
    )
    assert result.replies == (
        Confirmation("conf-c1", confirmed=False),  # ADK then rejects it; that outcome is not new
        FunctionResult("b1", "card", {"error": TIMEOUT_TEXT}),
        Confirmation("conf-c2", confirmed=True),
    )
    assert result.decisions == (Decision.ALLOW_ONCE,)  # the late answers decided nothing
    assert [book.calls[c].state for c in ("c1", "b1", "c2")] == [
        CallState.OUTPUT_ERROR, CallState.OUTPUT_ERROR, CallState.APPROVAL_RESPONDED]
    assert book.reported("c1", CallState.OUTPUT_DENIED) is False
    # Exactly at the timeout counts as late; 0 turns the timeout off.
    edge = ApprovalBook()
    server_call(edge, "c", "a", at=NOW - 5)
    assert apply(edge, responded("c", "a", True), timeout_s=5.0).shown == (
        ToolOutcome("c", CallState.OUTPUT_ERROR, TIMEOUT_TEXT),)
    off = ApprovalBook()
    server_call(off, "c", "a", at=0.0)
    assert apply(off, responded("c", "a", True), timeout_s=0).shown == ()


def test_deny_and_stop_stops_every_open_call_of_the_turn() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    server_call(book, "c2", "a2")
    browser_call(book, "b1", "ab")
    book.track("b2", "where", browser=True)  # a browser tool still running
    result = apply(
        book,
        responded("c1", "a1", True, "always"),  # approved in the same message: stopped too
        responded("c2", "a2", False, "stop"),
        part("b1", "output-available", output={"shown": True}, approval={"id": "ab", "approved": True}),
    )
    assert result.interrupted
    assert result.decisions == (Decision.ALLOW_ALWAYS, Decision.DENY_AND_STOP, Decision.ALLOW_ONCE)
    calls = ["c1", "c2", "b1", "b2"]
    assert [o.tool_call_id for o in result.shown] == calls
    assert all(isinstance(o, ToolOutcome) and o.state is CallState.OUTPUT_DENIED for o in result.shown)
    assert [r.tool_call_id for r in result.replies if isinstance(r, FunctionResult)] == calls
    assert all(r == FunctionResult(r.tool_call_id, r.tool_name, {"error": interrupt_result()})
               for r in result.replies if isinstance(r, FunctionResult))
    assert {book.calls[c].state for c in calls} == {CallState.OUTPUT_DENIED}
    assert book.pending() == []
    assert book.permission("pay") is Permission.ALWAYS  # the "always" beside it still counts


def test_an_expired_stop_stops_nothing_and_an_expired_call_beside_a_stop_ends_as_timed_out() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1", at=NOW - 10)
    server_call(book, "c2", "a2")
    late_stop = apply(book, responded("c1", "a1", False, "stop"), responded("c2", "a2", True), timeout_s=5.0)
    assert not late_stop.interrupted
    assert late_stop.replies == (Confirmation("conf-c1", confirmed=False), Confirmation("conf-c2", confirmed=True))

    book = ApprovalBook()
    server_call(book, "c1", "a1", at=NOW - 10)
    server_call(book, "c2", "a2")
    stop = apply(book, responded("c1", "a1", True), responded("c2", "a2", False, "stop"), timeout_s=5.0)
    assert stop.interrupted
    assert stop.shown == (ToolOutcome("c1", CallState.OUTPUT_ERROR, TIMEOUT_TEXT),
                          ToolOutcome("c2", CallState.OUTPUT_DENIED))
    # Nothing runs the model after a stop, so the expired call's result goes to the session itself.
    assert stop.replies == (FunctionResult("c1", "pay", {"error": TIMEOUT_TEXT}),
                            FunctionResult("c2", "pay", {"error": interrupt_result()}))


# --- outcomes, endings and permissions -----------------------------------------------------------------


def test_reported_outcomes() -> None:
    book = ApprovalBook()
    assert book.reported("not-followed", CallState.OUTPUT_AVAILABLE) is True
    assert "not-followed" not in book.calls
    book.track("b1", "where", browser=True)
    assert book.reported("b1", CallState.OUTPUT_DENIED) is True
    assert book.calls["b1"].state is CallState.OUTPUT_DENIED
    assert book.reported("b1", CallState.OUTPUT_AVAILABLE) is False
    # A tool output while its approval is open is impossible: it raises, and changes nothing.
    server_call(book, "c1", "a1")
    before = book.calls["c1"]
    with pytest.raises(InvalidTransition):
        book.reported("c1", CallState.OUTPUT_AVAILABLE)
    assert book.calls["c1"] == before
    assert book.reported("c1", CallState.OUTPUT_ERROR) is True


def test_abandon_all_ends_open_calls_and_their_approvals() -> None:
    book = ApprovalBook()
    server_call(book, "c1", "a1")
    book.track("b1", "where", browser=True)
    assert {r.tool_call_id for r in book.abandon_all()} == {"c1", "b1"}
    assert {r.state for r in book.calls.values()} == {CallState.OUTPUT_ERROR}
    with pytest.raises(ApprovalRefused) as info:
        book.answers([responded("c1", "a1", True)])
    assert info.value.reason == "answered"


def test_permissions() -> None:
    book = ApprovalBook()
    assert book.remember("pay", Decision.ALLOW_ONCE) is False and book.permissions == {}
    assert book.remember("pay", Decision.DENY_NEVER) is True
    assert book.remember("card", Decision.ALLOW_ALWAYS) is True
    assert book.refused_tools() == frozenset({"pay"})
    stored = book.to_state()
    assert ApprovalBook.stored_permission(stored, "pay") is Permission.NEVER
    assert ApprovalBook.stored_permission(stored, "card") is Permission.ALWAYS
    assert ApprovalBook.stored_permission(stored, "other") is None
    assert ApprovalBook.stored_permission(None, "pay") is None
    assert ApprovalBook.stored_permission({"permissions": {"pay": "sometimes"}}, "pay") is None


# --- property: a continuation is refused whole, or applied without an illegal move ---------------------

CALLS = ["c0", "c1", "c2", "b0", "b1"]


@st.composite
def books_and_messages(draw: st.DrawFn) -> tuple[ApprovalBook, list[ToolPart], float]:
    book = ApprovalBook()
    for n, call_id in enumerate(CALLS):
        browser = call_id.startswith("b")
        fate = draw(st.sampled_from(["asked", "asked", "asked", "responded", "running", "ended", "absent"]))
        if fate == "absent":
            continue
        if fate == "running":
            book.track(call_id, f"tool{n}", browser=browser)
            continue
        at = draw(st.sampled_from([NOW - 10, NOW]))
        book.ask(call_id, f"tool{n}", browser=browser, confirmation_id=None if browser else f"k{n}",
                 approval_id=f"a{n}", now=at)
        if fate in ("responded", "ended"):
            book.respond(f"a{n}", call_id, draw(st.sampled_from([Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS])))
        if fate == "ended":
            book.reported(call_id, CallState.OUTPUT_AVAILABLE)
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        n = draw(st.integers(0, len(CALLS)))  # len(CALLS): a call this book never saw
        call_id = CALLS[n] if n < len(CALLS) else "zz"
        # Mostly the call's own approval id; sometimes another call's, or one never issued.
        approval_n = draw(st.sampled_from([n, n, n, None, (n + 1) % len(CALLS), len(CALLS)]))
        approval = None if approval_n is None else {
            "id": f"a{approval_n}", "approved": draw(st.booleans()),
            "reason": draw(st.sampled_from([None, "always", "never", "stop"])),
        }
        state = draw(st.sampled_from(["approval-responded", "approval-responded", "output-available", "output-error",
                                      "input-available"]))
        parts.append(part(call_id, state, output={"v": 1}, approval=approval))
    return book, parts, draw(st.sampled_from([0.0, 5.0]))


@settings(max_examples=500, deadline=None)
@given(books_and_messages())
def test_a_continuation_is_refused_whole_or_applied_legally(case: tuple[ApprovalBook, list[ToolPart], float]) -> None:
    book, parts, timeout_s = case
    before = snapshot(book)
    try:
        answers = book.answers(parts)
    except (ApprovalRefused, BadRequest):
        assert book == before
        return
    assert book == before  # checking changes nothing
    result = book.answer(answers, now=NOW, timeout_s=timeout_s)  # never raises InvalidTransition
    answered = {a.record.tool_call_id for a in answers}
    assert len(answered) == len(answers)
    for call_id in answered:
        assert book.calls[call_id] != before.calls[call_id]  # every answer moved its call
    outcomes = [o.tool_call_id for o in result.shown if isinstance(o, ToolOutcome)]
    assert len(outcomes) == len(set(outcomes))  # at most one outcome shown per call
    for call_id in outcomes:
        assert book.calls[call_id].state in TERMINAL
    if result.interrupted:
        assert book.pending() == []
        assert not any(isinstance(r, Confirmation) for r in result.replies)
    ended_now = {c for c, r in book.calls.items() if r.state in TERMINAL and before.calls[c].state not in TERMINAL}
    assert ended_now >= set(outcomes)
    # Once applied, no approval in the message can be used again.
    try:
        again = book.answers(parts)
    except ApprovalRefused:
        return
    assert all(a.decision is None for a in again)


def test_call_event_names_are_unique() -> None:
    assert len({e.value for e in CallEvent}) == len(CallEvent)
