"""What both store backends do the same way, written once.

`SQLStore` implements the `AdminStore` protocol (declared once, in `_interface`): it holds
every method whose logic is the same on
SQLite and on PostgreSQL: the takeover of a lease, attempts, finishing, settling, the
conflicts of a registration, the look-ups, reaping and purging. So the lease fencing
and the rules about final answers cannot drift apart between the two. It runs the
`Statements` of the backend's `Dialect` (see `_statements`) on the backend's
connections:

- `_use()`: a connection for reads;
- `_write(durable=)`: a connection for one write statement, committed on its own;
- `_transaction(durable=)`: one transaction, committed when the block ends, rolled
  back if it raises;
- `_admit()`: the admission of one intent, `begin`'s first write.

`durable` says whether the commit must survive a power loss (see `Durability`). Each
backend turns its driver's errors into ours inside those context managers.

What a backend does its own way stays there: opening and closing (SQLite's file, WAL
and fsync levels; PostgreSQL's pool, schema and `synchronous_commit`), admission
(SQLite commits queued intents in groups), and `register` (SQLite in chunks inside
one transaction; PostgreSQL in one statement a chunk, also inside the application's own
transaction for the outbox).
"""

from __future__ import annotations

import dataclasses
import itertools
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Self

import httpx

from .._db.dialect import Connection, Cursor
from .._errors import OperationMismatch
from .._outcome import State
from .._redaction import DEFAULT_SECRET_HEADERS, HeaderRule, origin_of
from .._server_time import DATE_RESOLUTION, ServerTime
from ._base import (
    Begin,
    Claim,
    Durability,
    Headers,
    Intent,
    NotFound,
    OperationRecord,
    Progress,
    StoredResponse,
    holder_is_live,
    owner_sent_until,
)
from ._cipher import PLAIN, BodyEncryption, Cipher
from ._interface import AdminStore
from ._owners import owner_is_dead
from ._rows import as_stored, dump_headers, intent_from_row, mismatch, record_from_row
from ._statements import Statements

__all__ = ["SQLStore", "admission_values", "admitted", "finished_record", "refused"]


def _prefixes(id_prefix: str, reference_prefix: str) -> tuple[object, ...]:
    """The arguments of a statement's prefix filter (`_statements._PREFIXES`): an empty
    prefix lets every row through."""
    return (len(id_prefix), id_prefix, len(reference_prefix), reference_prefix)


