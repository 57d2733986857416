"""Where each of a store's conditional writes may land, drawn from the state table.

The table (`_states`) says in which states each event may happen (`sources`) and where
it leads (`after`); a store write records an event, and lands only in those states.
This module turns the table into the guards every backend runs: SQL for the statements
both SQL stores share (`_statements`), and the same sets for the store in memory. No
backend names a state by hand where it guards a write, so the table and the guards
cannot drift apart (tests/store/guards.py holds every backend to the table, state by
state).

One condition stands beside the table: a failed operation is reopened only where its
answer's status says it never reached the payment (`NEVER_APPLIED_STATUSES`).

"Every unfinished state" is written `finished_at IS NULL` in SQL: the stores write
`finished_at` exactly when a row's state becomes final (and clear it only when a row is
reopened), and their partial indexes answer that condition.
"""

from __future__ import annotations

from .._outcome import State
from .._states import UNFINISHED, Event, after, sources
from ._base import NEVER_APPLIED_STATUSES, OperationRecord

__all__ = [
    "ATTEMPTED_IN",
    "CLAIMED_IN",
    "FINAL_ANSWER_IN",
    "LEARNT_IN",
    "SETTLED_IN",
    "lands_in",
    "may_reopen",
    "sql_attempted",
    "sql_claimed",
    "sql_claimed_state",
    "sql_final_answer",
    "sql_learnt_state",
    "sql_reopenable",
    "sql_settled",
]


def lands_in(*events: Event) -> frozenset[State]:
    """The recorded states in which each of `events` may happen: one write records them
    all, so the table must give them the same sources (else ValueError, at import)."""
    found = {frozenset(s for s in sources(event) if s is not None) for event in events}
    if len(found) != 1:
        named = ", ".join(event.value for event in events)
        raise ValueError(
            f"one store write records {named}, which the table lets happen in"
            " different states: it needs a guard of its own for each"
        )
    return found.pop()


def _sql_in(states: frozenset[State]) -> str:
    if states == frozenset(UNFINISHED):
        return "finished_at IS NULL"
    return "state IN (" + ", ".join(sorted(f"'{state.value}'" for state in states)) + ")"


def _uniform_target(event: Event) -> State:
    """Where `event` leads from every state it may happen in (ValueError if it depends
    on the state: one value could not be written)."""
    targets = {after(state, event) for state in lands_in(event)}
    if len(targets) != 1:
        raise ValueError(f"{event.value!r} leads to different states from different ones")
    return targets.pop()


#: A sender's claim (`Statements.take_over`, `MemoryStore.claim`).
CLAIMED_IN = lands_in(Event.CLAIMED, Event.CLAIMED_TO_LOOK_UP)
#: An attempt noted (`record_attempt`).
ATTEMPTED_IN = lands_in(Event.ATTEMPTED)
#: A final answer stored (`finish` with a final state), whoever holds the lease.
FINAL_ANSWER_IN = lands_in(Event.SUCCEEDED, Event.REFUSED)
#: A look-up's finding (`settle`).
SETTLED_IN = lands_in(
    Event.FOUND_APPLIED, Event.FOUND_DECLINED, Event.FOUND_NOTHING, Event.FOUND_REFUSED
)
#: Where a caller whose lease was taken leaves that its attempt may have been applied
#: changes the state (`finish`'s merge).
LEARNT_IN = lands_in(Event.LEARNT_MAYBE_APPLIED)
_REOPENED_IN = lands_in(Event.REOPENED)


def sql_attempted() -> str:
    return _sql_in(ATTEMPTED_IN)


def sql_final_answer() -> str:
    return _sql_in(FINAL_ANSWER_IN)


def sql_settled() -> str:
    return _sql_in(SETTLED_IN)


def sql_claimed() -> str:
    return _sql_in(CLAIMED_IN)


def sql_claimed_state(sender: str) -> str:
    """The state a claim writes: where a sender's claim leads (`sender` the SQL of
    whether it is one), else where a look-up's does from the row's state."""
    moves = [
        f" WHEN state = '{state.value}' THEN '{after(state, Event.CLAIMED_TO_LOOK_UP).value}'"
        for state in sorted(CLAIMED_IN, key=lambda s: s.value)
        if after(state, Event.CLAIMED_TO_LOOK_UP) is not state
    ]
    sent = _uniform_target(Event.CLAIMED).value
    return f"CASE WHEN {sender} THEN '{sent}'" + "".join(moves) + " ELSE state END"


def sql_learnt_state(learnt: str) -> str:
    """The state a caller whose lease was taken leaves: where learning that its attempt
    may have been applied leads, where `learnt` (SQL, written once) holds and the table
    lets it happen; the row's state elsewhere."""
    target = _uniform_target(Event.LEARNT_MAYBE_APPLIED).value
    return f"CASE WHEN {_sql_in(LEARNT_IN)} AND ({learnt}) THEN '{target}' ELSE state END"


def sql_reopenable() -> str:
    """The states a correction reopens (`Statements.reopen`), a failed one only where
    its answer's status says it never reached the payment."""
    conditions = []
    plain = _REOPENED_IN - {State.FAILED}
    if plain:
        conditions.append(_sql_in(plain))
    if State.FAILED in _REOPENED_IN:
        statuses = ", ".join(str(status) for status in NEVER_APPLIED_STATUSES)
        conditions.append(f"(state = '{State.FAILED.value}' AND status_code IN ({statuses}))")
    return "(" + " OR ".join(conditions) + ")" if conditions else "false"


def may_reopen(record: OperationRecord) -> bool:
    """Whether a correction may reopen `record` by its state (`sql_reopenable`)."""
    if record.state not in _REOPENED_IN:
        return False
    if record.state is not State.FAILED:
        return True
    return record.response is not None and record.response.status_code in NEVER_APPLIED_STATUSES
