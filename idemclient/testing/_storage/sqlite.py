"""The reference server's durable state: SQLite, with the seed's key table.

One connection for writes, one lock: SQLite serialises writers anyway, and each
transaction here is a handful of statements, so the lock is held for microseconds and
never across an external call. Every write transaction is `BEGIN IMMEDIATE`, so several
server processes may share one database file and still let SQLite arbitrate (with a
busy timeout) exactly as the seed lets the database arbitrate admission.

Reads of a file in WAL mode take neither that lock nor that connection: each borrows a
read-only connection from a small pool (one per thread reading at the same moment), and
WAL lets it read the last commit while a write is under way. A replay (a finished key
answered again) is one such read. A database in memory, or a file the file system kept
out of WAL mode, reads through the write connection, under the lock, as before.

The phases, look-ups and outbox writes are `_transactions.Transactions`, shared with
the PostgreSQL backend; this module holds what SQLite does its own way: the schema,
the connection and its lock, admission, reaping and reset.

Every phase write is fenced by the lease owner: it commits only while this attempt
still owns the row, so an attempt that stalled past its lease and was taken over
cannot commit a phase twice. The external systems keep their own records in their own
tables here for convenience; their writes never share a transaction with the
server's phases.

Webhook events are an outbox: Handler3 inserts the event in the same transaction that
finishes the resource, so an event exists exactly when its resource is final, and
delivery (slow, failing, retried) happens later from that table, never inside a phase.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..._db.dialect import SQLITE
from ..._db.sqlite import MEMORY, connect, immediate, use_wal
from ..._db.versions import Step, UserVersion, upgrade
from ..._errors import StoreTooNew

# The row types are re-exported here, where they were first defined.
from .rows import EventRow, ExternalRecord, KeyRow, ResourceRow
from .statements import Statements
from .transactions import Transactions

__all__ = ["SCHEMA_VERSION", "EventRow", "ExternalRecord", "KeyRow", "ResourceRow", "Storage"]

# The migrations: _V1 and _V2 take a database to versions 1 and 2 (append only). Each
# statement is IF NOT EXISTS, as it always was: a file that has a table before its
# version says so opens unchanged.
_V1 = (
    """
CREATE TABLE IF NOT EXISTS idempotency_keys (
  client          TEXT    NOT NULL,              -- keys are unique per client, not globally
  key             TEXT    NOT NULL,              -- client-supplied, validated at the edge
  request_hash    BLOB    NOT NULL,              -- method, path, body: other request = 422
  endpoint        TEXT    NOT NULL,
  request_body    BLOB    NOT NULL,              -- canonical body: a resumer needs the instruction
  state           TEXT    NOT NULL CHECK (state IN ('started', 'finished')),
  recovery_point  TEXT,                          -- the last phase that committed
  resource_id     TEXT,
  response_code   INTEGER,
  response_body   BLOB,
  locked_at       REAL,                          -- the lease: NULL once finished or released
  lease_owner     TEXT,                          -- fencing token of the attempt holding the lease
  attempts        INTEGER NOT NULL DEFAULT 0,    -- external calls intended so far
  last_attempt_at REAL,
  created_at      REAL    NOT NULL,
  PRIMARY KEY (client, key)
) WITHOUT ROWID
""",
    """
-- The recovery worker looks only at unfinished rows: keep that search small and fast.
-- Ordered by age (oldest first), with locked_at inside so the index alone answers.
CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished
  ON idempotency_keys (created_at, locked_at) WHERE state = 'started'
""",
    """
CREATE INDEX IF NOT EXISTS idempotency_keys_created ON idempotency_keys (created_at)
""",
    """
CREATE TABLE IF NOT EXISTS resources (
  id              TEXT    PRIMARY KEY,
  kind            TEXT    NOT NULL,              -- payment | payout
  client          TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  reference       TEXT    NOT NULL,
  amount          INTEGER NOT NULL,
  currency        TEXT    NOT NULL,
  status          TEXT    NOT NULL,
  fields          TEXT    NOT NULL,              -- the body's other fields, JSON
  ext1            TEXT,                          -- external system 1's answer, JSON
  ext2            TEXT,
  created_at      REAL    NOT NULL
)
""",
    """
