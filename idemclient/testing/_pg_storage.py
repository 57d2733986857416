"""The reference server's durable state in PostgreSQL, with the seed's schema.

Everything lives in one PostgreSQL schema, `idemclient_server`, created on first use
(several processes opening it at once take turns on an advisory lock). The key table
is the seed's:

    idempotency_keys (client, key, request_hash, endpoint, state, recovery_point,
                      response_code, response_body, locked_at, created_at, ...)
      PARTITION BY RANGE (created_at), one partition per UTC day,
      each partition with PRIMARY KEY (client, key)
    idempotency_keys_unfinished ON (created_at, locked_at) WHERE state = 'started'

**Uniqueness across days.** PostgreSQL enforces a unique constraint only inside one
partition: a primary key on the partitioned table itself must contain the partition
key, and `(client, key, created_at)` would let the same key in again a millisecond
later. So each day's partition carries `PRIMARY KEY (client, key)`, which makes
`INSERT ... ON CONFLICT DO NOTHING RETURNING` the arbiter between arrivals on the same
day; and a key that a plain read does not find is admitted under a transaction-scoped
advisory lock on (client, key), which looks in every partition again before inserting,
so a key first seen yesterday is found, not admitted twice, even when two arrivals
straddle midnight. Every admission goes through
`admit`, so the lock is never skipped.

**Partitions.** A day's partition is created when the first key of that day arrives
(an insert that finds no partition creates it and tries again) and one day ahead by
the reaper. `key_partitions` records each partition's range, in the same transactions
as the DDL.

**The reaper drops whole days**, never deleting rows one by one: a partition goes when
its whole range is older than the TTL. Its started keys (the instructions to finish a
payment that may have reached an external system) are not dropped with it: they are
copied into a small "holdover" partition covering the expired range, which keeps
their `created_at`, so they remain where the recovery sweep finds them. Expired
ranges merge into one holdover, so stuck keys never pin a day's worth of rows.

Times are the server's injected clock: written with `to_timestamp(seconds)`, read back
as epoch seconds, so leases expire when a test's clock says so. Commits run with
`synchronous_commit = off`, the counterpart of the SQLite backend's
`synchronous = NORMAL`: a commit survives the server process's crash (PostgreSQL
holds it), and a crash of the database itself can lose only the last commits, a suffix
the protocol absorbs by resuming one phase earlier.

psycopg is an optional dependency: nothing imports this module until a `postgresql://`
URL is opened (see `_backend.open_storage`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict

from .._store._pg_conn import display as _display
from ._backend import LedgerRow
from ._protocol import Phase
from ._storage import EventRow, ExternalRecord, KeyRow, ResourceRow

__all__ = ["DAY", "SCHEMA", "SCHEMA_VERSION", "PostgresStorage"]

#: The PostgreSQL schema (namespace) holding the server's tables.
SCHEMA = "idemclient_server"
SCHEMA_VERSION = 1
#: One partition of the key table per UTC day.
DAY = 86_400

# Two-integer advisory locks (a key space of their own, apart from the one-bigint locks
# the client's PostgreSQL store takes): the class says what is locked.
_MAINTENANCE_LOCK = (0x1DE5, 0)  # creating the schema, creating and dropping partitions
_ADMISSION_CLASS = 0x1DE6  # admitting one (client, key); objid is a hash of it

_DDL = (
    """
    CREATE TABLE schema_version (
      singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      version         integer NOT NULL
    )
    """,
    """
    CREATE TABLE idempotency_keys (
      client          text        NOT NULL,    -- keys are unique per client, not globally
      key             text        NOT NULL,    -- client-supplied, validated at the edge
      request_hash    bytea       NOT NULL,    -- method, path, body: other request = 422
      endpoint        text        NOT NULL,
      request_body    bytea       NOT NULL,    -- canonical body: a resumer needs the instruction
      state           text        NOT NULL CHECK (state IN ('started', 'finished')),
      recovery_point  text,                    -- the last phase that committed
      resource_id     text,
      response_code   integer,
      response_body   bytea,                   -- bytes, not jsonb: replays are byte-identical
      locked_at       timestamptz,             -- the lease: NULL once finished or released
      lease_owner     text,                    -- fencing token of the attempt holding the lease
      attempts        integer     NOT NULL DEFAULT 0,
      last_attempt_at timestamptz,
      created_at      timestamptz NOT NULL
    ) PARTITION BY RANGE (created_at)
    """,
    # The recovery sweep reads only unfinished rows, oldest first. Declared once on the
    # partitioned table, so every partition (holdovers included) gets its own.
    """
    CREATE INDEX idempotency_keys_unfinished
      ON idempotency_keys (created_at, locked_at) WHERE state = 'started'
    """,
    """
    CREATE TABLE key_partitions (
      name            text        PRIMARY KEY,
      starts          timestamptz NOT NULL,
      ends            timestamptz NOT NULL,
      CHECK (starts < ends)
    )
    """,
    """
    CREATE TABLE resources (
      seq             bigint      GENERATED ALWAYS AS IDENTITY,
      id              text        PRIMARY KEY,
      kind            text        NOT NULL,
      client          text        NOT NULL,
      idempotency_key text        NOT NULL,
      reference       text        NOT NULL,
      amount          bigint      NOT NULL,
      currency        text        NOT NULL,
      status          text        NOT NULL,
      fields          text        NOT NULL,
      ext1            text,
      ext2            text,
      created_at      timestamptz NOT NULL
    )
    """,
    "CREATE INDEX resources_reference ON resources (client, kind, reference)",
    "CREATE INDEX resources_key ON resources (client, kind, idempotency_key)",
    """
    CREATE TABLE journal (
      seq             bigint      GENERATED ALWAYS AS IDENTITY,
      resource_id     text        NOT NULL,
      step            text        NOT NULL,
      at              timestamptz NOT NULL
    )
    """,
    "CREATE INDEX journal_resource ON journal (resource_id)",
    """
    CREATE TABLE external_effects (
      system          integer     NOT NULL,
      key             text        NOT NULL,
      resource_id     text        NOT NULL,
      outcome         text        NOT NULL,
      reference       text        NOT NULL,
      amount          bigint      NOT NULL,
      applied_at      timestamptz NOT NULL,
      calls           integer     NOT NULL,
      PRIMARY KEY (system, key)
    )
    """,
    "CREATE INDEX external_effects_resource ON external_effects (resource_id)",
    # The webhook outbox, as in the SQLite backend. Its times are the server clock's
    # seconds as they are (double precision, not timestamptz): a deliverer claims an
    # event on the exact `next_attempt_at` it read.
    """
    CREATE TABLE webhook_events (
      seq             bigint      GENERATED ALWAYS AS IDENTITY,
      id              text        PRIMARY KEY,  -- evt_...: the message id on every delivery
      client          text        NOT NULL,     -- whose endpoint receives it
      type            text        NOT NULL,     -- payment.succeeded, payout.declined, ...
      resource_id     text        NOT NULL,
      body            bytea       NOT NULL,     -- fixed once: every delivery sends these bytes
      created_at      double precision NOT NULL,
      state           text        NOT NULL CHECK (state IN ('pending', 'delivered', 'abandoned')),
      attempts        integer     NOT NULL DEFAULT 0,
      posts           integer     NOT NULL DEFAULT 0,
      next_attempt_at double precision NOT NULL,
      delivered_at    double precision,
      last_status     integer,
      last_error      text
    )
    """,
    # The deliverer reads only pending events, the soonest due first.
    """
    CREATE INDEX webhook_events_due ON webhook_events (next_attempt_at, seq)
      WHERE state = 'pending'
    """,
)


def _epoch(column: str) -> str:
    return f"extract(epoch FROM {column})::float8"


_KEY_COLUMNS = (
    "client, key, request_hash, endpoint, request_body, state, recovery_point, resource_id,"
    f" response_code, response_body, {_epoch('locked_at')}, lease_owner, attempts,"
    f" {_epoch('last_attempt_at')}, {_epoch('created_at')}"
)
_RESOURCE_COLUMNS = (
    "id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,"
    f" {_epoch('created_at')}"
)

_LOCK = "SELECT pg_advisory_xact_lock(%s::int4, %s::int4)"
_SELECT_KEY = f"SELECT {_KEY_COLUMNS} FROM idempotency_keys WHERE client = %s AND key = %s"
# No conflict target: the unique index is each partition's own primary key, which
# PostgreSQL consults when none is named (a target would need one on the parent).
_ADMIT = f"""
INSERT INTO idempotency_keys
  (client, key, request_hash, endpoint, request_body, state, locked_at, lease_owner, created_at)