class SQLStore(AdminStore, ABC):
    """The shared half of a SQL backend of `AdminStore`; see the module docstring."""

    durability: Durability
    max_stored_body: int
    retention: float
    #: the header names never written: the defaults and the user's (see `header_rule`
    #: for every name that looks secret)
    secret_headers: frozenset[str]
    #: which request headers are written with their values (see `_redaction`)
    header_rule: HeaderRule
    _cipher: Cipher = PLAIN
    _sql: Statements
    #: `finish` answers from the caller's `known` record instead of reading the row
    #: back (the backend says whether that saves anything).
    _answer_from_known: ClassVar[bool]

    @property
    @abstractmethod
    def path(self) -> str: ...

    @abstractmethod
    def _use(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _write(self, *, durable: bool) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _transaction(self, *, durable: bool) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _admit(self, values: tuple[Any, ...]) -> bool:
        """Run `Statements.admit` with `values` (see `admission_values`), committed
        before it returns: True if the row was written, False if its id or key was
        there first."""

    def _configure(
        self,
        *,
        where: str,
        max_stored_body: int,
        secret_headers: Collection[str],
        persist_headers: Collection[str],
        encryption: BodyEncryption | None,
    ) -> None:
        """The options every backend takes, checked (before anything is opened)."""
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        if encryption is not None and not isinstance(encryption, BodyEncryption):
            raise TypeError("encryption must be a BodyEncryption (or None)")
        self.max_stored_body = max_stored_body
        self.header_rule = HeaderRule.of(secret_headers, persist_headers)
        self.secret_headers = DEFAULT_SECRET_HEADERS | self.header_rule.secret
        self._cipher = Cipher(encryption, where)

    @property
    def encrypted(self) -> bool:
        """Whether bodies are written encrypted (see `BodyEncryption`)."""
        return self._cipher.enabled

    # -- writing ---------------------------------------------------------------------

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        # The intent's server time, read as it was recorded, is the time now as well.
        known = intent.server_created_at
        server = None if known is None else ServerTime(known, known + DATE_RESOLUTION)
        headers, withheld = self.header_rule.split_request(intent.headers)
        if self._admit(
            admission_values(
                intent,
                dump_headers(headers, withheld),
                State.IN_FLIGHT,
                owner,
                lease_until,
                now,
                cipher=self._cipher,
            )
        ):
            # The record just written, without reading it back.
            return Begin(
                Claim.CREATED,
                admitted(
                    intent,
                    headers,
                    withheld=withheld,
                    owner=owner,
                    now=now,
                    lease_until=lease_until,
                ),
            )
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._find_for(conn, intent)
            return self._claim_found(
                conn, record, owner=owner, now=now, lease_until=lease_until, server_time=server
            )

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
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
            return self._claim_found(
                conn,
                record,
                owner=owner,
                now=now,
                lease_until=lease_until,
                look_up=look_up,
                server_time=server_time,
            )

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._write(durable=self.durability is Durability.FULL) as conn:
            cursor = conn.execute(
                self._sql.record_attempt,
                (
                    progress.attempts,
                    progress.maybe_applied,
                    progress.evidence,
                    progress.not_before,
                    lease_until,
                    progress.now,
                    progress.sent_at,
                    progress.sent_at,
                    *server_sent(progress),
                    progress.replay_unexplained,
                    operation_id,
                    owner,
                ),
            )
            return cursor.rowcount == 1

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
        kept, response_values = as_stored(
            response,
            self.header_rule,
            self.max_stored_body,
            cipher=self._cipher,
            operation_id=operation_id,
        )
        now = progress.now
        final = state.finished
        # Unsettled with no answer given: the row keeps the answer it has (see
        # `Statements.finish`), unless it is dropped (its columns written empty).
        answered = final or response is not None or drop_answer
        finished_at = now if final else None
        # A final answer ends any wait the server asked for.
        not_before = None if final else progress.not_before
        # Unsettled, and maybe applied by this caller or by anyone before: indeterminate.
        if_maybe = state if final else State.INDETERMINATE
        params: tuple[Any, ...] = (
            progress.maybe_applied,
            if_maybe.value,
            state.value,
            progress.attempts,
            progress.maybe_applied,
            progress.evidence,
            not_before,
            *(response_values if answered else ()),
            now,
            finished_at,
            progress.sent_at,
            progress.sent_at,
            *server_sent(progress),
            progress.replay_unexplained,
            operation_id,
        )
        if not final:  # the guard names the owner (see `Statements.finish`)
            params += (owner,)
        answer_from = known if self._answer_from_known else None
        with self._write(durable=self.durability is Durability.FULL) as conn:
            if answer_from is None:
                row = _returned(conn.execute(self._sql.finish_returning[final, answered], params))
                if row is not None:
                    return self._record(row)
            elif conn.execute(self._sql.finish[final, answered], params).rowcount == 1:
                maybe_applied = answer_from.maybe_applied or progress.maybe_applied
                return finished_record(
                    answer_from,
                    state=if_maybe if maybe_applied else state,
                    attempts=progress.attempts,
                    maybe_applied=maybe_applied,
                    evidence=progress.evidence,
                    not_before=not_before,
                    response=kept if answered else answer_from.response,
                    updated_at=now,
                    finished_at=finished_at,
                    sent_at=_latest(answer_from.sent_at, progress.sent_at),
                    server_sent_at=_server_sent_after(answer_from, progress),
                    replay_unexplained=(
                        answer_from.replay_unexplained or progress.replay_unexplained
                    ),
                )
            # Not written as asked (a final answer was there first, or the lease moved
            # on): the stored row is the truth, and keeps what this caller learnt.
            if not final:
                self._merge(conn, operation_id, progress)
            return dataclasses.replace(self._fetch(conn, operation_id), lease_lost=True)

    def _merge(self, conn: Connection, operation_id: str, progress: Progress) -> None:
        conn.execute(
            self._sql.merge,
            (
                State.NOT_SENT.value,
                progress.maybe_applied,
                State.INDETERMINATE.value,
                progress.maybe_applied,
                progress.attempts,
                progress.attempts,
                progress.now,
                progress.sent_at,
                progress.sent_at,
                *server_sent(progress),
                progress.replay_unexplained,
                operation_id,
            ),
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
        if applied:
            if not state.finished:
                raise ValueError(f"an applied operation is settled as final, not {state.words}")
            _kept, columns = as_stored(
                response or StoredResponse.of(200, (), b""),
                self.header_rule,
                self.max_stored_body,
                cipher=self._cipher,
                operation_id=operation_id,
            )
            statement = self._sql.settle_applied
            values: tuple[Any, ...] = (state.value, *columns, now)
        elif state is State.FAILED:
            statement = self._sql.settle_refused
            values = (State.FAILED.value, now)
        else:
            statement = self._sql.settle_not_applied
            values = (State.NOT_SENT.value,)
        with self._write(durable=self.durability is Durability.FULL) as conn:
            row = _returned(conn.execute(statement, (*values, evidence, now, operation_id, owner)))
            return self._record(row) if row is not None else self._fetch(conn, operation_id)

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
        _kept, answer = as_stored(
            response or StoredResponse.of(200, (), b""),
            self.header_rule,
            self.max_stored_body,
            cipher=self._cipher,
            operation_id=intent.operation_id,
        )
        values = admission_values(
            intent, self._stored_headers(intent), state, None, None, now, cipher=self._cipher
        )
        sql = self._sql
        with self._write(durable=self.durability is Durability.FULL) as conn:
            conn.execute(sql.record_settled, (*values, evidence, *answer, now))
            # Written now, or there first: the stored row answers, if it is this request.
            row = conn.execute(
                sql.find_for, (intent.operation_id, intent.key, intent.operation_id)
            ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self.path!r}")
        record = self._record(row)
        reason = mismatch(intent, record, sending=False)
        if reason is not None:
            raise OperationMismatch(reason, operation_id=intent.operation_id, key=record.key)
        return record

    def move(self, operation_id: str, *, origin: str, now: float) -> OperationRecord:
        target = httpx.URL(origin)
        if target.scheme not in ("http", "https") or not target.host:
            raise ValueError(f"origin {origin!r} is not an http(s) scheme and host")
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
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
            row = _returned(
                conn.execute(self._sql.move, (str(url), now, operation_id, record.lease_owner))
            )
            if row is None:  # pragma: no cover - the transaction holds the row
                raise ValueError(f"operation {operation_id!r} changed while being moved")
            return self._record(row)

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        where = {"operation_id": intent.operation_id}
        values = (
            intent.url,
            self._stored_headers(intent),
            self._cipher.seal(intent.body, column="body", **where),
            self._cipher.seal_text(intent.fingerprint, column="fingerprint", **where),
            State.PENDING.value,
            evidence,
            now,
            intent.operation_id,
            intent.key,
        )
        # Durable like an intent: the request about to be sent is this one.
        with self._write(durable=self.durability is not Durability.BUFFERED) as conn:
            row = _returned(conn.execute(self._sql.reopen, values))
        return None if row is None else self._record(row)

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        with self._write(durable=False) as conn:
            return conn.execute(
                self._sql.reap, (b"", b"", now, now - self.retention, batch)
            ).rowcount

    def advance_clock(self, *, now: float) -> float:
        with self._transaction(durable=False) as conn:
            (seen,) = conn.execute(self._sql.seen).fetchone()
            conn.execute(self._sql.advance, (now,))
        return float(seen)

    def clock_went_back(self, *, step: float, now: float) -> int:
        if not step > 0.0 or step == float("inf"):
            raise ValueError(f"a clock's step back is a positive number of seconds, not {step!r}")
        # Durable as an intent is: what it keeps is what stops a second send.
        with self._transaction(durable=self.durability is not Durability.BUFFERED) as conn:
            marked = conn.execute(self._sql.stepped_back, (step, step, now, now)).rowcount
            conn.execute(self._sql.rewind, (now, now))
            # A look-up's "nothing found" is only as good as the time it was asked.
            conn.execute(self._sql.forget_not_found)
        return int(marked)

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(operation_ids)
        sql = self._sql
        listed = sql.dialect.values(ids)
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            found = dict(conn.execute(sql.purgeable, (listed,)).fetchall())
            for operation_id in ids:
                if operation_id not in found:
                    raise KeyError(f"no operation {operation_id!r} in {self.path!r}")
                state = State(found[operation_id])
                if not state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {state.words}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            conn.execute(sql.forget_not_found_of, (listed,))
            conn.execute(sql.forget_contents_of, (listed,))
            return conn.execute(sql.purge, (listed,)).rowcount

    # -- reading ---------------------------------------------------------------------

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        return None if row is None else self._record(row)

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_key, (key,)).fetchone()
        return None if row is None else self._record(row)

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        sql = self._sql
        found: dict[str, OperationRecord] = {}
        with self._use() as conn:
            # In chunks: a file of a hundred thousand rows is a few statements, and no
            # list parameter grows without bound.
            for statement, values in (
                (sql.find_ids, operation_ids),
                (sql.find_references, references),
            ):
                for chunk in _chunked(values, _FIND_CHUNK):
                    for row in conn.execute(statement, (sql.dialect.values(chunk),)).fetchall():
                        record = self._record(row)
                        found[record.operation_id] = record
        return list(found.values())

    def references(
        self, *, after: tuple[str, str] | None = None, limit: int = 5_000
    ) -> Sequence[tuple[str, str]]:
        sql = self._sql
        with self._use() as conn:
            if after is None:
                rows = conn.execute(sql.references_first, (limit,)).fetchall()
            else:
                reference, operation_id = after
                rows = conn.execute(
                    sql.references_from, (reference, reference, operation_id, limit)
                ).fetchall()
        return [(str(reference), str(operation_id)) for reference, operation_id in rows]

    def remember_not_found(self, answers: Iterable[NotFound], *, now: float) -> None:
        rows = [(a.operation_id, a.key, a.url, a.reading, a.asked_at, a.server_at) for a in answers]
        if not rows:
            return
        with self._transaction(durable=False) as conn:
            for values in rows:
                conn.execute(self._sql.remember_not_found, values)
            conn.execute(self._sql.advance, (now,))

    def not_found(self, operation_ids: Iterable[str]) -> Sequence[NotFound]:
        sql = self._sql
        found: list[NotFound] = []
        with self._use() as conn:
            for chunk in _chunked(operation_ids, _FIND_CHUNK):
                found += (
                    NotFound(*row)
                    for row in conn.execute(sql.not_found, (sql.dialect.values(chunk),))
                )
        return found

    def forget_not_found(self, *, asked_before: float) -> int:
        with self._write(durable=False) as conn:
            return int(conn.execute(self._sql.forget_not_found_before, (asked_before,)).rowcount)

    def note_contents(self, digests: Iterable[tuple[str, str]]) -> None:
        # Under a key where bodies are encrypted: a digest in clear would confirm a
        # guessed payment (see `Cipher.blind`).
        rows = [(operation_id, self._cipher.blind(digest)) for operation_id, digest in digests]
        if not rows:
            return
        with self._transaction(durable=False) as conn:
            for values in rows:
                conn.execute(self._sql.note_content, values)

    def find_contents(self, digests: Iterable[str]) -> Sequence[tuple[str, str]]:
        sql = self._sql
        asked: dict[str, str] = {}  # as stored -> as given
        for digest in digests:
            for blinded in self._cipher.blinds(digest):
                asked[blinded] = digest
        found: list[tuple[str, str]] = []
        with self._use() as conn:
            for chunk in _chunked(asked, _FIND_CHUNK):
                for stored, operation_id in conn.execute(
                    sql.find_contents, (sql.dialect.values(chunk),)
                ):
                    found.append((asked[stored], operation_id))
        return found

    def undigested(self, *, id_prefix: str, limit: int, after: str = "") -> Sequence[Intent]:
        sql = self._sql
        with self._use() as conn:
            rows = conn.execute(
                sql.undigested, (after, len(id_prefix), id_prefix, limit)
            ).fetchall()
        headers: dict[object, Headers] = {}
        return [intent_from_row(row, self._cipher, headers) for row in rows]

    def find_requests(self, *, reference_tails: Iterable[str]) -> Sequence[Intent]:
        sql = self._sql
        with self._use() as conn:
            # A store that holds no reference (a batch's first run) has no request to
            # find: the tails, every value of every row of a file, are not even read.
            if conn.execute(sql.any_reference).fetchone() is None:
                return []
            # Deduplicated once and encoded at once: only the encoded list is held while
            # the statement runs.
            tails = list(dict.fromkeys(reference_tails))
            if not tails:
                return []
            wanted = sql.dialect.values(tails)
            del tails
            # One statement: each chunk of tails would cost a pass over the references.
            rows = conn.execute(sql.find_tail_requests, (wanted,)).fetchall()
        # The rows of a batch share their headers: each distinct text is read once.
        headers: dict[object, Headers] = {}
        return [intent_from_row(row, self._cipher, headers) for row in rows]

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._use() as conn:
            rows = conn.execute(self._sql.unfinished, (self._limit(limit),)).fetchall()
        return [self._record(r) for r in rows]

    def operations(
        self,
        *,
        states: Iterable[State] | None = None,
        limit: int | None = None,
        id_prefix: str = "",
        reference_prefix: str = "",
    ) -> Sequence[OperationRecord]:
        sql = self._sql
        args: tuple[object, ...] = _prefixes(id_prefix, reference_prefix)
        if states is None:
            statement, args = sql.operations, (*args, self._limit(limit))
        else:
            wanted = sql.dialect.values([State(s).value for s in states])
            statement, args = sql.operations_in, (wanted, *args, self._limit(limit))
        with self._use() as conn:
            rows = conn.execute(statement, args).fetchall()
        return [self._record(r) for r in rows]

    def counts(self, *, id_prefix: str = "", reference_prefix: str = "") -> dict[State, int]:
        with self._use() as conn:
            found = {
                State(state): n
                for state, n in conn.execute(
                    self._sql.counts, _prefixes(id_prefix, reference_prefix)
                )
            }
        return {state: found.get(state, 0) for state in State}

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside a transaction --------------------------------------------------------

    def _record(self, row: Any) -> OperationRecord:
        return record_from_row(row, self._cipher)

    def _stored_headers(self, intent: Intent) -> str:
        return dump_headers(*self.header_rule.split_request(intent.headers))

    def _limit(self, limit: int | None) -> int | None:
        return self._sql.dialect.unlimited if limit is None else limit

    def _fetch(self, conn: Connection, operation_id: str) -> OperationRecord:
        row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self.path!r}")
        return self._record(row)

    def _find_for(self, conn: Connection, intent: Intent) -> OperationRecord:
        """The stored operation matching `intent`, which must be the same request."""
        row = conn.execute(
            self._sql.find_for, (intent.operation_id, intent.key, intent.operation_id)
        ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self.path!r}")
        record = self._record(row)
        reason = mismatch(intent, record)
        if reason is not None:
            raise OperationMismatch(reason, operation_id=intent.operation_id, key=record.key)
        return record

    def _claim_found(
        self,
        conn: Connection,
        record: OperationRecord,
        *,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool = False,
        server_time: ServerTime | None = None,
    ) -> Begin:
        """Lease `record`, just read in this transaction, unless it is finished or a
        live owner holds it; `look_up`: for a look-up (see `OperationStore.claim`).
        `server_time`: the server's time now, if the caller knows it (see
        `Statements.take_over`)."""
        if record.state.finished:
            return Begin(Claim.FINISHED, record)
        holder = record.lease_owner
        # Judged once, before the lease is taken: what the claim says of its holder
        # must be what it was when taken (see `Begin.holder_dead`).
        dead = holder is not None and owner_is_dead(holder)
        if not dead and holder_is_live(record, now=now):
            return Begin(Claim.BUSY, record)
        # Taken from an owner in flight: it may have sent until now or its lease's end.
        # A look-up's lease is never in flight: nothing was sent under it.
        sent_until = owner_sent_until(record, now=now)
        row = _returned(
            conn.execute(
                self._sql.take_over,
                (
                    not look_up,
                    State.IN_FLIGHT.value,
                    State.IN_FLIGHT.value,
                    State.INDETERMINATE.value,
                    owner,
                    lease_until,
                    look_up,
                    now,
                    State.IN_FLIGHT.value,
                    sent_until,
                    sent_until,
                    State.PENDING.value,
                    None if server_time is None else server_time.low,
                    sent_until is not None,
                    None if server_time is None else server_time.high,
                    record.operation_id,
                    holder,
                ),
            )
        )
        if row is None:
            return Begin(Claim.BUSY, record)
        # A look-up that held it sent nothing: no attempt of its to wait for.
        sender = holder is not None and not record.lease_look_up
        return Begin(
            Claim.CLAIMED,
            self._record(row),
            taken_over=sender,
            prior=record,
            dead_holder=holder if sender and dead else None,
        )

    def _conflicts(self, conn: Connection, intents: Sequence[Intent]) -> list[tuple[str, str, str]]:
        """(operation id, key, why) for each of `intents` stored before for another
        request. `conn` sees the rows just inserted for them: those match themselves."""
        values = self._sql.dialect.values
        existing = [
            self._record(row)
            for row in conn.execute(
                self._sql.existing,
                (values([i.operation_id for i in intents]), values([i.key for i in intents])),
            ).fetchall()
        ]
        by_id = {r.operation_id: r for r in existing}
        by_key = {r.key: r for r in existing}
        conflicts = []
        for intent in intents:
            record = by_id.get(intent.operation_id) or by_key.get(intent.key)
            # Registering sends nothing: only the request itself must be the same.
            reason = None if record is None else mismatch(intent, record, sending=False)
            if reason is not None:
                conflicts.append((intent.operation_id, intent.key, reason))
        return conflicts


