"""Where an inbox keeps the ids it has processed: the interface, and SQLite.

The inbox's table must live in the application's own database, because the whole point
is one transaction holding both the message id and the application's effect. So an
`InboxStorage` does not own a database: it opens (or is handed) the application's
connection, adds one table to it, and offers transactions on it in which the
application writes its effect.

The interface is small so that other databases fit behind it: four statements
(`INSERT .. ON CONFLICT DO NOTHING`, a look-up, a batched `DELETE`,
`BEGIN`/`COMMIT`/`ROLLBACK`). The PostgreSQL one is `idemclient.postgres`'s
`PostgresInboxStorage`, kept there because it needs psycopg; there a second delivery of
the same id blocks on the first one's uncommitted row and then sees the conflict, the
behaviour SQLite's write lock gives here.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from .._db.errors import sqlite_errors
from .._db.sqlite import MEMORY, connect, immediate, use_wal
from .._db.versions import upgrade
from .._errors import ForeignStore, StoreUnavailable

__all__ = [
    "INBOX_TABLE",
    "SCHEMA_TABLE",
    "VERSIONS_TABLE",
    "InboxStorage",
    "SQLiteInboxStorage",
]

Tx = TypeVar("Tx")

#: The application's database gains these two tables, and nothing else is touched.
INBOX_TABLE = "idemclient_inbox"
SCHEMA_TABLE = "idemclient_schema"
#: ... and this one, from schema version 2: the latest version applied per resource.
VERSIONS_TABLE = "idemclient_resource_versions"
_COMPONENT = "inbox"


class InboxStorage(Protocol[Tx]):
    """The processed-messages table in an application's database.

    `Tx` is what the application writes its effect through (a `sqlite3.Connection`,
    a psycopg connection). Implementations are thread-safe.
    """

    @property
    def name(self) -> str:
        """The database, for messages (a file path; never a password)."""
        ...

    def transaction(self) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction: committed durably on a normal exit, rolled back on an
        exception. The caller's effect and `insert` share it."""
        ...

    def in_transaction(self, tx: Tx) -> bool:
        """Whether `tx` has a transaction open (`insert` outside one is refused)."""
        ...

    def insert(self, tx: Tx, sender: str, message_id: str, now: float) -> bool:
        """Record the id inside `tx`'s transaction. False: it was recorded before."""
        ...

    def contains(self, sender: str, message_id: str) -> bool:
        """Whether the id is recorded (committed)."""
        ...

    def advance(self, tx: Tx, sender: str, resource: str, version: float, now: float) -> bool:
        """Inside `tx`'s transaction, set `resource`'s applied version to `version` if
        that is greater than the one stored (or none is). False: it was not."""
        ...

    def delete_older(self, cutoff: float, *, batch: int) -> int:
        """Delete up to `batch` ids received before `cutoff` (wall-clock seconds)."""
        ...

    def close(self) -> None: ...


def _v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE TABLE {INBOX_TABLE} ("
        " sender TEXT NOT NULL,"
        " message_id TEXT NOT NULL,"
        " received_at REAL NOT NULL,"  # wall clock: retention spans restarts and hosts
        " PRIMARY KEY (sender, message_id))"
    )
    # The reaper reads the oldest rows first; without this it would scan the table.
    conn.execute(f"CREATE INDEX {INBOX_TABLE}_received ON {INBOX_TABLE} (received_at)")


