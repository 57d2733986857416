"""The SQLite store: one private file per application, in WAL mode.

The schema and its migrations are made with sqlite-utils (see `_schema`); the hot path
(begin, finish) is a few prepared statements on the same connection, because
sqlite-utils' conveniences introspect the table on every call and that would cost more
than the rest of a request. One connection is shared by the threads of a process,
behind a lock; processes share the file through SQLite's own locking.

The methods both backends run the same way are in `_sqlstore`, on the statements of
`_statements` spelled for SQLite here. What is SQLite's own stays in this module: the
file and its two connections (one whose every commit is flushed to disk, one whose
commits are not: no fsync level is switched per commit), the group commit of intents,
IMMEDIATE
transactions (a takeover reads and writes with no other process in between), and
registration in chunks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator
from typing import Any, ClassVar

from .._db.dialect import SQLITE
from .._db.errors import sqlite_error
from .._db.sqlite import MEMORY, connect, immediate
from .._errors import StoreError, StoreUnavailable
from .._forks import afresh_in_child, quiet_at_fork, quieted
from .._outcome import State
from ._base import Durability, Headers, Intent
from ._cipher import BodyEncryption
from ._rows import DEFAULT_MAX_STORED_BODY
from ._schema import open_database
from ._sqlstore import SQLStore, admission_values, refused
from ._statements import Statements

__all__ = ["SQLiteStore"]

# A write transaction (BEGIN IMMEDIATE) holds the whole file: no row locks.
_SQL = Statements(
    SQLITE,
    table="operations",
    order="created_at, rowid",
    clock_table="store_clock",
    not_found_table="not_found",
    contents_table="contents",
)
_REGISTER_CHUNK = 5_000
#: How long a process that begins to fork waits for a write in progress on a store's
#: connections to end (seconds): a write lasts milliseconds, a batch's registration of
#: a large file a few seconds; a fork is not held up longer than that.
_FORK_WAIT = 2.0
#: In a forked child: its parent's connections that may have been inside a write as it
#: forked, kept unused and never closed there (see `SQLiteStore._locks_afresh`).
_CROSSED: list[sqlite3.Connection] = []


class SQLiteStore(SQLStore):
    """The default `Store`: a local SQLite file, created with mode 0600.

    `durability` trades power-loss safety for speed (see `Durability`). Response bodies
    up to `max_stored_body` bytes (1 MiB) are kept whole; a longer one keeps only its
    size and sha256, and an operation re-issued later says so (`Outcome.body_omitted`).
    Finished operations older than `retention` seconds are reaped; unfinished ones
    never are.

    Request headers are written by an allow list: Content-Type, Content-Encoding,
    Content-Language, Accept, and the names in `persist_headers`; of every other header
    only the name is kept, and a request that sends the operation again must carry it.
    No header or query parameter whose name looks secret (auth, token, key, secret,
    password, signature, cookie, session...), nor any name in `secret_headers`, is ever
    written with its value, in requests or responses. With `encryption`, bodies are
    written encrypted (see `BodyEncryption`).
    """

    _sql = _SQL
    # Reading the row back and decoding it would cost more than the write itself, on
    # the hottest path of the library.
    _answer_from_known: ClassVar[bool] = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = Durability.INTENT,
        max_stored_body: int = DEFAULT_MAX_STORED_BODY,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        encryption: BodyEncryption | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._path = os.fspath(path)
        self._configure(
            where=self._path,
            max_stored_body=max_stored_body,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
            encryption=encryption,
        )
        self.durability = Durability(durability)
        self.retention = retention
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Admission] = []
        self._busy_timeout = busy_timeout
        # Two connections, each with one fsync level set once: commits that must survive
        # a power loss (`durable`) go through `_flushed` (synchronous FULL: the log is
        # flushed at each commit), the rest through `_conn` (NORMAL: flushed at
        # checkpoints). Switching one connection's level costs a statement before and
        # after every intent, on the hottest path of the library.
        self._conn = open_database(self._path, busy_timeout=busy_timeout)
        self._flushed: sqlite3.Connection | None = None  # opened at its first commit
        #: the connection the thread that holds the lock is using, if any
        self._held: sqlite3.Connection | None = None
        self._closed = False
        #: what a call is told once the store cannot be used (closed, or not reopened)
        self._closed_why = "is closed"
        try:
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._conn.close()
            raise self._translate(exc) from exc
        afresh_in_child(self)
        quiet_at_fork(self)

    def _fork_begins(self) -> bool:
        """As the process begins to fork (`_forks`): wait (`_FORK_WAIT`) for a write in
        progress on the connections to end, and hold off the next until the fork is
        done, so that the child gets them idle; whether it did."""
        return self._lock.acquire(timeout=_FORK_WAIT)

    def _fork_ended(self, quiet: bool) -> None:
        """In the parent, once it has forked: writes go on."""
        if quiet:
            self._lock.release()

    def _locks_afresh(self) -> None:
        """In a forked child (`_forks`), before anything else runs there: its locks made
        afresh, and a connection of its own.

        SQLite keeps, per process, a record of the locks its connections hold on each
        file, and the child has a copy of its parent's: a connection opened here would
        share it, and believe it holds locks it does not (the parent, closing its store,
        would then take itself for the file's last user and remove the log the child is
        writing to). Where the fork waited for the store's writes (`_fork_begins`), the
        copies of the parent's connections are idle, and are closed first, which drops
        that record: they hold only shared locks, which the parent's own connections
        keep holding, so closing them neither checkpoints nor removes the log (that
        takes the file's exclusive lock). A copy left inside a transaction (a write that
        outlasted the wait, or the forking thread's own) is never touched: closing it
        would roll the parent's write back in the memory the log's index shares with
        it, and its locks would hold the file here for ever: the store refuses every
        call, saying why. Where a thread held the store past the wait outside any
        transaction, the copies are kept unused, as they may be inside a statement.
        A database in memory is the connection's own, copied into the child: it keeps
        it."""
        quiet = quieted(self)
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue = []
        self._held = None
        if self._path == MEMORY or self._closed:
            return
        copies = [self._conn] if self._flushed is None else [self._conn, self._flushed]
        self._flushed = None  # opened again at its first commit
        if any(copy.in_transaction for copy in copies):
            _CROSSED.extend(copies)
            self._closed = True
            self._closed_why = (
                "was inside a write as this process was forked from its parent: SQLite's"
                " record of that write's locks, copied into this process, would hold the"
                " file here for ever. Create the client (and its store) in each process,"
                " after the fork, or fork while no write is in progress"
            )
            return
        if quiet:
            for copy in copies:
                with contextlib.suppress(sqlite3.Error):
                    copy.close()
        else:
            _CROSSED.extend(copies)
        try:
            conn = connect(self._path, busy_timeout=self._busy_timeout, check=False)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._closed = True
            self._closed_why = f"could not be opened again in a forked child: {exc}"
            return
        self._conn = conn

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r}, durability={self.durability.value!r})"

    # -- writing ---------------------------------------------------------------------

    def _admit(self, values: tuple[Any, ...]) -> bool:
        durable = self.durability is not Durability.BUFFERED
        lock = self._lock
        # Alone (no intent queued, the connection free): admitted at once, without a
        # ticket. An intent queued meanwhile waits for the lock and admits itself.
        if not self._queue and lock.acquire(blocking=False):
            try:
                if self._held is None and not self._closed:
                    try:
                        conn = self._flushing() if durable else self._conn
                        return conn.execute(_SQL.admit, values).rowcount == 1
                    except sqlite3.Error as exc:
                        raise self._translate(exc) from exc
            finally:
                lock.release()
        return self._admit_grouped(values, durable=durable)

    def _admit_grouped(self, values: tuple[Any, ...], *, durable: bool) -> bool:
        ticket = _Admission(values)
        try:
            with self._queue_lock:
                self._queue.append(ticket)
            with self._use(durable=durable) as conn:
                # Group commit: whoever holds the connection first admits every intent
                # queued by then, in one transaction and one fsync. A thread that gets
                # the connection after its intent was admitted by another finds it done.
                if ticket.created is None and ticket.error is None:
                    self._admit_queued(conn)
        except BaseException:
            # Given up (a Ctrl-C while waiting for the connection): never admitted later
            # by another thread, for a caller that has gone and will not give it back.
            with self._queue_lock:
                self._queue[:] = [queued for queued in self._queue if queued is not ticket]
            raise
        if ticket.error is not None:
            raise ticket.error
        return bool(ticket.created)

    def _admit_queued(self, conn: sqlite3.Connection) -> None:
        """Admit every queued intent, one statement each (see `Statements.admit`)."""
        with self._queue_lock:
            group = list(self._queue)
            self._queue.clear()
        try:
            # Alone, the insert is its own transaction; together, they share one.
            with immediate(conn) if len(group) > 1 else contextlib.nullcontext():
                for ticket in group:
                    ticket.created = conn.execute(_SQL.admit, ticket.values).rowcount == 1
        except sqlite3.Error as exc:
            error = self._translate(exc)
            for ticket in group:  # the transaction rolled back: none of them is recorded
                ticket.created, ticket.error = None, error
        except BaseException as exc:
            for ticket in group:
                ticket.created, ticket.error = None, exc
            raise

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        stored: dict[Headers, str] = {}  # rows of a batch share their headers: redact once
        created = 0
        conflicts: list[tuple[str, str, str]] = []
        durable = self.durability is not Durability.BUFFERED
        with self._transaction(durable=durable) as conn:
            # In chunks, inside one transaction: all rows or none, and a batch of a
            # hundred thousand rows is never held whole a second time.
            for chunk in _chunks(intents, _REGISTER_CHUNK):
                rows = [
                    admission_values(
                        i,
                        stored.get(i.headers)
                        or stored.setdefault(i.headers, self._stored_headers(i)),
                        State.PENDING,
                        None,
                        None,
                        now,
                        cipher=self._cipher,
                    )
                    for i in chunk
                ]
                before = conn.total_changes
                conn.executemany(_SQL.admit, rows)
                added = conn.total_changes - before
                created += added
                if added != len(rows):
                    # Some existed already: each must be the same request.
                    conflicts += self._conflicts(conn, chunk)
            if conflicts:  # raised inside the transaction: it rolls back, nothing is kept
                raise refused(conflicts)
        return created

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._flushed is not None:
                    self._flushed.close()

    # -- the connection --------------------------------------------------------------

    def _use(self, *, durable: bool = False) -> _Using:
        """The connection with the fsync level this commit needs, under the lock, and
        SQLite's errors turned into ours (naming the file)."""
        return _Using(self, durable)

    def _flushing(self) -> sqlite3.Connection:
        """The connection whose every commit is flushed to disk (opened on first use: a
        store that never needs one never opens it). In memory there is no disk, and a
        second connection would be another database: the one connection serves."""
        if self._flushed is None:
            if self._path == MEMORY:
                return self._conn
            flushed = connect(self._path, busy_timeout=self._busy_timeout, check=False)
            try:
                flushed.execute("PRAGMA synchronous = FULL")
            except BaseException:
                flushed.close()
                raise
            self._flushed = flushed
        return self._flushed

    # Outside a transaction, each statement commits on its own.
    _write = _use

    @contextlib.contextmanager
    def _transaction(self, *, durable: bool) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: it holds the write lock from its first statement,
        so a takeover reads and writes the row with no other process in between."""
        with self._use(durable=durable) as conn, immediate(conn):
            yield conn

    def _translate(self, error: sqlite3.Error) -> StoreError:
        return sqlite_error(self._path, error)


class _Using:
    """`SQLiteStore._use`: a context manager of its own rather than a generator, since
    every store call enters one (twice per operation)."""

    __slots__ = ("durable", "outer", "store")

    def __init__(self, store: SQLiteStore, durable: bool) -> None:
        self.store = store
        self.durable = durable
        self.outer: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        store = self.store
        store._lock.acquire()
        try:
            if store._closed:
                raise StoreUnavailable(store._path, store._closed_why)
            held = store._held
            if held is not None and held.in_transaction:
                # Inside a transaction this thread holds (a read while registering):
                # its connection, and its level. The other would wait for its lock.
                conn = held
            elif self.durable:
                try:
                    conn = store._flushing()
                except sqlite3.Error as exc:
                    raise store._translate(exc) from exc
            else:
                conn = store._conn
            self.outer, store._held = held, conn
        except BaseException:
            store._lock.release()
            raise
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        store = self.store
        try:
            if isinstance(error, sqlite3.Error):
                raise store._translate(error) from error
        finally:
            store._held = self.outer
            store._lock.release()


def _chunks(items: Iterable[Intent], size: int) -> Iterator[list[Intent]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


@dataclasses.dataclass(slots=True)
class _Admission:
    """One intent waiting to be admitted (its `admission_values`), and what became of it."""

    values: tuple[Any, ...]
    created: bool | None = None
    error: BaseException | None = None
