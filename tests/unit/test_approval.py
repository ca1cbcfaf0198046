"""Unit tests for adk_gateway.core.approval: the call state machine and the per-chat approval book."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

from adk_gateway.core.approval import (
    INITIAL,
    MAX_ANSWERED_KEPT,
    TERMINAL,
    TRANSITIONS,
    ApprovalBook,
    ApprovalRefused,
    CallEvent,
    CallRecord,
    CallState,
    Decision,
    InvalidTransition,
    Permission,
    decision_from_response,
    interrupt_result,
    permanently_denied_text,
)

ALL_PAIRS = list(itertools.product(CallState, CallEvent))


def record(state: CallState = CallState.INPUT_AVAILABLE, **kw: object) -> CallRecord:
    base = CallRecord("call-1", "process_payment", state, approval_id="apr-1", confirmation_id="conf-1",
                      browser=False, issued_at=12.5, decision=Decision.ALLOW_ONCE)
    return replace(base, **kw)  # type: ignore[arg-type]


# --- the transition table ----------------------------------------------------------------------


def test_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(CallState)
    for moves in TRANSITIONS.values():
        assert set(moves) <= set(CallEvent)
        assert set(moves.values()) <= set(CallState)


def test_terminal_states_are_the_three_outcomes() -> None:
    assert frozenset({CallState.OUTPUT_AVAILABLE, CallState.OUTPUT_ERROR, CallState.OUTPUT_DENIED}) == TERMINAL


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=[f"{s.value}-{e.value}" for s, e in ALL_PAIRS])
def test_every_pair_moves_to_the_table_target_or_raises(state: CallState, event: CallEvent) -> None:
    before = record(state)
    snapshot = replace(before)
    target = TRANSITIONS[state].get(event)
    if target is None:
        with pytest.raises(InvalidTransition) as info:
            before.fire(event)
        assert info.value.state is state
        assert info.value.event is event
        assert event.value in str(info.value) and state.value in str(info.value)
        assert before == snapshot  # nothing changed
    else:
        after = before.fire(event)
        assert after.state is target
        # Only the state moves; everything else is carried over.
        assert replace(after, state=state) == snapshot
        assert before == snapshot  # the original record is immutable


def test_expected_happy_paths() -> None:
    r = record(INITIAL)
    for event, state in [
        (CallEvent.REQUEST_APPROVAL, CallState.APPROVAL_REQUESTED),
        (CallEvent.RESPOND, CallState.APPROVAL_RESPONDED),
        (CallEvent.DENY, CallState.OUTPUT_DENIED),
    ]:
        r = r.fire(event)
        assert r.state is state
    assert record(CallState.INPUT_AVAILABLE).fire(CallEvent.OUTPUT).state is CallState.OUTPUT_AVAILABLE
    for state in set(CallState) - TERMINAL:
        assert record(state).fire(CallEvent.FAIL).state is CallState.OUTPUT_ERROR


OPEN = [s for s in CallState if s not in TERMINAL]


@pytest.mark.parametrize("state", OPEN, ids=[s.value for s in OPEN])
def test_every_open_call_can_end_every_way_but_output(state: CallState) -> None:
    # What the agent or the user reports about an open call never needs a suppressor: every
    # ending is legal from every open state, except a tool output while its approval is open.
    moves = TRANSITIONS[state]
    for event in (CallEvent.DENY, CallEvent.FAIL, CallEvent.STOP, CallEvent.CUT, CallEvent.ABANDON):
        assert moves[event] in TERMINAL
    assert (CallEvent.OUTPUT in moves) is (state is not CallState.APPROVAL_REQUESTED)
    assert moves[CallEvent.STOP] is CallState.OUTPUT_DENIED
    assert moves[CallEvent.ABANDON] is CallState.OUTPUT_ERROR


def test_only_an_open_question_can_be_answered_or_expire() -> None:
    for event in (CallEvent.RESPOND, CallEvent.EXPIRE):
        assert {s for s in CallState if event in TRANSITIONS[s]} == {CallState.APPROVAL_REQUESTED}
    assert TRANSITIONS[CallState.APPROVAL_REQUESTED][CallEvent.EXPIRE] is CallState.OUTPUT_ERROR
    # A barge-in denies a pending question; anything else it cuts fails.
    assert {s: TRANSITIONS[s][CallEvent.CUT] for s in OPEN} == {
        CallState.INPUT_AVAILABLE: CallState.OUTPUT_ERROR,
        CallState.APPROVAL_REQUESTED: CallState.OUTPUT_DENIED,
        CallState.APPROVAL_RESPONDED: CallState.OUTPUT_ERROR,
    }


def test_every_state_is_reachable_from_the_initial_one() -> None:
    seen, todo = {INITIAL}, [INITIAL]
    while todo:
        for target in TRANSITIONS[todo.pop()].values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(CallState)


# --- decisions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("approved", "reason", "decision"),
    [
        (True, None, Decision.ALLOW_ONCE),
        (True, "", Decision.ALLOW_ONCE),
        (True, "ok", Decision.ALLOW_ONCE),
        (True, "always", Decision.ALLOW_ALWAYS),
        (True, "  ALWAYS  ", Decision.ALLOW_ALWAYS),
        (True, "always-allow", Decision.ALLOW_ALWAYS),
        (True, "allow-always", Decision.ALLOW_ALWAYS),
        (True, "Allow Always", Decision.ALLOW_ALWAYS),
        (True, "always allow", Decision.ALLOW_ALWAYS),
        (True, "never", Decision.ALLOW_ONCE),  # a standing "never" needs approved=false
        (True, "stop", Decision.ALLOW_ONCE),
        (False, None, Decision.DENY),
        (False, "too risky", Decision.DENY),
        (False, "always", Decision.DENY),  # "always" with approved=false is a plain deny
        (False, "never", Decision.DENY_NEVER),
        (False, "Never-Allow", Decision.DENY_NEVER),
        (False, "deny-never", Decision.DENY_NEVER),
        (False, "never allow", Decision.DENY_NEVER),
        (False, "deny never", Decision.DENY_NEVER),
        (False, "stop", Decision.DENY_AND_STOP),
        (False, " STOP ", Decision.DENY_AND_STOP),
        (False, "deny-stop", Decision.DENY_AND_STOP),
        (False, "deny-and-stop", Decision.DENY_AND_STOP),
        (False, "deny and stop", Decision.DENY_AND_STOP),
        (False, "stop-and-deny", Decision.DENY_AND_STOP),
        (False, "stop it now", Decision.DENY),  # whole words only, not a substring match
    ],
)
def test_decision_vocabulary(approved: bool, reason: str | None, decision: Decision) -> None:
    assert decision_from_response(approved, reason) is decision
    assert decision.approved is approved


def test_decision_approved_flag() -> None:
    assert {d for d in Decision if d.approved} == {Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS}


def test_decision_permission_is_the_one_mapping() -> None:
    assert {d: d.permission for d in Decision} == {
        Decision.ALLOW_ONCE: None,
        Decision.ALLOW_ALWAYS: Permission.ALWAYS,
        Decision.DENY: None,
        Decision.DENY_AND_STOP: None,
        Decision.DENY_NEVER: Permission.NEVER,
    }


def test_result_texts() -> None:
    assert permanently_denied_text("get_location") == "Permission to use get_location has been permanently denied"
    assert interrupt_result().startswith("[Request interrupted by user for tool use]")


# --- the book ------------------------------------------------------------------------------------


def issued_book(*calls: tuple[str, str, str]) -> ApprovalBook:
    book = ApprovalBook()
    for call_id, name, approval_id in calls:
        book.track(call_id, name, browser=name.startswith("b_"))
        book.request_approval(call_id, approval_id, now=100.0, confirmation_id=f"conf-{call_id}")
    return book


def test_track_is_idempotent() -> None:
    book = ApprovalBook()
    first = book.track("c1", "tool", browser=True)
    book.request_approval("c1", "a1", now=1.0)
    again = book.track("c1", "other", browser=False)
    assert first.state is CallState.INPUT_AVAILABLE
    assert again.state is CallState.APPROVAL_REQUESTED and again.tool_name == "tool" and again.browser


def test_request_approval_records_ids_and_time() -> None:
    book = issued_book(("c1", "pay", "a1"))
    rec = book.calls["c1"]
    assert (rec.state, rec.approval_id, rec.confirmation_id, rec.issued_at) == (
        CallState.APPROVAL_REQUESTED, "a1", "conf-c1", 100.0)
    with pytest.raises(InvalidTransition):
        book.request_approval("c1", "a2", now=101.0)  # asked twice
    assert book.calls["c1"] == rec


def test_check_refuses_unknown_mismatched_and_answered() -> None:
    book = issued_book(("c1", "pay", "a1"), ("c2", "pay", "a2"))
    snapshot = ApprovalBook.from_state(book.to_state())
    assert book.check("a1", "c1") == book.calls["c1"]

    for approval_id, call_id, reason in [("nope", "c1", "unknown"), ("a1", "c2", "mismatch"), ("a2", "c9", "mismatch")]:
        with pytest.raises(ApprovalRefused) as info:
            book.respond(approval_id, call_id, Decision.ALLOW_ONCE)
        assert info.value.reason == reason and info.value.approval_id == approval_id
    assert book == snapshot

    book.respond("a1", "c1", Decision.DENY)
    answered = ApprovalBook.from_state(book.to_state())
    with pytest.raises(ApprovalRefused) as info:
        book.respond("a1", "c1", Decision.ALLOW_ONCE)
    assert info.value.reason == "answered"
    assert book == answered
    assert book.calls["c1"].decision is Decision.DENY


@pytest.mark.parametrize(
    ("decision", "permission"),
    [
        (Decision.ALLOW_ONCE, None),
        (Decision.ALLOW_ALWAYS, Permission.ALWAYS),
        (Decision.DENY, None),
        (Decision.DENY_AND_STOP, None),
        (Decision.DENY_NEVER, Permission.NEVER),
    ],
)
def test_respond_sets_standing_permissions(decision: Decision, permission: Permission | None) -> None:
    book = issued_book(("c1", "pay", "a1"))
    rec = book.respond("a1", "c1", decision)
    assert rec.state is CallState.APPROVAL_RESPONDED and rec.decision is decision
    assert book.permission("pay") is permission
    assert book.permission("other") is None


def test_fire_pending_and_abandon() -> None:
    book = issued_book(("c1", "pay", "a1"), ("c2", "pay", "a2"))
    book.track("c3", "b_tool", browser=True)
    assert {r.tool_call_id for r in book.awaiting_approval()} == {"c1", "c2"}
    assert {r.tool_call_id for r in book.pending()} == {"c1", "c2", "c3"}

    book.respond("a1", "c1", Decision.ALLOW_ONCE)
    assert book.fire("c1", CallEvent.OUTPUT).state is CallState.OUTPUT_AVAILABLE
    with pytest.raises(InvalidTransition):
        book.fire("c1", CallEvent.DENY)
    assert book.calls["c1"].state is CallState.OUTPUT_AVAILABLE

    abandoned = book.abandon_all()
    assert {r.tool_call_id for r in abandoned} == {"c2", "c3"}
    assert {r.state for r in book.calls.values()} == {CallState.OUTPUT_AVAILABLE, CallState.OUTPUT_ERROR}
    assert book.pending() == [] and book.abandon_all() == []


def test_round_trip_through_json() -> None:
    book = issued_book(("c1", "pay", "a1"), ("c2", "b_bgm", "a2"))
    book.track("c3", "b_loc", browser=True)
    book.respond("a1", "c1", Decision.ALLOW_ALWAYS)
    book.respond("a2", "c2", Decision.DENY_NEVER)
    book.fire("c2", CallEvent.DENY)
    state = json.loads(json.dumps(book.to_state()))  # plain JSON, as stored in session state
    restored = ApprovalBook.from_state(state)
    assert restored == book
    assert restored.calls["c2"].browser is True and restored.calls["c1"].confirmation_id == "conf-c1"
    assert restored.permissions == {"pay": Permission.ALWAYS, "b_bgm": Permission.NEVER}
    assert ApprovalBook.from_state(None) == ApprovalBook() == ApprovalBook.from_state({})


def test_to_state_keeps_pending_and_the_latest_answered() -> None:
    book = ApprovalBook()
    for n in range(MAX_ANSWERED_KEPT + 20):
        book.track(f"c{n}", "t", browser=False)
        book.fire(f"c{n}", CallEvent.OUTPUT)
    book.track("open", "t", browser=False)
    restored = ApprovalBook.from_state(book.to_state())
    assert "open" in restored.calls
    kept = [k for k in restored.calls if k != "open"]
    assert len(kept) == MAX_ANSWERED_KEPT
    assert kept[-1] == f"c{MAX_ANSWERED_KEPT + 19}" and "c0" not in restored.calls


def test_call_record_json_omits_unset_fields() -> None:
    bare = CallRecord("c", "t", CallState.INPUT_AVAILABLE)
    assert bare.to_json() == {
        "toolCallId": "c", "toolName": "t", "state": "input-available", "browser": False, "issuedAt": 0.0,
    }
    assert CallRecord.from_json(bare.to_json()) == bare
    full = record(CallState.APPROVAL_RESPONDED)
    assert CallRecord.from_json(full.to_json()) == full


# --- stateful property test ----------------------------------------------------------------------


class ApprovalBookMachine(RuleBasedStateMachine):
    """Issues approvals in a chat's book and a foreign book, and answers them in every way."""

    issued = Bundle("issued")  # (approval id, tool call id) of this book
    answered = Bundle("answered")

    def __init__(self) -> None:
        super().__init__()
        self.book = ApprovalBook()
        self.other = ApprovalBook()  # another chat's (or user's) book
        self.accepted: dict[str, int] = {}  # approval id -> accepted responses
        self.terminal_seen: dict[str, CallState] = {}
        self.foreign: list[tuple[str, str]] = []
        self.counter = itertools.count()

    def _record_terminals(self) -> None:
        for call_id, rec in self.book.calls.items():
            if rec.state in TERMINAL:
                self.terminal_seen.setdefault(call_id, rec.state)

    @rule(target=issued, name=st.sampled_from(["pay", "bgm", "loc"]), browser=st.booleans())
    def issue(self, name: str, browser: bool) -> tuple[str, str]:
        n = next(self.counter)
        call_id, approval_id = f"call-{n}", f"apr-{n}"
        self.book.track(call_id, name, browser=browser)
        self.book.request_approval(call_id, approval_id, now=float(n))
        return approval_id, call_id

    @rule(name=st.sampled_from(["pay", "bgm"]))
    def issue_foreign(self, name: str) -> None:
        # Same tool call ids as this book can use, different approval ids.
        n = next(self.counter)
        call_id, approval_id = f"call-{n}", f"foreign-{n}"
        self.other.track(call_id, name, browser=False)
        self.other.request_approval(call_id, approval_id, now=float(n))
        self.foreign.append((approval_id, call_id))

    @rule(target=answered, ids=consumes(issued), decision=st.sampled_from(list(Decision)))
    def respond(self, ids: tuple[str, str], decision: Decision) -> tuple[str, str]:
        approval_id, call_id = ids
        if self.book.calls[call_id].state is not CallState.APPROVAL_REQUESTED:
            # Abandoned or failed meanwhile: refused, and nothing changes.
            before = ApprovalBook.from_state(self.book.to_state())
            with pytest.raises(ApprovalRefused):
                self.book.respond(approval_id, call_id, decision)
            assert self.book == before
            return ids
        rec = self.book.respond(approval_id, call_id, decision)
        self.accepted[approval_id] = self.accepted.get(approval_id, 0) + 1
        assert rec.state is CallState.APPROVAL_RESPONDED and rec.decision is decision
        return ids

    @rule(ids=answered, decision=st.sampled_from(list(Decision)))
    def replay(self, ids: tuple[str, str], decision: Decision) -> None:
        approval_id, call_id = ids
        before = ApprovalBook.from_state(self.book.to_state())
        with pytest.raises(ApprovalRefused) as info:
            self.book.respond(approval_id, call_id, decision)
        assert info.value.reason == "answered"
        assert self.book == before

    @rule(ids=issued, data=st.data())
    def respond_with_wrong_call(self, ids: tuple[str, str], data: st.DataObject) -> None:
        approval_id, call_id = ids
        others = [c for c in self.book.calls if c != call_id]
        wrong = data.draw(st.sampled_from(others)) if others else "no-such-call"
        before = ApprovalBook.from_state(self.book.to_state())
        with pytest.raises(ApprovalRefused):
            self.book.respond(approval_id, wrong, Decision.ALLOW_ONCE)
        assert self.book == before

    @rule(data=st.data())
    def respond_with_foreign_id(self, data: st.DataObject) -> None:
        if not self.foreign:
            return
        approval_id, call_id = data.draw(st.sampled_from(self.foreign))
        target_call = data.draw(st.sampled_from([call_id, *self.book.calls]))
        before = ApprovalBook.from_state(self.book.to_state())
        with pytest.raises(ApprovalRefused) as info:
            self.book.respond(approval_id, target_call, Decision.ALLOW_ALWAYS)
        assert info.value.reason == "unknown"
        assert self.book == before

    @rule(ids=answered, event=st.sampled_from(list(CallEvent)))
    def settle(self, ids: tuple[str, str], event: CallEvent) -> None:
        _, call_id = ids
        rec = self.book.calls[call_id]
        target = TRANSITIONS[rec.state].get(event)
        if target is None:
            with pytest.raises(InvalidTransition):
                self.book.fire(call_id, event)
            assert self.book.calls[call_id] == rec
        else:
            assert self.book.fire(call_id, event).state is target

    @rule()
    def abandon(self) -> None:
        pending = {r.tool_call_id for r in self.book.pending()}
        abandoned = {r.tool_call_id for r in self.book.abandon_all()}
        assert abandoned == pending
        assert all(self.book.calls[c].state is CallState.OUTPUT_ERROR for c in abandoned)

    @rule()
    def restore(self) -> None:
        state = json.loads(json.dumps(self.book.to_state()))
        restored = ApprovalBook.from_state(state)
        assert restored == self.book
        self.book = restored

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def accepted_at_most_once(self) -> None:
        assert all(count == 1 for count in self.accepted.values())

    @invariant()
    def terminal_states_are_final(self) -> None:
        for call_id, state in self.terminal_seen.items():
            assert self.book.calls[call_id].state is state
        self._record_terminals()

    @invariant()
    def foreign_ids_never_match(self) -> None:
        for approval_id, _ in self.foreign:
            assert self.book.find(approval_id) is None

    @invariant()
    def round_trip_is_identity(self) -> None:
        assert ApprovalBook.from_state(json.loads(json.dumps(self.book.to_state()))) == self.book

    @invariant()
    def answered_records_carry_a_decision(self) -> None:
        for rec in self.book.calls.values():
            if rec.state is CallState.APPROVAL_RESPONDED:
                assert rec.decision is not None


ApprovalBookMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestApprovalBookMachine = ApprovalBookMachine.TestCase
