"""The SQLite store: one private file per application, in WAL mode.

The schema and its migrations are made with sqlite-utils (see `_schema`); the hot path
(begin, finish) is a few prepared statements on the same connection, because
sqlite-utils' conveniences introspect the table on every call and that would cost more
than the rest of a request. One connection is shared by the threads of a process,
behind a lock; processes share the file through SQLite's own locking.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from .._errors import OperationMismatch, StoreError, StoreUnavailable
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
from ._rows import (
    COLUMNS,
    DEFAULT_SECRET_HEADERS,
    as_stored,
    dump_headers,
    mismatch,
    record_from_row,
    redact,
)
from ._schema import open_database, store_error

__all__ = ["SQLiteStore"]

_INSERT = (
    "INSERT INTO operations (id, key, method, url, headers, body, fingerprint, reference,"
    " state, attempts, maybe_applied, evidence, lease_owner, lease_expires, created_at,"
    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, '', ?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
_SELECT = f"SELECT {COLUMNS} FROM operations"
_REGISTER_CHUNK = 5_000
_UNFINISHED = "finished_at IS NULL"


class SQLiteStore:
    """The default `Store`: a local SQLite file, created with mode 0600.

    `durability` trades power-loss safety for speed (see `Durability`). Response bodies
    longer than `max_stored_body` bytes keep only their size and sha256. Finished
    operations older than `retention` seconds are reaped; unfinished ones never are.
    Header names in `secret_headers` are never written (Authorization, Cookie,
    Proxy-Authorization, Set-Cookie and X-Api-Key always included).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = Durability.INTENT,
        max_stored_body: int = 16 * 1024,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        busy_timeout: float = 30.0,
    ) -> None:
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._path = os.fspath(path)
        self.durability = Durability(durability)
        self.max_stored_body = max_stored_body
        self.retention = retention
        self.secret_headers = DEFAULT_SECRET_HEADERS | {h.lower() for h in secret_headers}
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Admission] = []
        self._conn = open_database(self._path, busy_timeout=busy_timeout)
        self._synchronous: str | None = None
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r}, durability={self.durability.value!r})"

    # -- writing ---------------------------------------------------------------------

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        headers = redact(intent.headers, self.secret_headers)
        ticket = _Admission(intent, dump_headers(headers), owner, now, lease_until)
        with self._queue_lock:
            self._queue.append(ticket)
        with self._use(durable=self.durability is not Durability.BUFFERED) as conn:
            # Group commit: whoever holds the connection first admits every intent
            # queued by then, in one transaction and one fsync. A thread that gets the
            # connection after its intent was admitted by another finds it done.
            if ticket.created is None and ticket.error is None:
                self._admit_queued(conn)
        if ticket.error is not None:
            raise ticket.error
        if ticket.created:
            return Begin(Claim.CREATED, _admitted(ticket, headers))
        with self._use(durable=self.durability is Durability.FULL) as conn, _transaction(conn):
            record = self._find_for(conn, intent)
            if record.state.finished:
                return Begin(Claim.FINISHED, record)
            return self._claim_locked(conn, record, owner=owner, now=now, lease_until=lease_until)

    def _admit_queued(self, conn: sqlite3.Connection) -> None:
        """Admission in one statement per intent: a row written means its caller owns
        the operation, exactly as the server admits a key."""
        with self._queue_lock:
            group = list(self._queue)
            self._queue.clear()
        try:
            # Alone, the insert is its own transaction; together, they share one.
            with _transaction(conn) if len(group) > 1 else contextlib.nullcontext():
                for ticket in group:
                    cursor = conn.execute(
                        _INSERT,
                        (
                            ticket.intent.operation_id,
                            ticket.intent.key,
                            ticket.intent.method,
                            ticket.intent.url,
                            ticket.headers,
                            ticket.intent.body,
                            ticket.intent.fingerprint,
                            ticket.intent.reference,
                            State.IN_FLIGHT.value,
                            ticket.owner,
                            ticket.lease_until,
                            ticket.now,
                            ticket.now,
                        ),
                    )
                    ticket.created = cursor.rowcount == 1
        except sqlite3.Error as exc:
            error = self._translate(exc)
            for ticket in group:  # the transaction rolled back: none of them is recorded
                ticket.created, ticket.error = None, error
        except BaseException as exc:
            for ticket in group:
                ticket.created, ticket.error = None, exc
            raise

    def claim(self, operation_id: str, *, owner: str, now: float, lease_until: float) -> Begin:
        with self._use(durable=self.durability is Durability.FULL) as conn, _transaction(conn):
            record = self._fetch(conn, operation_id)
            if record.state.finished:
                return Begin(Claim.FINISHED, record)
            return self._claim_locked(conn, record, owner=owner, now=now, lease_until=lease_until)

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._use(durable=self.durability is Durability.FULL) as conn:
            cursor = conn.execute(
                "UPDATE operations SET attempts = ?, maybe_applied = max(maybe_applied, ?),"
                " evidence = ?, not_before = ?, lease_expires = ?, updated_at = ?"
                " WHERE id = ? AND lease_owner = ? AND finished_at IS NULL",
                (
                    progress.attempts,
                    int(progress.maybe_applied),
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
        finished_at = now if state.finished else None
        # A final answer ends any wait the server asked for.
        not_before = None if state.finished else progress.not_before
        # A final answer is recorded whoever holds the lease: the server answers the
        # same under this key to everyone. Giving up only counts while we own it.
        guard = "finished_at IS NULL" if state.finished else "lease_owner = ?"
        guard_args: tuple[Any, ...] = () if state.finished else (owner,)
        with self._use(durable=self.durability is Durability.FULL) as conn:
            cursor = conn.execute(
                "UPDATE operations SET state = ?, attempts = ?,"
                " maybe_applied = max(maybe_applied, ?), evidence = ?, not_before = ?,"
                " lease_owner = NULL, lease_expires = NULL, status_code = ?,"
                " response_headers = ?, response_body = ?, response_sha256 = ?,"
                " response_size = ?, updated_at = ?, finished_at = ?"
                f" WHERE id = ? AND {guard}",
                (
                    state.value,
                    progress.attempts,
                    int(progress.maybe_applied),
                    progress.evidence,
                    not_before,
                    *response_values,
                    now,
                    finished_at,
                    operation_id,
                    *guard_args,
                ),
            )
            if cursor.rowcount != 1 or known is None:
                # Not written as asked (a final answer was there first, or the lease
                # moved on), or nothing to answer from: the stored row is the truth.
                return self._fetch(conn, operation_id)
        return dataclasses.replace(
            known,
            state=state,
            attempts=progress.attempts,
            maybe_applied=known.maybe_applied or progress.maybe_applied,
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
    ) -> OperationRecord:
        if applied:
            _kept, columns = as_stored(
                response or StoredResponse.of(200, (), b""),
                self.secret_headers,
                self.max_stored_body,
            )
            sets = (
                "state = ?, status_code = ?, response_headers = ?, response_body = ?,"
                " response_sha256 = ?, response_size = ?, finished_at = ?"
            )
            values: tuple[Any, ...] = (State.SUCCEEDED.value, *columns, now)
        else:
            sets = "state = ?, maybe_applied = 0"
            values = (State.NOT_SENT.value,)
        with self._use(durable=self.durability is Durability.FULL) as conn:
            rows = conn.execute(
                f"UPDATE operations SET {sets}, evidence = ?, not_before = NULL,"
                " lease_owner = NULL, lease_expires = NULL, updated_at = ?"
                " WHERE id = ? AND finished_at IS NULL AND lease_owner = ?"
                f" RETURNING {COLUMNS}",
                (*values, evidence, now, operation_id, owner),
            ).fetchall()
            return record_from_row(rows[0]) if rows else self._fetch(conn, operation_id)

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        stored: dict[Headers, str] = {}  # rows of a batch share their headers: redact once
        created = 0
        conflicts: list[tuple[str, str, str]] = []
        durable = self.durability is not Durability.BUFFERED
        with self._use(durable=durable) as conn, _transaction(conn):
            # In chunks, inside one transaction: all rows or none, and a batch of a
            # hundred thousand rows is never held whole a second time.
            for chunk in _chunks(intents, _REGISTER_CHUNK):
                rows = [
                    (
                        i.operation_id,
                        i.key,
                        i.method,
                        i.url,
                        stored.get(i.headers)
                        or stored.setdefault(i.headers, self._stored_headers(i)),
                        i.body,
                        i.fingerprint,
                        i.reference,
                        State.PENDING.value,
                        None,
                        None,
                        now,
                        now,
                    )
                    for i in chunk
                ]
                before = conn.total_changes
                conn.executemany(_INSERT, rows)
                added = conn.total_changes - before
                created += added
                if added != len(rows):
                    # Some existed already: each must be the same request.
                    for intent in chunk:
                        try:
                            self._find_for(conn, intent)
                        except OperationMismatch as exc:
                            conflicts.append((intent.operation_id, intent.key, str(exc)))
            if conflicts:  # raised inside the transaction: it rolls back, nothing is kept
                first_id, first_key, first_reason = conflicts[0]
                raise OperationMismatch(
                    f"{len(conflicts)} operation(s) were recorded before for other"
                    f" requests; nothing was registered. First: {first_reason}",
                    operation_id=first_id,
                    key=first_key,
                    conflicts=tuple((op, reason) for op, _key, reason in conflicts),
                )
        return created

    def _stored_headers(self, intent: Intent) -> str:
        return dump_headers(redact(intent.headers, self.secret_headers))

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        cutoff = now - self.retention
        with self._use(durable=False) as conn:
            cursor = conn.execute(
                "DELETE FROM operations WHERE id IN (SELECT id FROM operations"
                " WHERE finished_at IS NOT NULL AND finished_at < ? LIMIT ?)",
                (cutoff, batch),
            )
            return cursor.rowcount

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(operation_ids)
        with self._use(durable=self.durability is Durability.FULL) as conn, _transaction(conn):
            for operation_id in ids:
                record = self._fetch(conn, operation_id)
                if not record.state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {record.state.value}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            before = conn.total_changes
            conn.executemany("DELETE FROM operations WHERE id = ?", [(i,) for i in ids])
            return conn.total_changes - before

    # -- reading ---------------------------------------------------------------------

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(f"{_SELECT} WHERE id = ?", (operation_id,)).fetchone()
        return None if row is None else record_from_row(row)

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(f"{_SELECT} WHERE key = ?", (key,)).fetchone()
        return None if row is None else record_from_row(row)

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._use() as conn:
            rows = conn.execute(
                f"{_SELECT} WHERE {_UNFINISHED} ORDER BY created_at LIMIT ?",
                (-1 if limit is None else limit,),
            ).fetchall()
        return [record_from_row(r) for r in rows]

    def operations(
        self, *, states: Iterable[State] | None = None, limit: int | None = None
    ) -> Sequence[OperationRecord]:
        where, args = "", []
        if states is not None:
            wanted = [State(s).value for s in states]
            where = f" WHERE state IN ({', '.join('?' for _ in wanted)})"
            args = list(wanted)
        with self._use() as conn:
            rows = conn.execute(
                f"{_SELECT}{where} ORDER BY created_at LIMIT ?",
                (*args, -1 if limit is None else limit),
            ).fetchall()
        return [record_from_row(r) for r in rows]

    def counts(self) -> dict[State, int]:
        with self._use() as conn:
            rows = conn.execute("SELECT state, count(*) FROM operations GROUP BY state")
            found = {State(state): n for state, n in rows}
        return {state: found.get(state, 0) for state in State}

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside the lock -------------------------------------------------------------

    @contextlib.contextmanager
    def _use(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with the fsync level this commit needs, and
        SQLite's errors turned into ours (naming the file)."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(self._path, "is closed")
            synchronous = "FULL" if durable else "NORMAL"
            try:
                if synchronous != self._synchronous:
                    self._conn.execute(f"PRAGMA synchronous = {synchronous}")
                    self._synchronous = synchronous
                yield self._conn
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    def _translate(self, error: sqlite3.Error) -> StoreError:
        return store_error(self._path, error)

    def _fetch(self, conn: sqlite3.Connection, operation_id: str) -> OperationRecord:
        row = conn.execute(f"{_SELECT} WHERE id = ?", (operation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self._path!r}")
        return record_from_row(row)

    def _find_for(self, conn: sqlite3.Connection, intent: Intent) -> OperationRecord:
        """The stored operation matching `intent`, which must be the same request."""
        row = conn.execute(
            f"{_SELECT} WHERE id = ? OR key = ? ORDER BY id = ? DESC LIMIT 1",
            (intent.operation_id, intent.key, intent.operation_id),
        ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self._path!r}")
        record = record_from_row(row)
        reason = mismatch(intent, record)
        if reason is not None:
            raise OperationMismatch(reason, operation_id=intent.operation_id, key=record.key)
        return record

    def _claim_locked(
        self,
        conn: sqlite3.Connection,
        record: OperationRecord,
        *,
        owner: str,
        now: float,
        lease_until: float,
    ) -> Begin:
        holder = record.lease_owner
        live = (
            holder is not None
            and record.lease_expires is not None
            and record.lease_expires > now
            and not owner_is_dead(holder)
        )
        if live:
            return Begin(Claim.BUSY, record)
        # Conditional on the holder we just read: the takeover is one guarded write.
        cursor = conn.execute(
            "UPDATE operations SET state = ?, lease_owner = ?, lease_expires = ?,"
            " updated_at = ? WHERE id = ? AND finished_at IS NULL AND lease_owner IS ?",
            (State.IN_FLIGHT.value, owner, lease_until, now, record.operation_id, holder),
        )
        if cursor.rowcount != 1:
            return Begin(Claim.BUSY, record)
        return Begin(Claim.CLAIMED, self._fetch(conn, record.operation_id))


def _chunks(items: Iterable[Intent], size: int) -> Iterator[list[Intent]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


@dataclasses.dataclass(slots=True)
class _Admission:
    """One intent waiting to be admitted, and what became of it."""

    intent: Intent
    headers: str
    owner: str
    now: float
    lease_until: float
    created: bool | None = None
    error: BaseException | None = None


def _admitted(ticket: _Admission, headers: Headers) -> OperationRecord:
    """The record just inserted, without reading it back."""
    intent = ticket.intent
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
        lease_owner=ticket.owner,
        lease_expires=ticket.lease_until,
        response=None,
        created_at=ticket.now,
        updated_at=ticket.now,
        finished_at=None,
    )


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
