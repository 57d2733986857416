"""A store in this process's memory: the whole interface in plain Python, for tests.

Not durable: everything it holds is gone when the process ends, and nothing is shared
with another process. It keeps what the SQL stores keep, by the same rules (the same
leases, the same answers, secret headers never kept, bodies over `max_stored_body`
kept as their size and hash), so a client's behaviour on it is the behaviour a durable
store gives, minus the disk. It passes `idemclient.testing.store_contract`, as the
durable stores do, and shows that the interface can be implemented without SQL.

Every method runs under one lock: threads of the process share it safely. Records are
immutable: each write replaces the operation's record whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Self

import httpx

from .._errors import OperationMismatch, StoreUnavailable
from .._outcome import State
from .._redaction import DEFAULT_SECRET_HEADERS, HeaderRule, origin_of
from .._server_time import DATE_RESOLUTION, ServerTime
from ._base import (
    NEVER_APPLIED_STATUSES,
    REOPENABLE_STATES,
    Begin,
    Claim,
    Intent,
    NotFound,
    OperationRecord,
    Progress,
    StoredResponse,
    holder_is_live,
    owner_sent_until,
)
from ._owners import owner_is_dead
from ._rows import DEFAULT_MAX_STORED_BODY, as_stored, mismatch
from ._sqlstore import refused

__all__ = ["MemoryStore"]

_names = itertools.count(1)


@dataclass(slots=True)
class _Row:
    record: OperationRecord
    #: the order rows were made in (the SQL stores' rowid)
    seq: int
    reaped: bool = False


class MemoryStore:
    """An `AdminStore` in memory (see the module docstring): for tests, never durable.

    Takes the options of `SQLiteStore` that mean something without a disk:
    `max_stored_body`, `retention`, `secret_headers` and `persist_headers`.
    """

    def __init__(
        self,
        *,
        max_stored_body: int = DEFAULT_MAX_STORED_BODY,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        name: str | None = None,
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        self.max_stored_body = max_stored_body
        self.retention = retention
        self.header_rule = HeaderRule.of(secret_headers, persist_headers)
        self.secret_headers = DEFAULT_SECRET_HEADERS | self.header_rule.secret
        self._path = f"memory:{name or next(_names)}"
        self._lock = threading.RLock()
        self._closed = False
        self._rows: dict[str, _Row] = {}
        self._by_key: dict[str, str] = {}
        self._seq = itertools.count()
        self._high_water = 0.0
        self._not_found: dict[str, NotFound] = {}
        self._contents: dict[str, str] = {}

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"MemoryStore({self._path!r})"

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _open(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(self._path, "is closed")
            yield

    # -- sending ---------------------------------------------------------------------

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        known = intent.server_created_at
        server = None if known is None else ServerTime(known, known + DATE_RESOLUTION)
        with self._open():
            found = self._found_for(intent)
            if found is None:
                record = self._new(intent, State.IN_FLIGHT, now, owner, lease_until)
                return Begin(Claim.CREATED, record)
            reason = mismatch(intent, found)
            if reason is not None:
                raise OperationMismatch(reason, operation_id=intent.operation_id, key=found.key)
            return self._claim(found, owner, now, lease_until, False, server)

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
        with self._open():
            record = self._fetch(operation_id)
            return self._claim(record, owner, now, lease_until, look_up, server_time)

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._open():
            row = self._rows.get(operation_id)
            if row is None or row.record.lease_owner != owner or row.record.finished_at is not None:
                return False
            stored = row.record
            self._put(
                stored,
                attempts=progress.attempts,
                maybe_applied=stored.maybe_applied or progress.maybe_applied,
                evidence=progress.evidence,
                not_before=progress.not_before,
                lease_expires=lease_until,
                updated_at=progress.now,
                **_sends(stored, progress),
            )
            return True

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
        kept = self._kept(response)
        final = state.finished
        answered = final or response is not None or drop_answer
        with self._open():
            stored = self._fetch(operation_id)
            mine = stored.finished_at is None if final else stored.lease_owner == owner
            if not mine:
                # Not written as asked: the stored record is the truth, and keeps what
                # this caller learnt (its attempts may have been applied).
                if not final and stored.finished_at is None:
                    stored = self._merge(stored, progress)
                return dataclasses.replace(stored, lease_lost=True)
            maybe_applied = stored.maybe_applied or progress.maybe_applied
            return self._put(
                stored,
                state=(state if final else State.INDETERMINATE) if maybe_applied else state,
                attempts=progress.attempts,
                maybe_applied=maybe_applied,
                evidence=progress.evidence,
                not_before=None if final else progress.not_before,
                lease_owner=None,
                lease_expires=None,
                lease_look_up=False,
                response=kept if answered else stored.response,
                updated_at=progress.now,
                finished_at=progress.now if final else None,
                **_sends(stored, progress),
            )

    def _merge(self, stored: OperationRecord, progress: Progress) -> OperationRecord:
        maybe_applied = stored.maybe_applied or progress.maybe_applied
        state = stored.state
        if state is State.NOT_SENT and maybe_applied:
            state = State.INDETERMINATE
        return self._put(
            stored,
            state=state,
            maybe_applied=maybe_applied,
            attempts=max(stored.attempts, progress.attempts),
            updated_at=progress.now,
            **_sends(stored, progress),
        )

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
        if applied and not state.finished:
            raise ValueError(f"an applied operation is settled as final, not {state.words}")
        with self._open():
            stored = self._fetch(operation_id)
            if stored.finished_at is not None or stored.lease_owner != owner:
                return stored
            changes: dict[str, object]
            if applied:
                answer = self._kept(response or StoredResponse.of(200, (), b""))
                changes = {"state": state, "response": answer, "finished_at": now}
            elif state is State.FAILED:
                if stored.response is None:  # refused keeps the answer it has: none here
                    return stored
                changes = {"state": State.FAILED, "maybe_applied": False, "finished_at": now}
            else:
                changes = {"state": State.NOT_SENT, "maybe_applied": False}
            return self._put(
                stored,
                evidence=evidence,
                not_before=None,
                lease_owner=None,
                lease_expires=None,
                lease_look_up=False,
                updated_at=now,
                **changes,
            )

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        ids = set(operation_ids)
        wanted = set(references)
        with self._open():
            return [
                row.record
                for row in self._rows.values()
                if row.record.operation_id in ids or row.record.reference in wanted
            ]

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._open():
            row = self._rows.get(operation_id)
            return None if row is None else row.record

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._open():
            operation_id = self._by_key.get(key)
            return None if operation_id is None else self._rows[operation_id].record

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._open():
            rows = [r for r in self._ordered() if r.finished_at is None]
        return rows[:limit] if limit is not None else rows

    # -- the store's clock -------------------------------------------------------------

    def advance_clock(self, *, now: float) -> float:
        with self._open():
            seen = self._high_water
            for row in self._rows.values():
                record = row.record
                stamp = record.created_at if record.finished_at is None else record.finished_at
                seen = max(seen, stamp)
            self._high_water = max(self._high_water, now)
            return seen

    def clock_went_back(self, *, step: float, now: float) -> int:
        if not step > 0.0 or step == float("inf"):
            raise ValueError(f"a clock's step back is a positive number of seconds, not {step!r}")
        marked = 0
        with self._open():
            for row in list(self._rows.values()):
                record = row.record
                if record.finished_at is not None:
                    continue
                marked += 1
                not_before = record.not_before
                sent_at = record.sent_at
                self._put(
                    record,
                    clock_stepped=max(record.clock_stepped or 0.0, step),
                    not_before=None if not_before is None else not_before - step,
                    sent_at=now if sent_at is not None and sent_at > now else sent_at,
                )
            self._high_water = min(self._high_water, now)
            self._not_found.clear()
        return marked

    # -- the batch ---------------------------------------------------------------------

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        with self._open():
            made: list[OperationRecord] = []
            conflicts: list[tuple[str, str, str]] = []
            for intent in intents:
                found = self._found_for(intent)
                if found is None:
                    made.append(self._new(intent, State.PENDING, now, None, None))
                    continue
                reason = mismatch(intent, found, sending=False)
                if reason is not None:
                    conflicts.append((intent.operation_id, intent.key, reason))
            if conflicts:  # all or nothing: what this call made goes
                for record in made:
                    del self._rows[record.operation_id]
                    del self._by_key[record.key]
                raise refused(conflicts)
            return len(made)

    def record_settled(
        self,
        intent: Intent,
        *,
        state: State,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
    ) -> OperationRecord:
        if not state.finished:
            raise ValueError(
                f"an operation found on the server is recorded final, not {state.words}"
            )
        answer = self._kept(response or StoredResponse.of(200, (), b""))
        with self._open():
            found = self._found_for(intent)
            if found is None:
                made = self._new(intent, state, now, None, None)
                return self._put(made, evidence=evidence, response=answer, finished_at=now)
            reason = mismatch(intent, found, sending=False)
            if reason is not None:
                raise OperationMismatch(reason, operation_id=intent.operation_id, key=found.key)
            return found

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        with self._open():
            row = self._rows.get(intent.operation_id)
            if row is None or row.record.key != intent.key:
                return None
            stored = row.record
            reopenable = stored.state.value in REOPENABLE_STATES or (
                stored.state is State.FAILED
                and stored.response is not None
                and stored.response.status_code in NEVER_APPLIED_STATUSES
            )
            if stored.maybe_applied or stored.lease_owner is not None or not reopenable:
                return None
            headers, withheld = self.header_rule.split_request(intent.headers)
            return self._put(
                stored,
                url=intent.url,
                headers=headers,
                withheld_headers=withheld,
                body=intent.body,
                fingerprint=intent.fingerprint,
                state=State.PENDING,
                evidence=evidence,
                not_before=None,
                response=None,
                updated_at=now,
                finished_at=None,
            )

    def references(
        self, *, after: tuple[str, str] | None = None, limit: int = 5_000
    ) -> Sequence[tuple[str, str]]:
        with self._open():
            pairs = sorted(
                (r.record.reference, r.record.operation_id)
                for r in self._rows.values()
                if r.record.reference is not None
            )
        return [pair for pair in pairs if after is None or pair > after][:limit]

    def remember_not_found(self, answers: Iterable[NotFound], *, now: float) -> None:
        kept = list(answers)
        if not kept:
            return
        with self._open():
            for answer in kept:
                self._not_found[answer.operation_id] = answer
            self._high_water = max(self._high_water, now)

    def not_found(self, operation_ids: Iterable[str]) -> Sequence[NotFound]:
        with self._open():
            return [self._not_found[i] for i in set(operation_ids) if i in self._not_found]

    def forget_not_found(self, *, asked_before: float) -> int:
        with self._open():
            old = [i for i, answer in self._not_found.items() if answer.asked_at < asked_before]
            for operation_id in old:
                del self._not_found[operation_id]
            return len(old)

    def note_contents(self, digests: Iterable[tuple[str, str]]) -> None:
        with self._open():
            self._contents.update(digests)

    def find_contents(self, digests: Iterable[str]) -> Sequence[tuple[str, str]]:
        wanted = set(digests)
        with self._open():
            return [
                (digest, operation_id)
                for operation_id, digest in self._contents.items()
                if digest in wanted and operation_id in self._rows
            ]

    def undigested(self, *, id_prefix: str, limit: int, after: str = "") -> Sequence[Intent]:
        with self._open():
            ids = sorted(
                i
                for i in self._rows
                if i > after and i.startswith(id_prefix) and i not in self._contents
            )
            return [_request(self._rows[i].record) for i in ids[:limit]]

    def find_requests(self, *, reference_tails: Iterable[str]) -> Sequence[Intent]:
        with self._open():
            held = [r.record for r in self._rows.values() if r.record.reference is not None]
            if not held:
                return []
            tails = set(reference_tails)
            return [_request(r) for r in held if _tail_in(r.reference or "", tails)]

    # -- operators ---------------------------------------------------------------------

    def operations(
        self,
        *,
        states: Iterable[State] | None = None,
        limit: int | None = None,
        id_prefix: str = "",
        reference_prefix: str = "",
    ) -> Sequence[OperationRecord]:
        wanted = None if states is None else {State(s) for s in states}
        with self._open():
            found = [
                record
                for record in self._ordered()
                if (wanted is None or record.state in wanted)
                and _prefixed(record, id_prefix, reference_prefix)
            ]
        return found[:limit] if limit is not None else found

    def counts(self, *, id_prefix: str = "", reference_prefix: str = "") -> dict[State, int]:
        counted = dict.fromkeys(State, 0)
        with self._open():
            for row in self._rows.values():
                if _prefixed(row.record, id_prefix, reference_prefix):
                    counted[row.record.state] += 1
        return counted

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        reaped = 0
        with self._open():
            for row in self._rows.values():
                if reaped >= batch:
                    break
                record = row.record
                finished = record.finished_at
                if row.reaped or finished is None or not finished < now - self.retention:
                    continue
                response = record.response
                if response is not None:
                    response = dataclasses.replace(response, body=b"")
                self._put(record, body=b"", response=response)
                row.reaped = True
                reaped += 1
        return reaped

    def move(self, operation_id: str, *, origin: str, now: float) -> OperationRecord:
        target = httpx.URL(origin)
        if target.scheme not in ("http", "https") or not target.host:
            raise ValueError(f"origin {origin!r} is not an http(s) scheme and host")
        with self._open():
            record = self._fetch(operation_id)
            if record.state.finished:
                raise ValueError(
                    f"operation {operation_id!r} is {record.state.words}: a finished"
                    " operation is never sent again, so it is not moved"
                )
            if holder_is_live(record, now=now):
                raise ValueError(
                    f"operation {operation_id!r} is being sent by {record.lease_owner}"
                    " right now; it was not moved"
                )
            url = httpx.URL(record.url).copy_with(
                scheme=target.scheme, host=target.host, port=target.port
            )
            if origin_of(url) == origin_of(record.url):
                return record
            return self._put(record, url=str(url), updated_at=now)

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(operation_ids))
        with self._open():
            for operation_id in ids:
                record = self._fetch(operation_id)
                if not record.state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {record.state.words}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            for operation_id in ids:
                row = self._rows.pop(operation_id)
                del self._by_key[row.record.key]
                self._not_found.pop(operation_id, None)
                self._contents.pop(operation_id, None)
        return len(ids)

    # -- under the lock ----------------------------------------------------------------

    def _kept(self, response: StoredResponse | None) -> StoredResponse | None:
        return as_stored(response, self.header_rule, self.max_stored_body)[0]

    def _fetch(self, operation_id: str) -> OperationRecord:
        row = self._rows.get(operation_id)
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self._path!r}")
        return row.record

    def _found_for(self, intent: Intent) -> OperationRecord | None:
        """The stored operation that answers for `intent`: the one with its id, else
        the one with its key."""
        row = self._rows.get(intent.operation_id)
        if row is None:
            operation_id = self._by_key.get(intent.key)
            row = None if operation_id is None else self._rows[operation_id]
        return None if row is None else row.record

    def _new(
        self,
        intent: Intent,
        state: State,
        now: float,
        owner: str | None,
        lease_until: float | None,
    ) -> OperationRecord:
        headers, withheld = self.header_rule.split_request(intent.headers)
        record = OperationRecord(
            operation_id=intent.operation_id,
            key=intent.key,
            method=intent.method,
            url=intent.url,
            headers=headers,
            body=intent.body,
            fingerprint=intent.fingerprint,
            reference=intent.reference,
            state=state,
            attempts=0,
            maybe_applied=False,
            evidence="",
            not_before=None,
            lease_owner=owner,
            lease_expires=lease_until,
            response=None,
            created_at=now,
            updated_at=now,
            finished_at=None,
            withheld_headers=withheld,
            profile=intent.profile,
            server_created_at=intent.server_created_at,
        )
        self._rows[intent.operation_id] = _Row(record, next(self._seq))
        self._by_key[intent.key] = intent.operation_id
        return record

    def _put(self, record: OperationRecord, **changes: object) -> OperationRecord:
        new = dataclasses.replace(record, **changes)  # type: ignore[arg-type]
        self._rows[record.operation_id].record = new
        return new

    def _ordered(self) -> list[OperationRecord]:
        rows = sorted(self._rows.values(), key=lambda r: (r.record.created_at, r.seq))
        return [row.record for row in rows]

    def _claim(
        self,
        record: OperationRecord,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool,
        server_time: ServerTime | None,
    ) -> Begin:
        """Lease `record` unless it is finished or a live owner holds it (the rules of
        `OperationStore.claim`, as the SQL stores' takeover writes them)."""
        if record.state.finished:
            return Begin(Claim.FINISHED, record)
        holder = record.lease_owner
        # Judged once, before the lease is taken (see `Begin.dead_holder`).
        dead = holder is not None and owner_is_dead(holder)
        if not dead and holder_is_live(record, now=now):
            return Begin(Claim.BUSY, record)
        sent_until = owner_sent_until(record, now=now)
        in_flight = record.state is State.IN_FLIGHT
        if not look_up:
            state = State.IN_FLIGHT
        elif in_flight:
            state = State.INDETERMINATE
        else:
            state = record.state
        server_created_at = record.server_created_at
        if server_created_at is None and record.state is State.PENDING and server_time:
            server_created_at = server_time.low
        server_sent_at = record.server_sent_at
        if sent_until is not None:
            server_sent_at = None if server_time is None else server_time.high
        taken = self._put(
            record,
            state=state,
            lease_owner=owner,
            lease_expires=lease_until,
            lease_look_up=look_up,
            updated_at=now,
            maybe_applied=record.maybe_applied or in_flight,
            sent_at=_latest(record.sent_at, sent_until),
            server_created_at=server_created_at,
            server_sent_at=server_sent_at,
        )
        # A look-up that held it sent nothing: no attempt of its to wait for.
        sender = holder is not None and not record.lease_look_up
        return Begin(
            Claim.CLAIMED,
            taken,
            taken_over=sender,
            prior=record,
            dead_holder=holder if sender and dead else None,
        )


def _sends(stored: OperationRecord, progress: Progress) -> dict[str, object]:
    """What a write keeps of the caller's sends: the latest that may have been applied,
    the server's time at it, and whether an answer no attempt explains came."""
    if progress.sent_at is None:
        server_sent_at = stored.server_sent_at
    elif progress.server_sent_at is None:
        server_sent_at = None  # the row's belongs to an earlier send
    else:
        server_sent_at = _latest(stored.server_sent_at, progress.server_sent_at)
    return {
        "sent_at": _latest(stored.sent_at, progress.sent_at),
        "server_sent_at": server_sent_at,
        "replay_unexplained": stored.replay_unexplained or progress.replay_unexplained,
    }


def _latest(stored: float | None, sent: float | None) -> float | None:
    if stored is None or sent is None:
        return sent if stored is None else stored
    return max(stored, sent)


def _prefixed(record: OperationRecord, id_prefix: str, reference_prefix: str) -> bool:
    if not record.operation_id.startswith(id_prefix):
        return False
    return not reference_prefix or (record.reference or "").startswith(reference_prefix)


def _tail_in(reference: str, tails: set[str]) -> bool:
    """Whether `reference`, or what follows any "/" in it, is one of `tails`."""
    if reference in tails:
        return True
    return any(reference[i + 1 :] in tails for i, c in enumerate(reference) if c == "/")


def _request(record: OperationRecord) -> Intent:
    """What `record` was recorded to send (as `find_requests` gives it)."""
    return Intent(
        operation_id=record.operation_id,
        key=record.key,
        key_given=True,
        method=record.method,
        url=record.url,
        headers=record.headers,
        body=record.body,
        fingerprint=record.fingerprint,
        reference=record.reference,
        profile=record.profile,
    )
