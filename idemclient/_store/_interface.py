"""The interface a store offers, in two parts: what a client needs (`OperationStore`)
and what the batch command and the operator's commands need beside it (`AdminStore`).

Both are `typing.Protocol`s: a backend implements them by having the methods, without
inheriting from anything here. `SQLiteStore`, `PostgresStore` and `MemoryStore`
implement both; `idemclient.testing.store_contract` is the suite a backend passes.
`Store`, the name of the whole interface before it was split, is `AdminStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, Protocol, cast

from .._outcome import State
from .._server_time import ServerTime
from ._base import Begin, Finished, Intent, NotFound, OperationRecord, Progress, StoredResponse

__all__ = [
    "AdminStore",
    "BatchStore",
    "BriefFinish",
    "FinalWrite",
    "OperationStore",
    "OperatorStore",
    "SendingStore",
    "Store",
    "as_admin",
    "final_write",
]


class OperationStore(Protocol):
    """What `Client`, `AsyncClient`, `wrap()` and `resume()` need of a store: the
    operations that send, reconcile and resume one operation, and the store's clock.

    Why each is here, and nothing more:

    - `begin`, `record_attempt`, `finish`: the life of one send. `begin` records the
      intent durably before the first byte is sent (or finds the operation),
      `record_attempt` notes a retry and extends the lease, `finish` stores where the
      call left it and releases the lease.
    - `claim`: leases an operation that exists, for `resume()`, for an operation issued
      again after its lease lapsed (a takeover), and for a look-up on the server (which
      sends nothing under its lease).
    - `settle`: records what a look-up found; the only way "maybe applied" is ever
      cleared, so reconciling cannot do without it.
    - `get`, `find`: read an operation by id, or many by id or end-to-end reference
      (reconciling by reference).
    - `unfinished`: what `resume()` picks up after a crash.
    - `advance_clock`, `clock_went_back`: the store's high-water mark of its users'
      clocks. Without it a host clock stepped back (while nothing ran) would make old
      records look young, and a payment the server may have forgotten the key of would
      be sent again: the client checks it as it starts.

    The batch command and the operator's commands need more (`AdminStore`). A client
    given a store that has `reap` (an `AdminStore`) reaps old bodies as it starts;
    `resume(origin=...)` needs `move`.

    **Leases.** An owner (a string naming a host, a process and one call: see
    `new_owner`) may send an operation only while it holds the operation's lease,
    taken by one conditional write: of two callers, exactly one gets it. A lease is held
    until `lease_until` on the callers' clocks; a caller that finds a live lease held by
    another (`Claim.BUSY`) waits or stops, and never sends. A lease whose time is over,
    or whose owner is dead (`owner_is_dead`: a process of this host and PID namespace
    that exited, or an ended call of this process), is taken over: taken from an owner
    that was in flight, the operation may have been applied (`maybe_applied`, and
    `sent_at` up to when that owner may have sent). A final answer is recorded whoever
    holds the lease, unless another final answer is there first; an unsettled one only
    while the caller holds it. "Maybe applied" never goes back, except by `settle`.

    **Clock steps.** Every time is the callers' wall clock, passed in (`now`): the store
    never reads a clock of its own. `advance_clock(now)` returns the latest time the
    store had seen; a caller that finds its clock behind it calls `clock_went_back`,
    and from then on every unfinished operation says that its age is unknown
    (`clock_stepped`): once it may have been applied it is looked up, never sent again
    on its age alone.

    Every method may raise `StoreError` (`StoreUnavailable`, ...) when the store cannot
    be used; a write that raised may or may not have landed, except `begin`, whose
    intent is either durable or not written.
    """

    @property
    def path(self) -> str:
        """Where the store is, for messages (a file, a URL without its password, or a
        name)."""
        ...

    def close(self) -> None: ...

    def get(self, operation_id: str) -> OperationRecord | None: ...

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        """Every operation whose id is among `operation_ids` or whose end-to-end
        reference is among `references`, each once, in no particular order."""
        ...

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        """Operations without a final answer, oldest first."""
        ...

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
        operation's). A success is the one exception: it is written over a refusal
        stored first (a failed operation whose answer is not a 2xx), for the payment
        was made; never over a success, nor over a payment a look-up found declined
        (failed, with the look-up's 2xx), which is the server's own word on it. Nor is
        a refusal written over an operation that may have been applied by a caller
        whose `progress` says it did not know that (another caller noted an attempt
        after this one read the row): the caller gets the stored record back, marked
        `lease_lost`, and judges its answer again knowing it.

        `response` is the final answer; an unsettled operation may keep one too (an
        answer read as a replay that no attempt of ours explains: the refusal it is,
        if a look-up finds nothing, see `settle`). Unsettled with no `response`, the
        operation keeps the answer it has, unless `drop_answer`: the caller sent it
        again since, and what the server said to that is not this answer (a timeout, a
        throttle), so the kept one is no longer the operation's last word.

        `known` is the record as the caller last saw it (from `begin` or `claim`): when
        the write lands, the store may answer from it instead of reading the row back.

        A backend may offer a brief form of this write beside it, `finish_brief`, which
        tells a write that landed without building the record, and declare it
        (`BriefFinish`: optional; a client asks `finish` of a store that does not).
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
        is left as it is). The only ways "maybe applied" is ever cleared. Found made
        (applied, `succeeded`), it is written over a refusal stored first too, as a
        final success is (see `finish`).
        """
        ...

    def advance_clock(self, *, now: float) -> float:
        """Note that a clock of this store's users reads `now`; return the latest time
        the store had seen before (0.0 for a new store): the latest `now` it was given
        (its high-water mark) and the latest time its records show: a finished
        operation's `finished_at` (until it is reaped: `reap` raises the mark past it),
        an unfinished one's `created_at` and `sent_at` (a send may come long after the
        intent)."""
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


