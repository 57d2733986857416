"""The reference server's durable state: SQLite, with the seed's key table.

One connection, one lock: SQLite serialises writers anyway, and each transaction here
is a handful of statements, so the lock is held for microseconds and never across an
external call. Every write transaction is `BEGIN IMMEDIATE`, so several server
processes may share one database file and still let SQLite arbitrate (with a busy
timeout) exactly as the seed lets the database arbitrate admission.

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
from dataclasses import dataclass

from ._protocol import Phase

__all__ = ["SCHEMA_VERSION", "EventRow", "ExternalRecord", "KeyRow", "ResourceRow", "Storage"]

# 2: webhook_events. Version 1 files gain the table when opened (CREATE IF NOT EXISTS).
SCHEMA_VERSION = 2

_SCHEMA = """
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
) WITHOUT ROWID;
-- The recovery worker looks only at unfinished rows: keep that search small and fast.
-- Ordered by age (oldest first), with locked_at inside so the index alone answers.
CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished
  ON idempotency_keys (created_at, locked_at) WHERE state = 'started';
CREATE INDEX IF NOT EXISTS idempotency_keys_created ON idempotency_keys (created_at);

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
);
CREATE INDEX IF NOT EXISTS resources_reference ON resources (client, kind, reference);
CREATE INDEX IF NOT EXISTS resources_key ON resources (client, kind, idempotency_key);

-- One row per handler run: how a test proves no phase ran twice.
CREATE TABLE IF NOT EXISTS journal (
  resource_id     TEXT    NOT NULL,
  step            TEXT    NOT NULL,
  at              REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_resource ON journal (resource_id);

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
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS external_effects_resource ON external_effects (resource_id);

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
);
-- The deliverer reads only pending events, the soonest due first.
CREATE INDEX IF NOT EXISTS webhook_events_due
  ON webhook_events (next_attempt_at) WHERE state = 'pending';
"""

# Column lists are spelled out in each statement: plain constants, prepared once by
# sqlite3's statement cache, nothing assembled per request.
_ADMIT = """
INSERT INTO idempotency_keys
  (client, key, request_hash, endpoint, request_body, state, locked_at, lease_owner, created_at)
VALUES (?, ?, ?, ?, ?, 'started', ?, ?, ?)
ON CONFLICT (client, key) DO NOTHING
RETURNING client, key, request_hash, endpoint, request_body, state, recovery_point, resource_id,
  response_code, response_body, locked_at, lease_owner, attempts, last_attempt_at, created_at
"""
_SELECT_KEY = """
SELECT client, key, request_hash, endpoint, request_body, state, recovery_point, resource_id,
  response_code, response_body, locked_at, lease_owner, attempts, last_attempt_at, created_at
FROM idempotency_keys WHERE client = ? AND key = ?
"""
# The seed's takeover: one conditional UPDATE, so of two racing resumers exactly one
# gets the row back.
_TAKE_OVER = """
UPDATE idempotency_keys SET locked_at = ?, lease_owner = ?
WHERE client = ? AND key = ? AND state = 'started'
  AND (locked_at IS NULL OR locked_at < ?)
RETURNING client, key, request_hash, endpoint, request_body, state, recovery_point, resource_id,
  response_code, response_body, locked_at, lease_owner, attempts, last_attempt_at, created_at
"""
_ADVANCE = """
UPDATE idempotency_keys SET recovery_point = ?, locked_at = ?
WHERE client = ? AND key = ? AND state = 'started' AND lease_owner = ?
RETURNING resource_id
"""
_ADVANCE_H1 = """
UPDATE idempotency_keys SET recovery_point = ?, locked_at = ?, resource_id = ?
WHERE client = ? AND key = ? AND state = 'started' AND lease_owner = ?
RETURNING resource_id
"""
_MARK_SENT = """
UPDATE idempotency_keys
SET recovery_point = ?, locked_at = ?, attempts = attempts + 1, last_attempt_at = ?
WHERE client = ? AND key = ? AND state = 'started' AND lease_owner = ?
RETURNING resource_id
"""
_FINISH = """
UPDATE idempotency_keys
SET state = 'finished', response_code = ?, response_body = ?, locked_at = NULL,
    lease_owner = NULL
