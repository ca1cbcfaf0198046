"""Unit tests for `adk_gateway.core.approval.LiveBook`: the calls a live session holds inside ADK's tool
pipeline until the client answers. The session keeps the asyncio futures; these tests play the
session's part with plain dicts, so every rule is checked without an event loop."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from adk_gateway.core.approval import (
    CUT_TEXT,
    ENDED_TEXT,
    MAX_ANSWERED_KEPT,
    REJECTED_TEXT,
    TIMEOUT_TEXT,
    ApprovalBook,
    ApprovalRefused,
    AwaitClient,
    CallState,
    Decision,
    Hold,
    LiveApproval,
    LiveBook,
    LiveStep,
    Permission,
    Resume,
    RunInBrowser,
    ToolOutcome,
    interrupt_result,
)

INTERRUPTED = interrupt_result()


def held_for_approval(book: LiveBook, call_id: str = "c1", name: str = "pay", *, browser: bool = False,
                      approval_id: str = "a1") -> LiveStep:
    book.announce(call_id, name, browser=browser, input={"amount": 5})
    return book.hold(call_id, name, browser=browser, hold=Hold.APPROVAL, approval_id=approval_id)


# --- issuing ---------------------------------------------------------------------------------------


def test_announced_then_held_is_issued_at_the_hold() -> None:
    book = LiveBook()
    assert book.announce("c1", "pay", browser=False, input={"amount": 5}) == LiveStep()
    step = book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a1")
    assert step == LiveStep(shown=(AwaitClient("c1", "a1"),))
    record = book.book.calls["c1"]
    assert record.state is CallState.APPROVAL_REQUESTED and record.approval_id == "a1"
    assert book.held("c1") is Hold.APPROVAL


def test_held_then_announced_is_issued_at_the_announcement() -> None:
    book = LiveBook()
    assert book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a1") == LiveStep()
    assert book.book.calls["c1"].state is CallState.INPUT_AVAILABLE  # not shown yet: not asked yet
    assert book.announce("c1", "pay", browser=False) == LiveStep(shown=(AwaitClient("c1", "a1"),))
    assert book.announce("c1", "pay", browser=False) == LiveStep()  # issued once


def test_a_held_browser_output_ends_the_step_once() -> None:
    book = LiveBook()
    book.announce("b1", "where", browser=True)
    assert book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="unused") == LiveStep(
        shown=(AwaitClient("b1"),))
    assert book.announce("b1", "where", browser=True) == LiveStep()
    assert book.book.find("unused") is None


# --- the user's answer -------------------------------------------------------------------------------


@pytest.mark.parametrize(("approved", "reason", "answer", "refusal"), [
    (True, None, LiveApproval(True, Decision.ALLOW_ONCE), None),
    (False, None, LiveApproval(False, Decision.DENY), {"error": REJECTED_TEXT}),
    (False, "stop", LiveApproval(False, Decision.DENY_AND_STOP, INTERRUPTED), {"error": INTERRUPTED}),
    (True, "always", LiveApproval(True, Decision.ALLOW_ALWAYS), None),
    (False, "never", LiveApproval(False, Decision.DENY_NEVER), {"error": REJECTED_TEXT}),
])
def test_an_answer_wakes_the_waiter(
    approved: bool, reason: str | None, answer: LiveApproval, refusal: dict[str, Any] | None
) -> None:
    book = LiveBook()
    held_for_approval(book)
    step = book.answer("a1", approved, reason)
    assert step == LiveStep(resumes=(Resume("c1", answer),), decisions=(answer.decision,))
    assert answer.refusal() == refusal
    assert book.book.calls["c1"].state is CallState.APPROVAL_RESPONDED
    assert book.held("c1") is None
    assert book.permission("pay") is answer.decision.permission  # type: ignore[union-attr]
    with pytest.raises(ApprovalRefused) as info:
        book.answer("a1", True, None)
    assert info.value.reason == "answered"


def test_an_approved_browser_tool_is_announced_again() -> None:
    book = LiveBook()
    held_for_approval(book, "b1", "music", browser=True, approval_id="ab")
    step = book.answer("ab", True, None)
    assert step.shown == (RunInBrowser("b1", "music", {"amount": 5}),)
    # Denied: no signal to run it.
    other = LiveBook()
    held_for_approval(other, "b1", "music", browser=True, approval_id="ab")
    assert other.answer("ab", False, None).shown == ()


def test_unknown_approval_ids_are_refused() -> None:
    book = LiveBook()
    with pytest.raises(ApprovalRefused) as info:
        book.answer("apr-made-up", True, None)
    assert info.value.reason == "unknown"


def test_a_live_book_starts_with_the_chats_permissions_only() -> None:
    stored = ApprovalBook(permissions={"pay": Permission.ALWAYS})
    stored.ask("c1", "card", browser=True, confirmation_id=None, approval_id="http-approval", now=1.0)
    book = LiveBook.for_chat(stored.to_state())
    assert book.permission("pay") is Permission.ALWAYS
    assert book.book.calls == {}
    with pytest.raises(ApprovalRefused):  # an HTTP approval is answered over HTTP
        book.answer("http-approval", True, None)
    assert LiveBook.for_chat(None).book == ApprovalBook()


# --- the browser's result ------------------------------------------------------------------------------


def test_a_browser_result_wakes_its_waiter() -> None:
    book = LiveBook()
    book.announce("b1", "where", browser=True)
    book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")
    assert book.browser_output("b1", {"lat": 1}) == LiveStep(resumes=(Resume("b1", {"lat": 1}),))
    assert book.held("b1") is None
    # Until ADK reports the result, a second one is only kept; after that it is ignored.
    assert book.browser_output("b1", None, "again") == LiveStep()
    assert book.reported("b1", CallState.OUTPUT_AVAILABLE) is True
    assert book.browser_output("b1", None, "late") is None


def test_an_empty_browser_result_is_wrapped() -> None:
    # ADK takes an empty result of a long-running tool for "no result yet".
    book = LiveBook()
    book.announce("b1", "where", browser=True)
    book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")
    assert book.browser_output("b1", {}) == LiveStep(resumes=(Resume("b1", {"result": {}}),))
    early = LiveBook()
    early.announce("b2", "where", browser=True)
    assert early.browser_output("b2", {}) == LiveStep()
    assert early.hold("b2", "where", browser=True, hold=Hold.OUTPUT, approval_id="x").answer == {"result": {}}


def test_a_browser_result_that_comes_first_answers_the_hold() -> None:
    book = LiveBook()
    held_for_approval(book, "b1", "where", browser=True, approval_id="ab")
    book.answer("ab", True, None)
    assert book.browser_output("b1", None, "Permission denied by the browser") == LiveStep()
    step = book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")
    assert step == LiveStep(answer={"error": "Permission denied by the browser"})
    assert book.held("b1") is None


def test_browser_results_that_are_ignored() -> None:
    book = LiveBook()
    book.announce("s1", "weather", browser=False)
    book.hold("h1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")  # held, not shown yet
    assert book.browser_output("nope", {"a": 1}) is None  # never shown
    assert book.browser_output("s1", {"a": 1}) is None  # not a browser tool
    book.announce("b1", "where", browser=True)
    book.reported("b1", CallState.OUTPUT_AVAILABLE)
    assert book.browser_output("b1", {"a": 1}) is None  # already ended


# --- holds that end otherwise -------------------------------------------------------------------------


def test_an_issued_approval_expires_as_an_error() -> None:
    book = LiveBook()
    held_for_approval(book)
    step = book.expire("c1")
    assert step == LiveStep(shown=(ToolOutcome("c1", CallState.OUTPUT_ERROR, TIMEOUT_TEXT),),
                            answer=LiveApproval(False, error=TIMEOUT_TEXT))
    assert book.held("c1") is None
    with pytest.raises(ApprovalRefused) as info:
        book.answer("a1", True, None)
    assert info.value.reason == "answered"
    # ADK's response with the timeout error is not a second outcome.
    assert book.reported("c1", CallState.OUTPUT_ERROR) is False
    book.release("c1")
    assert book.book.calls["c1"].state is CallState.OUTPUT_ERROR


def test_an_approval_that_expires_before_it_was_shown_leaves_the_outcome_to_adk() -> None:
    book = LiveBook()
    book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a1")
    step = book.expire("c1")
    assert step == LiveStep(answer=LiveApproval(False, error=TIMEOUT_TEXT))
    assert book.announce("c1", "pay", browser=False) == LiveStep()  # no question any more
    assert book.reported("c1", CallState.OUTPUT_ERROR) is True


def test_a_barge_in_cuts_the_turns_open_calls() -> None:
    book = LiveBook()
    held_for_approval(book, "c1", "pay")  # a pending question
    book.announce("s1", "weather", browser=False)  # a server tool running
    book.announce("b1", "where", browser=True)  # a browser tool the browser runs
    book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")
    book.announce("done", "weather", browser=False)
    book.reported("done", CallState.OUTPUT_AVAILABLE)
    step = book.cut(["c1", "s1", "b1", "done", "unknown"])
    assert step.shown == (
        ToolOutcome("c1", CallState.OUTPUT_DENIED),
        ToolOutcome("s1", CallState.OUTPUT_ERROR, CUT_TEXT),
        ToolOutcome("b1", CallState.OUTPUT_ERROR, CUT_TEXT, browser=True),
    )
    assert step.resumes == (Resume("c1", LiveApproval(False, error=INTERRUPTED)), Resume("b1", {"error": INTERRUPTED}))
    with pytest.raises(ApprovalRefused):
        book.answer("a1", True, None)
    # What ADK still reports for them is not shown; a later hold is answered at once.
    assert book.reported("s1", CallState.OUTPUT_AVAILABLE) is False
    assert book.hold("s1", "weather", browser=False, hold=Hold.APPROVAL, approval_id="a9") == LiveStep(
        answer=LiveApproval(False, error=INTERRUPTED))
    assert book.browser_output("b1", {"late": True}) is None


def test_a_call_of_a_cut_turn_is_dropped_without_being_shown() -> None:
    book = LiveBook()
    book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a1")
    step = book.drop("c1", "pay", browser=False)
    assert step == LiveStep(resumes=(Resume("c1", LiveApproval(False, error=INTERRUPTED)),))
    assert book.book.calls["c1"].state is CallState.OUTPUT_ERROR
    assert book.reported("c1", CallState.OUTPUT_ERROR) is False
    assert book.drop("c2", "weather", browser=False) == LiveStep()
    assert book.hold("c2", "weather", browser=True, hold=Hold.OUTPUT, approval_id="x") == LiveStep(
        answer={"error": INTERRUPTED})


def test_a_waiter_that_gives_up_abandons_its_call() -> None:
    book = LiveBook()
    held_for_approval(book)
    book.release("c1")  # e.g. cancelled with the ADK task
    assert book.book.calls["c1"].state is CallState.OUTPUT_ERROR
    with pytest.raises(ApprovalRefused):
        book.answer("a1", True, None)
    # After a normal answer, the waiter's release changes nothing.
    other = LiveBook()
    held_for_approval(other)
    other.answer("a1", True, None)
    other.release("c1")
    assert other.book.calls["c1"].state is CallState.APPROVAL_RESPONDED


def test_closing_the_session_wakes_every_waiter() -> None:
    book = LiveBook()
    held_for_approval(book, "c1", "pay")
    book.hold("h1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a2")  # held, not shown
    book.announce("b1", "where", browser=True)
    book.hold("b1", "where", browser=True, hold=Hold.OUTPUT, approval_id="x")
    book.announce("s1", "weather", browser=False)  # running in ADK: its own result still counts
    step = book.close()
    assert step.shown == (
        ToolOutcome("c1", CallState.OUTPUT_ERROR, ENDED_TEXT),
        ToolOutcome("b1", CallState.OUTPUT_ERROR, ENDED_TEXT, browser=True),
    )
    assert step.resumes == (
        Resume("c1", LiveApproval(False, error=ENDED_TEXT)),
        Resume("h1", LiveApproval(False, error=ENDED_TEXT)),
        Resume("b1", {"error": ENDED_TEXT}),
    )
    with pytest.raises(ApprovalRefused):
        book.answer("a1", True, None)
    assert book.reported("s1", CallState.OUTPUT_AVAILABLE) is True
    assert book.hold("new", "pay", browser=False, hold=Hold.APPROVAL, approval_id="a3") == LiveStep(
        answer=LiveApproval(False, error=ENDED_TEXT))
    assert book.hold("new", "where", browser=True, hold=Hold.OUTPUT, approval_id="a3") == LiveStep(
        answer={"error": ENDED_TEXT})


# --- outcomes and memory ----------------------------------------------------------------------------------


def test_reported_outcomes_are_new_once_and_only_for_shown_calls() -> None:
    book = LiveBook()
    assert book.reported("never-shown", CallState.OUTPUT_AVAILABLE) is False
    book.announce("s1", "weather", browser=False)
    assert book.reported("s1", CallState.OUTPUT_AVAILABLE) is True
    assert book.reported("s1", CallState.OUTPUT_AVAILABLE) is False
    # A tool whose own result is ADK's rejection text is shown denied, as the converter shows it.
    book.announce("s2", "weather", browser=False)
    assert book.reported("s2", CallState.OUTPUT_DENIED) is True


def test_forget_drops_ended_calls_but_keeps_their_approvals_refused() -> None:
    book = LiveBook()
    held_for_approval(book)
    book.answer("a1", True, None)
    book.release("c1")
    book.announce("s1", "weather", browser=False)  # still running: kept
    book.forget(["c1", "s1"])  # c1 is not over yet either
    assert set(book.book.calls) == {"c1", "s1"}
    book.reported("c1", CallState.OUTPUT_AVAILABLE)
    book.forget(["c1", "s1"])
    assert set(book.book.calls) == {"s1"}
    with pytest.raises(ApprovalRefused) as info:
        book.answer("a1", True, None)
    assert info.value.reason == "answered"
    assert book.reported("c1", CallState.OUTPUT_ERROR) is False  # a late response for a forgotten call


def test_forgotten_approval_ids_are_bounded() -> None:
    book = LiveBook()
    for n in range(MAX_ANSWERED_KEPT + 5):
        held_for_approval(book, f"c{n}", approval_id=f"a{n}")
        book.answer(f"a{n}", False, None)
        book.reported(f"c{n}", CallState.OUTPUT_DENIED)
        book.forget([f"c{n}"])
    assert book.book.calls == {}
    with pytest.raises(ApprovalRefused) as oldest:
        book.answer("a0", True, None)
    assert oldest.value.reason == "unknown"
    with pytest.raises(ApprovalRefused) as latest:
        book.answer(f"a{MAX_ANSWERED_KEPT + 4}", True, None)
    assert latest.value.reason == "answered"


# --- property: every waiter is woken at most once, and every call shows at most one outcome ------------


class LiveBookMachine(RuleBasedStateMachine):
    """Plays a live session against a `LiveBook` in every order: announcements, holds, answers,
    browser results, timeouts, barge-ins, ADK's responses, releases and the session's end."""

    def __init__(self) -> None:
        super().__init__()
        self.book = LiveBook()
        self.ids = itertools.count()
        self.calls: list[str] = []
        self.waiting: dict[str, Hold] = {}  # the session's futures: call -> what it waits for
        self.woken: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}  # outcomes shown per call (the book's and ADK's)
        self.approvals: dict[str, str] = {}  # approval id -> call
        self.shown_calls: set[str] = set()

    def _apply(self, step: LiveStep) -> None:
        for item in step.shown:
            if isinstance(item, ToolOutcome):
                assert item.tool_call_id in self.shown_calls  # only calls the client saw
                self.outcomes[item.tool_call_id] = self.outcomes.get(item.tool_call_id, 0) + 1
            elif isinstance(item, AwaitClient) and item.approval_id is not None:
                assert item.approval_id not in self.approvals  # issued once
                self.approvals[item.approval_id] = item.tool_call_id
        for resume in step.resumes:
            hold = self.waiting.pop(resume.tool_call_id)  # a waiter that is there
            assert isinstance(resume.answer, LiveApproval) is (hold is Hold.APPROVAL)
            self.woken[resume.tool_call_id] = self.woken.get(resume.tool_call_id, 0) + 1

    def _call(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.calls))

    @rule(browser=st.booleans())
    def new_call(self, browser: bool) -> None:
        self.calls.append(f"call-{next(self.ids)}-{'b' if browser else 's'}")

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def announce(self, data: st.DataObject) -> None:
        call_id = self._call(data)
        if call_id in self.shown_calls:
            return  # ADK announces a call once
        self.shown_calls.add(call_id)
        self._apply(self.book.announce(call_id, "tool", browser=call_id.endswith("b"), input={}))

    @precondition(lambda self: self.calls)
    @rule(data=st.data(), hold=st.sampled_from(list(Hold)))
    def hold(self, data: st.DataObject, hold: Hold) -> None:
        call_id = self._call(data)
        if call_id in self.waiting:
            return  # ADK's plugin holds a call once at a time
        step = self.book.hold(call_id, "tool", browser=call_id.endswith("b"), hold=hold,
                              approval_id=f"apr-{next(self.ids)}")
        if step.answer is None:
            self.waiting[call_id] = hold
        else:
            assert isinstance(step.answer, LiveApproval) is (hold is Hold.APPROVAL)
            assert not step.resumes
        self._apply(step)

    @precondition(lambda self: self.approvals)
    @rule(data=st.data(), approved=st.booleans(), reason=st.sampled_from([None, "always", "never", "stop"]))
    def answer(self, data: st.DataObject, approved: bool, reason: str | None) -> None:
        approval_id = data.draw(st.sampled_from(sorted(self.approvals)))
        call_id = self.approvals[approval_id]
        answerable = self.waiting.get(call_id) is Hold.APPROVAL and (
            self.book.book.calls[call_id].approval_id == approval_id)
        if not answerable:
            with pytest.raises(ApprovalRefused):
                self.book.answer(approval_id, approved, reason)
            return
        self._apply(self.book.answer(approval_id, approved, reason))
        assert call_id not in self.waiting

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def browser_output(self, data: st.DataObject) -> None:
        call_id = self._call(data)
        step = self.book.browser_output(call_id, {"ok": True})
        if step is not None:
            self._apply(step)

    @precondition(lambda self: any(h is Hold.APPROVAL for h in self.waiting.values()))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(sorted(c for c, h in self.waiting.items() if h is Hold.APPROVAL)))
        step = self.book.expire(call_id)
        del self.waiting[call_id]  # the waiter answers itself
        assert step.answer == LiveApproval(False, error=TIMEOUT_TEXT)
        self._apply(step)
        self.book.release(call_id)

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def cancel_waiter(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.waiting)))
        del self.waiting[call_id]
        self.book.release(call_id)
        record = self.book.book.calls[call_id]
        assert not record.open or record.state is not CallState.APPROVAL_REQUESTED

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def barge_in(self, data: st.DataObject) -> None:
        cut = data.draw(st.lists(st.sampled_from(self.calls), unique=True))
        self._apply(self.book.cut(cut))

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        call_id = self._call(data)
        if call_id in self.shown_calls:
            return  # only calls the client never saw are dropped
        self._apply(self.book.drop(call_id, "tool", browser=call_id.endswith("b")))

    @precondition(lambda self: self.calls)
    @rule(data=st.data(), outcome=st.sampled_from([CallState.OUTPUT_AVAILABLE, CallState.OUTPUT_DENIED,
                                                    CallState.OUTPUT_ERROR]))
    def adk_reports(self, data: st.DataObject, outcome: CallState) -> None:
        call_id = self._call(data)
        record = self.book.book.calls.get(call_id)
        if call_id in self.waiting or (record is not None and record.state is CallState.APPROVAL_REQUESTED):
            return  # ADK reports a held call's result only after its waiter returned
        if self.book.reported(call_id, outcome):
            self.outcomes[call_id] = self.outcomes.get(call_id, 0) + 1

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        self.book.forget(data.draw(st.lists(st.sampled_from(self.calls), unique=True)))

    @rule()
    def close(self) -> None:
        self._apply(self.book.close())
        assert not self.waiting

    @invariant()
    def each_waiter_is_woken_at_most_once_per_hold(self) -> None:
        assert all(count >= 1 for count in self.woken.values())
        for call_id in self.waiting:
            assert self.book.held(call_id) is self.waiting[call_id]

    @invariant()
    def each_call_shows_at_most_one_outcome(self) -> None:
        assert all(count == 1 for count in self.outcomes.values()), self.outcomes

    @invariant()
    def an_open_question_has_its_waiter(self) -> None:
        for call_id, record in self.book.book.calls.items():
            if record.state is CallState.APPROVAL_REQUESTED:
                assert self.waiting.get(call_id) is Hold.APPROVAL


LiveBookMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLiveBookMachine = LiveBookMachine.TestCase


def test_a_call_held_again_for_approval_gets_one_question() -> None:
    """ADK asking twice for one call: answered, the same answer at once; open, no second question."""
    book = LiveBook()
    book.announce("c1", "pay", browser=False, input={})
    first = book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="apr-1")
    assert [type(item).__name__ for item in first.shown] == ["AwaitClient"]
    again = book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="apr-2")
    assert again.shown == () and again.answer is None
    book.answer("apr-1", False, None)
    third = book.hold("c1", "pay", browser=False, hold=Hold.APPROVAL, approval_id="apr-3")
    assert third.shown == ()
    assert third.answer is not None and third.answer.approved is False
