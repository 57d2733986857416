"""The contract every store backend passes, whoever wrote it.

A backend's test suite runs it against its own stores by subclassing a contract class
and saying how a store is opened::

    from idemclient.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        def open_store(self, **options):
            return MyStore(**options)

`OperationStoreContract` holds what a client relies on (`idemclient.store.
OperationStore`): admission, leases and their takeovers, attempts, final answers,
look-ups' verdicts, the store's clock. `StoreContract` adds what the batch command and
the operator's commands rely on (`AdminStore`): registration, listing, reaping,
references, look-ups kept, purging. `SQLiteStore`, `PostgresStore` and `MemoryStore`
pass `StoreContract` (tests/store, tests/postgres).

`open_store(**options)` opens a new, empty store. The options a test may pass are
`max_stored_body`, `retention` and `secret_headers`, with the meaning `SQLiteStore`
gives them. Each test closes the stores it opened. Needs pytest (this module is for
test suites; nothing else in the package imports it).

What the tests state, in short (docs/store.md says it at length):

- **Leases.** One owner at a time: of callers claiming one operation, exactly one gets
  its lease. A live lease (its time not over, its owner not dead) is never taken; one
  that lapsed, or whose owner is a process of this host and PID namespace that exited
  (or an ended call of this process), is taken over, and an operation taken from an
  owner in flight may have been applied. A look-up's lease sends nothing: it keeps the
  operation's state, and its takeover counts no send.
- **Answers.** A final answer is written whoever holds the lease, unless another final
  answer is there first; but a success is written over a refusal stored first (the
  payment was made), never over a payment a look-up found declined, and a caller whose
  lease was taken over, whose attempt such a refusal does not cover may have been
  applied, leaves it indeterminate (one stored while the operation may have been
  applied covers no other caller's attempt; a look-up's, those sent before it); an
  unsettled one only by the lease's holder. A caller whose write did not land as asked
  gets the stored record back, marked `lease_lost`. "Maybe applied" never goes back,
  except by a look-up's verdict (`settle`). Each rule of a final write by a caller
  whose lease was taken over is checked for `finish` and for `finish_brief`, where a
  backend declares it (`late_write`).
- **Clock steps.** Times are the callers' (`now`); the store keeps the latest it saw
  (`advance_clock`), its records' included (an unfinished operation's latest send). A
  clock seen going back marks every unfinished operation (`clock_stepped`), so that its
  age is never trusted again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import httpx
import pytest

from .. import State
from .._fingerprint import fingerprint
from ..errors import OperationMismatch, StoreUnavailable
from ..store import (
    AdminStore,
    Claim,
    Intent,
    NotFound,
    OperationRecord,
    OperationStore,
    Progress,
    ServerTime,
    StoredResponse,
    new_owner,
    release_owner,
)

__all__ = ["OperationStoreContract", "StoreContract", "dead_owner", "make_intent"]

NOW = 1_800_000_000.0
DAY = 86_400.0


def make_intent(
    operation_id: str = "op-1",
    key: str = "key-1",
    body: bytes = b'{"amount":100}',
    *,
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),),
    key_given: bool = True,
    url: str = "http://psp.test/v1/payments",
) -> Intent:
    """An intent as a client records it: a JSON POST, its fingerprint over the request."""
    parsed = httpx.URL(url)
    return Intent(
        operation_id=operation_id,
        key=key,
        key_given=key_given,
        method="POST",
        url=str(parsed),
        headers=headers,
        body=body,
        fingerprint=fingerprint("POST", parsed, body),
        reference="ref-1",
    )


def dead_owner() -> str:
    """The owner name a process of this host (and PID namespace) took, and then exited."""
    done = subprocess.run(
        [sys.executable, "-c", "from idemclient.store import new_owner; print(new_owner())"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


def progress(attempts: int = 1, *, now: float = NOW, applied: bool = True) -> Progress:
    return Progress(
        attempts=attempts, maybe_applied=applied, evidence="HTTP 201", not_before=None, now=now
    )


def succeed(store: OperationStore, operation_id: str, owner: str, status: int = 201) -> None:
    store.finish(
        operation_id,
        owner=owner,
        state=State.SUCCEEDED if status < 300 else State.FAILED,
        progress=progress(),
        response=StoredResponse.of(status, (), b"{}"),
    )


def _not_sent(store: OperationStore, *, sent_at: float | None = None) -> None:
    """op-1 given back unsettled: never applied (`sent_at` None), or maybe applied,
    last sent at `sent_at`."""
    owner = new_owner()
    store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
    state = State.NOT_SENT if sent_at is None else State.INDETERMINATE
    done = dataclasses.replace(progress(applied=sent_at is not None), sent_at=sent_at)
    store.finish("op-1", owner=owner, state=state, progress=done)
    release_owner(owner)


def nothing_found(operation_id: str, asked_at: float, *, key: str = "k") -> NotFound:
    return NotFound(
        operation_id,
        key,
        "https://psp.example/v1/payouts?reference=r#sent-as=v1.00.00",
        "reference",
        asked_at,
        asked_at + 2.0,
    )


def _unexplained(store: OperationStore, owner: str, *, answer: bool = True) -> None:
    """op-1 left unsettled after an answer read as a replay that nothing of ours
    explains (django-idempotency-key's 409), kept with it when `answer`."""
    store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
    store.finish(
        "op-1",
        owner=owner,
        state=State.INDETERMINATE,
        progress=dataclasses.replace(progress(), sent_at=NOW, replay_unexplained=True),
        response=StoredResponse.of(409, (), b'{"detail": "exists"}') if answer else None,
    )


def reference_intent(operation_id: str, reference: str, key: str | None = None) -> Intent:
    return dataclasses.replace(
        make_intent(operation_id, key or f"key-{operation_id}"), reference=reference
    )


def moved(intent: Intent, path: str = "/v1/payouts") -> Intent:
    url = httpx.URL(intent.url).copy_with(path=path)
    return dataclasses.replace(
        intent, url=str(url), fingerprint=fingerprint("POST", url, intent.body)
    )


@dataclasses.dataclass(frozen=True)
class Takeover:
    """An operation a first caller began (lease for one second) and a second caller took
    over once that lapsed (at NOW + 2, for a minute): the setup of every rule of a late
    write (`taken_over`). `known` is the record as the first caller last saw it, from
    `begin`: what a client hands its final write."""

    operation_id: str
    first: str
    second: str
    known: OperationRecord

    def second_answers(self, store: OperationStore, state: State, status: int) -> None:
        """The caller that took over stores an answer (`state`, HTTP `status`) at NOW + 3."""
        store.finish(
            self.operation_id,
            owner=self.second,
            state=state,
            progress=progress(now=NOW + 3),
            response=StoredResponse.of(status, (), b"{}"),
        )

    def first_stops_unsettled(
        self, store: OperationStore, late_write: LateWrite, *, sent: float | None, now: float
    ) -> OperationRecord:
        """The first caller writes, at `now`, that it stopped unsettled, its attempt
        sent at `sent` (None: it sent nothing): its write only merges, and it is told
        the stored record. The operation as stored then."""
        late = dataclasses.replace(progress(now=now), sent_at=sent)
        assert late_write(self, state=State.INDETERMINATE, progress=late).lease_lost
        stored = store.get(self.operation_id)
        assert stored is not None
        return stored


#: an operation's (state, finished_at, maybe_applied) once a later send unsettled it
UNSETTLED = (State.INDETERMINATE, None, True)


def taken_over(
    store: OperationStore, operation_id: str = "op-1", *, look_up: bool = False
) -> Takeover:
    """`operation_id` begun by one caller and taken over by another (`look_up`: by a
    look-up) once the first one's lease lapsed."""
    first, second = new_owner(), new_owner()
    intent = make_intent(operation_id, f"key-{operation_id}")
    known = store.begin(intent, owner=first, now=NOW, lease_until=NOW + 1).record
    store.claim(operation_id, owner=second, now=NOW + 2, lease_until=NOW + 60, look_up=look_up)
    return Takeover(operation_id, first, second, known)


class LateWrite(Protocol):
    """The final write of the first caller of a `Takeover` (the fixture `late_write`),
    told as a record."""

    def __call__(
        self,
        taken: Takeover,
        *,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
    ) -> OperationRecord: ...


def declared_brief(store: Any) -> Any:
    """`store.finish_brief`, where the backend declares it the brief form of its
    `finish` (`finish_brief_of = finish`: `idemclient.store.BriefFinish`); else None."""
    if getattr(type(store), "finish_brief_of", None) is None:
        return None
    return store.finish_brief


def as_record(told: Any) -> OperationRecord:
    """The record a final write told: `finish`'s; or, from `finish_brief`, the one it
    makes when asked (`record()`) where the write landed as asked, else the row."""
    record: OperationRecord = told.record() if callable(getattr(told, "record", None)) else told
    return record


class OperationStoreContract:
    """What a client relies on (`OperationStore`): subclass it and define
    `open_store` (see the module docstring)."""

    def open_store(self, **options: Any) -> Any:
        """A new, empty store of the backend under test, with `options`."""
        raise NotImplementedError(f"{type(self).__name__} must define open_store(**options)")

    @pytest.fixture
    def opened(self) -> Iterator[list[Any]]:
        stores: list[Any] = []
        yield stores
        for store in stores:
            store.close()

    @pytest.fixture
    def store(self, opened: list[Any]) -> Any:
        store = self.open_store()
        opened.append(store)
        return store

    @pytest.fixture(autouse=True)
    def _closes_what_it_opens(self, opened: list[Any]) -> None:
        self._opened = opened

    def _open(self, **options: Any) -> Any:
        store = self.open_store(**options)
        self._opened.append(store)
        return store

    def test_begin_admits_once_then_finds(self, store: OperationStore) -> None:
        first, second = new_owner(), new_owner()
        begun = store.begin(make_intent(), owner=first, now=NOW, lease_until=NOW + 60)
        assert begun.claim is Claim.CREATED
        assert begun.record.state is State.IN_FLIGHT
        assert begun.record.lease_owner == first
        assert begun.record.created_at == NOW
        again = store.begin(make_intent(), owner=second, now=NOW + 1, lease_until=NOW + 61)
        assert again.claim is Claim.BUSY  # the first owner's lease is live
        after = store.begin(make_intent(), owner=second, now=NOW + 61, lease_until=NOW + 121)
        assert after.claim is Claim.CLAIMED  # expired: taken over
        assert after.record.lease_owner == second
        assert after.record.lease_expires == NOW + 121

    def test_a_claim_says_whether_it_took_a_lapsed_lease_over(self, store: OperationStore) -> None:
        first, second = new_owner(), new_owner()
        store.begin(make_intent(), owner=first, now=NOW, lease_until=NOW + 60)
        taken = store.claim("op-1", owner=second, now=NOW + 61, lease_until=NOW + 121)
        assert (taken.claim, taken.taken_over) == (Claim.CLAIMED, True)  # first may be sending
        assert taken.dead_holder is None  # its call is still running: it may record an answer
        store.finish("op-1", owner=second, state=State.INDETERMINATE, progress=progress())
        released = store.claim("op-1", owner=first, now=NOW + 62, lease_until=NOW + 122)
        assert (released.claim, released.taken_over) == (Claim.CLAIMED, False)  # given back

    def test_a_finished_operation_is_never_claimed(self, store: OperationStore) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        succeed(store, "op-1", owner)
        again = store.begin(make_intent(), owner=new_owner(), now=NOW + 999, lease_until=NOW + 1999)
        assert again.claim is Claim.FINISHED
        assert again.record.response is not None
        assert again.record.response.body == b"{}"
        assert (
            store.claim("op-1", owner=new_owner(), now=NOW, lease_until=NOW).claim is Claim.FINISHED
        )

    def test_a_dead_local_owner_is_taken_over_at_once(self, store: OperationStore) -> None:
        dead = dead_owner()
        live = new_owner()
        store.begin(make_intent(), owner=dead, now=NOW, lease_until=NOW + 3600)
        taken = store.claim("op-1", owner=live, now=NOW + 1, lease_until=NOW + 60)
        assert taken.claim is Claim.CLAIMED
        assert taken.record.lease_owner == live
        # The claim says whom it took the lease from, found dead: nobody to wait for.
        assert (taken.taken_over, taken.dead_holder) == (True, dead)

    def test_a_claim_names_only_a_dead_sender_as_its_dead_holder(
        self, store: OperationStore
    ) -> None:
        # Another host's owner, out of its lease: it may be alive, paused.
        store.begin(make_intent(), owner="elsewhere:1:abc:1", now=NOW, lease_until=NOW + 60)
        taken = store.claim("op-1", owner=new_owner(), now=NOW + 61, lease_until=NOW + 90)
        assert (taken.claim, taken.taken_over, taken.dead_holder) == (Claim.CLAIMED, True, None)
        # A call of this process that ended, its lease left behind: dead, taken at once.
        ended = new_owner()
        store.begin(make_intent("op-2", "key-2"), owner=ended, now=NOW, lease_until=NOW + 600)
        release_owner(ended)
        taken = store.claim("op-2", owner=new_owner(), now=NOW + 1, lease_until=NOW + 60)
        assert (taken.claim, taken.taken_over, taken.dead_holder) == (Claim.CLAIMED, True, ended)
        # A dead look-up sent nothing: no takeover of a sender, no dead holder to name.
        store.finish(
            "op-2",
            owner=taken.record.lease_owner or "",
            state=State.INDETERMINATE,
            progress=progress(now=NOW + 2),
        )
        looker = new_owner()
        looking = store.claim("op-2", owner=looker, now=NOW + 3, lease_until=NOW + 60, look_up=True)
        assert looking.claim is Claim.CLAIMED
        release_owner(looker)
        taken = store.claim("op-2", owner=new_owner(), now=NOW + 4, lease_until=NOW + 60)
        assert (taken.claim, taken.taken_over, taken.dead_holder) == (Claim.CLAIMED, False, None)

    def test_an_owner_of_another_pid_namespace_is_respected_until_expiry(
        self, store: OperationStore
    ) -> None:
        # A process of another container with this hostname: its pid means nothing here.
        host, process, token, call = dead_owner().split(":")
        pid, _, where = process.partition("@")
        space, _, started = where.rpartition(".")
        elsewhere = f"{host}:{pid}@{space}0.{started}:{token}:{call}"
        store.begin(make_intent(), owner=elsewhere, now=NOW, lease_until=NOW + 60)
        busy = store.claim("op-1", owner=new_owner(), now=NOW + 59, lease_until=NOW + 90)
        assert busy.claim is Claim.BUSY
        taken = store.claim("op-1", owner=new_owner(), now=NOW + 61, lease_until=NOW + 90)
        assert (taken.claim, taken.taken_over, taken.dead_holder) == (Claim.CLAIMED, True, None)

    def test_another_hosts_owner_is_respected_until_expiry(self, store: OperationStore) -> None:
        store.begin(make_intent(), owner="elsewhere:1:abc:1", now=NOW, lease_until=NOW + 60)
        assert (
            store.claim("op-1", owner=new_owner(), now=NOW + 59, lease_until=NOW).claim
            is Claim.BUSY
        )
        assert store.claim("op-1", owner=new_owner(), now=NOW + 61, lease_until=NOW).claim is (
            Claim.CLAIMED
        )

    def test_many_threads_taking_over_one_lease_make_one_owner(self, store: OperationStore) -> None:
        store.begin(make_intent(), owner="elsewhere:1:abc:1", now=NOW, lease_until=NOW + 1)
        barrier = threading.Barrier(16)

        def take() -> Claim:
            owner = new_owner()
            barrier.wait(timeout=10)
            return store.claim("op-1", owner=owner, now=NOW + 2, lease_until=NOW + 60).claim

        with ThreadPoolExecutor(max_workers=16) as pool:
            claims = list(pool.map(lambda _: take(), range(16)))
        assert claims.count(Claim.CLAIMED) == 1
        assert claims.count(Claim.BUSY) == 15

    def test_same_operation_with_another_body_is_refused(self, store: OperationStore) -> None:
        store.begin(make_intent(), owner=new_owner(), now=NOW, lease_until=NOW + 60)
        with pytest.raises(OperationMismatch, match="differs in its body"):
            store.begin(
                make_intent(body=b'{"amount":999}'), owner=new_owner(), now=NOW, lease_until=NOW
            )

    def test_a_key_cannot_move_to_another_operation(self, store: OperationStore) -> None:
        store.begin(make_intent("op-1", "key-1"), owner=new_owner(), now=NOW, lease_until=NOW + 60)
        with pytest.raises(OperationMismatch, match="already belongs"):
            store.begin(make_intent("op-2", "key-1"), owner=new_owner(), now=NOW, lease_until=NOW)
        assert store.get("op-2") is None

    def test_a_given_key_never_replaces_a_recorded_one(self, store: OperationStore) -> None:
        store.begin(make_intent("op-1", "key-1"), owner=new_owner(), now=NOW, lease_until=NOW + 60)
        with pytest.raises(OperationMismatch, match="never replaced"):
            store.begin(make_intent("op-1", "key-2"), owner=new_owner(), now=NOW, lease_until=NOW)
        # A minted key (not given) yields to the recorded one: same operation, same key.
        found = store.begin(
            make_intent("op-1", "fresh", key_given=False),
            owner=new_owner(),
            now=NOW + 61,
            lease_until=NOW + 99,
        )
        assert found.record.key == "key-1"

    @pytest.fixture(params=["finish", "finish_brief"])
    def late_write(self, request: pytest.FixtureRequest, store: Any) -> LateWrite:
        """The final write of a caller whose lease was taken over (`Takeover.first`),
        with the record it last knew: `finish`, or `finish_brief`, the write a client
        ends a call with where the backend declares one (`declared_brief`; where it
        does not, a client asks `finish`, and so does this). Every rule of a late write
        is checked by both."""
        write = store.finish
        if request.param == "finish_brief":
            write = declared_brief(store) or store.finish

        def late(
            taken: Takeover,
            *,
            state: State,
            progress: Progress,
            response: StoredResponse | None = None,
        ) -> OperationRecord:
            told = write(
                taken.operation_id,
                owner=taken.first,
                state=state,
                progress=progress,
                response=response,
                known=taken.known,
            )
            return as_record(told)

        return late

    def test_giving_up_only_counts_while_holding_the_lease(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        taken = taken_over(store)
        record = late_write(taken, state=State.NOT_SENT, progress=progress())
        assert record.lease_lost  # told so by the stored record
        assert record.state is State.IN_FLIGHT
        assert record.lease_owner == taken.second
        assert not store.record_attempt(
            "op-1", owner=taken.first, progress=progress(), lease_until=NOW
        )
        assert store.record_attempt(
            "op-1", owner=taken.second, progress=progress(3), lease_until=NOW + 90
        )
        after = store.get("op-1")
        assert after is not None
        assert (after.attempts, after.lease_expires) == (3, NOW + 90)

    def test_a_caller_that_lost_its_lease_is_told_so_even_once_the_taker_let_it_go(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # The taker may still hold the lease, or have let it go (unsettled): either way the
        # first caller's write only merges, and the record it gets back says so.
        taken = taken_over(store)
        let_go = store.finish(
            "op-1", owner=taken.second, state=State.NOT_SENT, progress=progress(3, now=NOW + 3)
        )
        assert (let_go.lease_owner, let_go.lease_lost) == (None, False)  # its own write
        late = late_write(taken, state=State.NOT_SENT, progress=progress(1, now=NOW + 4))
        assert late.lease_lost
        assert late.lease_owner is None
        assert (late.state, late.maybe_applied) == (State.INDETERMINATE, True)
        stored = store.get("op-1")
        assert stored is not None
        assert not stored.lease_lost  # not a column: only what a finish gives back

    def test_a_final_answer_is_recorded_whoever_holds_the_lease(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        record = late_write(
            taken_over(store),
            state=State.SUCCEEDED,
            progress=progress(),
            response=StoredResponse.of(201, (), b"{}"),
        )
        assert record.state is State.SUCCEEDED
        assert record.lease_owner is None
        assert record.finished_at == NOW
        # Over a row the caller that took over let go meanwhile (its attempt lost, maybe
        # applied) it lands all the same, and tells that row, not what the caller knew
        # before its lease lapsed. (A success: a refusal judged without knowing the
        # operation may have been applied is not written at all, see
        # `test_a_refusal_judged_blind_is_not_written_over_a_maybe_applied_one`.)
        let_go = taken_over(store, "op-2")
        store.finish("op-2", owner=let_go.second, state=State.INDETERMINATE, progress=progress())
        paid = late_write(
            let_go,
            state=State.SUCCEEDED,
            progress=progress(now=NOW + 3, applied=False),
            response=StoredResponse.of(201, (), b"{}"),
        )
        stored = store.get("op-2")
        assert stored is not None
        assert (stored.state, stored.maybe_applied) == (State.SUCCEEDED, True)
        assert (paid.state, paid.maybe_applied) == (stored.state, stored.maybe_applied)

    def test_a_brief_finish_writes_and_tells_what_finish_would(self, store: OperationStore) -> None:
        # Optional (`idemclient.store.BriefFinish`): a backend may offer `finish_brief`
        # beside `finish`, and declare it the brief form of its `finish`
        # (`finish_brief_of = finish`); the client then asks it for a call's final
        # answer. It writes what `finish` writes; landed as asked, it tells the
        # operation as an outcome reads it and makes the record, the row, only when
        # asked (`record()`); not landed, it answers the stored record, `lease_lost`, as
        # `finish` does (the rules of a write that did not land, or landed over a row
        # another caller took over, are checked for both writes: `late_write`).
        brief = declared_brief(store)
        if brief is None:
            return  # nothing more to hold a backend that declares none to
        owner = new_owner()
        begun = store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        told = brief(
            "op-1",
            owner=owner,
            state=State.SUCCEEDED,
            progress=progress(2),
            response=StoredResponse.of(201, (), b"{}"),
            known=begun.record,
        )
        stored = store.get("op-1")
        assert stored is not None
        # The record, made when asked (`Finished.record()`); or the row itself, read back
        # by a backend for which that costs nothing more (`finish`'s record).
        assert as_record(told) == stored
        assert (told.state, told.attempts, told.maybe_applied) == (State.SUCCEEDED, 2, True)
        assert (told.key, told.response, told.lease_lost) == (stored.key, stored.response, False)

    def test_a_refusal_judged_blind_is_not_written_over_a_maybe_applied_one(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # A caller paused past its lease read the row before the one that took over
        # noted an attempt that may have been applied; its refusal (a 403 in front of
        # the server), judged without knowing that, is not written: it is told the
        # stored record, `lease_lost`, and judges again. Knowing it, it is written.
        taken = taken_over(store)
        assert store.record_attempt(
            "op-1", owner=taken.second, progress=progress(1, now=NOW + 3), lease_until=NOW + 60
        )
        refusal = StoredResponse.of(403, (), b'{"title": "Forbidden"}')
        blind = late_write(
            taken,
            state=State.FAILED,
            progress=progress(1, applied=False, now=NOW + 4),
            response=refusal,
        )
        assert (blind.state, blind.maybe_applied, blind.lease_lost) == (State.IN_FLIGHT, True, True)
        stored = store.get("op-1")
        assert stored is not None
        assert (stored.state, stored.lease_owner, stored.response) == (
            State.IN_FLIGHT,
            taken.second,
            None,
        )
        knowing = late_write(
            taken,
            state=State.FAILED,
            progress=progress(1, applied=True, now=NOW + 5),
            response=refusal,
        )
        assert (knowing.state, knowing.lease_lost) == (State.FAILED, False)

    def test_a_final_success_replaces_a_refusal_stored_first(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # A caller paused past its lease; the one that took over was refused (stored
        # failed); then the first one's own request is answered 2xx: the payment was
        # made, and the success is the operation's answer, written as the caller's own.
        taken = taken_over(store)
        refused = store.finish(
            "op-1",
            owner=taken.second,
            state=State.FAILED,
            progress=dataclasses.replace(progress(2, now=NOW + 3), evidence="HTTP 400 Bad Request"),
            response=StoredResponse.of(400, (), b'{"error": "bad request"}'),
        )
        assert (refused.state, refused.lease_lost) == (State.FAILED, False)
        record = late_write(
            taken,
            state=State.SUCCEEDED,
            progress=progress(1, applied=True, now=NOW + 4),
            response=StoredResponse.of(201, (), b'{"id": "pay_1"}'),
        )
        assert (record.state, record.lease_lost, record.lease_owner) == (
            State.SUCCEEDED,
            False,
            None,
        )
        stored = store.get("op-1")
        assert stored is not None
        assert (stored.state, stored.finished_at, stored.maybe_applied) == (
            State.SUCCEEDED,
            NOW + 4,
            True,
        )
        assert stored.response is not None
        assert (stored.response.status_code, stored.response.body) == (201, b'{"id": "pay_1"}')
        # Nothing recorded is dropped: the refusal stays in the evidence, after the
        # success's own (another caller was told it), and the attempts are the most seen.
        assert stored.evidence.startswith("HTTP 201")
        assert stored.evidence.endswith(
            "another caller stored first, and was told: HTTP 400 Bad Request"
        )
        assert stored.attempts == 2

    def test_an_attempt_sent_after_a_refusal_stored_first_unsettles_it(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # The caller whose lease was taken over stops unsettled, its own attempt maybe
        # applied. The refusal the caller that took over stored was stored while the
        # operation may have been applied (the takeover from a sender says so): it covers
        # no other caller's attempt, whether that one was sent (or learnt maybe applied)
        # at or after it, or before (its answer read as lost before, written after). A
        # caller that sent nothing leaves it as it is.
        for sent, unsettled in ((NOW + 4, True), (NOW + 3, True), (NOW + 1, True), (None, False)):
            taken = taken_over(store, f"op-sent-{'none' if sent is None else f'{sent - NOW:.0f}'}")
            taken.second_answers(store, State.FAILED, 400)
            stored = taken.first_stops_unsettled(store, late_write, sent=sent, now=NOW + 5)
            if unsettled:
                assert (stored.state, stored.finished_at, stored.maybe_applied) == UNSETTLED, sent
                assert "no longer settled" in stored.evidence
            else:
                assert (stored.state, stored.finished_at) == (State.FAILED, NOW + 3), sent

    def test_a_look_up_s_refusal_settles_the_attempts_sent_before_it(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # A look-up that found nothing, the refusal the operation keeps its answer (which
        # clears "maybe applied"), covers the attempts sent before it was stored: a caller
        # whose lease was taken over and whose attempt was sent before leaves it failed;
        # one sent at or after it, which it could not know of, unsettles it.
        for sent, unsettled in ((NOW + 6, True), (NOW + 5, True), (NOW + 1, False)):
            taken = taken_over(store, f"op-looked-up-{sent - NOW:.0f}")
            # read a refusal no attempt explains: kept, unsettled
            taken.second_answers(store, State.INDETERMINATE, 400)
            third = new_owner()
            store.claim(
                taken.operation_id, owner=third, now=NOW + 4, lease_until=NOW + 60, look_up=True
            )
            found = store.settle(
                taken.operation_id,
                owner=third,
                applied=False,
                evidence="found nothing: the refusal is its answer",
                now=NOW + 5,
                state=State.FAILED,
            )
            assert (found.state, found.maybe_applied) == (State.FAILED, False)
            stored = taken.first_stops_unsettled(store, late_write, sent=sent, now=NOW + 7)
            if unsettled:
                assert (stored.state, stored.finished_at, stored.maybe_applied) == UNSETTLED, sent
            else:
                assert (stored.state, stored.finished_at) == (State.FAILED, NOW + 5), sent

    def test_a_final_answer_never_replaces_a_success_nor_a_refusal_a_second_refusal(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        for first_answer, late_answer in (
            ((State.SUCCEEDED, 201), (State.SUCCEEDED, 200)),
            ((State.SUCCEEDED, 201), (State.FAILED, 400)),
            ((State.FAILED, 400), (State.FAILED, 402)),
        ):
            operation_id = f"op-{first_answer[1]}-{late_answer[1]}-{late_answer[0].value}"
            taken = taken_over(store, operation_id)
            taken.second_answers(store, *first_answer)
            late = late_write(
                taken,
                state=late_answer[0],
                progress=progress(now=NOW + 4),
                response=StoredResponse.of(late_answer[1], (), b"{}"),
            )
            assert late.lease_lost, (first_answer, late_answer)
            assert late.state is first_answer[0]
            assert late.response is not None
            assert late.response.status_code == first_answer[1]
            stored = store.get(operation_id)
            assert stored is not None
            assert (stored.state, stored.finished_at) == (first_answer[0], NOW + 3)

    def test_a_final_success_never_replaces_a_payment_a_look_up_found_declined(
        self, store: OperationStore, late_write: LateWrite
    ) -> None:
        # Failed by a look-up that found the payment and its status, declined: the
        # server's own later word on the payment, which a 2xx to the request that made
        # it (accepted, then declined) does not undo.
        taken = taken_over(store, look_up=True)
        declined = StoredResponse.of(200, (), b'{"data": [{"status": "declined"}]}')
        store.settle(
            "op-1",
            owner=taken.second,
            applied=True,
            evidence="found, declined",
            now=NOW + 3,
            response=declined,
            state=State.FAILED,
        )
        late = late_write(
            taken,
            state=State.SUCCEEDED,
            progress=progress(applied=True, now=NOW + 4),
            response=StoredResponse.of(201, (), b"{}"),
        )
        assert late.lease_lost
        assert (late.state, late.evidence) == (State.FAILED, "found, declined")
        stored = store.get("op-1")
        assert stored is not None
        assert stored.state is State.FAILED
        assert stored.response is not None
        assert stored.response.status_code == 200

    def test_maybe_applied_never_goes_back(self, store: OperationStore) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.record_attempt("op-1", owner=owner, progress=progress(applied=True), lease_until=NOW)
        record = store.finish(
            "op-1", owner=owner, state=State.NOT_SENT, progress=progress(applied=False)
        )
        assert record.maybe_applied is True

    def test_the_servers_wait_is_kept_until_a_final_answer(self, store: OperationStore) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        waiting = Progress(
            attempts=1, maybe_applied=False, evidence="HTTP 503", not_before=NOW + 30.5, now=NOW
        )
        left = store.finish("op-1", owner=owner, state=State.NOT_SENT, progress=waiting)
        assert left.not_before == NOW + 30.5
        assert left.finished_at is None
        taken = store.claim("op-1", owner=owner, now=NOW + 31, lease_until=NOW + 90)
        assert taken.claim is Claim.CLAIMED
        succeed(store, "op-1", owner)
        done = store.get("op-1")
        assert done is not None
        assert done.not_before is None

    def test_the_store_keeps_the_latest_time_it_has_seen(self, store: OperationStore) -> None:
        assert store.advance_clock(now=NOW) == 0.0  # a new store has seen nothing
        assert store.advance_clock(now=NOW - 3600) == NOW  # a clock that went back
        assert store.advance_clock(now=NOW + 10) == NOW  # never lowered by the earlier reading
        owner = new_owner()
        store.begin(make_intent("late", "k-late"), owner=owner, now=NOW + 500, lease_until=NOW)
        assert store.advance_clock(now=NOW) == NOW + 500  # rows count too

    def test_a_send_recorded_after_the_intent_counts_in_the_latest_time_seen(
        self, store: OperationStore
    ) -> None:
        # An unfinished operation may be sent long after its intent was written (a retry
        # after the server's wait, a resume, a takeover): that send is a time the store
        # has seen. A clock set back below it while nothing ran is seen at the next
        # start, so that the operation's age (which may be past the server's key
        # retention) is never trusted and it is looked up, not sent again.
        owner = new_owner()
        store.advance_clock(now=NOW)
        store.begin(make_intent("retried", "k-1"), owner=owner, now=NOW, lease_until=NOW + 600)
        retried = dataclasses.replace(progress(now=NOW + 120), sent_at=NOW + 120)
        assert store.record_attempt("retried", owner=owner, progress=retried, lease_until=NOW)
        assert store.advance_clock(now=NOW + 60) == NOW + 120
        store.begin(make_intent("stopped", "k-2"), owner=owner, now=NOW, lease_until=NOW + 600)
        stopped = dataclasses.replace(progress(now=NOW + 300), sent_at=NOW + 300)
        store.finish("stopped", owner=owner, state=State.INDETERMINATE, progress=stopped)
        assert store.advance_clock(now=NOW + 60) == NOW + 300
        # Kept once seen, the step is not seen again: the sends come back to the clock.
        store.clock_went_back(step=240.0, now=NOW + 60)
        assert store.advance_clock(now=NOW + 60) == NOW + 60

    def test_sent_at_keeps_the_latest_send_that_may_have_been_applied(
        self, store: OperationStore
    ) -> None:
        # The look-up's "nothing found" waits for the server to have finished the last
        # attempt that may have been applied: the store keeps when that was sent.
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        assert store.get("op-1").sent_at is None  # type: ignore[union-attr]
        sent = dataclasses.replace(progress(now=NOW + 5), sent_at=NOW + 5)
        assert store.record_attempt("op-1", owner=owner, progress=sent, lease_until=NOW + 60)
        assert store.get("op-1").sent_at == NOW + 5  # type: ignore[union-attr]
        # A later write that sent nothing (None), or reports an earlier send, lowers nothing.
        store.record_attempt(
            "op-1", owner=owner, progress=progress(now=NOW + 6), lease_until=NOW + 60
        )
        early = dataclasses.replace(progress(now=NOW + 7), sent_at=NOW + 1)
        record = store.finish("op-1", owner=owner, state=State.INDETERMINATE, progress=early)
        assert record.sent_at == NOW + 5
        assert store.get("op-1").sent_at == NOW + 5  # type: ignore[union-attr]
        # An owner that took it and ran out of its lease in flight may have sent until then.
        slow = new_owner()
        store.claim("op-1", owner=slow, now=NOW + 100, lease_until=NOW + 160)
        taken = store.claim("op-1", owner=new_owner(), now=NOW + 200, lease_until=NOW + 260)
        assert taken.claim is Claim.CLAIMED
        assert taken.record.sent_at == NOW + 160
        # A clock that went back brings a send time in its future back to now, and leaves
        # one in its past as it is: which clock wrote it is not known, and a send made to
        # look older than it was lets a look-up's "none" count too early.
        store.clock_went_back(step=60.0, now=NOW + 200)
        assert store.get("op-1").sent_at == NOW + 160  # type: ignore[union-attr]
        store.clock_went_back(step=60.0, now=NOW + 120)
        assert store.get("op-1").sent_at == NOW + 120  # type: ignore[union-attr]

    def test_the_servers_time_is_kept_beside_the_first_send_and_the_latest(
        self, store: OperationStore
    ) -> None:
        # The server's time (by its Date) as an operation is recorded, and at each send
        # that may have been applied: its age and in-flight hold are then measured on the
        # server's clock alone too, whatever the writing host's clock said.
        owner = new_owner()
        intent = dataclasses.replace(make_intent(), server_created_at=NOW - 2 * DAY)
        begun = store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
        assert begun.record.server_created_at == NOW - 2 * DAY
        assert store.get("op-1").server_created_at == NOW - 2 * DAY  # type: ignore[union-attr]

        def sent(now: float, server: float | None) -> Progress:
            return dataclasses.replace(progress(now=now), sent_at=now, server_sent_at=server)

        store.record_attempt(
            "op-1", owner=owner, progress=sent(NOW + 5, NOW + 9), lease_until=NOW + 60
        )
        assert store.get("op-1").server_sent_at == NOW + 9  # type: ignore[union-attr]
        # A write with no send keeps it; an earlier one lowers nothing (as sent_at).
        store.record_attempt(
            "op-1", owner=owner, progress=progress(now=NOW + 6), lease_until=NOW + 60
        )
        record = store.finish(
            "op-1", owner=owner, state=State.INDETERMINATE, progress=sent(NOW + 7, NOW + 8)
        )
        assert record.server_sent_at == NOW + 9
        assert store.get("op-1").server_sent_at == NOW + 9  # type: ignore[union-attr]
        # A send whose server time its writer does not know: the one kept belongs to an
        # earlier send, and is dropped (the hold is then judged from sent_at alone).
        again = new_owner()
        store.claim("op-1", owner=again, now=NOW + 10, lease_until=NOW + 70)
        record = store.finish(
            "op-1", owner=again, state=State.INDETERMINATE, progress=sent(NOW + 11, None)
        )
        assert (record.sent_at, record.server_sent_at) == (NOW + 11, None)
        assert store.get("op-1").server_sent_at is None  # type: ignore[union-attr]
        assert store.get("op-1").server_created_at == NOW - 2 * DAY  # type: ignore[union-attr]
        # An owner in flight taken over may have sent until now: the taker's server time
        # now goes beside it (none, if it knows none).
        slow = new_owner()
        store.claim("op-1", owner=slow, now=NOW + 100, lease_until=NOW + 160)
        server_now = ServerTime(NOW + 500, NOW + 501)
        taken = store.claim(
            "op-1", owner=new_owner(), now=NOW + 200, lease_until=NOW + 260, server_time=server_now
        )
        assert (taken.record.sent_at, taken.record.server_sent_at) == (NOW + 160, NOW + 501)
        assert taken.record.server_created_at == NOW - 2 * DAY  # never moved by a claim

    def test_an_unexplained_replay_is_kept_for_good(self, store: OperationStore) -> None:
        # A replay-looking answer no attempt of ours explains: once seen, no later write
        # (an attempt, the end of a call, a lost lease's merge, a final answer) forgets it.
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        assert not store.get("op-1").replay_unexplained  # type: ignore[union-attr]
        doubted = dataclasses.replace(progress(now=NOW + 1), replay_unexplained=True)
        assert store.record_attempt("op-1", owner=owner, progress=doubted, lease_until=NOW + 60)
        assert store.get("op-1").replay_unexplained  # type: ignore[union-attr]
        store.record_attempt(
            "op-1", owner=owner, progress=progress(now=NOW + 2), lease_until=NOW + 60
        )
        record = store.finish(
            "op-1", owner=owner, state=State.INDETERMINATE, progress=progress(now=NOW + 3)
        )
        assert record.replay_unexplained
        assert store.get("op-1").replay_unexplained  # type: ignore[union-attr]
        # Seen by a call whose lease was taken over: merged into the row all the same.
        other = make_intent("op-2", "k-2")
        first, second = new_owner(), new_owner()
        store.begin(other, owner=first, now=NOW, lease_until=NOW + 60)
        store.claim("op-2", owner=second, now=NOW + 61, lease_until=NOW + 120)
        late = dataclasses.replace(progress(now=NOW + 90), replay_unexplained=True)
        merged = store.finish("op-2", owner=first, state=State.INDETERMINATE, progress=late)
        assert merged.lease_owner == second
        assert merged.replay_unexplained
        # Settled by a final answer: still there (the row says what was seen).
        store.finish(
            "op-2",
            owner=second,
            state=State.SUCCEEDED,
            progress=progress(now=NOW + 100),
            response=StoredResponse.of(201, (), b"{}"),
        )
        assert store.get("op-2").replay_unexplained  # type: ignore[union-attr]

    def test_an_owner_dead_in_flight_may_have_sent_until_it_was_found_dead(
        self, store: OperationStore
    ) -> None:
        gone = new_owner()
        release_owner(gone)  # this process's call ended: its owner is dead, its lease not over
        store.begin(make_intent(), owner=gone, now=NOW, lease_until=NOW + 600)
        taken = store.claim("op-1", owner=new_owner(), now=NOW + 30, lease_until=NOW + 90)
        assert taken.claim is Claim.CLAIMED
        assert (taken.record.sent_at, taken.record.maybe_applied) == (NOW + 30, True)

    def test_a_look_ups_lease_keeps_the_state_and_its_takeover_counts_no_send(
        self, store: OperationStore
    ) -> None:
        # A reconciler leases the row for its look-up and is killed: the next caller takes
        # the lease over. The look-up sent nothing, so nothing of a send is counted.
        _not_sent(store)
        looker = new_owner()
        held = store.claim("op-1", owner=looker, now=NOW + 10, lease_until=NOW + 20, look_up=True)
        assert held.claim is Claim.CLAIMED
        record = held.record
        assert (record.state, record.lease_owner, record.lease_look_up) == (
            State.NOT_SENT,
            looker,
            True,
        )
        assert store.get("op-1") == record
        # While it holds the row, nobody sends it, or looks it up beside it.
        assert store.claim("op-1", owner=new_owner(), now=NOW + 15, lease_until=NOW + 75).claim is (
            Claim.BUSY
        )
        assert store.begin(
            make_intent(), owner=new_owner(), now=NOW + 15, lease_until=NOW + 75
        ).claim is (Claim.BUSY)
        again = store.claim(
            "op-1", owner=new_owner(), now=NOW + 15, lease_until=NOW + 25, look_up=True
        )
        assert again.claim is Claim.BUSY
        # Killed: its lease runs out, and a sender takes it over, as from nobody in flight.
        sender = new_owner()
        taken = store.claim("op-1", owner=sender, now=NOW + 30, lease_until=NOW + 90)
        assert (taken.claim, taken.taken_over) == (Claim.CLAIMED, False)
        record = taken.record
        assert (record.state, record.lease_look_up, record.lease_owner) == (
            State.IN_FLIGHT,
            False,
            sender,
        )
        assert (record.maybe_applied, record.sent_at) == (False, None)

    def test_a_dead_look_up_leaves_the_send_time_and_maybe_applied_as_they_were(
        self,
        store: OperationStore,
    ) -> None:
        _not_sent(store, sent_at=NOW + 1)
        # Killed look-ups, one after another, each taking the row from the one before.
        for n in range(3):
            at = NOW + 100 + 20 * n
            taken = store.claim(
                "op-1", owner=new_owner(), now=at, lease_until=at + 10, look_up=True
            )
            assert (taken.claim, taken.taken_over) == (Claim.CLAIMED, False)
            record = taken.record
            assert (record.state, record.maybe_applied, record.sent_at) == (
                State.INDETERMINATE,
                True,
                NOW + 1,
            )
        sent = store.claim("op-1", owner=new_owner(), now=NOW + 500, lease_until=NOW + 560)
        assert (sent.record.maybe_applied, sent.record.sent_at) == (True, NOW + 1)

    def test_a_look_up_that_takes_a_dead_senders_lease_keeps_that_it_may_have_sent(
        self,
        store: OperationStore,
    ) -> None:
        store.begin(make_intent(), owner=new_owner(), now=NOW, lease_until=NOW + 60)
        looker = new_owner()
        taken = store.claim("op-1", owner=looker, now=NOW + 61, lease_until=NOW + 71, look_up=True)
        assert (taken.claim, taken.taken_over) == (Claim.CLAIMED, True)
        record = taken.record
        # Not in flight (the look-up sends nothing), maybe applied (the sender may have).
        assert (record.state, record.maybe_applied, record.sent_at, record.lease_look_up) == (
            State.INDETERMINATE,
            True,
            NOW + 60,
            True,
        )
        # Given back: the mark goes with the lease.
        back = store.finish(
            "op-1", owner=looker, state=State.INDETERMINATE, progress=progress(now=NOW + 65)
        )
        assert (back.lease_owner, back.lease_look_up) == (None, False)
        assert store.get("op-1").lease_look_up is False  # type: ignore[union-attr]

    def test_a_settled_look_up_leaves_no_mark(self, store: OperationStore) -> None:
        _not_sent(store)
        looker = new_owner()
        store.claim("op-1", owner=looker, now=NOW + 10, lease_until=NOW + 20, look_up=True)
        record = store.settle("op-1", owner=looker, applied=False, evidence="none", now=NOW + 11)
        assert (record.state, record.lease_owner, record.lease_look_up) == (
            State.NOT_SENT,
            None,
            False,
        )

    def test_a_senders_lease_is_not_taken_by_a_look_up(self, store: OperationStore) -> None:
        store.begin(make_intent(), owner=new_owner(), now=NOW, lease_until=NOW + 60)
        busy = store.claim(
            "op-1", owner=new_owner(), now=NOW + 5, lease_until=NOW + 15, look_up=True
        )
        assert busy.claim is Claim.BUSY
        assert (busy.record.state, busy.record.lease_look_up) == (State.IN_FLIGHT, False)

    def test_a_lost_lease_still_leaves_its_send_time(self, store: OperationStore) -> None:
        first, second = new_owner(), new_owner()
        store.begin(make_intent(), owner=first, now=NOW, lease_until=NOW + 60)
        store.claim("op-1", owner=second, now=NOW + 61, lease_until=NOW + 120)  # first expired
        late = dataclasses.replace(progress(now=NOW + 90), sent_at=NOW + 90)
        record = store.finish("op-1", owner=first, state=State.INDETERMINATE, progress=late)
        assert record.lease_owner == second  # not written as asked: merged
        assert record.sent_at == NOW + 90

    def test_a_closed_store_says_so(self, store: OperationStore) -> None:
        store.close()
        with pytest.raises(StoreUnavailable, match="closed"):
            store.get("x")

    def test_response_bodies_over_the_cap_keep_only_size_and_hash(self) -> None:
        store = self._open(max_stored_body=10)
        for op, body in (("small", b"0123456789"), ("large", b"0123456789A")):
            owner = new_owner()
            store.begin(make_intent(op, f"key-{op}"), owner=owner, now=NOW, lease_until=NOW + 9)
            record = store.finish(
                op,
                owner=owner,
                state=State.SUCCEEDED,
                progress=progress(),
                response=StoredResponse.of(201, (), body),
            )
            assert record.response is not None
            assert record.response.body_size == len(body)
            assert record.response.body_sha256 == hashlib.sha256(body).hexdigest()
            assert record.response.body == (body if op == "small" else b"")
            assert record.response.body_omitted is (op == "large")

    def test_a_lookup_that_finds_the_payment_settles_it_succeeded(
        self, store: OperationStore
    ) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish("op-1", owner=owner, state=State.INDETERMINATE, progress=progress())
        store.claim("op-1", owner=owner, now=NOW + 1, lease_until=NOW + 60)
        found = StoredResponse.of(200, (("Set-Cookie", "sid=secret"),), b'{"data": [1]}')
        record = store.settle(
            "op-1", owner=owner, applied=True, evidence="found", now=NOW + 2, response=found
        )
        assert record.state is State.SUCCEEDED
        assert record.finished_at == NOW + 2
        assert record.lease_owner is None
        assert record.response is not None
        assert record.response.body == b'{"data": [1]}'
        assert record.response.headers == ()  # redacted like any response

    def test_a_lookup_that_finds_nothing_clears_maybe_applied(self, store: OperationStore) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish(
            "op-1", owner=owner, state=State.INDETERMINATE, progress=progress(applied=True)
        )
        store.claim("op-1", owner=owner, now=NOW + 1, lease_until=NOW + 60)
        record = store.settle("op-1", owner=owner, applied=False, evidence="not found", now=NOW + 2)
        assert record.state is State.NOT_SENT
        assert record.maybe_applied is False
        assert record.finished_at is None
        assert record.evidence == "not found"

    def test_only_the_lease_holder_may_settle(self, store: OperationStore) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        record = store.settle("op-1", owner=new_owner(), applied=False, evidence="x", now=NOW)
        assert record.state is State.IN_FLIGHT
        assert record.maybe_applied is False
        assert record.lease_owner == owner

    def test_a_lookup_that_finds_a_declined_payment_settles_it_failed(
        self, store: OperationStore
    ) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        found = StoredResponse.of(200, (), b'{"data": [{"status": "declined"}]}')
        record = store.settle(
            "op-1",
            owner=owner,
            applied=True,
            evidence="found, declined",
            now=NOW + 2,
            response=found,
            state=State.FAILED,
        )
        assert (record.state, record.finished_at) == (State.FAILED, NOW + 2)
        assert record.response is not None
        assert record.response.status_code == 200
        with pytest.raises(ValueError, match="final"):
            store.settle(
                "op-1", owner=owner, applied=True, evidence="", now=NOW, state=State.PENDING
            )

    def test_an_unsettled_operation_keeps_its_answer_until_a_final_one(
        self, store: OperationStore
    ) -> None:
        owner = new_owner()
        _unexplained(store, owner)
        kept = store.get("op-1")
        assert kept is not None
        assert (kept.state, kept.finished_at) == (State.INDETERMINATE, None)
        assert kept.response is not None
        assert (kept.response.status_code, kept.response.body) == (409, b'{"detail": "exists"}')
        # Taken and given back with no answer (a look-up too early to believe): still kept.
        store.claim("op-1", owner=owner, now=NOW + 1, lease_until=NOW + 60, look_up=True)
        again = store.finish("op-1", owner=owner, state=State.INDETERMINATE, progress=progress())
        assert again.response is not None
        assert again.response.status_code == 409
        # A final answer replaces it.
        store.claim("op-1", owner=owner, now=NOW + 2, lease_until=NOW + 60)
        succeed(store, "op-1", owner)
        done = store.get("op-1")
        assert done is not None
        assert done.response is not None
        assert done.response.status_code == 201

    def test_a_refused_operation_is_settled_failed_with_the_answer_it_keeps(
        self, store: OperationStore
    ) -> None:
        owner = new_owner()
        _unexplained(store, owner)
        store.claim("op-1", owner=owner, now=NOW + 1, lease_until=NOW + 60, look_up=True)
        record = store.settle(
            "op-1", owner=owner, applied=False, evidence="refused", now=NOW + 2, state=State.FAILED
        )
        assert (record.state, record.finished_at, record.maybe_applied) == (
            State.FAILED,
            NOW + 2,
            False,
        )
        assert (record.lease_owner, record.evidence) == (None, "refused")
        assert record.response is not None
        assert (record.response.status_code, record.response.body) == (409, b'{"detail": "exists"}')
        assert store.get("op-1") == record
        assert [r.operation_id for r in store.unfinished()] == []

    def test_an_operation_that_keeps_no_answer_is_never_settled_refused(
        self, store: OperationStore
    ) -> None:
        # A finished operation always has an answer: one with none is left as it was.
        owner = new_owner()
        _unexplained(store, owner, answer=False)
        store.claim("op-1", owner=owner, now=NOW + 1, lease_until=NOW + 60, look_up=True)
        record = store.settle(
            "op-1", owner=owner, applied=False, evidence="refused", now=NOW + 2, state=State.FAILED
        )
        assert (record.state, record.finished_at, record.maybe_applied) == (
            State.INDETERMINATE,
            None,
            True,
        )
        assert record.lease_owner == owner


class StoreContract(OperationStoreContract):
    """Everything a store offers (`AdminStore`): the client's part, and what the batch
    command and the operator's commands rely on."""

    def test_register_records_all_rows_in_one_transaction(self, store: AdminStore) -> None:
        intents = [make_intent(f"op-{n}", f"key-{n}") for n in range(50)]
        assert store.register(intents, now=NOW) == 50
        assert store.register(intents, now=NOW) == 0  # the same file again: nothing new
        assert store.counts()[State.PENDING] == 50
        changed = [
            *intents[:10],
            make_intent("op-10", "key-10", body=b"{}"),
            make_intent("op-new", "key-new"),
            make_intent("op-other", "key-11"),
        ]
        with pytest.raises(OperationMismatch) as caught:
            store.register(changed, now=NOW)
        assert [operation for operation, _ in caught.value.conflicts] == ["op-10", "op-other"]
        assert store.get("op-new") is None  # nothing of the failed registration was kept
        assert store.counts()[State.PENDING] == 50

    def test_a_registration_of_many_chunks_is_one_transaction(self, store: AdminStore) -> None:
        many = 12_000  # several of the store's chunks, streamed to it
        intents = (make_intent(f"op-{n}", f"key-{n}") for n in range(many))
        assert store.register(intents, now=NOW) == many
        changed = (
            make_intent("op-11999", "key-11999", body=b"{}")
            if n == many
            else make_intent(f"new-{n}", f"new-key-{n}")
            for n in range(many + 1)
        )
        with pytest.raises(OperationMismatch) as caught:
            store.register(changed, now=NOW)  # the last of them conflicts
        assert [operation for operation, _ in caught.value.conflicts] == ["op-11999"]
        assert store.get("new-0") is None  # none of the earlier chunks was kept
        assert store.counts()[State.PENDING] == many

    def test_every_reference_is_read_once_a_page_at_a_time(self, store: AdminStore) -> None:
        references = ["b/E1", "E1", "a/E2", "E1", "a/E10", "c"]  # one held twice
        store.register(
            [
                dataclasses.replace(make_intent(f"op-{n}", f"key-{n}"), reference=reference)
                for n, reference in enumerate(references)
            ]
            + [dataclasses.replace(make_intent("none", "key-none"), reference=None)],
            now=NOW,
        )
        read: list[tuple[str, str]] = []
        page = store.references(limit=2)
        while page:
            assert len(page) <= 2
            read += page
            page = store.references(after=page[-1], limit=2)
        # Each once, whatever order the database's collation gives them.
        assert len(read) == len(set(read))
        assert sorted(read) == sorted(
            (reference, f"op-{n}") for n, reference in enumerate(references)
        )

    def test_registered_operations_keep_their_order_and_content(self, store: AdminStore) -> None:
        intents = [make_intent(f"op-{n:02}", f"key-{n}", body=b"%d" % n) for n in (3, 1, 2)]
        store.register(intents, now=NOW)
        records = store.unfinished()
        assert [r.operation_id for r in records] == ["op-03", "op-01", "op-02"]  # as recorded
        assert [r.body for r in records] == [b"3", b"1", b"2"]
        assert all(r.state is State.PENDING and r.lease_owner is None for r in records)
        assert records[0].headers == (("content-type", "application/json"),)
        assert records[0].reference == "ref-1"

    def test_operations_made_at_one_time_are_listed_as_recorded(self, store: AdminStore) -> None:
        # Under a ManualClock, or a batch recorded at once, many operations share a
        # created_at: listed (`ops list`, resume's order) as they were recorded, every time.
        owner = new_owner()
        names = [f"op-{n}" for n in (5, 0, 9, 3, 7, 1)]
        for name in names:
            store.begin(make_intent(name, f"key-{name}"), owner=owner, now=NOW, lease_until=NOW)
        for name in names[::2]:
            succeed(store, name, owner)
        assert [r.operation_id for r in store.operations()] == names
        assert [r.operation_id for r in store.operations(states=[State.SUCCEEDED])] == names[::2]
        assert [r.operation_id for r in store.unfinished()] == names[1::2]

    def test_unfinished_lists_oldest_first_and_skips_finished(self, store: AdminStore) -> None:
        owner = new_owner()
        for n in range(3):
            store.begin(
                make_intent(f"op-{n}", f"key-{n}"), owner=owner, now=NOW + n, lease_until=NOW
            )
        succeed(store, "op-1", owner, status=400)
        assert [r.operation_id for r in store.unfinished()] == ["op-0", "op-2"]
        assert [r.operation_id for r in store.unfinished(limit=1)] == ["op-0"]
        assert [r.operation_id for r in store.operations(states=[State.FAILED])] == ["op-1"]
        assert [r.operation_id for r in store.operations(limit=2)] == ["op-0", "op-1"]
        assert store.get_by_key("key-2") is not None
        assert store.counts()[State.IN_FLIGHT] == 2

    def test_operations_and_counts_by_the_prefixes_of_their_id_and_reference(
        self, store: AdminStore
    ) -> None:
        owner = new_owner()
        made = {
            "batch/payout/2026-11/E1": "2026-11/E1",
            "batch/payout/2026-11/E2": "2026-11/E2",
            "batch/payout/2026-110/E1": "2026-110/E1",
            "batch/payout/2026-12/É1": "2026-12/É1",  # counted in characters, not bytes
            "order-1": "2026-11/E1",  # not the batch's
            "order-2": None,
        }
        for n, (name, reference) in enumerate(made.items()):
            intent = dataclasses.replace(make_intent(name, f"key-{n}"), reference=reference)
            store.begin(intent, owner=owner, now=NOW + n, lease_until=NOW)
        succeed(store, "batch/payout/2026-11/E2", owner)

        def listed(id_prefix: str = "", reference_prefix: str = "") -> list[str]:
            found = store.operations(id_prefix=id_prefix, reference_prefix=reference_prefix)
            return [r.operation_id for r in found]

        assert listed() == list(made)
        assert listed(id_prefix="batch/", reference_prefix="2026-11/") == [
            "batch/payout/2026-11/E1",
            "batch/payout/2026-11/E2",
        ]
        assert listed(id_prefix="batch/", reference_prefix="2026-12/É") == [
            "batch/payout/2026-12/É1"
        ]
        assert listed(reference_prefix="2026-11/") == [
            "batch/payout/2026-11/E1",
            "batch/payout/2026-11/E2",
            "order-1",
        ]
        assert [
            r.operation_id
            for r in store.operations(
                states=[State.IN_FLIGHT], id_prefix="batch/", reference_prefix="2026-11/"
            )
        ] == ["batch/payout/2026-11/E1"]
        counts = store.counts(id_prefix="batch/", reference_prefix="2026-11")
        assert (counts[State.IN_FLIGHT], counts[State.SUCCEEDED]) == (2, 1)
        assert sum(store.counts().values()) == len(made)

    def test_a_reaped_operations_end_stays_behind_the_latest_time_seen(self) -> None:
        # The latest time seen reads only what the store's indexes hold (a start costs
        # the same among millions of rows): a reaped operation's end is not read, so
        # reaping raises the store's mark past it. A clock set back below that end is
        # still seen at the next start.
        store = self._open(retention=100)
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW)
        succeed(store, "op-1", owner)
        assert store.reap(now=NOW + 101) == 1
        assert store.advance_clock(now=0.0) >= NOW

    def test_reaping_drops_bodies_and_keeps_every_operation(self) -> None:
        store = self._open(retention=100)
        owner = new_owner()
        for n, state in enumerate([State.SUCCEEDED, State.FAILED, State.INDETERMINATE]):
            store.begin(make_intent(f"op-{n}", f"key-{n}"), owner=owner, now=NOW, lease_until=NOW)
            store.finish(
                f"op-{n}",
                owner=owner,
                state=state,
                progress=progress(),
                response=StoredResponse.of(200, (), b'{"id": "pay"}') if state.finished else None,
            )
        assert store.reap(now=NOW + 50) == 0  # within retention
        assert store.reap(now=NOW + 101) == 2
        assert store.reap(now=NOW + 102) == 0  # nothing is reaped twice
        records = {r.operation_id: r for r in store.operations()}
        assert set(records) == {"op-0", "op-1", "op-2"}  # an operation id is never forgotten
        for n, state in enumerate([State.SUCCEEDED, State.FAILED]):
            reaped = records[f"op-{n}"]
            assert (reaped.key, reaped.state, reaped.body) == (f"key-{n}", state, b"")
            assert reaped.response is not None
            assert reaped.response.status_code == 200
            assert reaped.response.body_omitted  # kept: its size and sha256, flagged
            assert reaped.response.body_size == len(b'{"id": "pay"}')
        assert records["op-2"].body != b""  # unfinished: untouched

    def test_a_registered_operation_takes_the_servers_time_at_its_first_claim(
        self, store: AdminStore
    ) -> None:
        # Registered (a batch) while the server's time was not known: the first claim for
        # a send comes before any send, so its server time bounds the first send's.
        store.register([make_intent()], now=NOW)
        assert store.get("op-1").server_created_at is None  # type: ignore[union-attr]
        owner = new_owner()
        first = store.claim(
            "op-1",
            owner=owner,
            now=NOW + 5,
            lease_until=NOW + 65,
            server_time=ServerTime(NOW, NOW + 1),
        )
        assert first.record.server_created_at == NOW
        store.finish("op-1", owner=owner, state=State.INDETERMINATE, progress=progress(now=NOW + 6))
        # Claimed again after a send: a later time says nothing of the first send.
        later = store.claim(
            "op-1",
            owner=new_owner(),
            now=NOW + 100,
            lease_until=NOW + 160,
            server_time=ServerTime(NOW + 100, NOW + 101),
        )
        assert later.record.server_created_at == NOW
        # ... and one registered with it known keeps that.
        store.register(
            [dataclasses.replace(make_intent("op-2", "k-2"), server_created_at=NOW - 9)], now=NOW
        )
        assert store.get("op-2").server_created_at == NOW - 9  # type: ignore[union-attr]

    def test_a_clock_step_back_marks_every_unfinished_operation(self, store: AdminStore) -> None:
        owner = new_owner()
        # in flight, maybe applied, not sent (the server asked to wait), finished
        store.begin(make_intent("flying", "k-1"), owner=owner, now=NOW, lease_until=NOW + 60)
        store.begin(make_intent("maybe", "k-2"), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish("maybe", owner=owner, state=State.INDETERMINATE, progress=progress())
        store.begin(make_intent("unsent", "k-3"), owner=owner, now=NOW, lease_until=NOW + 60)
        wait = Progress(
            attempts=1, maybe_applied=False, evidence="HTTP 429", not_before=NOW + 120, now=NOW
        )
        store.finish("unsent", owner=owner, state=State.NOT_SENT, progress=wait)
        store.begin(make_intent("done", "k-4"), owner=owner, now=NOW, lease_until=NOW + 60)
        succeed(store, "done", owner)
        assert store.clock_went_back(step=3600.0, now=NOW) == 3
        assert store.clock_went_back(step=600.0, now=NOW) == 3  # the largest step is kept
        stepped = {r.operation_id: r.clock_stepped for r in store.operations()}
        assert stepped == {"flying": 3600.0, "maybe": 3600.0, "unsent": 3600.0, "done": None}
        unsent = store.get("unsent")
        assert unsent is not None
        # The wait was written by the clock ahead: it comes back with each step.
        assert unsent.not_before == NOW + 120 - 3600.0 - 600.0
        taken = store.claim("maybe", owner=new_owner(), now=NOW + 1, lease_until=NOW + 60)
        assert taken.record.clock_stepped == 3600.0  # what a sender adopts
        # The high-water mark comes back to the clock's time, never forward.
        assert store.advance_clock(now=0.0) == NOW
        store.advance_clock(now=NOW + 7200)
        store.clock_went_back(step=60.0, now=NOW)
        assert store.advance_clock(now=0.0) == NOW
        for bad in (0.0, -5.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="step back"):
                store.clock_went_back(step=bad, now=NOW)

    def test_a_look_up_that_found_nothing_is_kept_the_latest_per_operation(
        self, store: AdminStore
    ) -> None:
        store.remember_not_found([nothing_found("a", NOW), nothing_found("b", NOW)], now=NOW)
        store.remember_not_found([nothing_found("a", NOW + 30, key="k2")], now=NOW + 30)
        kept = {answer.operation_id: answer for answer in store.not_found(["a", "b", "c"])}
        assert kept == {
            "a": nothing_found("a", NOW + 30, key="k2"),
            "b": nothing_found("b", NOW),
        }
        assert store.not_found([]) == []
        # Kept with the store's clock raised: a clock set back after it is seen at a start.
        assert store.advance_clock(now=0.0) == NOW + 30
        assert store.forget_not_found(asked_before=NOW + 1) == 1
        assert [answer.operation_id for answer in store.not_found(["a", "b"])] == ["a"]

    def test_a_clock_seen_going_back_forgets_every_look_up_that_found_nothing(
        self, store: AdminStore
    ) -> None:
        store.remember_not_found([nothing_found("a", NOW), nothing_found("b", NOW)], now=NOW)
        store.clock_went_back(step=60.0, now=NOW - 60)
        assert store.not_found(["a", "b"]) == []

    def test_purging_an_operation_forgets_its_look_up(self, store: AdminStore) -> None:
        owner = new_owner()
        store.begin(make_intent("a", "ka"), owner=owner, now=NOW, lease_until=NOW)
        succeed(store, "a", owner)
        store.remember_not_found([nothing_found("a", NOW), nothing_found("b", NOW)], now=NOW)
        assert store.purge(["a"]) == 1
        assert [answer.operation_id for answer in store.not_found(["a", "b"])] == ["b"]

    def test_purge_refuses_unfinished_operations(self, store: AdminStore) -> None:
        owner = new_owner()
        store.begin(make_intent("a", "ka"), owner=owner, now=NOW, lease_until=NOW)
        store.begin(make_intent("b", "kb"), owner=owner, now=NOW, lease_until=NOW)
        succeed(store, "a", owner)
        with pytest.raises(ValueError, match="not finished"):
            store.purge(["a", "b"])
        assert store.get("a") is not None  # nothing purged
        with pytest.raises(KeyError, match="missing"):
            store.purge(["a", "missing"])
        assert store.purge(["a"]) == 1
        assert store.get("a") is None

    def test_find_answers_by_operation_id_or_by_reference(self, store: AdminStore) -> None:
        store.register(
            [
                reference_intent("op-a", "ref-1"),
                reference_intent("op-b", "ref-1"),  # a reference may repeat
                reference_intent("op-c", "ref-2"),
                dataclasses.replace(make_intent("op-d", "key-d"), reference=None),
            ],
            now=NOW,
        )
        assert store.find() == []
        by_reference = store.find(references=["ref-1", "ref-9"])
        assert sorted(r.operation_id for r in by_reference) == ["op-a", "op-b"]
        both = store.find(operation_ids=["op-c", "op-d", "op-a"], references=["ref-1"])
        assert sorted(r.operation_id for r in both) == ["op-a", "op-b", "op-c", "op-d"]
        assert both[0].body == b'{"amount":100}'

    def test_find_takes_more_references_than_one_statement_holds(self, store: AdminStore) -> None:
        intents = [reference_intent(f"op-{n}", f"ref-{n}") for n in range(12_000)]
        store.register(intents, now=NOW)
        wanted = [f"ref-{n}" for n in range(0, 12_000, 2)] + ["ref-none"]
        assert len(store.find(references=wanted)) == 6_000

    @pytest.mark.parametrize("status", [401, 404, 405, 407])
    def test_an_operation_refused_for_its_target_is_reopened_with_its_key(
        self, store: AdminStore, status: int
    ) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish(
            "op-1",
            owner=owner,
            state=State.FAILED,
            progress=progress(applied=False),
            response=StoredResponse.of(status, (), b"{}"),
        )
        record = store.reopen(moved(make_intent()), evidence="wrong path fixed", now=NOW + 5)
        assert record is not None
        assert (record.state, record.key, record.response, record.finished_at) == (
            State.PENDING,
            "key-1",
            None,
            None,
        )
        assert record.url == "http://psp.test/v1/payouts"
        assert record.fingerprint == moved(make_intent()).fingerprint
        assert (record.evidence, record.updated_at) == ("wrong path fixed", NOW + 5)
        # Pending again: a call with the corrected request claims it and sends it.
        taken = store.begin(moved(make_intent()), owner=owner, now=NOW + 6, lease_until=NOW + 60)
        assert taken.claim is Claim.CLAIMED

    @pytest.mark.parametrize(
        ("state", "status", "maybe_applied"),
        [
            (State.SUCCEEDED, 201, True),  # applied
            (State.FAILED, 400, False),  # a refusal of the payment itself
            (State.FAILED, 422, False),
            (State.FAILED, 404, True),  # a 404 after an attempt that may have been applied
            (State.INDETERMINATE, None, True),
            # The store never keeps not_sent with maybe applied: it becomes indeterminate.
            (State.NOT_SENT, None, True),
        ],
    )
    def test_nothing_that_may_have_been_applied_is_reopened(
        self, store: AdminStore, state: State, status: int | None, maybe_applied: bool
    ) -> None:
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish(
            "op-1",
            owner=owner,
            state=state,
            progress=progress(applied=maybe_applied),
            response=None if status is None else StoredResponse.of(status, (), b"{}"),
        )
        assert store.reopen(moved(make_intent()), evidence="x", now=NOW + 5) is None
        record = store.get("op-1")
        assert record is not None
        kept = State.INDETERMINATE if state is State.NOT_SENT and maybe_applied else state
        assert (record.state, record.url) == (kept, make_intent().url)

    def test_a_pending_or_not_sent_operation_is_reopened_but_never_while_held(
        self, store: AdminStore
    ) -> None:
        store.register([make_intent("op-p", "key-p")], now=NOW)
        reopened = store.reopen(moved(make_intent("op-p", "key-p")), evidence="moved", now=NOW + 1)
        assert reopened is not None
        assert reopened.url.endswith("/v1/payouts")
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        assert store.reopen(moved(make_intent()), evidence="x", now=NOW + 1) is None  # held
        store.finish("op-1", owner=owner, state=State.NOT_SENT, progress=progress(applied=False))
        assert store.reopen(moved(make_intent()), evidence="x", now=NOW + 2) is not None
        # The key is the stored one, or nothing happens.
        wrong_key = moved(make_intent("op-p", "key-other"))
        assert store.reopen(wrong_key, evidence="x", now=NOW + 3) is None

    def test_find_requests_answers_a_reference_in_any_scope_by_its_tail(
        self, store: AdminStore
    ) -> None:
        references = ["E1", "2026-11/E1", "a/b/E1", "E10", "xE1", "2026-11/E2", "E1/x", "b/E1"]
        store.register(
            [reference_intent(f"op-{n}", ref) for n, ref in enumerate(references)], now=NOW
        )
        found = store.find_requests(reference_tails=["E1", "E1", "none"])
        assert sorted(r.reference or "" for r in found) == ["2026-11/E1", "E1", "a/b/E1", "b/E1"]
        # A tail with a "/" of its own matches whole segments only.
        assert sorted(r.reference or "" for r in store.find_requests(reference_tails=["b/E1"])) == [
            "a/b/E1",
            "b/E1",
        ]
        assert store.find_requests(reference_tails=[]) == []
        # Each is the request as registered.
        (one,) = store.find_requests(reference_tails=["E10"])
        assert one == reference_intent("op-3", "E10")

    def test_find_requests_reads_no_tails_where_the_store_holds_no_reference(
        self, store: AdminStore
    ) -> None:
        # A batch's tails are every value of every row of its file: a store with nothing to
        # match (its first run) never gathers them.
        def untouchable() -> Iterator[str]:
            yield from ()
            raise AssertionError("the tails were read")

        assert store.find_requests(reference_tails=untouchable()) == []
        store.register([dataclasses.replace(make_intent("op-n", "key-n"), reference=None)], now=NOW)
        assert store.find_requests(reference_tails=untouchable()) == []
        # Once it holds one, they are read (streamed from any iterable).
        store.register([reference_intent("op-r", "2026-11/E1")], now=NOW)
        found = store.find_requests(reference_tails=(tail for tail in ["x", "E1", "E1"]))
        assert [r.reference for r in found] == ["2026-11/E1"]

    def test_a_payment_found_on_the_server_is_recorded_settled_in_one_write(
        self, store: AdminStore
    ) -> None:
        answer = StoredResponse.of(200, (("Set-Cookie", "sid=secret"),), b'{"data": [1]}')
        record = store.record_settled(
            make_intent(), state=State.SUCCEEDED, evidence="found", now=NOW, response=answer
        )
        assert (record.state, record.attempts, record.maybe_applied) == (State.SUCCEEDED, 0, False)
        assert (record.created_at, record.finished_at, record.lease_owner) == (NOW, NOW, None)
        assert record.evidence == "found"
        assert record.response is not None
        assert (record.response.status_code, record.response.body) == (200, b'{"data": [1]}')
        assert record.response.headers == ()  # redacted like any response
        assert store.get("op-1") == record
        # Never sent: a call with the same request finds it finished.
        again = store.begin(make_intent(), owner=new_owner(), now=NOW + 1, lease_until=NOW + 60)
        assert again.claim is Claim.FINISHED
        declined = store.record_settled(
            make_intent("op-2", "key-2"), state=State.FAILED, evidence="declined", now=NOW
        )
        assert (declined.state, declined.finished_at) == (State.FAILED, NOW)

    def test_recording_a_found_payment_keeps_what_was_recorded_first(
        self, store: AdminStore
    ) -> None:
        store.register([make_intent()], now=NOW)  # another process registered it meanwhile
        kept = store.record_settled(make_intent(), state=State.SUCCEEDED, evidence="x", now=NOW + 1)
        assert (kept.state, kept.finished_at) == (State.PENDING, None)
        store.record_settled(
            make_intent("op-2", "key-2"), state=State.SUCCEEDED, evidence="a", now=NOW
        )
        second = store.record_settled(
            make_intent("op-2", "key-2"), state=State.FAILED, evidence="b", now=NOW + 1
        )
        assert (second.state, second.evidence) == (State.SUCCEEDED, "a")
        with pytest.raises(OperationMismatch, match="differs in its body"):
            store.record_settled(
                make_intent("op-2", "key-2", b'{"amount":999}'),
                state=State.SUCCEEDED,
                evidence="c",
                now=NOW,
            )
        with pytest.raises(OperationMismatch, match="already belongs"):
            store.record_settled(
                make_intent("op-3", "key-2"), state=State.SUCCEEDED, evidence="", now=NOW
            )
        with pytest.raises(ValueError, match="final"):
            store.record_settled(
                make_intent("op-4", "key-4"), state=State.PENDING, evidence="", now=NOW
            )
        assert store.get("op-4") is None

    def test_contents_are_kept_found_by_digest_and_go_with_their_operation(
        self, store: AdminStore
    ) -> None:
        store.register([reference_intent(f"batch/payout/R{n}", f"R{n}") for n in range(4)], now=NOW)
        store.register([reference_intent("order-1", "R9")], now=NOW)
        assert [r.operation_id for r in store.undigested(id_prefix="batch/payout/", limit=10)] == [
            f"batch/payout/R{n}" for n in range(4)
        ]
        # A page at a time, from after the last one read.
        page = store.undigested(id_prefix="batch/payout/", limit=2, after="batch/payout/R0")
        assert [r.operation_id for r in page] == ["batch/payout/R1", "batch/payout/R2"]
        assert page[0] == reference_intent("batch/payout/R1", "R1")  # as registered
        store.note_contents([("batch/payout/R0", "d-1"), ("batch/payout/R1", "d-1")])
        store.note_contents([("batch/payout/R2", "d-2"), ("batch/payout/R3", "")])
        store.note_contents([("batch/payout/R1", "d-3")])  # replaced: a corrected body
        assert sorted(store.find_contents(["d-1", "d-3", "none"])) == [
            ("d-1", "batch/payout/R0"),
            ("d-3", "batch/payout/R1"),
        ]
        assert store.undigested(id_prefix="batch/payout/", limit=10) == []
        # Purged, the operation takes its digest with it.
        owner = new_owner()
        store.claim("batch/payout/R0", owner=owner, now=NOW, lease_until=NOW + 30)
        succeed(store, "batch/payout/R0", owner)
        store.purge(["batch/payout/R0"])
        assert store.find_contents(["d-1"]) == []