WHERE client = ? AND key = ? AND state = 'started' AND lease_owner = ?
RETURNING resource_id
"""
_RELEASE = """
UPDATE idempotency_keys SET locked_at = NULL, lease_owner = NULL, last_attempt_at = ?
WHERE client = ? AND key = ? AND state = 'started' AND lease_owner = ?
RETURNING resource_id
"""
_INSERT_RESOURCE = """
INSERT INTO resources
  (id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)
"""
_SELECT_RESOURCE = """
SELECT id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at
FROM resources WHERE id = ?
"""
_ALL_RESOURCES = """
SELECT id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at
FROM resources ORDER BY rowid
"""
# find_resources: the caller's own rows of one kind, with optional filters (NULL = any).
_FIND_RESOURCES = """
SELECT id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at
FROM resources
WHERE client = ? AND kind = ?
  AND (? IS NULL OR id = ?) AND (? IS NULL OR reference = ?) AND (? IS NULL OR idempotency_key = ?)
ORDER BY rowid
"""
_SET_EXTERNAL = {
    1: "UPDATE resources SET ext1 = ? WHERE id = ?",
    2: "UPDATE resources SET ext2 = ? WHERE id = ?",
}
_RESET = (
    "DELETE FROM webhook_events",
    "DELETE FROM idempotency_keys",
    "DELETE FROM resources",
    "DELETE FROM journal",
    "DELETE FROM external_effects",
)
_JOURNAL = "INSERT INTO journal (resource_id, step, at) VALUES (?, ?, ?)"
_STALE = """
SELECT client, key FROM idempotency_keys
WHERE state = 'started' AND (locked_at IS NULL OR locked_at < ?)
ORDER BY created_at LIMIT ?
"""
# Only finished keys are reaped: a started row is the instruction to resume, and
# dropping it would strand a payment that may have reached an external system.
_REAP = "DELETE FROM idempotency_keys WHERE state = 'finished' AND created_at < ?"
_EXTERNAL_APPLY = """
INSERT INTO external_effects
  (system, key, resource_id, outcome, reference, amount, applied_at, calls)
VALUES (?, ?, ?, ?, ?, ?, ?, 1)
ON CONFLICT (system, key) DO UPDATE SET calls = calls + 1
RETURNING outcome, reference, calls
"""
_EVENT_COLUMNS = (
    "id, client, type, resource_id, body, created_at, state, attempts, posts, next_attempt_at,"
    " delivered_at, last_status, last_error"
)
_INSERT_EVENT = (
    "INSERT INTO webhook_events (id, client, type, resource_id, body, created_at, state,"
    " next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)"
)
_DUE_EVENTS = (
    f"SELECT {_EVENT_COLUMNS} FROM webhook_events"
    " WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, rowid LIMIT ?"
)
# A claim moves the due time forward, conditional on the value just read: of two
# deliverers that read the same event, one gets it; if the winner dies, the event is
# due again when the claim runs out (at least once, never never).
_CLAIM_EVENT = (
    "UPDATE webhook_events SET next_attempt_at = ?"
    " WHERE id = ? AND state = 'pending' AND next_attempt_at = ?"
)
_EVENT_RESULT = (
    "UPDATE webhook_events SET state = ?, attempts = attempts + ?, posts = posts + ?,"
    " next_attempt_at = ?, delivered_at = ?, last_status = ?, last_error = ?"
    " WHERE id = ? AND state = 'pending'"
)
_EXTERNAL_LOOKUP = (
    "SELECT outcome, reference, calls FROM external_effects WHERE system = ? AND key = ?"
)


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One row of `idempotency_keys`."""

    client: str
    key: str
    request_hash: bytes
    endpoint: str
    request_body: bytes
    state: str
    recovery_point: str | None
    resource_id: str | None
    response_code: int | None
    response_body: bytes | None
    locked_at: float | None
    lease_owner: str | None
    attempts: int
    last_attempt_at: float | None
    created_at: float


