"""What a store holds and the interface every store backend offers."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .._outcome import State
from .._server_time import ServerTime
from ._owners import owner_is_dead

__all__ = [
    "NEVER_APPLIED_STATUSES",
    "REOPENABLE_STATES",
    "AdminStore",
    "BatchStore",
    "Begin",
    "Claim",
    "Durability",
    "Intent",
    "NotFound",
    "OperationLookup",
    "OperationRecord",
    "Progress",
    "SendingStore",
    "Store",
    "StoredResponse",
    "holder_is_live",
    "owner_sent_until",
]

Headers = tuple[tuple[str, str], ...]

#: Final answers that say the request never took effect because of where it went or
#: with what credentials: no such route (404), not this method there (405), refused
#: credentials (401, 407). An operation that ended with one, and that nothing says may
#: have been applied, may be pointed at a corrected target under the same key.
NEVER_APPLIED_STATUSES = (401, 404, 405, 407)
#: Unfinished states from which nothing was ever applied when `maybe_applied` is false.
REOPENABLE_STATES = (State.PENDING.value, State.NOT_SENT.value)


class Durability(enum.StrEnum):
    """How much of the store survives a power loss (all levels survive a process crash).

    - `FULL`: every commit is flushed to disk (fsync) before it returns.
    - `INTENT` (default): the intent (key, request) is flushed before the first byte is
      sent; outcomes are not. A lost outcome costs one replayed request after a power
      loss, answered from the server's stored response under the same key.
    - `BUFFERED`: nothing is flushed; the operating system writes it out later. A power
      loss can forget the last operations' keys; re-issued with a natural identity
      (`identity=`), they get the same key back anyway. Survives process crashes.
    """

    FULL = "full"
    INTENT = "intent"
    BUFFERED = "buffered"


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A final answer as stored. A body over the store's `max_stored_body`, or dropped
    when its finished operation was reaped, is kept as its size and sha256 only
    (`body_omitted`)."""

    status_code: int
    headers: Headers
    body: bytes
    body_sha256: str
    body_size: int

    @property
    def body_omitted(self) -> bool:
        return self.body_size != len(self.body)

    @classmethod
    def of(cls, status_code: int, headers: Headers, body: bytes) -> StoredResponse:
        """A whole response; the store decides how much of the body to keep."""
        return cls(status_code, headers, body, hashlib.sha256(body).hexdigest(), len(body))


