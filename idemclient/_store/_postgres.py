"""The PostgreSQL store: one store for an application that runs on several hosts.

It runs the SQLite store's methods on the same statements, spelled for PostgreSQL (see
`_sqlstore` and `_statements`): admission by `INSERT ... ON CONFLICT DO NOTHING`, leases
taken by one conditional `UPDATE` (a dead local owner is taken over at once), mismatches
refused, secrets never written, response bodies capped, unfinished operations found
through a partial index, and only finished ones reaped. Times are the client's injected
clock, as in SQLite, never the database's. What is its own is here: the pool, the
schema, the commit level per transaction, registration in one statement a chunk, and the
outbox's `record_pending`.

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
import itertools
import threading
from collections.abc import Collection, Iterable, Iterator
from typing import Any, ClassVar

import psycopg
from psycopg.rows import tuple_row

from .._db.dialect import POSTGRES
from .._db.pg_schema import StoreIdentity, open_schema, read_identity
from .._db.postgres import (
    COMMIT_OFF,
    Conn,
    check_joinable,
    connect_args,
    display,
    durable_level,
    open_then_pool,
    pg_errors,
    quoted,
    with_lock_timeout,
)
from .._errors import StoreError, StoreUnavailable
from .._forks import afresh_in_child
from .._outcome import State
from ._base import Durability, Intent
from ._cipher import BodyEncryption
from ._pg_schema import STORE
from ._rows import DEFAULT_MAX_STORED_BODY
from ._sqlstore import SQLStore, admission_values, refused
from ._statements import INSERT_COLUMNS, Statements

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "idemclient"


#: Intents inserted at once by a registration (one statement each, in one transaction).
_REGISTER_CHUNK = 5_000


def _chunks(items: Iterable[Intent], size: int) -> Iterator[list[Intent]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def holds_no_store(url: str, *, schema: str = DEFAULT_SCHEMA) -> bool:
    """True when the database at `url` is reachable and holds no store in `schema`,
    found by reading only: a command that reads a store must not create one in a
    database it was pointed at by mistake. False when it holds one, or when that cannot
    be told here (the store's own opening then says why)."""
    try:
        with psycopg.connect(url, **connect_args(url, 10.0)) as conn:
            return read_identity(conn, schema, where=display(url), layout=STORE) is None
    except (psycopg.Error, StoreError, ValueError):
        return False


class PostgresStore(SQLStore):
    """A `Store` in a PostgreSQL database, shared by every host of an application.

    `url` is a libpq connection string (``postgresql://user@host:5432/db``). The store
    keeps its tables in their own PostgreSQL `schema` (``idemclient``), created on
    first use along with the tables; a schema holding tables idemclient did not create
    under its names, or a newer version of them, is refused with a `StoreError` and
    left as it is.

    `durability`, `max_stored_body`, `retention`, `secret_headers`, `persist_headers`
    and `encryption` mean what they mean for `SQLiteStore`. `max_connections` bounds
    the pool of connections this store opens; `connect_timeout` bounds connecting and
    waiting for a free one. `lock_timeout` bounds how long a statement waits for a row
    another transaction holds (an operation recorded by an outbox transaction that has
    not committed yet): past it the call raises `StoreUnavailable` instead of hanging.
    """

    # One round trip either way: `finish` reads the row back with RETURNING.
    _answer_from_known: ClassVar[bool] = False

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        durability: Durability | str = Durability.INTENT,
        max_stored_body: int = DEFAULT_MAX_STORED_BODY,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        encryption: BodyEncryption | None = None,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if lock_timeout <= 0:
            raise ValueError("lock_timeout must be positive")
        if not schema or len(schema.encode()) > 63:
            raise ValueError("schema must be 1..63 bytes (a PostgreSQL identifier)")
        self._where = display(url)
        self._configure(
            where=self._where,
            max_stored_body=max_stored_body,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
            encryption=encryption,
        )
        self._quoted = quoted(schema)
        self.schema = schema
        self.durability = Durability(durability)
        self.retention = retention
        self._closed = False
        #: what a call is told once the store cannot be used (closed, or crossed a fork)
        self._closed_why = "is closed"
        self._close_lock = threading.Lock()

        def prepare(conn: Conn) -> tuple[StoreIdentity, str | None]:
            return open_schema(conn, schema, where=self._where, layout=STORE), durable_level(conn)

        # Opened and migrated on one plain connection first (see `open_then_pool`).
        (self.identity, self._durable_level), self._pool = open_then_pool(
            url,
            prepare=prepare,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            configure=with_lock_timeout(lock_timeout),
            name=f"idemclient-{schema}",
            where=self._where,
            schema=self._quoted,
        )
        self._table = f"{self._quoted}.operations"
        # Hosts reaping at the same time share the work (SKIP LOCKED), never wait.
        self._sql = Statements(
            POSTGRES,
            table=self._table,
            order="created_at, seq",
            clock_table=f"{self._quoted}.store_clock",
            not_found_table=f"{self._quoted}.not_found",
            contents_table=f"{self._quoted}.contents",
        )
        afresh_in_child(self)

    def _locks_afresh(self) -> None:
        """In a forked child (`_forks`): its pool's connections are its parent's (a socket
        each, a session on the server), and statements sent on them from here would mix
        with the parent's: every call is refused, saying so, and `close` leaves them to
        the parent (psycopg never ends a connection from a process that did not open it)."""
        self._close_lock = threading.Lock()
        if not self._closed:
            self._closed = True
            self._closed_why = (
                "was opened before this process was forked from its parent: a PostgreSQL"
                " connection cannot cross a fork. Create the client (and its store) in"
                " each process, after the fork"
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

    def _admit(self, values: tuple[Any, ...]) -> bool:
        # Autocommitted on its own unless the commit level must change.
        with self._write(durable=self.durability is not Durability.BUFFERED) as conn:
            return conn.execute(self._sql.admit, values).rowcount == 1

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        chunks = _chunks(intents, _REGISTER_CHUNK)
        first = next(chunks, None)
        if first is None:
            return 0
        durable = self.durability is not Durability.BUFFERED
        with self._transaction(durable=durable) as conn:
            # In chunks, inside one transaction: all rows or none, and a batch of a
            # million rows is never held whole a second time.
            return self._register(conn, itertools.chain([first], chunks), now=now)

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
        self._check_outbox_connection(conn)
        with pg_errors(self._where, self._quoted):
            return self._register(conn, _chunks(intents, _REGISTER_CHUNK), now=now)

    def close(self) -> None:
        with self._close_lock:
            if not self._closed:
                self._closed = True
                self._pool.close()

    # -- connections -----------------------------------------------------------------

    @contextlib.contextmanager
    def _use(self) -> Iterator[Conn]:
        """A pooled connection (autocommit), with psycopg's errors turned into ours."""
        if self._closed:
            raise StoreUnavailable(self._where, self._closed_why)
        with pg_errors(self._where, self._quoted), self._pool.connection() as conn:
            yield conn

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

    # -- inside a transaction --------------------------------------------------------

    def _register(self, conn: Conn, chunks: Iterable[list[Intent]], *, now: float) -> int:
        """Insert the intents of `chunks` as pending on `conn` (inside a transaction):
        all of them are new or the same requests as before, or `OperationMismatch` is
        raised (after every chunk, so that every conflict is named)."""
        created = 0
        conflicts: list[tuple[str, str, str]] = []
        for intents in chunks:
            added, found = self._register_chunk(conn, intents, now=now)
            created += added
            conflicts += found
        if conflicts:
            raise refused(conflicts)
        return created

    def _register_chunk(
        self, conn: Conn, intents: list[Intent], *, now: float
    ) -> tuple[int, list[tuple[str, str, str]]]:
        rows = [
            admission_values(
                i, self._stored_headers(i), State.PENDING, None, None, now, cipher=self._cipher
            )
            for i in intents
        ]
        columns = list(zip(*rows, strict=True))
        with conn.cursor(row_factory=tuple_row) as cur:
            # One statement for the chunk, whatever its size.
            created = cur.execute(
                f"INSERT INTO {self._table} ({INSERT_COLUMNS})"
                " SELECT id, key, method, url, headers::jsonb, body, fingerprint, reference,"
                " state, lease_owner, lease_expires, created_at, updated_at, profile,"
                " server_created_at FROM"
                " unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
                " %s::bytea[], %s::text[], %s::text[], %s::text[], %s::text[], %s::float8[],"
                " %s::float8[], %s::float8[], %s::text[], %s::float8[]) WITH ORDINALITY AS"
                " t(id, key, method, url, headers, body, fingerprint, reference, state,"
                " lease_owner, lease_expires, created_at, updated_at, profile,"
                " server_created_at, n) ORDER BY n"
                " ON CONFLICT DO NOTHING",
                [list(column) for column in columns],
            ).rowcount
            if created == len(intents):
                return created, []
            # Some existed already: each must be the same request, or the whole
            # registration fails (the caller's transaction rolls back). Every conflict
            # is named. (On a cursor of our own: the caller's connection may make
            # rows of another shape.)
            return created, self._conflicts(cur, intents)

    def _check_outbox_connection(self, conn: object) -> None:
        where = self._where
        check_joinable(conn, self.schema, STORE, self.identity, where=where, what="operation")