def _v2(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE TABLE {VERSIONS_TABLE} ("
        " sender TEXT NOT NULL,"
        " resource TEXT NOT NULL,"
        " version NUMERIC NOT NULL,"  # the event's own sequence or creation time
        " updated_at REAL NOT NULL,"
        " PRIMARY KEY (sender, resource))"
    )


#: MIGRATIONS[n - 1] takes the inbox's tables from version n - 1 to n. Append only.
MIGRATIONS: Sequence[Callable[[sqlite3.Connection], None]] = (_v1, _v2)
SCHEMA_VERSION = len(MIGRATIONS)

_INSERT = (
    f"INSERT INTO {INBOX_TABLE} (sender, message_id, received_at) VALUES (?, ?, ?)"
    " ON CONFLICT (sender, message_id) DO NOTHING"
)
# The update happens only for a greater version: an equal or older one changes no row.
_ADVANCE = (
    f"INSERT INTO {VERSIONS_TABLE} AS stored (sender, resource, version, updated_at)"
    " VALUES (?, ?, ?, ?) ON CONFLICT (sender, resource) DO UPDATE"
    " SET version = excluded.version, updated_at = excluded.updated_at"
    " WHERE excluded.version > stored.version"
)
_CONTAINS = f"SELECT 1 FROM {INBOX_TABLE} WHERE sender = ? AND message_id = ?"
_REAP = (
    f"DELETE FROM {INBOX_TABLE} WHERE rowid IN"
    f" (SELECT rowid FROM {INBOX_TABLE} WHERE received_at < ? ORDER BY received_at LIMIT ?)"
)


class _InboxVersion:
    """The inbox's version: its row in the schema table, which it creates if absent."""

    source = f"table {SCHEMA_TABLE}"

    def __init__(self, name: str) -> None:
        self._name = name

    def read(self, conn: sqlite3.Connection) -> int:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                (INBOX_TABLE, SCHEMA_TABLE),
            )
        }
        version = 0
        if SCHEMA_TABLE in tables:
            row = conn.execute(
                f"SELECT version FROM {SCHEMA_TABLE} WHERE component = ?", (_COMPONENT,)
            ).fetchone()
            version = 0 if row is None else int(row[0])
        else:
            conn.execute(
                f"CREATE TABLE {SCHEMA_TABLE}"
                " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
        if version == 0 and INBOX_TABLE in tables:
            raise ForeignStore(
                self._name,
                f"has a table {INBOX_TABLE!r} that idemclient did not create; it is left as found",
            )
        return version

    def write(self, conn: sqlite3.Connection, version: int) -> None:
        conn.execute(
            f"INSERT INTO {SCHEMA_TABLE} (component, version) VALUES (?, ?)"
            " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            (_COMPONENT, version),
        )


class SQLiteInboxStorage:
    """The inbox's table in a SQLite database: a path, or the application's connection.

    Given a path, it opens the file itself (creating it with mode 0600, in WAL mode,
    if it does not exist) and commits with ``synchronous = FULL``: a 2xx goes back to
    the sender only after the commit, so that commit must survive a power loss, or
    the message would be acknowledged and lost. The application writes its effect
    through the connection each transaction yields.

    Given a `sqlite3.Connection`, it uses that one and changes none of its settings;
    the application decides its durability. The connection must not be in a
    transaction when it is handed over (the table may need creating).

    The table lives in the main database of the connection, never in an attached one:
    SQLite does not make a transaction across attached WAL databases atomic.

    Inside `transaction()` the connection refuses to begin, commit or roll back a
    transaction (it raises `sqlite3.ProgrammingError`): the inbox ends it.
    """

    def __init__(
        self,
        database: str | os.PathLike[str] | sqlite3.Connection,
        *,
        busy_timeout: float = 30.0,
    ) -> None:
        self._lock = threading.RLock()
        self._closed = False
        if isinstance(database, sqlite3.Connection):
            self._owned = False
            self._conn = database
            self._name = _main_file(database)
            if database.in_transaction:
                raise ValueError(
                    "hand the connection to the inbox outside a transaction:"
                    " it may need to create its table"
                )
            self._prepare()
        else:
            self._owned = True
            self._name = os.fspath(database)
            self._conn = self._open(busy_timeout)

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"SQLiteInboxStorage({self._name!r})"

    # -- opening -------------------------------------------------------------------------

    def _open(self, busy_timeout: float) -> sqlite3.Connection:
        path = self._name
        created = path == MEMORY or not os.path.exists(path) or os.path.getsize(path) == 0
        conn = connect(path, busy_timeout=busy_timeout)
        self._conn = conn
        try:
            with sqlite_errors(path):
                if created and path != MEMORY:
                    use_wal(conn, path)
                conn.execute("PRAGMA synchronous = FULL")
            self._prepare()
        except BaseException:
            conn.close()
            raise
        return conn

    def _prepare(self) -> None:
        with sqlite_errors(self._name):
            upgrade(
                self._conn,
                MIGRATIONS,
                _InboxVersion(self._name),
                exclusive=self._locked_transaction,
                where=self._name,
                what="inbox ",
            )

    # -- the interface -----------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_open()
            if self._conn.in_transaction:
                raise ValueError(
                    f"the connection to {self._name!r} is already in a transaction; inside"
                    " your own transaction, use inbox.record(conn, sender, message_id)"
                )
            with self._locked_transaction() as tx, _handler_guard(tx):
                yield tx

    @contextlib.contextmanager
    def _locked_transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        # IMMEDIATE: take the write lock now. A second delivery of the same id then
        # waits for the first to commit or roll back before it looks, instead of
        # failing to upgrade a read lock half way through the application's work.
        with self._lock, immediate(conn, name=self._name):
            yield conn
            if not conn.in_transaction:
                raise ValueError(
                    "the transaction was ended inside the handler (COMMIT or ROLLBACK);"
                    " the inbox commits it, so that the id and the effect go together"
                )

    def in_transaction(self, tx: sqlite3.Connection) -> bool:
        return tx.in_transaction

    def insert(self, tx: sqlite3.Connection, sender: str, message_id: str, now: float) -> bool:
        with self._lock:
            return self._execute_ours(_INSERT, (sender, message_id, now), conn=tx).rowcount == 1

    def contains(self, sender: str, message_id: str) -> bool:
        with self._lock:
            self._check_open()
            return self._execute_ours(_CONTAINS, (sender, message_id)).fetchone() is not None

    def advance(
        self, tx: sqlite3.Connection, sender: str, resource: str, version: float, now: float
    ) -> bool:
        with self._lock:
            params = (sender, resource, version, now)
            return self._execute_ours(_ADVANCE, params, conn=tx).rowcount == 1

    def delete_older(self, cutoff: float, *, batch: int) -> int:
        with self._lock:
            self._check_open()
            if self._conn.in_transaction:
                raise ValueError(f"the connection to {self._name!r} is in a transaction")
            with self._locked_transaction() as tx:
                return self._execute_ours(_REAP, (cutoff, batch), conn=tx).rowcount

    def close(self) -> None:
        """Close the connection if the inbox opened it (never the application's own)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._owned:
                    self._conn.close()

    # -- inside the lock ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(self._name, "the inbox is closed")

    def _execute_ours(
        self,
        sql: str,
        params: tuple[object, ...] = (),
        *,
        conn: sqlite3.Connection | None = None,
    ) -> sqlite3.Cursor:
        """Run one of the inbox's own statements, naming the file if SQLite refuses it.

        The application's statements in its handler are not wrapped: their errors are
        the application's, and reach it unchanged.
        """
        with sqlite_errors(self._name):
            return (conn or self._conn).execute(sql, params)


#: What the handler may have done, by the statement SQLite was asked to run.
_DONE_BY = {
    "COMMIT": "tx.commit(), a `with tx:` block, executescript(), COMMIT or END",
    "ROLLBACK": "tx.rollback(), ROLLBACK",
    "BEGIN": "BEGIN",
}


@contextlib.contextmanager
def _handler_guard(conn: sqlite3.Connection) -> Iterator[None]:
    """While the handler runs, `conn` refuses to end (or begin) a transaction.

    A COMMIT in the handler would commit the message id with half of the effect; the
    rest would be lost, since the redelivery is then a duplicate. SQLite's authorizer
    sees every statement, whichever way it is sent (`commit()`, `with conn:`,
    `executescript()`, a cursor, the SQL itself), and denies those that begin, commit or
    roll back a transaction; savepoints, which nest inside it, stay allowed. The
    handler sees SQLite's "not authorized"; the inbox then raises a
    `sqlite3.ProgrammingError` saying what was refused, as psycopg does for `commit()`
    inside `conn.transaction()`, even if the handler caught the first error. Either
    way the transaction rolls back and the message is processed as new next time.

    The authorizer is the connection's only one: an application's own is replaced for
    the handler's duration and cleared afterwards.
    """
    refused: list[str] = []

    def authorize(action: int, what: str | None, *_: str | None) -> int:
        if action == sqlite3.SQLITE_TRANSACTION:
            refused.append(what or "a transaction statement")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)
    try:
        yield
    except Exception as exc:
        if refused:
            raise _refusal(refused[0]) from exc
        raise
    else:
        if refused:
            raise _refusal(refused[0])
    finally:
        conn.set_authorizer(None)


def _refusal(statement: str) -> sqlite3.ProgrammingError:
    done_by = _DONE_BY.get(statement, statement)
    return sqlite3.ProgrammingError(
        f"the handler ran {statement} inside the inbox's transaction ({done_by}): refused."
        " The inbox commits the effect together with the message id when the handler"
        " returns, and rolls both back if it raises; nothing was recorded"
    )


def _main_file(conn: sqlite3.Connection) -> str:
    """The file behind a connection's main database, or ":memory:"."""
    try:
        for _, name, file in conn.execute("PRAGMA database_list"):
            if name == "main":
                return str(file) or ":memory:"
    except sqlite3.Error as exc:
        raise StoreUnavailable("<connection>", f"cannot be used: {exc}") from exc
    return ":memory:"
