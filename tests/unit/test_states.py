"""The operation state table (idemclient/_states.py): what it allows and forbids, and
that docs/concepts.md draws it as the code has it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from idemclient import State, _states
from idemclient._states import (
    NEW,
    TABLE,
    UNFINISHED,
    Event,
    StateMachineError,
    after,
    events_table,
    final_answer,
    may_follow,
    mermaid,
    sources,
    stop,
)

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"
LOOK_UPS = {Event.FOUND_APPLIED, Event.FOUND_DECLINED, Event.FOUND_NOTHING, Event.FOUND_REFUSED}


def test_every_event_happens_somewhere_and_every_stored_state_is_in_the_table() -> None:
    assert {event for moves in TABLE.values() for event in moves} == set(Event)
    assert set(TABLE) == {NEW, *(s for s in State if s is not State.CHALLENGED)}


def test_nothing_follows_a_success() -> None:
    assert TABLE[State.SUCCEEDED] == {}
    for event in Event:
        with pytest.raises(StateMachineError, match="cannot be"):
            after(State.SUCCEEDED, event)
    assert not may_follow((State.SUCCEEDED, True), (State.IN_FLIGHT, True))
    assert not may_follow((State.SUCCEEDED, False), (State.NOT_SENT, False))


def test_a_failure_is_final_unless_corrected_or_a_success_comes() -> None:
    # A final success is the truth about the money: it wins over a refusal stored first
    # (a paused caller's own request that paid); nothing else follows a failure but a
    # correction, or an attempt sent after it that may have been applied; never a
    # second refusal.
    assert set(TABLE[State.FAILED]) == {
        Event.REOPENED,
        Event.SUCCEEDED,
        Event.FOUND_APPLIED,
        Event.LEARNT_MAYBE_APPLIED,
    }
    assert after(State.FAILED, Event.SUCCEEDED) is State.SUCCEEDED
    # An attempt sent after the refusal was stored, which may have been applied: the
    # refusal no longer settles it.
    assert after(State.FAILED, Event.LEARNT_MAYBE_APPLIED) is State.INDETERMINATE
    assert after(State.FAILED, Event.FOUND_APPLIED) is State.SUCCEEDED
    for event in (Event.REFUSED, Event.FOUND_DECLINED, Event.FOUND_REFUSED, Event.FOUND_NOTHING):
        with pytest.raises(StateMachineError, match="failed cannot be"):
            after(State.FAILED, event)
    assert may_follow((State.FAILED, True), (State.SUCCEEDED, True))
    assert may_follow((State.FAILED, False), (State.SUCCEEDED, True))
    assert not may_follow((State.SUCCEEDED, True), (State.FAILED, True))
    # A correction only of what was never applied (maybe applied: not without a look-up
    # that clears it first, once an attempt sent after the refusal unsettled it).
    assert (State.PENDING, False) not in _reachable_without((State.FAILED, True), LOOK_UPS)
    assert True not in _states._MAYBE[Event.REOPENED]
    assert may_follow((State.FAILED, False), (State.PENDING, False))
    # A success that comes after a correction ends the row succeeded, whatever the
    # corrected request came to first.
    assert may_follow((State.PENDING, False), (State.SUCCEEDED, True))
    assert after(after(State.PENDING, Event.REFUSED), Event.SUCCEEDED) is State.SUCCEEDED


def _reachable_without(start: tuple[State, bool], left_out: set[Event]) -> set[tuple[State, bool]]:
    seen, todo = {start}, [start]
    while todo:
        state, maybe = todo.pop()
        for event, target in TABLE[state].items():
            if event in left_out:
                continue
            for now in _states._MAYBE[event].get(maybe, frozenset()):
                if (target, now) not in seen:
                    seen.add((target, now))
                    todo.append((target, now))
    return seen


def test_maybe_applied_is_cleared_only_by_a_look_up() -> None:
    assert after(State.IN_FLIGHT, stop(maybe_applied=False)) is State.NOT_SENT
    assert after(State.IN_FLIGHT, stop(maybe_applied=True)) is State.INDETERMINATE
    assert not may_follow((State.INDETERMINATE, True), (State.INDETERMINATE, False))
    assert may_follow((State.INDETERMINATE, True), (State.NOT_SENT, False))  # looked up
    for start in [(state, True) for state in UNFINISHED]:
        without = _reachable_without(start, LOOK_UPS)
        assert all(maybe for _state, maybe in without), (start, without)
        assert (State.NOT_SENT, False) not in without


def test_a_call_is_refused_an_event_its_state_does_not_allow() -> None:
    with pytest.raises(StateMachineError, match="an operation not recorded cannot be 'attempted'"):
        after(NEW, Event.ATTEMPTED)
    with pytest.raises(StateMachineError, match="pending cannot be 'stopped unsent'"):
        after(State.PENDING, Event.STOPPED_NOT_SENT)
    assert sources(Event.CLAIMED) == frozenset(UNFINISHED)
    assert sources(Event.SUCCEEDED) == frozenset({*UNFINISHED, State.FAILED})
    assert sources(Event.REFUSED) == frozenset(UNFINISHED)
    assert final_answer(State.SUCCEEDED) is Event.SUCCEEDED
    assert final_answer(State.FAILED) is Event.REFUSED
    with pytest.raises(ValueError, match="not a final answer"):
        final_answer(State.INDETERMINATE)


def test_docs_concepts_draws_the_table_as_the_code_has_it() -> None:
    text = CONCEPTS.read_text()
    drawn = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", text, re.S)
    assert drawn is not None, "docs/concepts.md has no state diagram"
    assert drawn.group(1) == mermaid(), "redraw docs/concepts.md from idemclient._states.mermaid()"
    assert events_table() in text, "docs/concepts.md's events table is not the code's"