def refused(conflicts: Sequence[tuple[str, str, str]]) -> OperationMismatch:
    """The error for a registration that found `conflicts` (see `SQLStore._conflicts`),
    raised inside its transaction so that nothing of it is kept."""
    first_id, first_key, first_reason = conflicts[0]
    return OperationMismatch(
        f"{len(conflicts)} operation(s) were recorded before for other"
        f" requests; nothing was registered. First: {first_reason}",
        operation_id=first_id,
        key=first_key,
        conflicts=tuple((operation_id, reason) for operation_id, _key, reason in conflicts),
    )


def admission_values(
    intent: Intent,
    headers: str,
    state: State,
    owner: str | None,
    lease_until: float | None,
    now: float,
    *,
    cipher: Cipher = PLAIN,
) -> tuple[Any, ...]:
    """The values of `Statements.admit` (`INSERT_COLUMNS`), headers already as stored,
    the body and its fingerprint sealed by `cipher`."""
    where = {"operation_id": intent.operation_id}
    return (
        intent.operation_id,
        intent.key,
        intent.method,
        intent.url,
        headers,
        cipher.seal(intent.body, column="body", **where),
        cipher.seal_text(intent.fingerprint, column="fingerprint", **where),
        intent.reference,
        state.value,
        owner,
        lease_until,
        now,
        now,
        intent.profile,
        intent.server_created_at,
    )