CREATE INDEX IF NOT EXISTS resources_reference ON resources (client, kind, reference)
""",
    """
CREATE INDEX IF NOT EXISTS resources_key ON resources (client, kind, idempotency_key)
""",
    """
-- One row per handler run: how a test proves no phase ran twice.
CREATE TABLE IF NOT EXISTS journal (
  resource_id     TEXT    NOT NULL,
  step            TEXT    NOT NULL,
  at              REAL    NOT NULL
)
""",
    """
CREATE INDEX IF NOT EXISTS journal_resource ON journal (resource_id)
""",
    """
-- The simulated external systems' own books, keyed by the derived key they were sent.
CREATE TABLE IF NOT EXISTS external_effects (
  system          INTEGER NOT NULL,
  key             TEXT    NOT NULL,
  resource_id     TEXT    NOT NULL,
  outcome         TEXT    NOT NULL,              -- approved | declined
  reference       TEXT    NOT NULL,              -- the external system's own id
  amount          INTEGER NOT NULL,
  applied_at      REAL    NOT NULL,
  calls           INTEGER NOT NULL,              -- deliveries of this key, replays included
  PRIMARY KEY (system, key)
) WITHOUT ROWID
""",
    """
CREATE INDEX IF NOT EXISTS external_effects_resource ON external_effects (resource_id)
""",
)

# 2: the webhook outbox.
_V2 = (
    """
-- The webhook outbox: one row per event, written with the resource's final status.
CREATE TABLE IF NOT EXISTS webhook_events (
  id              TEXT    PRIMARY KEY,           -- evt_...: the message id on every delivery
  client          TEXT    NOT NULL,              -- whose endpoint receives it
  type            TEXT    NOT NULL,              -- payment.succeeded, payout.declined, ...
  resource_id     TEXT    NOT NULL,
  body            BLOB    NOT NULL,              -- fixed once: every delivery sends these bytes
  created_at      REAL    NOT NULL,
  state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'abandoned')),
  attempts        INTEGER NOT NULL DEFAULT 0,    -- delivery attempts made (acknowledged or not)
  posts           INTEGER NOT NULL DEFAULT 0,    -- HTTP requests sent, injected duplicates included
  next_attempt_at REAL    NOT NULL,              -- due from then; a claim pushes it forward
  delivered_at    REAL,
  last_status     INTEGER,                       -- the receiver's last HTTP status, if any
  last_error      TEXT                           -- or why there was none
)
""",
    """
-- The deliverer reads only pending events, the soonest due first.
CREATE INDEX IF NOT EXISTS webhook_events_due
  ON webhook_events (next_attempt_at) WHERE state = 'pending'