@dataclass(frozen=True, slots=True)
class Intent:
    """An operation about to be sent for the first time (or registered for later)."""

    operation_id: str
    key: str
    #: the caller chose the key; it is never replaced by a stored one
    key_given: bool
    method: str
    url: str
    headers: Headers
    body: bytes
    #: sha256 over method, path and query (redacted), and body: same operation, same request
    fingerprint: str
    reference: str | None = None
    #: the server profile it is sent under (None: recorded before profiles, `generic`)
    profile: str | None = None
    #: the server's time as it is recorded, by the server's `Date` (a lower bound: its
    #: server sees the key later), if the recording process knew it (see
    #: `OperationRecord.server_created_at`)
    server_created_at: float | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a call has got to: written with each retry and at the end."""

    attempts: int
    maybe_applied: bool
    #: the last thing observed, in words
    evidence: str
    #: the server's not-before time (wall clock), if it gave one
    not_before: float | None
    now: float
    #: when this call last sent an attempt that may have been applied (its time, or
    #: the time it learnt so), if it did: the store keeps the latest (`sent_at`)
    sent_at: float | None = None
    #: the server's time at `sent_at` (an upper bound), by its `Date`, if the call knew
    #: it; None with a `sent_at`: not known, and the record keeps none for that send
    server_sent_at: float | None = None
    #: this call was given an answer the profile reads as a replay of the stored success
    #: that no attempt of its operation explains (see `OperationRecord`); kept for good
    replay_unexplained: bool = False


@dataclass(frozen=True, slots=True)
class OperationRecord:
    operation_id: str
    key: str
    method: str
    url: str
    headers: Headers
    body: bytes
    fingerprint: str
    reference: str | None
    state: State
    attempts: int
    maybe_applied: bool
    evidence: str
    not_before: float | None
    lease_owner: str | None
    lease_expires: float | None
    response: StoredResponse | None
    created_at: float
    updated_at: float
    finished_at: float | None
    #: headers the operation was sent with whose values were not stored (credentials,
    #: and any not persisted): a request that sends it again must carry them
    withheld_headers: tuple[str, ...] = ()
    #: the server profile it was sent under (None: recorded before profiles, `generic`)
    profile: str | None = None
    #: seconds a clock of the store's users was seen to go back while this operation was
    #: unfinished (the largest such step): it may have been recorded by that clock
    #: running fast, so its real age is unknown. None: no step seen.
    clock_stepped: float | None = None
    #: the latest time an attempt of it that may have been applied was sent (or may
    #: have been: an owner that died in flight counts until its lease ran out), on the
    #: writers' clocks. A look-up that finds nothing is only a "never applied" once the
    #: server has had its profile's `in_flight_for` to finish that attempt. None: no
    #: such attempt, or recorded before schema 7 (SQLite; PostgreSQL 5).
    sent_at: float | None = None
    #: the lease (`lease_owner`) is held for a look-up, not a send: nothing is sent
    #: under it, and the operation keeps its state meanwhile (never `in_flight`). A
    #: takeover of it, its holder dead or out of its lease, counts no send (it moves
    #: neither `sent_at` nor `maybe_applied`). False: a send's lease, or none.
    lease_look_up: bool = False
    #: an answer the profile reads as a replay of the stored success (a 409 with the
    #: stored body, django-idempotency-key) came to a key others may know (the
    #: caller's) before any attempt of its own may have been applied: the replay of
    #: another sender's payment, or the application's own refusal. Which is not known,
    #: so from then on no such answer counts as this operation's success; a look-up
    #: settles it. False for rows recorded before schema 9 (SQLite; PostgreSQL 7).
    replay_unexplained: bool = False
    #: the server's time, by its `Date`, at or before the operation's first send (a
    #: lower bound of when the server first saw its key), if the process that recorded
    #: it (or first claimed it, registered unsent) knew it: its age is then judged on
    #: the server's clock alone as well, whatever the recording host's clock said.
    #: None: not known, or recorded before schema 10 (SQLite; PostgreSQL 8).
    server_created_at: float | None = None
    #: the server's time at `sent_at` (an upper bound), if the process that kept that
    #: send knew it: an in-flight hold from it is measured on the server's clock alone
    #: as well. None: not known (the hold is judged from `sent_at` as before).
    server_sent_at: float | None = None
    #: not a column: set only on the record a `finish` gives back when the caller's
    #: write did not land as asked: unsettled, the caller no longer held the lease (it
    #: lapsed and another caller took it over, whether that caller holds it still or
    #: has let it go since) and the write only merged what the caller learnt; final,
    #: another caller's final answer was there first, and the record is that one.
    #: False on every record read from the store.
    lease_lost: bool = False


@dataclass(frozen=True, slots=True)
class NotFound:
    """A look-up on the server that found no payment for an operation, kept so that a
    batch killed during its look-ups need not ask them all again. Evidence of the
    moment it was asked, never the operation's state: how long it is believed, and for
    what question, is the caller's to judge (the batch command's `_remembered`)."""

    operation_id: str
    #: the key the operation is (or is to be) sent under
    key: str
    #: the look-up's absolute URL, with the asker's credentials digest in its fragment
    #: (never sent)
    url: str
    #: how its answer was read (what counts as the operation's payment), in the asker's
    #: words: the same URL read another way is another question
    reading: str
    #: when the request that answered was sent, on the asker's clock
    asked_at: float
    #: the server's time when it answered (its `Date`, a lower bound), if it sent one
    server_at: float | None = None


def holder_is_live(record: OperationRecord, *, now: float) -> bool:
    """An owner holds `record`'s lease, within it, and may still be alive: its lease is
    respected (not taken over)."""
    holder = record.lease_owner
    return (
        holder is not None
        and record.lease_expires is not None
        and record.lease_expires > now
        and not owner_is_dead(holder)
    )


def owner_sent_until(record: OperationRecord, *, now: float) -> float | None:
    """Until when the owner that holds `record` in flight may send (or have sent) it;
    None if none holds it in flight. A live owner may send until its lease's end; one
    that is dead, or out of its lease, may have sent until it died, at most until its
    lease's end or now, whichever is earlier. The one rule a takeover (which keeps it
    as the operation's `sent_at`) and a look-up's judgement (`_reconcile.last_sent`)
    both use."""
    expires = record.lease_expires
    if record.state is not State.IN_FLIGHT or expires is None:
        return None
    return expires if holder_is_live(record, now=now) else min(expires, now)


class Claim(enum.Enum):
    #: the intent was recorded now, with the lease held by the caller
    CREATED = "created"
    #: the operation existed, was unfinished, and the caller now holds its lease
    CLAIMED = "claimed"
    #: the operation has a final answer; nothing is to be sent
    FINISHED = "finished"
    #: another owner holds a live lease
    BUSY = "busy"


@dataclass(frozen=True, slots=True)
class Begin:
    claim: Claim
    record: OperationRecord
    #: CLAIMED from a sender whose lease lapsed unreleased (a dead or paused process):
    #: its attempt may still be running at the server (a look-up's lease, which sent
    #: nothing, is not a takeover in this sense)
    taken_over: bool = False
    #: CLAIMED: the record as it was just before this claim, read in its transaction
    #: (what a caller read earlier may be stale: another caller may have sent since)
    prior: OperationRecord | None = None
    #: `taken_over` from an owner that was, when taken, a process of this host that no
    #: longer exists, or an ended call of this process (`owner_is_dead`): that owner's
    #: name. It sent nothing after the claim and will record nothing more, so nobody is
    #: to be waited for; its attempt may still be running at the server all the same.
    #: Judged once, at the claim: an owner alive then and dead later may have sent until
    #: it died. None: taken from nobody, a look-up, or an owner that may be alive.
    dead_holder: str | None = None


class OperationLookup(Protocol):
    """Where a store is, reading one operation, and closing it: what every part of
    `Store` has."""

    @property
    def path(self) -> str: ...

    def get(self, operation_id: str) -> OperationRecord | None: ...

    def get_by_key(self, key: str) -> OperationRecord | None: ...

    def close(self) -> None: ...


class SendingStore(OperationLookup, Protocol):
    """What sending operations needs of a store: the transports' flow, reconciling and
    resuming one operation.

    Leases: an owner may send an operation only while it holds a live lease, taken by
    one conditional write; a lease whose owner died is taken over when it expires (or
    at once when the owner is a dead process on this host).
    """

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        """Record `intent` durably and lease it to `owner`, or find the operation.

        Raises `OperationMismatch` when the operation (or the key) exists for another
        request.
        """
        ...

    def claim(
        self,
        operation_id: str,
        *,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool = False,
        server_time: ServerTime | None = None,
    ) -> Begin:
        """Lease an existing unfinished operation to `owner` if nobody live holds it.

        A send's lease (the default) marks the operation `in_flight`. `look_up`: the
        lease is for a look-up on the server, which sends nothing: the operation keeps
        its state (`lease_look_up` says who holds it), and a later takeover of the
        lease counts no send. Either way, one taken from an owner that was in flight
        may have been applied (`maybe_applied`, and `sent_at` up to when that owner may
        have sent). `server_time`: the server's time now, if the caller knows it: kept
        beside `sent_at` for such a takeover (`server_sent_at`), and as the
        `server_created_at` of a registered operation claimed for its first send."""
        ...

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        """Note an attempt that will be retried and extend the lease. False if lost."""
        ...

    def finish(
        self,
        operation_id: str,
        *,
        owner: str,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
        known: OperationRecord | None = None,
        drop_answer: bool = False,
    ) -> OperationRecord:
        """Store where the call left the operation and release the lease.

        Unsettled, it is written only while `owner` holds the lease; a caller whose
        lease was taken over only merges what it learnt (its attempts may have been
        applied), and gets the stored record back marked `lease_lost`. Final, it is
        written whoever holds the lease, unless a final answer is there already: the
        caller gets that record back, marked `lease_lost` too (its answer is not the
        operation's).

        `response` is the final answer; an unsettled operation may keep one too (an
        answer read as a replay that no attempt of ours explains: the refusal it is,
        if a look-up finds nothing, see `settle`). Unsettled with no `response`, the
        operation keeps the answer it has, unless `drop_answer`: the caller sent it
        again since, and what the server said to that is not this answer (a timeout, a
        throttle), so the kept one is no longer the operation's last word.

        `known` is the record as the caller last saw it (from `begin` or `claim`): when
        the write lands, the store may answer from it instead of reading the row back.
        """
        ...

    def settle(
        self,
        operation_id: str,
        *,
        owner: str,
        applied: bool,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
        state: State = State.SUCCEEDED,
    ) -> OperationRecord:
        """Record what a look-up on the server found, while `owner` holds the lease.

        Applied: the server holds the payment, and `state` is what became of it there:
        `succeeded`, or `failed` for one it declined (`response` is what the look-up
        returned). Not applied: it is `not_sent`, and no longer "maybe applied", so
        that it can be sent again; or, `state` `failed`, refused: final, never applied,
        with the answer the operation keeps as its own (the application's refusal,
        read as a replay no attempt of ours explained), only if it keeps one (else it
        is left as it is). The only ways "maybe applied" is ever cleared.
        """
        ...


class BatchStore(SendingStore, Protocol):
    """What the batch command needs beside sending: its rows registered ahead, found
    again by id or reference, and what a look-up found recorded."""

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        """Record many pending operations in one transaction; returns how many were new."""
        ...

    def record_settled(
        self,
        intent: Intent,
        *,
        state: State,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
    ) -> OperationRecord:
        """Record, in one write, an operation a look-up found on the server before it
        was ever sent: already settled as `state` (`succeeded`, or `failed` for one the
        server declined), with `response` (what the look-up returned) as its answer.

        Never leased and never attempted: no crash leaves it half recorded, and it is
        never sent. When the operation (or its key) is there already (another process
        recorded it meanwhile), nothing is written and the stored record is returned.
        Raises `OperationMismatch` when that record is for another request, and
        `ValueError` for a `state` that is not final.
        """
        ...

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        """Point an operation that was never applied at a corrected request, same key.

        Only an operation that nothing says may have been applied and that nobody
        holds, which is `pending`, `not_sent`, or `failed` with one of
        `NEVER_APPLIED_STATUSES` (a wrong URL, path or token): it becomes `pending`
        with `intent`'s URL, headers, body and fingerprint, and its answer is dropped.
        `intent.operation_id` and `intent.key` must be the stored ones. Returns the
        record, or None when the operation is not in such a state (nothing changed).
        """
        ...

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        """Every operation whose id is among `operation_ids` or whose end-to-end
        reference is among `references`, each once, in no particular order."""
        ...

    def references(
        self, *, after: tuple[str, str] | None = None, limit: int = 5_000
    ) -> Sequence[tuple[str, str]]:
        """A page of the end-to-end references the store holds, as (reference,
        operation id), in that order, after `after` (the last of the page before; None:
        from the first): at most `limit`, fewer at the end. For a caller that reads
        every reference once, a page at a time, holding none of them."""
        ...

    def remember_not_found(self, answers: Iterable[NotFound], *, now: float) -> None:
        """Keep look-ups that found nothing, one per operation (a later one replaces
        it), in one write that also raises the store's clock to `now`: a clock that
        goes back after it is seen at the next start, and `clock_went_back` then
        forgets every one of them. Not flushed to disk: one lost costs a look-up."""
        ...

    def not_found(self, operation_ids: Iterable[str]) -> Sequence[NotFound]:
        """The look-ups kept for `operation_ids` that found nothing, in no particular
        order."""
        ...

    def forget_not_found(self, *, asked_before: float) -> int:
        """Forget the look-ups that found nothing asked before `asked_before` (too old
        to believe); returns how many."""
        ...

    def note_contents(self, digests: Iterable[tuple[str, str]]) -> None:
        """Keep, for each (operation id, digest), a digest of that operation's content
        (a later one replaces it), found again by `find_contents`; an empty digest says
        there is nothing to compare. Not flushed to disk: one lost is made again."""
        ...

    def find_contents(self, digests: Iterable[str]) -> Sequence[tuple[str, str]]:
        """(digest, operation id) for each kept digest among `digests`, of the operations
        the store still holds, in no particular order."""
        ...

    def undigested(self, *, id_prefix: str, limit: int, after: str = "") -> Sequence[Intent]:
        """The requests of at most `limit` operations whose id begins with `id_prefix`
        and that have no digest kept (`note_contents`), in the order of their ids, from
        the first after `after`."""
        ...

    def find_requests(self, *, reference_tails: Iterable[str]) -> Sequence[Intent]:
        """The request of every operation whose end-to-end reference is one of
        `reference_tails` or ends with "/" and one of them (the same reference in any
        scope: ``E1`` finds ``E1``, ``2026-11/E1`` and ``a/b/E1``), each once, in no
        particular order: what each was recorded to send (its id, key, method, URL,
        headers as stored, body, fingerprint and reference), without its state or
        answer, for a caller that compares many of them (`find` gives the rest).

        Reads every reference the store holds, once, whatever the number of tails; a
        store that holds no reference reads none of `reference_tails` (a batch's tails
        are every value of every row).
        """
        ...


class AdminStore(OperationLookup, Protocol):
    """What operators and a client's housekeeping need: listing and counting
    operations, reaping bodies, the store's clock, moving and purging operations."""

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        """Operations without a final answer, oldest first."""
        ...

    def operations(
        self,
        *,
        states: Iterable[State] | None = None,
        limit: int | None = None,
        id_prefix: str = "",
        reference_prefix: str = "",
    ) -> Sequence[OperationRecord]:
        """Operations oldest first, at most `limit`: only those in `states` (all by
        default), whose id begins with `id_prefix`, and whose end-to-end reference
        begins with `reference_prefix` (given, operations without one are left out)."""
        ...

    def counts(self, *, id_prefix: str = "", reference_prefix: str = "") -> dict[State, int]:
        """How many operations are in each state (of those `operations` would list with
        the same prefixes)."""
        ...

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        """Drop the request and response bodies of finished operations finished more than
        the retention before `now`, at most `batch` of them; returns how many.

        Their id, key, fingerprint, reference, state and status stay (and the answer's
        size and sha256), so an operation id is never given a second key: only `purge`
        deletes operations. Unfinished operations are never touched.
        """
        ...

    def advance_clock(self, *, now: float) -> float:
        """Note that a clock of this store's users reads `now`; return the latest time
        the store had seen before (its high-water mark; 0.0 for a new store)."""
        ...

    def clock_went_back(self, *, step: float, now: float) -> int:
        """Note that a clock of this store's users was seen to go back `step` seconds, to
        `now`:
        every unfinished operation keeps that its `created_at` no longer tells its age
        (`clock_stepped`, the largest step seen; it may have been recorded by that clock
        running fast), and a server's wait it keeps (`not_before`) comes back by the
        step. The store's high-water mark comes back to `now` (it was set by the clock
        ahead: kept, the next start would see the same step and mark again what a right
        clock recorded since). Every kept look-up that found nothing (`NotFound`) is
        forgotten: its age is no longer known either. Returns how many operations were
        marked. Once it may have been applied, such an operation is looked up, never
        sent again on its age alone."""
        ...

    def move(self, operation_id: str, *, origin: str, now: float) -> OperationRecord:
        """Bind an unfinished operation to another origin (scheme, host and port): its
        path, query, body and key stay. The only way an operation changes origin.

        Raises `KeyError` for an unknown operation, `ValueError` for a finished one or
        one another caller is sending right now.
        """
        ...

    def purge(self, operation_ids: Iterable[str]) -> int:
        """Delete these finished operations (and any look-up kept for them): an
        operator's explicit act, the only way an operation leaves the store. Unfinished
        ones are refused, not deleted."""
        ...


class Store(BatchStore, AdminStore, Protocol):
    """Durable operations, shared safely by threads and processes: every part a store
    offers (`SendingStore`, `BatchStore`, `AdminStore`), each declared once there.
    `SQLiteStore` and `PostgresStore` implement it all; a caller that needs only one
    part may take only that part.
    """