def admitted(
    intent: Intent,
    headers: Headers,
    *,
    withheld: tuple[str, ...] = (),
    owner: str,
    now: float,
    lease_until: float,
) -> OperationRecord:
    """The record an admission just wrote, without reading it back."""
    return OperationRecord(
        operation_id=intent.operation_id,
        key=intent.key,
        method=intent.method,
        url=intent.url,
        headers=headers,
        body=intent.body,
        fingerprint=intent.fingerprint,
        reference=intent.reference,
        state=State.IN_FLIGHT,
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


_FIND_CHUNK = 5_000


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
    return OperationRecord(
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


def server_sent(progress: Progress) -> tuple[int, float | None, float | None]:
    """The values of a write's `server_sent_at` (see `Statements`): 1 and the server's
    time at the send it keeps (the later of it and the row's is kept, as `sent_at`); 2
    for a send whose server time the writer does not know (the row then keeps none: the
    one it has belongs to an earlier send); 0 for no send (the row's is kept)."""
    if progress.sent_at is None:
        return 0, None, None
    if progress.server_sent_at is None:
        return 2, None, None
    return 1, progress.server_sent_at, progress.server_sent_at


def _server_sent_after(stored: OperationRecord, progress: Progress) -> float | None:
    """`server_sent_at` as `server_sent` has the row write it."""
    if progress.sent_at is None:
        return stored.server_sent_at
    if progress.server_sent_at is None:
        return None
    return _latest(stored.server_sent_at, progress.server_sent_at)


def _latest(stored: float | None, sent: float | None) -> float | None:
    """The later of two times, either of which may be unknown (as `_FINISH` writes it)."""
    if stored is None or sent is None:
        return sent if stored is None else stored
    return max(stored, sent)


def _chunked(values: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(values)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _returned(cursor: Cursor) -> Any:
    """The row an `UPDATE ... RETURNING` wrote, or None. Read with fetchall: sqlite3
    finishes the statement (and so its write) only once every row is read."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
