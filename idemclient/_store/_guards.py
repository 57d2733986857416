"""Where each of a store's conditional writes may land, drawn from the state table.

The table (`_states`) says in which states each event may happen (`sources`) and where
it leads (`after`); a store write records an event, and lands only in those states.
This module turns the table into the guards every backend runs: SQL for the statements
both SQL stores share (`_statements`), and the same sets for the store in memory. No
backend names a state by hand where it guards a write, so the table and the guards
cannot drift apart (tests/store/guards.py holds every backend to the table, state by
state).

Two conditions stand beside the table on the answer a failed operation keeps:
it is reopened only where its status says it never reached the payment
(`NEVER_APPLIED_STATUSES`); and a final success wins over it only where that answer is
a refusal, not a 2xx (`gives_way`): a failed operation whose answer is a 2xx is a
payment a look-up found declined, the server's own word on it, which stays. Such a
refusal is unsettled too by a caller whose lease was taken over and whose attempt may
have been applied, where the refusal does not cover it (`learns_over`): one stored
while the operation may have been applied never does; a look-up's, only the attempts
sent before it.
A third stands on what the caller knew: a refusal is not written over an operation
that may have been applied by a caller that judged it without knowing so
(`refusal_judged_blind`); that caller judges it again.

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
    "REFUSED_IN",
    "SETTLED_IN",
    "SUCCEEDED_IN",
    "final_answer_lands",
    "gives_way",
    "lands_in",
    "learns_over",
    "may_reopen",
    "refusal_judged_blind",
    "sql_attempted",
    "sql_claimed",
    "sql_claimed_state",
    "sql_final_answer",
    "sql_found_applied",
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
#: A final success stored (`finish`), whoever holds the lease, and a look-up's finding
#: that the payment was made (`settle`): over a refusal stored first too (`gives_way`).
SUCCEEDED_IN = lands_in(Event.SUCCEEDED, Event.FOUND_APPLIED)
#: A final refusal stored (`finish`), whoever holds the lease: never over another.
REFUSED_IN = lands_in(Event.REFUSED)
#: Where a final answer stored (`finish` with a final state) may land, by its state.
FINAL_ANSWER_IN = {State.SUCCEEDED: SUCCEEDED_IN, State.FAILED: REFUSED_IN}
#: A look-up's other findings (`settle`): declined, nothing, refused.
SETTLED_IN = lands_in(Event.FOUND_DECLINED, Event.FOUND_NOTHING, Event.FOUND_REFUSED)
if not REFUSED_IN <= SUCCEEDED_IN or {State.FAILED} != SUCCEEDED_IN - REFUSED_IN:
    # `sql_final_answer` writes a success's guard as a refusal's and a refusal overridden.
    raise ValueError("a final success must land where a refusal does, and over a refusal")
#: Where a caller whose lease was taken leaves that its attempt may have been applied
#: changes the state (`finish`'s merge): a failed one only by `learns_over`.
LEARNT_IN = lands_in(Event.LEARNT_MAYBE_APPLIED)
_REOPENED_IN = lands_in(Event.REOPENED)


def sql_attempted() -> str:
    return _sql_in(ATTEMPTED_IN)


def gives_way(record: OperationRecord) -> bool:
    """Whether a final success may replace `record`, failed, by the answer it keeps: a
    refusal (anything but a 2xx; none kept, a row of an earlier version) gives way; a
    2xx is a payment a look-up found declined (`FOUND_DECLINED`), and stays."""
    return record.response is None or not 200 <= record.response.status_code < 300


def final_answer_lands(record: OperationRecord, state: State, *, knew: bool = True) -> bool:
    """Whether a final answer classified `state` may be written over `record` (the
    guard `sql_final_answer` and `sql_found_applied` run, for the store in memory).
    `knew`: the caller judged its answer knowing the operation may have been applied
    (see `refusal_judged_blind`)."""
    if state is State.SUCCEEDED:
        return record.state in SUCCEEDED_IN and (
            record.state is not State.FAILED or gives_way(record)
        )
    return record.state in REFUSED_IN and not refusal_judged_blind(record, knew=knew)


def refusal_judged_blind(record: OperationRecord, *, knew: bool) -> bool:
    """Whether a refusal is written over `record` by a caller that judged it final
    without knowing what the row knows: that the operation may have been applied (an
    attempt another caller noted after this one read the row: its lease taken over).
    After such an attempt a refusal may be an edge's, or the server's to a duplicate;
    whether it still settles the operation is the caller's to judge again, with that
    knowledge (`_classify.after_maybe_applied`): the write does not land."""
    return record.maybe_applied and not knew


def _sql_refusal_given_way() -> str:
    """A failed row whose answer is a refusal (`gives_way`), in SQL."""
    return f"(state = '{State.FAILED.value}' AND coalesce(status_code, 0) NOT BETWEEN 200 AND 299)"


def sql_final_answer() -> str:
    """Where a final answer lands (`Statements.finish`): the parameters after the
    row's id are the state it writes, whether its caller knew the operation may have
    been applied (`refusal_judged_blind`), and the state again: a success lands over a
    refusal too."""
    succeeded = f"{{p}} = '{State.SUCCEEDED.value}'"
    return (
        f"(({_sql_in(REFUSED_IN)} AND ({succeeded} OR maybe_applied = false OR {{p}}))"
        f" OR ({succeeded} AND {_sql_refusal_given_way()}))"
    )


def sql_found_applied() -> str:
    """Where a look-up's finding that the payment was made lands (`settle`)."""
    return f"({_sql_in(SUCCEEDED_IN - {State.FAILED})} OR {_sql_refusal_given_way()})"


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