class BatchStore(OperationStore, Protocol):
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


class OperatorStore(OperationStore, Protocol):
    """What operators need (`idemclient ops`): listing and counting operations, reaping
    bodies, moving and purging operations."""

    def get_by_key(self, key: str) -> OperationRecord | None:
        """The operation recorded under `key`, if any."""
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
        deletes operations. Unfinished operations are never touched. Where it reaped
        any, the store's high-water mark is raised to `now` less the retention, past
        their ends (see `advance_clock`).
        """
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


class AdminStore(BatchStore, OperatorStore, Protocol):
    """Everything a store offers: what a client needs (`OperationStore`), and what the
    batch command (`BatchStore`) and the operator's commands (`OperatorStore`) need
    beside it, each declared once there. `SQLiteStore`, `PostgresStore` and
    `MemoryStore` implement it all."""


class Store(AdminStore, Protocol):
    """Deprecated name of `AdminStore` (the whole interface, from before it was split):
    take `OperationStore` where a client's part is enough, `AdminStore` for the rest."""


#: The name the client's flow knew its part by.
SendingStore = OperationStore


#: Every method and property of the whole interface.
_ADMIN_NAMES = frozenset(name for name in dir(AdminStore) if not name.startswith("_"))


def as_admin(store: OperationStore, *, needed_by: str) -> AdminStore:
    """`store` as an `AdminStore`, for a feature that needs more than a client's part
    (`needed_by` names it); a store that lacks some of it is refused here, naming what
    it lacks, rather than failing halfway."""
    missing = sorted(name for name in _ADMIN_NAMES if not hasattr(store, name))
    if missing:
        raise TypeError(
            f"{needed_by} needs a store with the whole interface (AdminStore);"
            f" {store!r} lacks {', '.join(missing)}"
        )
    return cast(AdminStore, store)


class FinalWrite(Protocol):
    """The write that ends a call (`final_write`): `OperationStore.finish`, or a store's
    declared brief form of it (`BriefFinish.finish_brief`)."""

    def __call__(
        self,
        operation_id: str,
        *,
        owner: str,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
        known: OperationRecord | None = None,
    ) -> Finished | OperationRecord: ...


class BriefFinish(Protocol):
    """The optional part of `OperationStore`: a brief form of `finish`, which a client
    asks for a call's final answer (where no `on_store` hook times the store's calls)
    instead of `finish`, only where the store declares it.

    `finish_brief` takes `finish`'s arguments and writes the same; a write that landed
    as asked it tells by a `Finished` (where the operation stands, as an outcome reads
    it), which builds the record only when asked (`Finished.record()`); one that did
    not, by the stored record, as `finish` does.

    `finish_brief_of` is the declaration: the `finish` that `finish_brief` is the brief
    form of, named in the class that defines them (`finish_brief_of = finish`, after
    both). It holds only while that is the `finish` the store has: a subclass that
    overrides `finish` (to watch or change it) and does not declare again, or a
    `finish` replaced on the class or on the store itself, is asked by that `finish`,
    never passed by for the brief form it inherited. A store that does not declare is
    asked `finish`, whatever else it has."""

    finish_brief_of: ClassVar[Callable[..., OperationRecord]]
    #: the brief form of `finish`: its arguments, and what it tells (`FinalWrite`)
    finish_brief: FinalWrite


def final_write(store: OperationStore) -> FinalWrite:
    """The write a client asks for a call's final answer: `store.finish_brief` where the
    store declares it the brief form of the `finish` it has (`BriefFinish`), else
    `store.finish`. Asked at each call, of the store as it is then."""
    finish = store.finish
    # The declaration is the class's (a `ClassVar`); the `finish` is the store's own,
    # wherever it came from: a function the declaration does not name is asked.
    declared = getattr(type(store), "finish_brief_of", None)
    if declared is not None and getattr(finish, "__func__", None) is declared:
        return cast(BriefFinish, store).finish_brief
    return finish