""",
)

SCHEMA_VERSION = 2


# Seconds are stored as REAL as they are; `rowid` keeps insertion order.
_SQL = Statements(SQLITE, time="?", epoch="{}", order="rowid")
#: The recovery sweep (a test checks its query plan uses the partial index).
_STALE = _SQL.stale
_RESET = (
    "DELETE FROM webhook_events",
    "DELETE FROM idempotency_keys",
    "DELETE FROM resources",
    "DELETE FROM journal",
    "DELETE FROM external_effects",
)
# Only finished keys are reaped: a started row is the instruction to resume, and
# dropping it would strand a payment that may have reached an external system.
_REAP = "DELETE FROM idempotency_keys WHERE state = 'finished' AND created_at < ?"


class Storage(Transactions):
    """SQLite storage for the reference server. Safe to share between threads."""

    _sql = _SQL

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout: float = 10.0):
        self.path = os.fspath(path)
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
        # Autocommit: every write below is a BEGIN IMMEDIATE transaction of its own.
        self._conn = connect(self.path, busy_timeout=busy_timeout, check=False)
        # The read pool (see the module docstring): idle read-only connections, and the
        # lock that guards only the list (never held across a statement).
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._pooled_reads = False
        try:
            self._prepare()
        except BaseException:
            self._conn.close()
            raise

    def _prepare(self) -> None:
        conn = self._conn
        if self.path != MEMORY:
            use_wal(conn, self.path, required=False)
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            self._pooled_reads = str(mode).lower() == "wal"
        # A lost outcome commit costs one replayed phase, which the protocol absorbs;
        # NORMAL keeps commits cheap without risking corruption.
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            upgrade(
                conn,
                (_statements(_V1), _statements(_V2)),
                UserVersion(),
                exclusive=lambda: immediate(conn),
                where=self.path,
                what="reference-server ",
            )
        except StoreTooNew as exc:
            raise ValueError(f"{self.path!r}: {exc.reason}") from exc

    def close(self) -> None:
        with self._lock:
            with self._readers_lock:
                self._closed = True
                readers, self._readers = self._readers, []
            for reader in readers:
                reader.close()
            self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, immediate(self._conn) as conn:
            yield conn

    @contextmanager
    def _write_one(self) -> Iterator[sqlite3.Connection]:
        # The connection is in autocommit mode: a single statement is its own
        # transaction (it takes the write lock before it reads, waiting as BEGIN
        # IMMEDIATE would), committed or rolled back whole when it completes.
        with self._lock:
            yield self._conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads: each statement sees the last commit. Several reads
        that must agree with each other take `_snapshot()`."""
        if not self._pooled_reads:
            with self._lock:
                yield self._conn
            return
        with self._readers_lock:
            reader = self._readers.pop() if self._readers else None
            closed = self._closed
        if closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if reader is None:
            reader = self._open_reader()
        try:
            yield reader
        finally:
            with self._readers_lock:
                keep = not self._closed and not reader.in_transaction
                if keep:
                    self._readers.append(reader)
            if not keep:
                reader.close()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        # One view for several reads: the write connection, under the lock, so no
        # commit of this server lands between them.
        with self._lock:
            yield self._conn

    def _open_reader(self) -> sqlite3.Connection:
        reader = connect(self.path, busy_timeout=self._busy_timeout, check=False)
        # A reader must never write, not even by mistake.
        reader.execute("PRAGMA query_only = ON")
        return reader

    # -- admission (one transaction) and maintenance ----------------------------------

    def admit(
        self,
        *,
        client: str,
        key: str,
        request_hash: bytes,
        endpoint: str,
        request_body: bytes,
        owner: str,
        now: float,
    ) -> tuple[bool, KeyRow]:
        """Insert the key, or find it. `(True, row)` means this attempt owns the request.

        A key that exists is answered from one plain read, without the write lock: what
        happens next (replay, 409, 422, takeover) needs none, and a replay is then a
        single read. A key the read does not find is inserted by one statement, its own
        transaction. If that insert meets a conflict (an arrival that raced this one
        since the read), the insert and a read run again in one transaction, so that
        the row found is the row that caused the conflict (the reaper cannot delete it
        in between).
        """
        with self._read() as conn:
            found = conn.execute(self._sql.select_key, (client, key)).fetchone()
        if found is not None:
            return False, KeyRow(*found)
        params = (client, key, request_hash, endpoint, request_body, now, owner, now)
        with self._write_one() as conn:
            row = conn.execute(self._sql.admit, params).fetchone()
        if row is None:
            with self._write() as conn:
                row = conn.execute(self._sql.admit, params).fetchone()
                if row is None:
                    existing = conn.execute(self._sql.select_key, (client, key)).fetchone()
                    return False, KeyRow(*existing)
        return True, KeyRow(*row)

    def reap(self, *, created_before: float, now: float) -> int:
        """Delete finished keys created before `created_before`. (`now` is for backends
        that also prepare ahead; one SQLite table needs nothing prepared.)"""
        with self._write() as conn:
            return conn.execute(_REAP, (created_before,)).rowcount

    def reset(self) -> None:
        with self._write() as conn:
            for statement in _RESET:
                conn.execute(statement)


def _statements(ddl: tuple[str, ...]) -> Step[sqlite3.Connection]:
    def step(conn: sqlite3.Connection) -> None:
        for statement in ddl:
            conn.execute(statement)

    return step