VALUES (%s, %s, %s, %s, %s, 'started', to_timestamp(%s), %s, to_timestamp(%s))
ON CONFLICT DO NOTHING
RETURNING {_KEY_COLUMNS}
"""
# The seed's takeover: one conditional UPDATE. Of two racing resumers the second waits
# for the first's row lock, re-checks the condition on the new row version, and
# matches nothing.
_TAKE_OVER = f"""
UPDATE idempotency_keys SET locked_at = to_timestamp(%s), lease_owner = %s
WHERE client = %s AND key = %s AND state = 'started'
  AND (locked_at IS NULL OR locked_at < to_timestamp(%s))
RETURNING {_KEY_COLUMNS}
"""
_ADVANCE = """
UPDATE idempotency_keys SET recovery_point = %s, locked_at = to_timestamp(%s)
WHERE client = %s AND key = %s AND state = 'started' AND lease_owner = %s
RETURNING resource_id
"""
_ADVANCE_H1 = """
UPDATE idempotency_keys SET recovery_point = %s, locked_at = to_timestamp(%s), resource_id = %s
WHERE client = %s AND key = %s AND state = 'started' AND lease_owner = %s
RETURNING resource_id
"""
_MARK_SENT = """
UPDATE idempotency_keys
SET recovery_point = %s, locked_at = to_timestamp(%s), attempts = attempts + 1,
    last_attempt_at = to_timestamp(%s)
