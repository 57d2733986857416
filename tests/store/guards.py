"""Every guarded write of a store lands only in the states the state table lists as its
event's sources (`_states.sources`), and moves the row where the table says.

Run against each backend (SQLite and memory in tests/store/test_guards.py, PostgreSQL
in tests/postgres/test_guards_postgres.py): a row is put in each state of the table in
turn (by the backend's own hand: no store write leads everywhere), then each write is
tried on it. A guard written by hand that lets one more state through (an attempt
recorded on a row a look-up holds, a correction of a row that may have been sent, a
"found nothing" that turns a finished row back into `not_sent`) fails here.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator

import pytest

from idemclient import State
from idemclient._states import TABLE, Event, after, sources
from idemclient.store import AdminStore, Progress, StoredResponse
from idemclient.testing.store_contract import NOW, make_intent

#: Every state an operation's row may be in (`CHALLENGED` is an outcome's only).
STATES = [state for state in TABLE if state is not None]

HOLDER = "holder-of-the-lease"
OTHER = "a-caller-whose-lease-was-taken"


def _ids() -> Iterator[str]:
    return (state.value for state in STATES)


def quiet(*, maybe_applied: bool = False, now: float = NOW) -> Progress:
    return Progress(
        attempts=1, maybe_applied=maybe_applied, evidence="HTTP 503", not_before=None, now=now
    )


class GuardsDrawnFromTheTable(ABC):
    """Subclassed once per backend: `open_store` and `force` (see the module docstring)."""

    @abstractmethod
    def open_store(self) -> AdminStore: ...

    @abstractmethod
    def force(
        self,
        store: AdminStore,
        operation_id: str,
        *,
        state: State,
        finished_at: float | None,
        lease_owner: str | None,
        lease_expires: float | None,
    ) -> None:
        """Write the row's state and lease as given, nothing else, behind the store's
        back (every other column as the store last wrote it)."""

    @pytest.fixture
    def store(self) -> Iterator[AdminStore]:
        with self.open_store() as opened:
            yield opened

    def put(
        self, store: AdminStore, state: State, *, held_by: str | None, status: int = 404
    ) -> None:
        """op-1 in `state`, never maybe applied, keeping an answer (HTTP `status`), held
        by `held_by` with a live lease (or by nobody)."""
        store.begin(make_intent(), owner="setup", now=NOW, lease_until=NOW + 60)
        store.finish(
            "op-1",
            owner="setup",
            state=State.FAILED,
            progress=quiet(),
            response=StoredResponse.of(status, (), b"{}"),
        )
        self.force(
            store,
            "op-1",
            state=state,
            finished_at=NOW if state.finished else None,
            lease_owner=held_by,
            lease_expires=None if held_by is None else NOW + 600,
        )
        record = store.get("op-1")
        assert record is not None
        assert record.state is state
        assert record.lease_owner == held_by
        assert not record.maybe_applied

    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_an_attempt_is_recorded_only_where_the_table_allows_one(
        self, store: AdminStore, state: State
    ) -> None:
        self.put(store, state, held_by=HOLDER)
        landed = store.record_attempt(
            "op-1", owner=HOLDER, progress=quiet(maybe_applied=True), lease_until=NOW + 60
        )
        assert landed is (state in sources(Event.ATTEMPTED))
        record = store.get("op-1")
        assert record is not None
        assert record.maybe_applied is landed

    @pytest.mark.parametrize(
        ("answer", "event"),
        [(State.SUCCEEDED, Event.SUCCEEDED), (State.FAILED, Event.REFUSED)],
        ids=["succeeded", "refused"],
    )
    @pytest.mark.parametrize("status", [400, 200], ids=["kept-a-refusal", "kept-a-2xx"])
    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_a_final_answer_lands_only_where_the_table_allows_one(
        self, store: AdminStore, state: State, status: int, answer: State, event: Event
    ) -> None:
        self.put(store, state, held_by=HOLDER, status=status)
        given = 201 if answer is State.SUCCEEDED else 402
        record = store.finish(
            "op-1",
            owner=HOLDER,
            state=answer,
            progress=quiet(now=NOW + 1),
            response=StoredResponse.of(given, (), b"{}"),
        )
        # A success wins over a failure only where the failure's answer is a refusal
        # (not a 2xx: a payment a look-up found declined stays): the other condition
        # beside the table (`_guards.gives_way`).
        allowed = state in sources(event) and (state is not State.FAILED or status == 400)
        assert record.lease_lost is not allowed
        assert record.state is (after(state, event) if allowed else state)
        stored = store.get("op-1")
        assert stored is not None
        assert stored.state is record.state
        assert stored.response is not None
        assert stored.response.status_code == (given if allowed else status)

    @pytest.mark.parametrize("answer", [State.SUCCEEDED, State.FAILED])
    @pytest.mark.parametrize("knew", [False, True], ids=["judged-blind", "knowing"])
    def test_a_refusal_judged_blind_does_not_land_over_an_operation_maybe_applied(
        self, store: AdminStore, knew: bool, answer: State
    ) -> None:
        # The condition beside the table on a final refusal (`_guards.refusal_judged_blind`):
        # written by a caller that did not know the operation may have been applied (the
        # lease's holder noted an attempt after that caller read the row), it does not
        # land: that caller judges it again. A success lands either way.
        self.put(store, State.IN_FLIGHT, held_by=HOLDER)
        assert store.record_attempt(
            "op-1", owner=HOLDER, progress=quiet(maybe_applied=True), lease_until=NOW + 60
        )
        given = 201 if answer is State.SUCCEEDED else 403
        record = store.finish(
            "op-1",
            owner=OTHER,
            state=answer,
            progress=quiet(maybe_applied=knew, now=NOW + 1),
            response=StoredResponse.of(given, (), b"{}"),
        )
        lands = knew or answer is State.SUCCEEDED
        assert record.lease_lost is not lands
        assert record.state is (answer if lands else State.IN_FLIGHT)
        stored = store.get("op-1")
        assert stored is not None
        assert (stored.state, stored.maybe_applied) == (record.state, True)
        assert stored.lease_owner == (None if lands else HOLDER)

    @pytest.mark.parametrize(
        ("applied", "verdict", "event"),
        [
            (True, State.SUCCEEDED, Event.FOUND_APPLIED),
            (True, State.FAILED, Event.FOUND_DECLINED),
            (False, State.NOT_SENT, Event.FOUND_NOTHING),
            (False, State.FAILED, Event.FOUND_REFUSED),
        ],
        ids=["found-applied", "found-declined", "found-nothing", "found-refused"],
    )
    @pytest.mark.parametrize("status", [404, 200], ids=["kept-a-refusal", "kept-a-2xx"])
    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_a_look_up_settles_only_where_the_table_allows_it(
        self,
        store: AdminStore,
        state: State,
        status: int,
        applied: bool,
        verdict: State,
        event: Event,
    ) -> None:
        self.put(store, state, held_by=HOLDER, status=status)
        record = store.settle(
            "op-1",
            owner=HOLDER,
            applied=applied,
            evidence="the look-up's finding",
            now=NOW + 1,
            state=verdict,
        )
        allowed = state in sources(event) and (state is not State.FAILED or status == 404)
        assert (record.evidence == "the look-up's finding") is allowed
        assert record.state is (after(state, event) if allowed else state)

    @pytest.mark.parametrize("status", [404, 500], ids=["never-applied", "maybe-reached"])
    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_a_correction_reopens_only_where_the_table_allows_one(
        self, store: AdminStore, state: State, status: int
    ) -> None:
        self.put(store, state, held_by=None, status=status)
        corrected = make_intent(url="http://psp.test/v1/payouts")
        record = store.reopen(corrected, evidence="corrected", now=NOW + 1)
        # A failure is reopened only where its status says it never reached the
        # payment (`NEVER_APPLIED_STATUSES`): the one condition beside the table.
        allowed = state in sources(Event.REOPENED) and (state is not State.FAILED or status == 404)
        assert (record is not None) is allowed
        stored = store.get("op-1")
        assert stored is not None
        assert stored.state is (after(state, Event.REOPENED) if allowed else state)

    @pytest.mark.parametrize(
        "sent", [NOW - 1, NOW, None], ids=["sent-before", "sent-as-it-ended", "nothing-sent"]
    )
    @pytest.mark.parametrize("status", [404, 200], ids=["kept-a-refusal", "kept-a-2xx"])
    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_a_caller_whose_lease_was_taken_changes_a_state_only_as_the_table_says(
        self, store: AdminStore, state: State, status: int, sent: float | None
    ) -> None:
        self.put(store, state, held_by=HOLDER, status=status)
        progress = dataclasses.replace(quiet(maybe_applied=True, now=NOW + 1), sent_at=sent)
        record = store.finish("op-1", owner=OTHER, state=State.INDETERMINATE, progress=progress)
        assert record.lease_lost
        learnt = state in sources(Event.LEARNT_MAYBE_APPLIED)
        if state is State.FAILED:
            # The condition beside the table (`_guards.learns_over`): a refusal (not a
            # 2xx: a payment found declined stays) stored at or before the caller's send.
            learnt = status == 404 and sent is not None and sent >= NOW
        assert record.state is (after(state, Event.LEARNT_MAYBE_APPLIED) if learnt else state)
        stored = store.get("op-1")
        assert stored is not None
        assert stored.state is record.state
        assert (stored.finished_at is None) is (not stored.state.finished)

    @pytest.mark.parametrize("sent", [NOW - 1, None], ids=["sent-before", "nothing-sent"])
    def test_a_refusal_stored_while_maybe_applied_is_unsettled_by_any_late_send(
        self, store: AdminStore, sent: float | None
    ) -> None:
        # Stored while the operation may have been applied (by the caller that took the
        # lease over from a sender, who may have sent): it covers no other caller's
        # attempt, whenever that caller read its end (`_guards.learns_over`).
        store.begin(make_intent(), owner="setup", now=NOW - 10, lease_until=NOW + 60)
        store.finish(
            "op-1",
            owner="setup",
            state=State.FAILED,
            progress=quiet(maybe_applied=True, now=NOW),
            response=StoredResponse.of(400, (), b"{}"),
        )
        stored = store.get("op-1")
        assert stored is not None
        assert (stored.state, stored.maybe_applied) == (State.FAILED, True)
        progress = dataclasses.replace(quiet(maybe_applied=True, now=NOW + 1), sent_at=sent)
        record = store.finish("op-1", owner=OTHER, state=State.INDETERMINATE, progress=progress)
        assert record.lease_lost
        assert record.state is (State.FAILED if sent is None else State.INDETERMINATE)
        stored = store.get("op-1")
        assert stored is not None
        assert stored.state is record.state
        assert (stored.finished_at is None) is (not stored.state.finished)

    def test_a_reaped_refusal_is_not_unsettled_by_a_late_send(self, store: AdminStore) -> None:
        # Its request's body is gone: unfinished again, it could not be sent again.
        self.put(store, State.FAILED, held_by=None)
        assert store.reap(now=NOW + 10**9) == 1
        progress = dataclasses.replace(quiet(maybe_applied=True, now=NOW + 1), sent_at=NOW + 1)
        record = store.finish("op-1", owner=OTHER, state=State.INDETERMINATE, progress=progress)
        assert record.lease_lost
        assert record.state is State.FAILED

    @pytest.mark.parametrize(
        ("look_up", "event"),
        [(False, Event.CLAIMED), (True, Event.CLAIMED_TO_LOOK_UP)],
        ids=["to-send", "to-look-up"],
    )
    @pytest.mark.parametrize("state", STATES, ids=list(_ids()))
    def test_a_claim_lands_and_moves_the_row_only_as_the_table_says(
        self, store: AdminStore, state: State, look_up: bool, event: Event
    ) -> None:
        self.put(store, state, held_by=None)
        begin = store.claim(
            "op-1", owner="claimer", now=NOW + 1, lease_until=NOW + 61, look_up=look_up
        )
        allowed = state in sources(event)
        assert (begin.record.lease_owner == "claimer") is allowed
        assert begin.record.state is (after(state, event) if allowed else state)
