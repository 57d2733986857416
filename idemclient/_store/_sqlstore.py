"""What both store backends do the same way, written once.

`SQLStore` holds every method of the `Store` protocol whose logic is the same on
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
one transaction; PostgreSQL in one statement, also inside the application's own
transaction for the outbox).
"""

from __future__ import annotations

import dataclasses
import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol, Self

from .._errors import OperationMismatch
from .._outcome import State
from ._base import (
    Begin,
    Claim,
    Durability,
    Headers,
    Intent,
    OperationRecord,
    Progress,
    StoredResponse,
)
from ._owners import owner_is_dead
from ._rows import as_stored, dump_headers, mismatch, record_from_row, redact
from ._statements import Statements

__all__ = ["Connection", "SQLStore", "admission_values", "admitted", "refused"]


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What SQL written once for both databases uses of a sqlite3 or psycopg
    connection (or a psycopg cursor): the stores' and the reference server's."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> _Cursor: ...


class SQLStore(ABC):
    """The shared half of a `Store` backend; see the module docstring."""

    durability: Durability
    max_stored_body: int
    retention: float
    secret_headers: frozenset[str]
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

    # -- writing ---------------------------------------------------------------------

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        headers = redact(intent.headers, self.secret_headers)
        if self._admit(
            admission_values(
                intent, dump_headers(headers), State.IN_FLIGHT, owner, lease_until, now
            )
        ):
            # The record just written, without reading it back.
            return Begin(
                Claim.CREATED,
                admitted(intent, headers, owner=owner, now=now, lease_until=lease_until),
            )
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._find_for(conn, intent)
            return self._claim_found(conn, record, owner=owner, now=now, lease_until=lease_until)

    def claim(self, operation_id: str, *, owner: str, now: float, lease_until: float) -> Begin:
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
            return self._claim_found(conn, record, owner=owner, now=now, lease_until=lease_until)

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
    ) -> OperationRecord:
        kept, response_values = as_stored(response, self.secret_headers, self.max_stored_body)
        now = progress.now
        final = state.finished
        finished_at = now if final else None
        # A final answer ends any wait the server asked for.
        not_before = None if final else progress.not_before
        params: tuple[Any, ...] = (
            state.value,
            progress.attempts,
            progress.maybe_applied,
            progress.evidence,
            not_before,
            *response_values,
            now,
            finished_at,
            operation_id,
        )
        if not final:  # the guard names the owner (see `Statements.finish`)
            params += (owner,)
        answer_from = known if self._answer_from_known else None
        with self._write(durable=self.durability is Durability.FULL) as conn:
            if answer_from is None:
                row = _returned(conn.execute(self._sql.finish_returning[final], params))
                return record_from_row(row) if row is not None else self._fetch(conn, operation_id)
            if conn.execute(self._sql.finish[final], params).rowcount != 1:
                # Not written as asked (a final answer was there first, or the lease
                # moved on): the stored row is the truth.
                return self._fetch(conn, operation_id)
        return dataclasses.replace(
            answer_from,
            state=state,
            attempts=progress.attempts,
            maybe_applied=answer_from.maybe_applied or progress.maybe_applied,
            evidence=progress.evidence,
            not_before=not_before,
            lease_owner=None,
            lease_expires=None,
            response=kept,
            updated_at=now,
            finished_at=finished_at,
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
                raise ValueError(f"an applied operation is settled as final, not {state.value}")
            _kept, columns = as_stored(
                response or StoredResponse.of(200, (), b""),
                self.secret_headers,
                self.max_stored_body,
            )
            statement = self._sql.settle_applied
            values: tuple[Any, ...] = (state.value, *columns, now)
        else:
            statement = self._sql.settle_not_applied
            values = (State.NOT_SENT.value,)
        with self._write(durable=self.durability is Durability.FULL) as conn:
            row = _returned(conn.execute(statement, (*values, evidence, now, operation_id, owner)))
            return record_from_row(row) if row is not None else self._fetch(conn, operation_id)

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        values = (
            intent.url,
            self._stored_headers(intent),
            intent.body,
            intent.fingerprint,
            State.PENDING.value,
            evidence,
            now,
            intent.operation_id,
            intent.key,
        )
        # Durable like an intent: the request about to be sent is this one.
        with self._write(durable=self.durability is not Durability.BUFFERED) as conn:
            row = _returned(conn.execute(self._sql.reopen, values))
        return None if row is None else record_from_row(row)

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        with self._write(durable=False) as conn:
            return conn.execute(self._sql.reap, (now - self.retention, batch)).rowcount

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
                        f"operation {operation_id!r} is {state.value}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            return conn.execute(sql.purge, (listed,)).rowcount

    # -- reading ---------------------------------------------------------------------

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        return None if row is None else record_from_row(row)

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_key, (key,)).fetchone()
        return None if row is None else record_from_row(row)

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
                        record = record_from_row(row)
                        found[record.operation_id] = record
        return list(found.values())

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._use() as conn:
            rows = conn.execute(self._sql.unfinished, (self._limit(limit),)).fetchall()
        return [record_from_row(r) for r in rows]

    def operations(
        self, *, states: Iterable[State] | None = None, limit: int | None = None
    ) -> Sequence[OperationRecord]:
        sql = self._sql
        args: tuple[object, ...]
        if states is None:
            statement, args = sql.operations, (self._limit(limit),)
        else:
            wanted = sql.dialect.values([State(s).value for s in states])
            statement, args = sql.operations_in, (wanted, self._limit(limit))
        with self._use() as conn:
            rows = conn.execute(statement, args).fetchall()
        return [record_from_row(r) for r in rows]

    def counts(self) -> dict[State, int]:
        with self._use() as conn:
            found = {State(state): n for state, n in conn.execute(self._sql.counts)}
        return {state: found.get(state, 0) for state in State}

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside a transaction --------------------------------------------------------

    def _stored_headers(self, intent: Intent) -> str:
        return dump_headers(redact(intent.headers, self.secret_headers))

    def _limit(self, limit: int | None) -> int | None:
        return self._sql.dialect.unlimited if limit is None else limit

    def _fetch(self, conn: Connection, operation_id: str) -> OperationRecord:
        row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self.path!r}")
        return record_from_row(row)

    def _find_for(self, conn: Connection, intent: Intent) -> OperationRecord:
        """The stored operation matching `intent`, which must be the same request."""
        row = conn.execute(
            self._sql.find_for, (intent.operation_id, intent.key, intent.operation_id)
        ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self.path!r}")
        record = record_from_row(row)
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
    ) -> Begin:
        """Lease `record`, just read in this transaction, unless it is finished or a
        live owner holds it."""
        if record.state.finished:
            return Begin(Claim.FINISHED, record)
        holder = record.lease_owner
        live = (
            holder is not None
            and record.lease_expires is not None
            and record.lease_expires > now
            and not owner_is_dead(holder)
        )
        if live:
            return Begin(Claim.BUSY, record)
        row = _returned(
            conn.execute(
                self._sql.take_over,
                (State.IN_FLIGHT.value, owner, lease_until, now, record.operation_id, holder),
            )
        )
        if row is None:
            return Begin(Claim.BUSY, record)
        return Begin(Claim.CLAIMED, record_from_row(row))

    def _conflicts(self, conn: Connection, intents: Sequence[Intent]) -> list[tuple[str, str, str]]:
        """(operation id, key, why) for each of `intents` stored before for another
        request. `conn` sees the rows just inserted for them: those match themselves."""
        values = self._sql.dialect.values
        existing = [
            record_from_row(row)
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
            reason = None if record is None else mismatch(intent, record)
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
) -> tuple[Any, ...]:
    """The values of `Statements.admit` (`INSERT_COLUMNS`), headers already as stored."""
    return (
        intent.operation_id,
        intent.key,
        intent.method,
        intent.url,
        headers,
        intent.body,
        intent.fingerprint,
        intent.reference,
        state.value,
        owner,
        lease_until,
        now,
        now,
    )


def admitted(
    intent: Intent, headers: Headers, *, owner: str, now: float, lease_until: float
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
    )


_FIND_CHUNK = 5_000


def _chunked(values: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(values)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _returned(cursor: _Cursor) -> Any:
    """The row an `UPDATE ... RETURNING` wrote, or None. Read with fetchall: sqlite3
    finishes the statement (and so its write) only once every row is read."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
