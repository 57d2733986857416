"""The inbox on PostgreSQL: processed message ids in the application's own database.

The ids live in a schema of their own (``idemclient_inbox``), in the database that
holds the application's tables, so that one transaction holds both the id and the
effect. A second delivery of an id that is being processed blocks on the first one's
uncommitted row; when the first commits, its `INSERT .. ON CONFLICT DO NOTHING` returns
nothing and the delivery is dropped; when the first rolls back (or its process dies,
and PostgreSQL ends its session), the second inserts and processes it.

PostgreSQL aborts a transaction at the first failed statement and then commits
nothing, silently. So a transaction whose handler caught a database error and carried
on is refused, loudly, rather than answered as processed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus

from .._db import postgres as pg
from .._db.errors import pg_error
from .._db.pg_schema import Layout, StoreIdentity, create_version_table, open_schema
from .._db.postgres import Conn, pg_errors
from .._errors import StoreUnavailable
from ..clock import Clock
from ..inbox import DEFAULT_RETENTION, Inbox

__all__ = ["DEFAULT_INBOX_SCHEMA", "INBOX", "PostgresInbox", "PostgresInboxStorage"]

DEFAULT_INBOX_SCHEMA = "idemclient_inbox"


def _v1(conn: Conn, schema: str) -> None:
    create_version_table(conn, schema, "inbox_version")
    conn.execute(
        f"""
        CREATE TABLE {schema}.inbox (
            sender text NOT NULL,
            message_id text NOT NULL,
            -- wall clock, epoch seconds: retention spans restarts and hosts
            received_at double precision NOT NULL,
            PRIMARY KEY (sender, message_id)
        )
        """
    )
    # The reaper reads the oldest ids first; without this it would scan the table.
    conn.execute(f"CREATE INDEX inbox_received ON {schema}.inbox (received_at)")


def _v2(conn: Conn, schema: str) -> None:
    conn.execute(
        f"""
        CREATE TABLE {schema}.resource_versions (
            sender text NOT NULL,
            resource text NOT NULL,
            -- the event's own sequence or creation time: whole or fractional
            version numeric NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (sender, resource)
        )
        """
    )


#: The inbox's tables. Their migrations are appended to, never edited.
INBOX = Layout("inbox_version", "inbox", (_v1, _v2), "inbox", "PostgresInbox")

Database = str | psycopg_pool.ConnectionPool[Any] | psycopg.Connection[Any]


class PostgresInboxStorage:
    """The inbox's table in a PostgreSQL database: a URL, the application's connection
    pool, or one of its connections.

    - A **URL**: the storage opens a small pool of its own (`max_connections`,
      autocommit, `lock_timeout` on every statement) and closes it on `close()`. Its
      commits survive a power loss: if the database runs with
      ``synchronous_commit = off``, the inbox's transactions set it `on`, because the
      2xx goes back only after the commit.
    - A `psycopg_pool.ConnectionPool` or a `psycopg.Connection` of the application:
      the storage borrows connections from it (a single connection is shared by
      threads behind a lock) and changes none of their settings; durability and
      timeouts are the application's. It never closes them. A connection must be
      handed over outside a transaction (the tables may need creating).

    The tables are created (or checked, or migrated) in `schema` when the storage
    opens; tables under our names that idemclient did not create, or a newer version
    of them, are refused with a `StoreError` and left as found.
    """

    def __init__(
        self,
        database: Database,
        *,
        schema: str = DEFAULT_INBOX_SCHEMA,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
    ) -> None:
        if not schema or len(schema.encode()) > 63:
            raise ValueError("schema must be 1..63 bytes (a PostgreSQL identifier)")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if lock_timeout <= 0:
            raise ValueError("lock_timeout must be positive")
        self.schema = schema
        self._quoted = pg.quoted(schema)
        self._table = f"{self._quoted}.inbox"
        self._lock = threading.RLock()  # only a single shared connection needs it
        self._closed = False
        self._durable_level: str | None = None
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._conn: Conn | None = None
        self.identity: StoreIdentity  # which inbox tables: set once they are open
        if isinstance(database, str):
            self._owned = True
            self._where = pg.display(database)
            self._open_own_pool(database, max_connections, connect_timeout, lock_timeout)
        elif isinstance(database, psycopg_pool.ConnectionPool):
            self._owned = False
            conninfo = database.conninfo  # a string, or a function that makes one
            self._where = (
                pg.display(conninfo) if isinstance(conninfo, str) else f"pool {database.name!r}"
            )
            self._pool = database
            with self._connection() as conn:
                self.identity = self._open_schema(conn)
        elif isinstance(database, psycopg.Connection):
            self._owned = False
            self._where = pg.display(database.info.dsn)
            if database.info.transaction_status is not TransactionStatus.IDLE:
                raise ValueError(
                    "hand the connection to the inbox outside a transaction:"
                    " it may need to create its tables"
                )
            self._conn = database
            self.identity = self._open_schema(database)
        else:
            raise TypeError(
                "the inbox needs a PostgreSQL URL, a psycopg_pool.ConnectionPool or a"
                f" psycopg (3) Connection, not {type(database).__module__}."
                f"{type(database).__qualname__}"
            )

    def _open_own_pool(
        self, url: str, max_connections: int, connect_timeout: float, lock_timeout: float
    ) -> None:
        def prepare(conn: Conn) -> tuple[StoreIdentity, str | None]:
            return self._open_schema(conn), pg.durable_level(conn)

        # Opened and migrated on one plain connection first (see `open_then_pool`).
        (self.identity, self._durable_level), self._pool = pg.open_then_pool(
            url,
            prepare=prepare,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            configure=pg.with_lock_timeout(lock_timeout),
            name=f"idemclient-inbox-{self.schema}",
            where=self._where,
            schema=self._quoted,
        )

    def _open_schema(self, conn: Conn) -> StoreIdentity:
        with pg_errors(self._where, self._quoted):
            return open_schema(conn, self.schema, where=self._where, layout=INBOX)

    @property
    def name(self) -> str:
        """The database, without its password."""
        return self._where

    def __repr__(self) -> str:
        return f"PostgresInboxStorage({self._where!r}, schema={self.schema!r})"

    # -- the interface -----------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Conn]:
        with self._connection() as conn:
            if conn.info.transaction_status is not TransactionStatus.IDLE:
                raise ValueError(
                    f"the connection to {self._where} is already in a transaction; inside"
                    " your own transaction, use inbox.record(conn, sender, message_id)"
                )
            in_handler = False
            try:
                with conn.transaction():
                    if self._durable_level is not None:
                        conn.execute(self._durable_level)
                    in_handler = True
                    yield conn
                    in_handler = False
                    _check_still_open(conn)
            except psycopg.Error as exc:
                if in_handler:
                    raise  # the application's own statement: its error, unchanged
                raise pg_error(self._where, self._quoted, exc) from exc

    def in_transaction(self, tx: Conn) -> bool:
        """True if `tx` may hold the id; raises `TypeError` or `ValueError` saying why
        not (autocommit with no transaction open, a failed transaction, another
        database...)."""
        where = self._where
        pg.check_joinable(tx, self.schema, INBOX, self.identity, where=where, what="message id")
        return True

    def insert(self, tx: Conn, sender: str, message_id: str, now: float) -> bool:
        with pg_errors(self._where, self._quoted):
            return (
                tx.execute(
                    f"INSERT INTO {self._table} (sender, message_id, received_at)"
                    " VALUES (%s, %s, %s) ON CONFLICT (sender, message_id) DO NOTHING"
                    " RETURNING true",
                    (sender, message_id, now),
                ).fetchone()
                is not None
            )

    def advance(self, tx: Conn, sender: str, resource: str, version: float, now: float) -> bool:
        # A second transaction advancing the same resource waits on the first one's row
        # lock, then compares with what that one committed.
        with pg_errors(self._where, self._quoted):
            return (
                tx.execute(
                    f"INSERT INTO {self._quoted}.resource_versions AS stored"
                    " (sender, resource, version, updated_at) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (sender, resource) DO UPDATE"
                    " SET version = excluded.version, updated_at = excluded.updated_at"
                    " WHERE excluded.version > stored.version RETURNING true",
                    (sender, resource, version, now),
                ).fetchone()
                is not None
            )

    def contains(self, sender: str, message_id: str) -> bool:
        with self._short() as conn:
            found = conn.execute(
                f"SELECT 1 FROM {self._table} WHERE sender = %s AND message_id = %s",
                (sender, message_id),
            ).fetchone()
        return found is not None

    def delete_older(self, cutoff: float, *, batch: int) -> int:
        with self._short() as conn:
            # A lost reap is redone by the next one: no need to wait for the WAL flush.
            conn.execute(pg.COMMIT_OFF)
            # SKIP LOCKED: hosts reaping at the same time share the work, never wait.
            return conn.execute(
                f"DELETE FROM {self._table} WHERE (sender, message_id) IN"
                f" (SELECT sender, message_id FROM {self._table} WHERE received_at < %s"
                " ORDER BY received_at LIMIT %s FOR UPDATE SKIP LOCKED)",
                (cutoff, batch),
            ).rowcount

    def close(self) -> None:
        """Close the pool the storage opened (never the application's pool or connection)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._owned and self._pool is not None:
                    self._pool.close()

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        """A connection to work on: the shared one (held under the lock), or one
        borrowed from the pool for as long as the block runs."""
        if self._closed:
            raise StoreUnavailable(self._where, "the inbox is closed")
        if self._conn is not None:
            with self._lock:
                yield self._conn
            return
        assert self._pool is not None
        with pg_errors(self._where, self._quoted):  # PoolTimeout, a refused connection
            conn = self._pool.getconn()
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    @contextlib.contextmanager
    def _short(self) -> Iterator[Conn]:
        """One short transaction of the inbox's own statements."""
        with pg_errors(self._where, self._quoted), self._connection() as conn:
            if conn.info.transaction_status is not TransactionStatus.IDLE:
                # It would run inside the application's transaction, and see (or
                # delete) what that transaction has not committed.
                raise ValueError(f"the connection to {self._where} is in a transaction")
            with conn.transaction():
                yield conn


def _check_still_open(conn: Conn) -> None:
    """Before committing: the handler must have left the transaction open and sound."""
    status = conn.info.transaction_status
    if status is TransactionStatus.INERROR:
        raise ValueError(
            "a statement failed inside the handler and its error was caught, so PostgreSQL"
            " aborted the transaction: neither the effect nor the message id can commit."
            " Let the error propagate (the message is then retried), or run the statement"
            " that may fail inside a savepoint (`with tx.transaction(): ...`)"
        )
    if status is not TransactionStatus.INTRANS:
        raise ValueError(
            "the transaction was ended inside the handler (COMMIT or ROLLBACK);"
            " the inbox commits it, so that the id and the effect go together"
        )


class PostgresInbox(Inbox[psycopg.Connection[Any]]):
    """An inbox in a PostgreSQL database: a URL, the application's connection pool, or
    one of its connections.

    The handler gets the `psycopg.Connection` the transaction is open on and writes
    the application's effect through it. See `PostgresInboxStorage` for what is opened,
    created and changed.
    """

    def __init__(
        self,
        database: Database,
        *,
        schema: str = DEFAULT_INBOX_SCHEMA,
        retention: float = DEFAULT_RETENTION,
        clock: Clock | None = None,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
    ) -> None:
        storage = PostgresInboxStorage(
            database,
            schema=schema,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            lock_timeout=lock_timeout,
        )
        try:
            super().__init__(storage, retention=retention, clock=clock)
        except BaseException:
            storage.close()
            raise