def learns_over(record: OperationRecord, sent_at: float | None, *, reaped: bool = False) -> bool:
    """Whether a caller whose lease was taken, whose last attempt that may have been
    applied was sent at `sent_at`, unsettles `record`, failed: a refusal (`gives_way`)
    that does not cover that attempt. One stored while the operation may have been
    applied (a refusal by the caller that took the lease over from a sender, who may
    have sent: the takeover says so) covers no other caller's attempt, whenever that
    caller read its end: a refusal in front of the server is its own request's, and
    one the server keeps under the key does not tell of a request that reached it
    first. One that is a look-up's finding (which cleared "maybe applied") covers the
    attempts sent before it was stored: it is unsettled by one sent at or after it,
    which it could not know of. Never one `reaped`: its request's body is gone, and it
    could not be sent again (it stays as it is)."""
    return (
        not reaped
        and record.state is State.FAILED
        and State.FAILED in LEARNT_IN
        and gives_way(record)
        and sent_at is not None
        and record.finished_at is not None
        and (record.maybe_applied or sent_at >= record.finished_at)
    )


def sql_learns_over(sent_at: str, sent: str) -> str:
    """`learns_over` in SQL: `sent_at` the SQL of the caller's send, `sent` that of
    whether it has one (in that order in the statement: `sent` first)."""
    if State.FAILED not in LEARNT_IN:
        return "false"
    return (
        f"({_sql_refusal_given_way()} AND reaped_at IS NULL"
        f" AND ({sent} AND maybe_applied OR coalesce({sent_at}, -1) >= finished_at))"
    )


def sql_learnt_state(learnt: str, sent_at: str, sent: str) -> str:
    """The state a caller whose lease was taken leaves: where learning that its attempt
    may have been applied leads, where `learnt` (SQL, written once) holds and the table
    lets it happen (over a failed one, where `sql_learns_over` holds, by `sent_at` and
    `sent`); the row's state elsewhere."""
    target = _uniform_target(Event.LEARNT_MAYBE_APPLIED).value
    unfinished = _sql_in(LEARNT_IN - {State.FAILED})
    return (
        f"CASE WHEN {unfinished} AND ({learnt}) THEN '{target}'"
        f" WHEN {sql_learns_over(sent_at, sent)} THEN '{target}' ELSE state END"
    )


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