WHERE client = %s AND key = %s AND state = 'started' AND lease_owner = %s
RETURNING resource_id
"""
_FINISH = """
UPDATE idempotency_keys
SET state = 'finished', response_code = %s, response_body = %s, locked_at = NULL,
    lease_owner = NULL
WHERE client = %s AND key = %s AND state = 'started' AND lease_owner = %s
RETURNING resource_id
"""
_RELEASE = """
UPDATE idempotency_keys SET locked_at = NULL, lease_owner = NULL,
    last_attempt_at = to_timestamp(%s)
WHERE client = %s AND key = %s AND state = 'started' AND lease_owner = %s
RETURNING resource_id
"""
#: The recovery sweep, answered from the partial index on unfinished keys.
STALE = """
SELECT client, key FROM idempotency_keys
WHERE state = 'started' AND (locked_at IS NULL OR locked_at < to_timestamp(%s))
ORDER BY created_at LIMIT %s
"""
_INSERT_RESOURCE = """
INSERT INTO resources
  (id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, NULL, NULL, to_timestamp(%s))
"""
_SET_STATUS = "UPDATE resources SET status = %s WHERE id = %s"
_SET_EXTERNAL = {
    1: "UPDATE resources SET ext1 = %s WHERE id = %s",
    2: "UPDATE resources SET ext2 = %s WHERE id = %s",
}
_JOURNAL = "INSERT INTO journal (resource_id, step, at) VALUES (%s, %s, to_timestamp(%s))"
_EXTERNAL_APPLY = """
INSERT INTO external_effects AS e
  (system, key, resource_id, outcome, reference, amount, applied_at, calls)
