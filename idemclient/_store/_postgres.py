"""The PostgreSQL store: one store for an application that runs on several hosts.

It behaves as the SQLite store does, statement for statement: admission by
`INSERT ... ON CONFLICT DO NOTHING`, leases taken by one conditional `UPDATE` (a dead
local owner is taken over at once), mismatches refused, secrets never written, response
bodies capped, unfinished operations found through a partial index, and only finished
ones reaped. Times are the client's injected clock, as in SQLite, never the database's.

Durability maps onto `synchronous_commit`, per transaction: a commit that must survive
a power loss keeps the database's own setting (raised to `on` if the database runs with
`off`); any other commit runs with `SET LOCAL synchronous_commit = off`, which returns
before the WAL is flushed. Either way a commit survives the client's crash, because the
server holds it.

Connections come from a small `psycopg_pool` pool (autocommit; explicit transactions),
so the threads of one process do not queue behind each other. The async transport
calls the store from worker threads, so one sync store serves both.

psycopg is an optional dependency: this module imports it, and nothing imports this
module until a PostgreSQL store is asked for (see `_open`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import tuple_row

from .._errors import OperationMismatch, StoreError, StoreUnavailable
from .._outcome import State
from ._base import (
    Begin,
    Claim,
    Durability,
    Intent,
    OperationRecord,
    Progress,
    StoredResponse,
)
from ._owners import owner_is_dead
from ._pg_conn import (
    COMMIT_OFF,
    Conn,
    check_joinable,
    configure,
    connect_args,
    display,
    durable_level,
    pg_error,
)
from ._pg_schema import STORE, StoreIdentity, open_schema
from ._rows import (
    COLUMNS,
    DEFAULT_SECRET_HEADERS,
    as_stored,
    dump_headers,
    mismatch,
    record_from_row,
    redact,
)

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "idemclient"

_INSERT_COLUMNS = (
    "id, key, method, url, headers, body, fingerprint, reference, state, lease_owner,"
    " lease_expires, created_at, updated_at"
)


class PostgresStore:
    """A `Store` in a PostgreSQL database, shared by every host of an application.

    `url` is a libpq connection string (``postgresql://user@host:5432/db``). The store
    keeps its tables in their own PostgreSQL `schema` (``idemclient``), created on
    first use along with the tables; a schema holding tables idemclient did not create
    under its names, or a newer version of them, is refused with a `StoreError` and
    left as it is.

    `durability`, `max_stored_body`, `retention` and `secret_headers` mean what they
    mean for `SQLiteStore`. `max_connections` bounds the pool of connections this
    store opens; `connect_timeout` bounds connecting and waiting for a free one.
    `lock_timeout` bounds how long a statement waits for a row another transaction
    holds (an operation recorded by an outbox transaction that has not committed yet):
    past it the call raises `StoreUnavailable` instead of hanging.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        durability: Durability | str = Durability.INTENT,
        max_stored_body: int = 16 * 1024,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
    ) -> None:
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        if retention <= 0:
            raise ValueError("retention must be positive")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if lock_timeout <= 0:
            raise ValueError("lock_timeout must be positive")
        if not schema or len(schema.encode()) > 63:
            raise ValueError("schema must be 1..63 bytes (a PostgreSQL identifier)")
        self._where = display(url)
        self._quoted = sql.Identifier(schema).as_string()
        self.schema = schema
        self.durability = Durability(durability)
        self.max_stored_body = max_stored_body
        self.retention = retention
        self.secret_headers = DEFAULT_SECRET_HEADERS | {h.lower() for h in secret_headers}
        self._closed = False
        self._close_lock = threading.Lock()
        connect_kwargs = connect_args(url, connect_timeout)
        # Open and migrate on one plain connection first: a wrong URL or a foreign
        # schema then fails here, at once and with its own message, instead of in the
        # pool's background reconnection loop.
        try:
            with psycopg.connect(url, **connect_kwargs) as conn:
                self.identity: StoreIdentity = open_schema(conn, schema, where=self._where)
                self._durable_level = durable_level(conn)
        except StoreError:
            raise
        except psycopg.Error as exc:
            raise self._translate(exc) from exc
        self._table = f"{self._quoted}.operations"
        self._select = f"SELECT {COLUMNS} FROM {self._table}"
        self._insert = (
            f"INSERT INTO {self._table} ({_INSERT_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s)"
            f" ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
        )
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            url,
            kwargs=connect_kwargs,
            min_size=1,
            max_size=max_connections,
            timeout=connect_timeout,
            configure=functools.partial(configure, lock_timeout=lock_timeout),
            # A connection broken by a database restart is replaced, not handed out.
            check=psycopg_pool.ConnectionPool.check_connection,
            name=f"idemclient-{schema}",
            open=True,
        )

    @property
    def path(self) -> str:
        """Where the store is, for people: the URL without its password."""
        return self._where

    def __repr__(self) -> str:
        return (
            f"PostgresStore({self._where!r}, schema={self.schema!r},"
            f" durability={self.durability.value!r})"
        )

    # -- writing ---------------------------------------------------------------------

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        row = self._insert_row(intent, State.IN_FLIGHT, owner, lease_until, now)
        with self._write(durable=self.durability is not Durability.BUFFERED) as conn:
            # Admission in one statement: a row returned means this call owns the
            # operation, exactly as the server admits a key.
            created = conn.execute(self._insert, row).fetchone()
        if created is not None:
            return Begin(Claim.CREATED, record_from_row(created))
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._find_for(conn, intent)
            if record.state.finished:
                return Begin(Claim.FINISHED, record)
            return self._claim_locked(conn, record, owner=owner, now=now, lease_until=lease_until)

    def claim(self, operation_id: str, *, owner: str, now: float, lease_until: float) -> Begin:
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
            if record.state.finished:
                return Begin(Claim.FINISHED, record)
            return self._claim_locked(conn, record, owner=owner, now=now, lease_until=lease_until)

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._write(durable=self.durability is Durability.FULL) as conn:
            cursor = conn.execute(
                f"UPDATE {self._table} SET attempts = %s, maybe_applied = maybe_applied OR %s,"
                " evidence = %s, not_before = %s, lease_expires = %s, updated_at = %s"
                " WHERE id = %s AND lease_owner = %s AND finished_at IS NULL",
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
        known: OperationRecord | None = None,  # one round trip either way: RETURNING
    ) -> OperationRecord:
        _kept, response_values = as_stored(response, self.secret_headers, self.max_stored_body)
        now = progress.now
        finished_at = now if state.finished else None
        # A final answer ends any wait the server asked for.
        not_before = None if state.finished else progress.not_before
        # A final answer is recorded whoever holds the lease: the server answers the
        # same under this key to everyone. Giving up only counts while we own it.
        guard = "finished_at IS NULL" if state.finished else "lease_owner = %s"
        guard_args: tuple[Any, ...] = () if state.finished else (owner,)
        with self._write(durable=self.durability is Durability.FULL) as conn:
            row = conn.execute(
                f"UPDATE {self._table} SET state = %s, attempts = %s,"
                " maybe_applied = maybe_applied OR %s, evidence = %s, not_before = %s,"
                " lease_owner = NULL, lease_expires = NULL, status_code = %s,"
                " response_headers = %s::jsonb, response_body = %s, response_sha256 = %s,"
                " response_size = %s, updated_at = %s, finished_at = %s"
                f" WHERE id = %s AND {guard} RETURNING {COLUMNS}",
                (
                    state.value,
                    progress.attempts,
                    progress.maybe_applied,
                    progress.evidence,
                    not_before,
                    *response_values,
                    now,
                    finished_at,
                    operation_id,
                    *guard_args,
                ),
            ).fetchone()
            return record_from_row(row) if row is not None else self._fetch(conn, operation_id)

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
                "state = %s, status_code = %s, response_headers = %s::jsonb, response_body = %s,"
                " response_sha256 = %s, response_size = %s, finished_at = %s"
            )
            values: tuple[Any, ...] = (State.SUCCEEDED.value, *columns, now)
        else:
            sets = "state = %s, maybe_applied = false"
            values = (State.NOT_SENT.value,)
        with self._write(durable=self.durability is Durability.FULL) as conn:
            row = conn.execute(
                f"UPDATE {self._table} SET {sets}, evidence = %s, not_before = NULL,"
                " lease_owner = NULL, lease_expires = NULL, updated_at = %s"
                " WHERE id = %s AND finished_at IS NULL AND lease_owner = %s"
                f" RETURNING {COLUMNS}",
                (*values, evidence, now, operation_id, owner),
            ).fetchone()
            return record_from_row(row) if row is not None else self._fetch(conn, operation_id)

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        intents = list(intents)
        if not intents:
            return 0
        durable = self.durability is not Durability.BUFFERED
        with self._transaction(durable=durable) as conn:
            return self._register(conn, intents, now=now)

    def record_pending(self, conn: Conn, intents: Iterable[Intent], *, now: float) -> int:
        """Record operations as pending inside the caller's own transaction on `conn`.

        The rows commit (or roll back) with whatever else that transaction writes: this
        is the outbox rule, an operation recorded in the same commit as the business
        row that caused it. `conn` must be a psycopg connection to this store's
        database with a transaction open, or one about to begin (not in autocommit
        mode). Raises `OperationMismatch` (nothing recorded) when one of them exists
        for another request. Returns how many were new.

        The durability of the commit is the caller's (their `synchronous_commit`).
        """
        intents = list(intents)
        self._check_outbox_connection(conn)
        if not intents:
            return 0
        try:
            return self._register(conn, intents, now=now)
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        cutoff = now - self.retention
        with self._write(durable=False) as conn:
            # SKIP LOCKED: hosts reaping at the same time share the work, never wait.
            return conn.execute(
                f"DELETE FROM {self._table} WHERE id IN (SELECT id FROM {self._table}"
                " WHERE finished_at IS NOT NULL AND finished_at < %s LIMIT %s"
                " FOR UPDATE SKIP LOCKED)",
                (cutoff, batch),
            ).rowcount

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(operation_ids)
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            found = dict(
                conn.execute(
                    f"SELECT id, state FROM {self._table} WHERE id = ANY(%s) FOR UPDATE",
                    (ids,),
                ).fetchall()
            )
            for operation_id in ids:
                if operation_id not in found:
                    raise KeyError(f"no operation {operation_id!r} in {self._where!r}")
                state = State(found[operation_id])
                if not state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {state.value}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            return conn.execute(f"DELETE FROM {self._table} WHERE id = ANY(%s)", (ids,)).rowcount

    # -- reading ---------------------------------------------------------------------

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(f"{self._select} WHERE id = %s", (operation_id,)).fetchone()
        return None if row is None else record_from_row(row)

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(f"{self._select} WHERE key = %s", (key,)).fetchone()
        return None if row is None else record_from_row(row)

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._use() as conn:
            rows = conn.execute(
                f"{self._select} WHERE finished_at IS NULL ORDER BY created_at, seq LIMIT %s",
                (limit,),
            ).fetchall()
        return [record_from_row(r) for r in rows]

    def operations(
        self, *, states: Iterable[State] | None = None, limit: int | None = None
    ) -> Sequence[OperationRecord]:
        where, args = "", []
        if states is not None:
            where = " WHERE state = ANY(%s)"
            args = [[State(s).value for s in states]]
        with self._use() as conn:
            rows = conn.execute(
                f"{self._select}{where} ORDER BY created_at, seq LIMIT %s", (*args, limit)
            ).fetchall()
        return [record_from_row(r) for r in rows]

    def counts(self) -> dict[State, int]:
        with self._use() as conn:
            rows = conn.execute(f"SELECT state, count(*) FROM {self._table} GROUP BY state")
            found = {State(state): n for state, n in rows}
        return {state: found.get(state, 0) for state in State}

    def close(self) -> None:
        with self._close_lock:
            if not self._closed:
                self._closed = True
                self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- connections -----------------------------------------------------------------

    @contextlib.contextmanager
    def _use(self) -> Iterator[Conn]:
        """A pooled connection (autocommit), with psycopg's errors turned into ours."""
        if self._closed:
            raise StoreUnavailable(self._where, "is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    @contextlib.contextmanager
    def _transaction(self, *, durable: bool) -> Iterator[Conn]:
        """A transaction whose commit waits for the WAL flush only when `durable`."""
        with self._use() as conn, conn.transaction():
            level = self._durable_level if durable else COMMIT_OFF
            if level is not None:
                conn.execute(level)
            yield conn

    @contextlib.contextmanager
    def _write(self, *, durable: bool) -> Iterator[Conn]:
        """For one statement: in a transaction only when the commit level must change
        (`SET LOCAL` needs one), else autocommitted in a single round trip."""
        level = self._durable_level if durable else COMMIT_OFF
        if level is None:
            with self._use() as conn:
                yield conn
        else:
            with self._use() as conn, conn.transaction():
                conn.execute(level)
                yield conn

    def _translate(self, error: psycopg.Error) -> StoreError:
        return pg_error(self._where, self._quoted, error)

    # -- inside a transaction --------------------------------------------------------

    def _insert_row(
        self, intent: Intent, state: State, owner: str | None, lease: float | None, now: float
    ) -> tuple[Any, ...]:
        return (
            intent.operation_id,
            intent.key,
            intent.method,
            intent.url,
            dump_headers(redact(intent.headers, self.secret_headers)),
            intent.body,
            intent.fingerprint,
            intent.reference,
            state.value,
            owner,
            lease,
            now,
            now,
        )

    def _register(self, conn: Conn, intents: list[Intent], *, now: float) -> int:
        """Insert `intents` as pending on `conn` (inside a transaction): all of them are
        new or the same requests as before, or `OperationMismatch` is raised."""
        rows = [self._insert_row(i, State.PENDING, None, None, now) for i in intents]
        columns = list(zip(*rows, strict=True))
        with conn.cursor(row_factory=tuple_row) as cur:
            # One statement for the whole set, whatever its size.
            created = cur.execute(
                f"INSERT INTO {self._table} ({_INSERT_COLUMNS})"
                " SELECT id, key, method, url, headers::jsonb, body, fingerprint, reference,"
                " state, lease_owner, lease_expires, created_at, updated_at FROM unnest("
                " %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[],"
                " %s::text[], %s::text[], %s::text[], %s::text[], %s::float8[],"
                " %s::float8[], %s::float8[]) WITH ORDINALITY AS t(id, key, method, url,"
                " headers, body, fingerprint, reference, state, lease_owner, lease_expires,"
                " created_at, updated_at, n) ORDER BY n ON CONFLICT DO NOTHING",
                [list(column) for column in columns],
            ).rowcount
            if created == len(intents):
                return created
            # Some existed already: each must be the same request, or the whole
            # registration fails (the caller's transaction rolls back). Every conflict
            # is named.
            existing = [
                record_from_row(row)
                for row in cur.execute(
                    f"{self._select} WHERE id = ANY(%s) OR key = ANY(%s)",
                    ([i.operation_id for i in intents], [i.key for i in intents]),
                )
            ]
        by_id = {r.operation_id: r for r in existing}
        by_key = {r.key: r for r in existing}
        conflicts = []
        for intent in intents:
            record = by_id.get(intent.operation_id) or by_key.get(intent.key)
            reason = None if record is None else mismatch(intent, record)
            if reason is not None:
                conflicts.append((intent.operation_id, reason))
        if conflicts:
            first = conflicts[0][0]
            raise OperationMismatch(
                f"{len(conflicts)} operation(s) were recorded before for other"
                f" requests; nothing was registered. First: {conflicts[0][1]}",
                operation_id=first,
                key=next(i.key for i in intents if i.operation_id == first),
                conflicts=tuple(conflicts),
            )
        return created

    def _check_outbox_connection(self, conn: object) -> None:
        check_joinable(
            conn,
            schema=self.schema,
            layout=STORE,
            identity=self.identity,
            where=self._where,
            what="operation",
        )

    def _fetch(self, conn: Conn, operation_id: str) -> OperationRecord:
        row = conn.execute(f"{self._select} WHERE id = %s", (operation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self._where!r}")
        return record_from_row(row)

    def _find_for(self, conn: Conn, intent: Intent) -> OperationRecord:
        """The stored operation matching `intent`, which must be the same request."""
        row = conn.execute(
            f"{self._select} WHERE id = %s OR key = %s ORDER BY id = %s DESC LIMIT 1",
            (intent.operation_id, intent.key, intent.operation_id),
        ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self._where!r}")
        record = record_from_row(row)
        reason = mismatch(intent, record)
        if reason is not None:
            raise OperationMismatch(
                reason,
                operation_id=intent.operation_id,
                key=record.key if record.operation_id == intent.operation_id else intent.key,
            )
        return record

    def _claim_locked(
        self,
        conn: Conn,
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
        # Under READ COMMITTED, a concurrent takeover makes this one match no row.
        row = conn.execute(
            f"UPDATE {self._table} SET state = %s, lease_owner = %s, lease_expires = %s,"
            " updated_at = %s WHERE id = %s AND finished_at IS NULL"
            f" AND lease_owner IS NOT DISTINCT FROM %s RETURNING {COLUMNS}",
            (State.IN_FLIGHT.value, owner, lease_until, now, record.operation_id, holder),
        ).fetchone()
        if row is None:
            return Begin(Claim.BUSY, record)
        return Begin(Claim.CLAIMED, record_from_row(row))