@dataclass(frozen=True, slots=True)
class ResourceRow:
    """One payment or payout."""

    id: str
    kind: str
    client: str
    idempotency_key: str
    reference: str
    amount: int
    currency: str
    status: str
    fields: str
    ext1: str | None
    ext2: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class EventRow:
    """One row of the webhook outbox."""

    id: str
    client: str
    type: str
    resource_id: str
    body: bytes
    created_at: float
    state: str
    attempts: int
    posts: int
    next_attempt_at: float
    delivered_at: float | None
    last_status: int | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class ExternalRecord:
    """What an external system holds under one derived key."""

    outcome: str
    reference: str
    calls: int


class _LeaseLost(Exception):
    """The attempt no longer owns the row: roll the phase back, write nothing."""


class Storage:
    """SQLite storage for the reference server. Safe to share between threads."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout: float = 10.0):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        # isolation_level=None: the module must not open transactions behind our back;
        # every write below says BEGIN IMMEDIATE itself.
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._prepare()
        except BaseException:
            self._conn.close()
            raise

    def _prepare(self) -> None:
        conn = self._conn
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        # A lost outcome commit costs one replayed phase, which the protocol absorbs;
        # NORMAL keeps commits cheap without risking corruption.
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if not 0 <= version <= SCHEMA_VERSION:
            raise ValueError(
                f"{self.path!r} holds reference-server schema version {version}; "
                f"this version reads {SCHEMA_VERSION}"
            )
        conn.executescript(f"BEGIN IMMEDIATE;\n{_SCHEMA}\nCOMMIT;")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    # -- admission and takeover ------------------------------------------------------

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

        Both statements run in one transaction, so the row found on a conflict is the
        row that caused it (the reaper cannot delete it in between).
        """
        with self._write() as conn:
            row = conn.execute(
                _ADMIT, (client, key, request_hash, endpoint, request_body, now, owner, now)
            ).fetchone()
            if row is not None:
                return True, KeyRow(*row)
            existing = conn.execute(_SELECT_KEY, (client, key)).fetchone()
        return False, KeyRow(*existing)

    def take_over(
        self, *, client: str, key: str, owner: str, now: float, stale_before: float
    ) -> KeyRow | None:
        """Stamp a new lease on a started, stale row. None: someone else won or it moved on."""
        with self._write() as conn:
            row = conn.execute(_TAKE_OVER, (now, owner, client, key, stale_before)).fetchone()
        return None if row is None else KeyRow(*row)

    # -- phases: each one transaction, fenced by the lease owner -----------------------

    def handler1(
        self, *, client: str, key: str, owner: str, now: float, resource: ResourceRow
    ) -> bool:
        """Create the resource and commit H1_DONE together."""
        try:
            with self._write() as conn:
                self._fenced(
                    conn,
                    _ADVANCE_H1,
                    (Phase.H1_DONE.value, now, resource.id, client, key, owner),
                )
                conn.execute(
                    _INSERT_RESOURCE,
                    (
                        resource.id,
                        resource.kind,
                        resource.client,
                        resource.idempotency_key,
                        resource.reference,
                        resource.amount,
                        resource.currency,
                        resource.status,
                        resource.fields,
                        resource.created_at,
                    ),
                )
                conn.execute(_JOURNAL, (resource.id, "H1", now))
        except _LeaseLost:
            return False
        return True

    def mark_sent(self, *, client: str, key: str, owner: str, now: float, point: Phase) -> bool:
        """Commit the intent to call an external system (EXTn_SENT), before the call."""
        try:
            with self._write() as conn:
                self._fenced(conn, _MARK_SENT, (point.value, now, now, client, key, owner))
        except _LeaseLost:
            return False
        return True

    def record_external(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        point: Phase,
        system: int,
        answer: str,
    ) -> bool:
        """Store an external system's answer on the resource and commit EXTn_DONE."""
        try:
            with self._write() as conn:
                resource_id = self._fenced(conn, _ADVANCE, (point.value, now, client, key, owner))
                conn.execute(_SET_EXTERNAL[system], (answer, resource_id))
        except _LeaseLost:
            return False
        return True

    def handler2(self, *, client: str, key: str, owner: str, now: float, status: str) -> bool:
        """Handler2's work (the resource's new status) and H2_DONE together."""
        try:
            with self._write() as conn:
                resource_id = self._fenced(
                    conn, _ADVANCE, (Phase.H2_DONE.value, now, client, key, owner)
                )
                conn.execute("UPDATE resources SET status = ? WHERE id = ?", (status, resource_id))
                conn.execute(_JOURNAL, (resource_id, "H2", now))
        except _LeaseLost:
            return False
        return True

    def finish(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        status: str,
        response_code: int,
        response_body: bytes,
        event: EventRow | None = None,
    ) -> bool:
        """Handler3: final status, stored response, state finished, lease cleared, and
        the webhook event queued, all in one transaction."""
        try:
            with self._write() as conn:
                resource_id = self._fenced(
                    conn, _FINISH, (response_code, response_body, client, key, owner)
                )
                conn.execute("UPDATE resources SET status = ? WHERE id = ?", (status, resource_id))
                conn.execute(_JOURNAL, (resource_id, "H3", now))
                if event is not None:
                    conn.execute(
                        _INSERT_EVENT,
                        (
                            event.id,
                            event.client,
                            event.type,
                            event.resource_id,
                            event.body,
                            event.created_at,
                            event.next_attempt_at,
                        ),
                    )
        except _LeaseLost:
            return False
        return True

    def release(self, *, client: str, key: str, owner: str, now: float) -> bool:
        """Give the lease up without finishing, so the next actor may take over at once."""
        try:
            with self._write() as conn:
                self._fenced(conn, _RELEASE, (now, client, key, owner))
        except _LeaseLost:
            return False
        return True

    @staticmethod
    def _fenced(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> str | None:
        row = conn.execute(sql, params).fetchone()
        if row is None:
            raise _LeaseLost
        resource_id: str | None = row[0]
        return resource_id

    # -- reads -------------------------------------------------------------------------

    def key_row(self, client: str, key: str) -> KeyRow | None:
        with self._read() as conn:
            row = conn.execute(_SELECT_KEY, (client, key)).fetchone()
        return None if row is None else KeyRow(*row)

    def resource(self, resource_id: str) -> ResourceRow | None:
        with self._read() as conn:
            row = conn.execute(_SELECT_RESOURCE, (resource_id,)).fetchone()
        return None if row is None else ResourceRow(*row)

    def find_resources(
        self,
        *,
        client: str,
        kind: str,
        resource_id: str | None = None,
        reference: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[ResourceRow]:
        """The caller's own resources of one kind matching every filter given."""
        params = (
            client,
            kind,
            resource_id,
            resource_id,
            reference,
            reference,
            idempotency_key,
            idempotency_key,
        )
        with self._read() as conn:
            rows = conn.execute(_FIND_RESOURCES, params).fetchall()
        return [ResourceRow(*row) for row in rows]

    def stale_keys(self, *, stale_before: float, limit: int) -> list[tuple[str, str]]:
        """Started rows whose lease expired or was released, oldest first."""
        with self._read() as conn:
            rows = conn.execute(_STALE, (stale_before, limit)).fetchall()
        return [(client, key) for client, key in rows]

    def reap(self, *, created_before: float, now: float) -> int:
        """Delete finished keys created before `created_before`. (`now` is for backends
        that also prepare ahead; one SQLite table needs nothing prepared.)"""
        with self._write() as conn:
            return conn.execute(_REAP, (created_before,)).rowcount

    def reset(self) -> None:
        with self._write() as conn:
            for statement in _RESET:
                conn.execute(statement)

    # -- the webhook outbox -----------------------------------------------------------

    def due_events(self, *, now: float, limit: int) -> list[EventRow]:
        """Pending events due at `now`, soonest first."""
        with self._read() as conn:
            rows = conn.execute(_DUE_EVENTS, (now, limit)).fetchall()
        return [EventRow(*row) for row in rows]

    def claim_event(self, event: EventRow, *, until: float) -> bool:
        """Hold `event` (as read) for one deliverer until `until`. False: someone else has it."""
        with self._write() as conn:
            cursor = conn.execute(_CLAIM_EVENT, (until, event.id, event.next_attempt_at))
            return cursor.rowcount == 1

    def postpone_event(self, event_id: str, *, until: float) -> None:
        """Make a pending event due at `until` (no attempt is counted)."""
        with self._write() as conn:
            conn.execute(
                "UPDATE webhook_events SET next_attempt_at = ? WHERE id = ? AND state = 'pending'",
                (until, event_id),
            )

    def event_result(
        self,
        event_id: str,
        *,
        state: str,
        posts: int,
        next_attempt_at: float,
        delivered_at: float | None,
        status: int | None,
        error: str | None,
    ) -> None:
        """Record one delivery attempt: delivered, abandoned, or pending until later."""
        with self._write() as conn:
            conn.execute(
                _EVENT_RESULT,
                (state, 1, posts, next_attempt_at, delivered_at, status, error, event_id),
            )

    def events(self) -> list[EventRow]:
        """Every webhook event, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_EVENT_COLUMNS} FROM webhook_events ORDER BY created_at, rowid"
            ).fetchall()
        return [EventRow(*row) for row in rows]

    # -- the external systems' own books -----------------------------------------------

    def external_apply(
        self,
        *,
        system: int,
        key: str,
        resource_id: str,
        outcome: str,
        reference: str,
        amount: int,
        now: float,
    ) -> tuple[ExternalRecord, bool]:
        """Apply an instruction under `key` unless that key was seen. (record, applied now)."""
        with self._write() as conn:
            row = conn.execute(
                _EXTERNAL_APPLY, (system, key, resource_id, outcome, reference, amount, now)
            ).fetchone()
        record = ExternalRecord(*row)
        return record, record.calls == 1

    def external_lookup(self, *, system: int, key: str) -> ExternalRecord | None:
        with self._read() as conn:
            row = conn.execute(_EXTERNAL_LOOKUP, (system, key)).fetchone()
        return None if row is None else ExternalRecord(*row)

    # -- inspection --------------------------------------------------------------------

    def ledger_rows(
        self,
    ) -> list[tuple[ResourceRow, str | None, str | None, tuple[int, int, int, int], list[str]]]:
        """Every resource with its key state, effect counts and journal, oldest first."""
        with self._read() as conn:
            resources = [ResourceRow(*row) for row in conn.execute(_ALL_RESOURCES)]
            keys = {
                resource_id: (state, point)
                for resource_id, state, point in conn.execute(
                    "SELECT resource_id, state, recovery_point FROM idempotency_keys"
                    " WHERE resource_id IS NOT NULL"
                )
            }
            effects: dict[tuple[str, int], tuple[int, int]] = {}
            for resource_id, system, applied, calls in conn.execute(
                "SELECT resource_id, system, COUNT(*), SUM(calls) FROM external_effects"
                " GROUP BY resource_id, system"
            ):
                effects[resource_id, system] = (applied, calls)
            journal: dict[str, list[str]] = {}
            for resource_id, step in conn.execute(
                "SELECT resource_id, step FROM journal ORDER BY rowid"
            ):
                journal.setdefault(resource_id, []).append(step)
        out = []
        for resource in resources:
            state, point = keys.get(resource.id, (None, None))
            e1 = effects.get((resource.id, 1), (0, 0))
            e2 = effects.get((resource.id, 2), (0, 0))
            out.append(
                (resource, state, point, (e1[0], e2[0], e1[1], e2[1]), journal.get(resource.id, []))
            )
        return out
