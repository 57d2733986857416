"""What a store holds: its records, the intents and progress written to it, and the
rules about leases both backends and the client read them by. The interface a store
offers is in `_interface`."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from .._frozen import fast_constructor
from .._outcome import State
from .._time import lease_holds
from ._owners import owner_is_dead

__all__ = [
    "NEVER_APPLIED_STATUSES",
    "OVER_A_REFUSAL",
    "UNSETTLED_BY_A_LATER_SEND",
    "Begin",
    "Claim",
    "Durability",
    "Finished",
    "Intent",
    "NotFound",
    "OperationRecord",
    "Progress",
    "StoredResponse",
    "finished_record",
    "holder_is_live",
    "latest",
    "new_finished",
    "new_stored_response",
    "owner_sent_until",
    "server_sent_after",
    "whole",
]

Headers = tuple[tuple[str, str], ...]

#: Final answers that say the request never took effect because of where it went or
#: with what credentials: no such route (404), not this method there (405), refused
#: credentials (401, 407). An operation that ended with one, and that nothing says may
#: have been applied, may be pointed at a corrected target under the same key.
NEVER_APPLIED_STATUSES = (401, 404, 405, 407)

#: Between a success's evidence and that of the refusal it was written over (see
#: `_guards.gives_way`): the refusal another caller stored first, and was told.
OVER_A_REFUSAL = "; written over a refusal another caller stored first, and was told: "

#: Added to the evidence of a refusal that an attempt it does not cover unsettles (see
#: `_guards.learns_over`): what the operation was, and why it is no longer that.
UNSETTLED_BY_A_LATER_SEND = (
    "; stored as a refusal, but an attempt it does not cover, by a caller whose lease had"
    " been taken over, may have been applied: no longer settled (resume it, or look it up)"
)


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
        new = new_stored_response if cls is StoredResponse else cls
        return new(status_code, headers, body, hashlib.sha256(body).hexdigest(), len(body))


#: `StoredResponse(...)` without a call per field (see `_frozen`): every final answer's,
#: and the one a store keeps of it.
new_stored_response = fast_constructor(StoredResponse)


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
class Finished:
    """What a write of where a call left an operation (`finish_brief`) tells the caller
    when it landed as asked: the operation as an `Outcome` reads it, the lease released,
    and the whole record only when asked for (`record()`), made from the record the
    caller knew (`known`) and what it wrote. Every operation ends with one such write:
    building the record there, field by field, cost more than the write's own Python.

    A write that did not land as asked answers with the stored record instead (see
    `OperationStore.finish`): that record, not this, is then the operation's."""

    operation_id: str
    key: str
    state: State
    attempts: int
    maybe_applied: bool
    evidence: str
    not_before: float | None
    #: the answer the operation keeps (as the store keeps it: its secret headers gone,
    #: a long body kept as its size and hash), None if it keeps none
    response: StoredResponse | None
    #: the record as the caller knew it before the write (from `begin` or `claim`)
    known: OperationRecord
    #: what the caller wrote
    progress: Progress

    # Released, by the caller's own write (class attributes, not fields: the same for
    # every one).
    lease_owner = None
    lease_lost = False

    def record(self) -> OperationRecord:
        """The record as the write left it, as `finish` gives it back."""
        known, progress = self.known, self.progress
        return finished_record(
            known,
            state=self.state,
            attempts=self.attempts,
            maybe_applied=self.maybe_applied,
            evidence=self.evidence,
            not_before=self.not_before,
            response=self.response,
            updated_at=progress.now,
            finished_at=progress.now if self.state.finished else None,
            sent_at=latest(known.sent_at, progress.sent_at),
            server_sent_at=server_sent_after(known, progress),
            replay_unexplained=known.replay_unexplained or progress.replay_unexplained,
        )


#: `Finished(...)` without a call per field (see `_frozen`): every operation's last write.
new_finished = fast_constructor(Finished)


def whole(finished: Finished | OperationRecord) -> OperationRecord:
    """The record a write gave back: `finish`'s, or `finish_brief`'s made whole."""
    return finished if isinstance(finished, OperationRecord) else finished.record()


#: `OperationRecord(...)`, built without a call per field (see `_frozen`): every
#: operation's finish builds one where the caller asks for the record.
_new_record = fast_constructor(OperationRecord)


def finished_record(
    known: OperationRecord,
    *,
    state: State,
    attempts: int,
    maybe_applied: bool,
    evidence: str,
    not_before: float | None,
    response: StoredResponse | None,
    updated_at: float,
    finished_at: float | None,
    sent_at: float | None,
    replay_unexplained: bool = False,
    server_sent_at: float | None = None,
) -> OperationRecord:
    """`known` as `finish` just wrote it, lease released: `dataclasses.replace`
    spelled out, which costs a quarter as much on the hottest path of the library (a
    test checks that every other field is carried over)."""
    return _new_record(
        operation_id=known.operation_id,
        key=known.key,
        method=known.method,
        url=known.url,
        headers=known.headers,
        body=known.body,
        fingerprint=known.fingerprint,
        reference=known.reference,
        state=state,
        attempts=attempts,
        maybe_applied=maybe_applied,
        evidence=evidence,
        not_before=not_before,
        lease_owner=None,
        lease_expires=None,
        lease_look_up=False,
        response=response,
        created_at=known.created_at,
        updated_at=updated_at,
        finished_at=finished_at,
        withheld_headers=known.withheld_headers,
        profile=known.profile,
        clock_stepped=known.clock_stepped,
        sent_at=sent_at,
        replay_unexplained=replay_unexplained,
        server_created_at=known.server_created_at,
        server_sent_at=server_sent_at,
    )


def server_sent_after(stored: OperationRecord, progress: Progress) -> float | None:
    """`server_sent_at` as `server_sent` has the row write it."""
    if progress.sent_at is None:
        return stored.server_sent_at
    if progress.server_sent_at is None:
        return None
    return latest(stored.server_sent_at, progress.server_sent_at)


def latest(stored: float | None, sent: float | None) -> float | None:
    """The later of two times, either of which may be unknown (as `_FINISH` writes it)."""
    if stored is None or sent is None:
        return sent if stored is None else stored
    return max(stored, sent)


@dataclass(frozen=True, slots=True)
class NotFound:
    """A look-up on the server that found no payment for an operation, kept so that a
    batch killed during its look-ups need not ask them all again. Evidence of the
    moment it was asked, never the operation's state: how long it is believed, and for
    what question, is the caller's to judge (the batch command judges it)."""

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
    if holder is None or not lease_holds(record.lease_expires, now):
        return False
    return not owner_is_dead(holder)


def owner_sent_until(record: OperationRecord, *, now: float) -> float | None:
    """Until when the owner that holds `record` in flight may send (or have sent) it;
    None if none holds it in flight. A live owner may send until its lease's end; one
    that is dead, or out of its lease, may have sent until it died, at most until its
    lease's end or now, whichever is earlier. The one rule a takeover (which keeps it
    as the operation's `sent_at`) and a look-up's judgement of the last send both
    use."""
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
