"""The life of an operation, as one table: its states, the events that move it, and
what may follow what.

An operation is a row of the store. Its state changes only by an event of this table:
the engine asks `after(state, event)` before it writes, and an event the table does not
allow in that state is a bug in the caller, raised at once (`StateMachineError`), never
a write. The store's conditional writes are the other half: each one lands only in the
states the table lists as the event's `sources` (a write whose guard fails leaves the
row as it was, and the caller reads back what is there).

A final success is the truth about the money, and it wins over a refusal stored
first: a 2xx to this operation's own request says the server made the payment, whatever
another caller was told before it (a caller paused past its lease whose request paid,
after the caller that took the operation over was refused in front of the server). So
`SUCCEEDED` (and `FOUND_APPLIED`, a look-up's) may follow `FAILED`; nothing follows
`SUCCEEDED`, and no refusal follows a failure (the first one stays). One condition
stands beside the table there (`_store._guards`): a failed operation gives way to a
success only where the answer it keeps is a refusal (not a 2xx). One whose answer is a
2xx was failed by a look-up that found the payment and its status, declined
(`FOUND_DECLINED`): the server's own later word on that very payment, which a 2xx to
the request that made it (a payment accepted, then declined; or a PSP that answers a
declined payment with a 2xx) does not undo; it stays failed. For the same reason a
refusal stored first does not settle an attempt it does not cover: a caller whose lease
was taken over, and whose own attempt may have been applied, leaves the operation
`INDETERMINATE` (`LEARNT_MAYBE_APPLIED`), to be resumed under its key or looked up,
never "failed" for a payment that may be made. A refusal stored while the operation may
have been applied (by the caller that took it over from a sender) covers no other
caller's attempt, whenever that caller read its end; a look-up's (which cleared "maybe
applied") covers the attempts sent before it was stored.

`maybe applied` rides beside the state: it is set by any attempt that may have reached
the server and cleared only by a look-up (`FOUND_NOTHING`, `FOUND_REFUSED`); an
unsettled stop of an operation that may have been applied is `INDETERMINATE`, never
`NOT_SENT`. `CHALLENGED` is an outcome's state only (the store keeps such an operation
`not_sent`), and is not in the table.

docs/concepts.md draws this table (`mermaid()`); a test keeps the drawing and the code
the same, and the model-based checker asserts that every change of state it sees in a
store is a path of the table.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from ._outcome import State

__all__ = [
    "MEANING",
    "NEW",
    "TABLE",
    "UNFINISHED",
    "Event",
    "StateMachineError",
    "after",
    "events_table",
    "final_answer",
    "may_follow",
    "mermaid",
    "sources",
    "stop",
]


class Event(enum.Enum):
    """What happens to an operation, each written by one kind of store write (what each
    is: `MEANING`)."""

    REGISTERED = "registered"
    BEGUN = "begun"
    CLAIMED = "claimed"
    CLAIMED_TO_LOOK_UP = "claimed to look up"
    ATTEMPTED = "attempted"
    SUCCEEDED = "succeeded"
    REFUSED = "refused"
    STOPPED_NOT_SENT = "stopped unsent"
    STOPPED_MAYBE_APPLIED = "stopped maybe applied"
    LEARNT_MAYBE_APPLIED = "learnt maybe applied"
    FOUND_APPLIED = "found applied"
    FOUND_DECLINED = "found declined"
    FOUND_NOTHING = "found nothing"
    FOUND_REFUSED = "found refused"
    REOPENED = "reopened"


#: What each event is, as docs/concepts.md tells it.
MEANING: Mapping[Event, str] = {
    Event.REGISTERED: "recorded ahead of sending, not leased (a batch's rows, an outbox entry)",
    Event.BEGUN: "recorded and leased for its first send, in one write (`begin`)",
    Event.CLAIMED: (
        "leased for a send: a later run, a resume, a lapsed lease taken over (`claim`)"
    ),
    Event.CLAIMED_TO_LOOK_UP: (
        "leased for a look-up on the server, which sends nothing: the state stays, but"
        " one taken from a sender whose lease lapsed is indeterminate (it may have sent)"
    ),
    Event.ATTEMPTED: "an attempt that will be retried, noted with the lease extended",
    Event.SUCCEEDED: (
        "a final 2xx answer stored (whoever holds the lease: a final answer is the truth);"
        " it wins over a refusal stored first, never over a payment a look-up found declined"
    ),
    Event.REFUSED: "a final refusal stored (400, 402, 422 ...), unless one is stored already",
    Event.STOPPED_NOT_SENT: "the call stopped, and no attempt may have been applied",
    Event.STOPPED_MAYBE_APPLIED: "the call stopped, and an attempt may have been applied",
    Event.LEARNT_MAYBE_APPLIED: (
        "a caller whose lease was taken over leaves that its attempt may have been applied"
        " (over a refusal another caller stored that does not cover it: no longer settled)"
    ),
    Event.FOUND_APPLIED: (
        "a look-up on the server found the payment made (over a refusal stored first too)"
    ),
    Event.FOUND_DECLINED: (
        "a look-up found the payment declined by the server (made, and failed there)"
    ),
    Event.FOUND_NOTHING: (
        "a look-up found nothing, after the server had time to finish any attempt"
    ),
    Event.FOUND_REFUSED: (
        "a look-up found nothing, and the refusal the operation keeps is its answer"
    ),
    Event.REOPENED: "pointed at a corrected request, never applied (a batch row's correction)",
}


#: Not yet recorded: the state "before" `REGISTERED`, `BEGUN`, or a look-up's record
#: of an operation it found before it was ever sent.
NEW = None

UNFINISHED = (State.PENDING, State.IN_FLIGHT, State.NOT_SENT, State.INDETERMINATE)

_CLAIMABLE = (State.PENDING, State.NOT_SENT, State.INDETERMINATE, State.IN_FLIGHT)


def _table() -> dict[State | None, dict[Event, State]]:
    table: dict[State | None, dict[Event, State]] = {state: {} for state in State}
    del table[State.CHALLENGED]
    table[NEW] = {
        Event.REGISTERED: State.PENDING,
        Event.BEGUN: State.IN_FLIGHT,
        Event.FOUND_APPLIED: State.SUCCEEDED,
        Event.FOUND_DECLINED: State.FAILED,
    }
    for state in _CLAIMABLE:  # an in-flight one only once its lease lapsed
        table[state][Event.CLAIMED] = State.IN_FLIGHT
        table[state][Event.CLAIMED_TO_LOOK_UP] = state
    # A look-up that takes over a sender's lapsed lease: that sender may have sent.
    table[State.IN_FLIGHT][Event.CLAIMED_TO_LOOK_UP] = State.INDETERMINATE
    table[State.IN_FLIGHT][Event.ATTEMPTED] = State.IN_FLIGHT
    table[State.IN_FLIGHT][Event.STOPPED_NOT_SENT] = State.NOT_SENT
    table[State.IN_FLIGHT][Event.STOPPED_MAYBE_APPLIED] = State.INDETERMINATE
    table[State.NOT_SENT][Event.LEARNT_MAYBE_APPLIED] = State.INDETERMINATE
    for state in UNFINISHED:
        table[state][Event.SUCCEEDED] = State.SUCCEEDED
        table[state][Event.REFUSED] = State.FAILED
        table[state][Event.FOUND_APPLIED] = State.SUCCEEDED
        table[state][Event.FOUND_DECLINED] = State.FAILED
        table[state][Event.FOUND_NOTHING] = State.NOT_SENT
        table[state][Event.FOUND_REFUSED] = State.FAILED
    # A final success wins over a refusal stored first: the payment was made (the
    # condition beside the table: not over a payment a look-up found declined).
    table[State.FAILED][Event.SUCCEEDED] = State.SUCCEEDED
    table[State.FAILED][Event.FOUND_APPLIED] = State.SUCCEEDED
    # ... and an attempt that refusal does not cover, which may have been applied, unsettles it.
    table[State.FAILED][Event.LEARNT_MAYBE_APPLIED] = State.INDETERMINATE
    # Only what was never applied (a failed one: with a status that says it never
    # reached the payment, see `NEVER_APPLIED_STATUSES`), and only while nobody holds it.
    for state in (State.PENDING, State.NOT_SENT, State.FAILED):
        table[state][Event.REOPENED] = State.PENDING
    return table


#: state -> event -> the state it leads to. `SUCCEEDED` is the end: nothing follows it.
TABLE: Mapping[State | None, Mapping[Event, State]] = _table()


class StateMachineError(RuntimeError):
    """An event the operation's state does not allow: a bug in idemclient, raised before
    anything is written."""

    def __init__(self, state: State | None, event: Event) -> None:
        self.state = state
        self.event = event
        allowed = ", ".join(e.value for e in TABLE.get(state, {})) or "nothing"
        where = "not recorded" if state is None else state.value
        super().__init__(
            f"an operation {where} cannot be {event.value!r} (it may be: {allowed});"
            " this is a bug in idemclient, please report it"
        )


def after(state: State | None, event: Event) -> State:
    """The state `event` leads to from `state`; raises `StateMachineError` if the table
    does not allow it."""
    try:
        return TABLE[state][event]
    except KeyError:
        raise StateMachineError(state, event) from None


def sources(event: Event) -> frozenset[State | None]:
    """Every state in which `event` may happen: a store write of it lands only there."""
    return frozenset(state for state, moves in TABLE.items() if event in moves)


def final_answer(state: State) -> Event:
    """The event of a final answer classified as `state` (`succeeded` or `failed`)."""
    if state is State.SUCCEEDED:
        return Event.SUCCEEDED
    if state is State.FAILED:
        return Event.REFUSED
    raise ValueError(f"{state.value} is not a final answer's state")


def stop(maybe_applied: bool) -> Event:
    """The event of a call that stopped without a final answer."""
    return Event.STOPPED_MAYBE_APPLIED if maybe_applied else Event.STOPPED_NOT_SENT


#: How each event may change "maybe applied" (before -> what it may be after). An
#: attempt, or a lease taken over from a sender, may set it; only a look-up's finding
#: clears it; a stop "not sent" and a correction happen only where it is clear.
_KEEP_OR_SET = {False: frozenset({False, True}), True: frozenset({True})}
_MAYBE: Mapping[Event, Mapping[bool, frozenset[bool]]] = {
    Event.REGISTERED: {False: frozenset({False})},
    Event.BEGUN: {False: frozenset({False})},
    Event.CLAIMED: _KEEP_OR_SET,
    Event.CLAIMED_TO_LOOK_UP: _KEEP_OR_SET,
    Event.ATTEMPTED: _KEEP_OR_SET,
    Event.SUCCEEDED: _KEEP_OR_SET,
    Event.REFUSED: _KEEP_OR_SET,
    Event.STOPPED_NOT_SENT: {False: frozenset({False})},
    Event.STOPPED_MAYBE_APPLIED: {False: frozenset({True}), True: frozenset({True})},
    Event.LEARNT_MAYBE_APPLIED: {False: frozenset({True}), True: frozenset({True})},
    Event.FOUND_APPLIED: _KEEP_OR_SET,
    Event.FOUND_DECLINED: _KEEP_OR_SET,
    Event.FOUND_NOTHING: {False: frozenset({False}), True: frozenset({False})},
    Event.FOUND_REFUSED: {False: frozenset({False}), True: frozenset({False})},
    Event.REOPENED: {False: frozenset({False})},
}

#: An operation as a store shows it: its state and whether it may have been applied.
Seen = tuple[State, bool]


def _steps(seen: Seen | None) -> set[Seen]:
    state, maybe = (NEW, False) if seen is None else seen
    out: set[Seen] = set()
    for event, target in TABLE.get(state, {}).items():
        for after_maybe in _MAYBE[event].get(maybe, frozenset()):
            if target is State.INDETERMINATE and not after_maybe:
                continue  # indeterminate is "maybe applied", by what it is
            out.add((target, after_maybe))
    return out


def _reachable() -> dict[Seen | None, frozenset[Seen]]:
    pairs: list[Seen | None] = [None]
    pairs += [(state, maybe) for state in TABLE if state is not None for maybe in (False, True)]
    reach: dict[Seen | None, set[Seen]] = {pair: _steps(pair) for pair in pairs}
    changed = True
    while changed:
        changed = False
        for targets in reach.values():
            more = set().union(*(reach.get(t, set()) for t in targets)) - targets
            if more:
                targets |= more
                changed = True
    return {pair: frozenset(targets) for pair, targets in reach.items()}


_REACHABLE = _reachable()


def may_follow(before: Seen | None, now: Seen) -> bool:
    """Whether a store may show `now` (a state, and whether the operation may have been
    applied) after it showed `before` (None: not recorded), by one or more events of
    the table, or none."""
    return now == before or now in _REACHABLE.get(before, frozenset())


def events_table() -> str:
    """The events and what each is, as a Markdown table (docs/concepts.md shows it)."""
    rows = ["| event | what it is |", "|---|---|"]
    rows += [f"| {event.value} | {MEANING[event]} |" for event in Event]
    return "\n".join(rows)


def mermaid(events: Iterable[Event] = Event) -> str:
    """The table as a Mermaid state diagram (docs/concepts.md shows it), one arrow per
    pair of states, labelled with the events that take it."""
    wanted = set(events)
    arrows: dict[tuple[str, str], list[str]] = {}
    for state, moves in TABLE.items():
        for event, target in moves.items():
            if event not in wanted:
                continue
            start = "[*]" if state is None else state.value
            arrows.setdefault((start, target.value), []).append(event.value)
    lines = ["stateDiagram-v2"]
    for (first, then), labels in arrows.items():
        lines.append(f"    {first} --> {then}: {', '.join(labels)}")
    return "\n".join(lines)