VALUES (%s, %s, %s, %s, %s, %s, to_timestamp(%s), 1)
ON CONFLICT (system, key) DO UPDATE SET calls = e.calls + 1
RETURNING outcome, reference, calls
"""
_EXTERNAL_LOOKUP = (
    "SELECT outcome, reference, calls FROM external_effects WHERE system = %s AND key = %s"
)
_EVENT_COLUMNS = (
    "id, client, type, resource_id, body, created_at, state, attempts, posts, next_attempt_at,"
    " delivered_at, last_status, last_error"
)
_INSERT_EVENT = (
    "INSERT INTO webhook_events (id, client, type, resource_id, body, created_at, state,"
    " next_attempt_at) VALUES (%s, %s, %s, %s, %s, %s, 'pending', %s)"
)
_DUE_EVENTS = (
    f"SELECT {_EVENT_COLUMNS} FROM webhook_events WHERE state = 'pending'"
    " AND next_attempt_at <= %s ORDER BY next_attempt_at, seq LIMIT %s"
)
# Conditional on the due time just read: of two deliverers (in two server processes,
# say) that read the same event, one gets it.
_CLAIM_EVENT = (
    "UPDATE webhook_events SET next_attempt_at = %s"
    " WHERE id = %s AND state = 'pending' AND next_attempt_at = %s"
)
_EVENT_RESULT = (
    "UPDATE webhook_events SET state = %s, attempts = attempts + 1, posts = posts + %s,"
    " next_attempt_at = %s, delivered_at = %s, last_status = %s, last_error = %s"
    " WHERE id = %s AND state = 'pending'"
)
_COVERED = (
    "SELECT 1 FROM key_partitions WHERE starts < to_timestamp(%s) AND ends > to_timestamp(%s)"
)
_RECORD_PARTITION = (
    "INSERT INTO key_partitions (name, starts, ends)"
    " VALUES (%s, to_timestamp(%s), to_timestamp(%s))"
)


def day_of(moment: float) -> int:
    """The UTC day (days since the epoch) holding `moment`."""
    return math.floor(moment / DAY)


def _date(day: int) -> datetime:
    return datetime.fromtimestamp(day * DAY, UTC)


def _bound(day: int) -> sql.Literal:
    # A plain string literal, read as timestamptz by the partition key's type.
    return sql.Literal(f"{_date(day):%Y-%m-%d} 00:00:00+00")


def admission_lock(client: str, key: str) -> int:
    """The advisory lock (objid) for admitting (client, key): a signed 32-bit hash."""
    digest = hashlib.sha256(f"{client}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class _LeaseLost(Exception):
    """The attempt no longer owns the row: roll the phase back, write nothing."""


Conn = psycopg.Connection[Any]


class PostgresStorage:
    """PostgreSQL storage for the reference server. Safe to share between threads, and
    between processes (several servers on one database arbitrate through it).

    `url` is a libpq connection string. `max_connections` bounds this process's pool.
    """

    def __init__(self, url: str, *, max_connections: int = 10, connect_timeout: float = 10.0):
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.path = _display(url)
        connect_args: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(url):
            connect_args["connect_timeout"] = max(1, round(connect_timeout))
        # Create or check the schema on one plain connection first, so a wrong URL or a
        # newer schema fails here with its own message, not in the pool's reconnect loop.
        try:
            with psycopg.connect(url, **connect_args) as conn:
                _open_schema(conn, self.path)
        except psycopg.Error as exc:
            raise ConnectionError(f"{self.path} cannot be used: {exc}") from exc
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            url,
            kwargs=connect_args,
            min_size=1,
            max_size=max_connections,
            timeout=connect_timeout,
            configure=_configure,
            name="idemclient-server",
            open=True,
        )
        # The last day for which partitions are known to exist (this process created
        # or found them); partitions are only ever dropped once wholly in the past.
        self._ready_through = -1

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStorage({self.path!r})"

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def _autocommit(self) -> Iterator[Conn]:
        """A pooled connection in autocommit mode: each statement commits on its own."""
        with self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[Conn]:
        """A pooled connection inside a transaction, committed when the block ends."""
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    @staticmethod
    def _fenced(conn: Conn, statement: str, params: tuple[object, ...]) -> str | None:
        row = conn.execute(statement, params).fetchone()
        if row is None:
            raise _LeaseLost
        resource_id: str | None = row[0]
        return resource_id

    # -- partitions --------------------------------------------------------------------

    def ensure_partitions(self, first_day: int, last_day: int) -> int:
        """Create the missing day partitions from `first_day` to `last_day` (inclusive).

        A day already covered by a partition (a holdover included) is left alone.
        Returns how many were created."""
        created = 0
        with self._write() as conn:
            conn.execute(_LOCK, _MAINTENANCE_LOCK)
            for day in range(first_day, last_day + 1):
                start, end = float(day * DAY), float((day + 1) * DAY)
                if conn.execute(_COVERED, (end, start)).fetchone() is not None:
                    continue
                name = f"idempotency_keys_{_date(day):%Y%m%d}"
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} PARTITION OF idempotency_keys (PRIMARY KEY (client, key))"
                        " FOR VALUES FROM ({}) TO ({})"
                    ).format(sql.Identifier(name), _bound(day), _bound(day + 1))
                )
                conn.execute(_RECORD_PARTITION, (name, start, end))
                created += 1
        return created

    def partitions(self) -> list[tuple[str, float, float]]:
        """Every partition of the key table: (name, starts, ends), oldest first."""
        with self._autocommit() as conn:
            rows = conn.execute(
                f"SELECT name, {_epoch('starts')}, {_epoch('ends')} FROM key_partitions"
                " ORDER BY starts"
            ).fetchall()
        return [(name, starts, ends) for name, starts, ends in rows]

    # -- admission and takeover --------------------------------------------------------

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

        A key that exists is answered from one plain read: what happens next (replay,
        409, 422, takeover) needs no lock, and retries of a request in flight are most
        of the traffic a storm brings. A key found nowhere takes the (client, key)
        advisory lock, under which the look-up across every day and the insert are one
        atomic step for every other admission of the same key; the transaction ends
        (and the lock goes) as soon as the row is committed.
        """
        with self._autocommit() as conn:
            existing = conn.execute(_SELECT_KEY, (client, key)).fetchone()
        if existing is not None:
            return False, KeyRow(*existing)
        lock = (_ADMISSION_CLASS, admission_lock(client, key))
        for attempt in range(2):
            try:
                with self._write() as conn:
                    conn.execute(_LOCK, lock)
                    existing = conn.execute(_SELECT_KEY, (client, key)).fetchone()
                    if existing is not None:
                        return False, KeyRow(*existing)
                    row = conn.execute(
                        _ADMIT, (client, key, request_hash, endpoint, request_body, now, owner, now)
                    ).fetchone()
                    if row is not None:
                        return True, KeyRow(*row)
                    # A conflict under the lock: only a writer that bypassed `admit`
                    # could have put it there. The primary key still held it out.
                    existing = conn.execute(_SELECT_KEY, (client, key)).fetchone()
                    assert existing is not None
                    return False, KeyRow(*existing)
            except errors.CheckViolation:
                # "No partition of relation found for row": the first key of a new day.
                # Create it (or find that a concurrent admission just did) and retry.
                if attempt:
                    raise
                self.ensure_partitions(day_of(now), day_of(now))
        raise AssertionError("unreachable")  # pragma: no cover

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
                    conn, _ADVANCE_H1, (Phase.H1_DONE.value, now, resource.id, client, key, owner)
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
                conn.execute(_SET_STATUS, (status, resource_id))
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
                conn.execute(_SET_STATUS, (status, resource_id))
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

    # -- reads -------------------------------------------------------------------------

    def key_row(self, client: str, key: str) -> KeyRow | None:
        with self._autocommit() as conn:
            row = conn.execute(_SELECT_KEY, (client, key)).fetchone()
        return None if row is None else KeyRow(*row)

    def resource(self, resource_id: str) -> ResourceRow | None:
        with self._autocommit() as conn:
            row = conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM resources WHERE id = %s", (resource_id,)
            ).fetchone()
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
        # Only the filters given go into the statement (each variant is planned for
        # the index it can use); the fragments are constants, the values parameters.
        where = ["client = %s", "kind = %s"]
        params: list[object] = [client, kind]
        for column, value in (
            ("id", resource_id),
            ("reference", reference),
            ("idempotency_key", idempotency_key),
        ):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        with self._autocommit() as conn:
            rows = conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM resources WHERE {' AND '.join(where)}"
                " ORDER BY seq",
                params,
            ).fetchall()
        return [ResourceRow(*row) for row in rows]

    def stale_keys(self, *, stale_before: float, limit: int) -> list[tuple[str, str]]:
        """Started rows whose lease expired or was released, oldest first."""
        with self._autocommit() as conn:
            rows = conn.execute(STALE, (stale_before, limit)).fetchall()
        return [(client, key) for client, key in rows]

    # -- maintenance -------------------------------------------------------------------

    def reap(self, *, created_before: float, now: float) -> int:
        """Prepare today's and tomorrow's partitions, and drop every partition wholly
        older than `created_before`, keeping its started keys in a holdover partition.
        Returns how many finished keys were dropped."""
        today = day_of(now)
        if self._ready_through < today + 1:
            self.ensure_partitions(today, today + 1)
            self._ready_through = today + 1
        with self._write() as conn:
            conn.execute(_LOCK, _MAINTENANCE_LOCK)
            expired = conn.execute(
                f"SELECT name, {_epoch('starts')}, {_epoch('ends')} FROM key_partitions"
                " WHERE ends <= to_timestamp(%s) ORDER BY starts",
                (created_before,),
            ).fetchall()
            if not expired:
                return 0
            # Dropping a partition takes this lock on the parent anyway; taking it first
            # means no transaction can change a started row between its copy and the
            # drop. The key table pauses for as long as this transaction takes.
            conn.execute("LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
            tables = [sql.Identifier(name) for name, _, _ in expired]
            union = sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT state FROM {}").format(table) for table in tables
            )
            counted = conn.execute(
                sql.SQL(
                    "SELECT count(*) FILTER (WHERE state = 'finished'),"
                    " count(*) FILTER (WHERE state = 'started') FROM ({}) AS expired"
                ).format(union)
            ).fetchone()
            assert counted is not None
            finished, started = int(counted[0]), int(counted[1])
            if finished == 0 and started > 0 and len(expired) == 1:
                return 0  # a holdover of started keys only: rebuilding it gains nothing
            if started:
                held = sql.SQL(" UNION ALL ").join(
                    sql.SQL("SELECT * FROM {} WHERE state = 'started'").format(table)
                    for table in tables
                )
                conn.execute(
                    sql.SQL("CREATE TEMPORARY TABLE held_keys ON COMMIT DROP AS {}").format(held)
                )
            for table in tables:
                conn.execute(sql.SQL("DROP TABLE {}").format(table))
            conn.execute(
                "DELETE FROM key_partitions WHERE name = ANY(%s)",
                ([name for name, _, _ in expired],),
            )
            if started:
                first, last = day_of(expired[0][1]), day_of(expired[-1][2])
                name = f"idempotency_keys_held_{_date(first):%Y%m%d}_{_date(last):%Y%m%d}"
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} PARTITION OF idempotency_keys (PRIMARY KEY (client, key))"
                        " FOR VALUES FROM ({}) TO ({})"
                    ).format(sql.Identifier(name), _bound(first), _bound(last))
                )
                conn.execute(_RECORD_PARTITION, (name, float(first * DAY), float(last * DAY)))
                conn.execute("INSERT INTO idempotency_keys SELECT * FROM held_keys")
        return finished

    def reset(self) -> None:
        with self._write() as conn:
            conn.execute(
                "TRUNCATE idempotency_keys, resources, journal, external_effects, webhook_events"
            )

    # -- the webhook outbox ------------------------------------------------------------

    def due_events(self, *, now: float, limit: int) -> list[EventRow]:
        """Pending events due at `now`, soonest first."""
        with self._autocommit() as conn:
            rows = conn.execute(_DUE_EVENTS, (now, limit)).fetchall()
        return [EventRow(*row) for row in rows]

    def claim_event(self, event: EventRow, *, until: float) -> bool:
        """Hold `event` (as read) for one deliverer until `until`. False: someone else has it."""
        with self._autocommit() as conn:
            cursor = conn.execute(_CLAIM_EVENT, (until, event.id, event.next_attempt_at))
            return cursor.rowcount == 1

    def postpone_event(self, event_id: str, *, until: float) -> None:
        """Make a pending event due at `until` (no attempt is counted)."""
        with self._autocommit() as conn:
            conn.execute(
                "UPDATE webhook_events SET next_attempt_at = %s"
                " WHERE id = %s AND state = 'pending'",
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
        with self._autocommit() as conn:
            conn.execute(
                _EVENT_RESULT,
                (state, posts, next_attempt_at, delivered_at, status, error, event_id),
            )

    def events(self) -> list[EventRow]:
        """Every webhook event, oldest first."""
        with self._autocommit() as conn:
            rows = conn.execute(
                f"SELECT {_EVENT_COLUMNS} FROM webhook_events ORDER BY created_at, seq"
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
        assert row is not None
        record = ExternalRecord(*row)
        return record, record.calls == 1

    def external_lookup(self, *, system: int, key: str) -> ExternalRecord | None:
        with self._autocommit() as conn:
            row = conn.execute(_EXTERNAL_LOOKUP, (system, key)).fetchone()
        return None if row is None else ExternalRecord(*row)

    # -- inspection --------------------------------------------------------------------

    def ledger_rows(self) -> list[LedgerRow]:
        """Every resource with its key state, effect counts and journal, oldest first."""
        with self._write() as conn:
            # One snapshot for the four reads, as the SQLite backend's lock gives.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            resources = [
                ResourceRow(*row)
                for row in conn.execute(f"SELECT {_RESOURCE_COLUMNS} FROM resources ORDER BY seq")
            ]
            keys = {
                resource_id: (state, point)
                for resource_id, state, point in conn.execute(
                    "SELECT resource_id, state, recovery_point FROM idempotency_keys"
                    " WHERE resource_id IS NOT NULL"
                )
            }
            effects: dict[tuple[str, int], tuple[int, int]] = {}
            for resource_id, system, applied, calls in conn.execute(
                "SELECT resource_id, system, count(*), sum(calls) FROM external_effects"
                " GROUP BY resource_id, system"
            ):
                effects[resource_id, system] = (int(applied), int(calls))
            journal: dict[str, list[str]] = {}
            for resource_id, step in conn.execute(
                "SELECT resource_id, step FROM journal ORDER BY seq"
            ):
                journal.setdefault(resource_id, []).append(step)
        out: list[LedgerRow] = []
        for resource in resources:
            state, point = keys.get(resource.id, (None, None))
            e1 = effects.get((resource.id, 1), (0, 0))
            e2 = effects.get((resource.id, 2), (0, 0))
            out.append(
                (resource, state, point, (e1[0], e2[0], e1[1], e2[1]), journal.get(resource.id, []))
            )
        return out


def _configure(conn: Conn) -> None:
    """Set up a new pooled connection: our schema first, cheap commits (see above)."""
    conn.execute(
        "SELECT set_config('search_path', %s, false),"
        " set_config('synchronous_commit', 'off', false)",
        (SCHEMA,),
    )


def _open_schema(conn: Conn, where: str) -> None:
    """Create the schema and its tables, or check that they are this version's."""
    quoted = sql.Identifier(SCHEMA)
    with conn.transaction():
        conn.execute(_LOCK, _MAINTENANCE_LOCK)
        version_table, key_table = conn.execute(
            "SELECT to_regclass(%s)::text, to_regclass(%s)::text",
            (f"{SCHEMA}.schema_version", f"{SCHEMA}.idempotency_keys"),
        ).fetchone() or (None, None)
        if version_table is None:
            if key_table is not None:
                raise ValueError(
                    f"{where} has a {SCHEMA}.idempotency_keys table that the reference server"
                    " did not create; it was left as it is"
                )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(quoted))
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(quoted))
            for statement in _DDL:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            return
        found = conn.execute(
            sql.SQL("SELECT version FROM {}.schema_version").format(quoted)
        ).fetchone()
        version = None if found is None else found[0]
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"{where} holds reference-server schema version {version} in schema"
                f" {SCHEMA}; this version reads {SCHEMA_VERSION}"
            )
