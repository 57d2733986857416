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
`synchronous_commit = on`: the server acts on a commit (calls an external system,
answers 201) only once it is durable, so a crash of the database itself loses nothing
the server acted on. (With it off, a database crash under load lost external systems'
records and left keys stuck at a phase with no resource.)

**No row is waited on for long.** Every connection has a `lock_timeout`
(`LOCK_TIMEOUT`) and an `idle_in_transaction_session_timeout`
(`IDLE_IN_TRANSACTION_TIMEOUT`): a server frozen inside a transaction (SIGSTOP) loses
its session, and with it its locks, instead of blocking the others; a request that
meets a row held longer is answered 409 with `Retry-After` (`RowHeld`), and the
recovery sweep skips held rows (`FOR UPDATE SKIP LOCKED`) rather than queueing behind
them.

The phases, look-ups and outbox writes are `_transactions.Transactions`, shared with
the SQLite backend, whose statements this module renders for PostgreSQL; what is its
own is here: the schema, the pool, partitions, admission, the reaper and reset.

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
from psycopg import errors, sql

from ..._db.dialect import POSTGRES
from ..._db.postgres import check_quiet, display, open_then_pool
from ..._db.versions import upgrade
from ..._errors import ForeignStore, StoreError, StoreTooNew
from .rows import KeyRow, RowHeld, StorageDown
from .statements import Statements
from .transactions import Transactions

__all__ = ["ACQUIRE_TIMEOUT", "DAY", "SCHEMA", "SCHEMA_VERSION", "PostgresStorage"]

#: The PostgreSQL schema (namespace) holding the server's tables.
SCHEMA = "idemclient_server"
SCHEMA_VERSION = 1
#: One partition of the key table per UTC day.
DAY = 86_400
#: How long a request waits for a connection from the pool before it is answered 503
#: (the database unreachable, or every connection busy): well inside the 5 to 10 s a
#: client usually waits for an answer, so that it hears "retry later" rather than
#: timing out on a request that may look applied.
ACQUIRE_TIMEOUT = 3.0

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


# The shared statements (`_statements`) write times with `to_timestamp(seconds)` and
# read them back as epoch seconds; an identity `seq` keeps insertion order.
_SQL = Statements(
    POSTGRES, time="to_timestamp(%s)", epoch="extract(epoch FROM {})::float8", order="seq"
)
#: The recovery sweep, answered from the partial index on unfinished keys.
STALE = _SQL.stale
#: The sweep as it runs here: rows another transaction holds are skipped, not awaited.
_STALE_UNHELD = STALE.rstrip() + " FOR UPDATE SKIP LOCKED"


def _unavailable(where: str, exc: psycopg.Error, *, maybe_written: bool) -> StorageDown:
    return StorageDown(f"{where} cannot be used: {str(exc).strip()}", maybe_written=maybe_written)


def _is_down(exc: BaseException) -> bool:
    """psycopg's word for a database that cannot be used now: a connection refused,
    lost or timed out (the pool's too), a server shutting down or starting. A lock
    wait past the lock timeout is another matter (`RowHeld`)."""
    return isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, errors.LockNotAvailable
    )


@contextlib.contextmanager
def _held_rows() -> Iterator[None]:
    """A lock wait past `LOCK_TIMEOUT` as `RowHeld`: the caller answers 409, or skips."""
    try:
        yield
    except errors.LockNotAvailable as exc:
        raise RowHeld(str(exc).strip()) from exc


def _epoch(column: str) -> str:
    return _SQL.epoch.format(column)


_LOCK = "SELECT pg_advisory_xact_lock(%s::int4, %s::int4)"

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


Conn = psycopg.Connection[Any]


class PostgresStorage(Transactions):
    """PostgreSQL storage for the reference server. Safe to share between threads, and
    between processes (several servers on one database arbitrate through it).

    `url` is a libpq connection string. `max_connections` bounds this process's pool.
    """

    _sql = _SQL

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 10,
        connect_timeout: float = 10.0,
        acquire_timeout: float = ACQUIRE_TIMEOUT,
    ):
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not 0 < acquire_timeout < float("inf"):
            raise ValueError(f"acquire_timeout must be positive seconds, not {acquire_timeout!r}")
        self.path = display(url)
        self._acquire_timeout = acquire_timeout
        try:
            # Created or checked on one plain connection first (see `open_then_pool`).
            _, self._pool = open_then_pool(
                url,
                prepare=lambda conn: _open_schema(conn, self.path),
                max_connections=max_connections,
                connect_timeout=connect_timeout,
                configure=_configure,
                name="idemclient-server",
                where=self.path,
                schema=SCHEMA,
                # Every phase and every replay takes a connection from the pool: an
                # empty query before each would double a replay's round trips.
                check=check_quiet,
            )
        except (ForeignStore, StoreTooNew) as exc:
            raise ValueError(f"{self.path} {exc.reason}") from exc
        except StoreError as exc:
            raise ConnectionError(f"{self.path} {exc.reason}") from exc
        # The last day for which partitions are known to exist (this process created
        # or found them); partitions are only ever dropped once wholly in the past.
        self._ready_through = -1

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStorage({self.path!r})"

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self, *, writes: bool) -> Iterator[Conn]:
        """A pooled connection, within `acquire_timeout`.

        The database unusable is `StorageDown`: nothing written when no connection came
        (or for reads); maybe written when a statement that commits on its own (`writes`)
        was lost on the way."""
        try:
            conn = self._pool.getconn(timeout=self._acquire_timeout)
        except psycopg.OperationalError as exc:  # the pool's timeout included
            raise _unavailable(self.path, exc, maybe_written=False) from exc
        try:
            yield conn
        except psycopg.Error as exc:
            if not _is_down(exc):
                raise
            raise _unavailable(self.path, exc, maybe_written=writes) from exc
        finally:
            self._pool.putconn(conn)

    @contextlib.contextmanager
    def _autocommit(self, *, writes: bool = False) -> Iterator[Conn]:
        """A pooled connection in autocommit mode: each statement commits on its own."""
        with _held_rows(), self._connection(writes=writes) as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[Conn]:
        """A pooled connection inside a transaction, committed when the block ends.

        The database lost inside the block: nothing of the transaction committed (the
        server ends a transaction whose connection is gone). Lost during the commit:
        it may have committed, and `StorageDown` says so."""
        committing = False
        with _held_rows(), self._connection(writes=False) as conn:
            try:
                with conn.transaction():
                    yield conn
                    committing = True
            except psycopg.Error as exc:
                if not (committing and _is_down(exc)):
                    raise
                raise _unavailable(self.path, exc, maybe_written=True) from exc

    def _write_one(self) -> contextlib.AbstractContextManager[Conn]:
        return self._autocommit(writes=True)

    def stale_keys(self, *, stale_before: float, limit: int) -> list[tuple[str, str]]:
        """Started rows whose lease expired or was released, oldest first; a row another
        transaction holds (a frozen server's) is skipped, not waited for."""
        with self._write() as conn:
            rows = conn.execute(_STALE_UNHELD, (stale_before, limit)).fetchall()
        return [(client, key) for client, key in rows]

    # Reads need no transaction of their own (nor do writes of one statement, above).
    _read = _autocommit

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[Conn]:
        """One snapshot for several reads, as the SQLite backend's lock gives."""
        with self._write() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

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

    # -- admission: a plain read, or an advisory lock across every day -----------------

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
            existing = conn.execute(self._sql.select_key, (client, key)).fetchone()
        if existing is not None:
            return False, KeyRow(*existing)
        lock = (_ADMISSION_CLASS, admission_lock(client, key))
        for attempt in range(2):
            try:
                with self._write() as conn:
                    conn.execute(_LOCK, lock)
                    existing = conn.execute(self._sql.select_key, (client, key)).fetchone()
                    if existing is not None:
                        return False, KeyRow(*existing)
                    row = conn.execute(
                        self._sql.admit,
                        (client, key, request_hash, endpoint, request_body, now, owner, now),
                    ).fetchone()
                    if row is not None:
                        return True, KeyRow(*row)
                    # A conflict under the lock: only a writer that bypassed `admit`
                    # could have put it there. The primary key still held it out.
                    existing = conn.execute(self._sql.select_key, (client, key)).fetchone()
                    assert existing is not None
                    return False, KeyRow(*existing)
            except errors.CheckViolation:
                # "No partition of relation found for row": the first key of a new day.
                # Create it (or find that a concurrent admission just did) and retry.
                if attempt:
                    raise
                self.ensure_partitions(day_of(now), day_of(now))
        raise AssertionError("unreachable")  # pragma: no cover

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


#: How long a statement waits for a row another transaction holds, in milliseconds.
LOCK_TIMEOUT = 2000
#: How long a transaction may sit idle before PostgreSQL ends its session, in ms.
IDLE_IN_TRANSACTION_TIMEOUT = 10_000


def _configure(conn: Conn) -> None:
    """Set up a new pooled connection: our schema first, durable commits, and bounded
    waits for locks and idle transactions (see above)."""
    conn.execute(
        "SELECT set_config('search_path', %s, false),"
        " set_config('synchronous_commit', 'on', false),"
        " set_config('lock_timeout', %s, false),"
        " set_config('idle_in_transaction_session_timeout', %s, false)",
        (SCHEMA, f"{LOCK_TIMEOUT}ms", f"{IDLE_IN_TRANSACTION_TIMEOUT}ms"),
    )


class _ServerVersion:
    """The server's version table, `schema_version` (one row), as the runner's `Marker`."""

    source = f"{SCHEMA}.schema_version"

    def __init__(self, where: str) -> None:
        self._where = where

    def read(self, conn: Conn) -> int:
        quoted = sql.Identifier(SCHEMA)
        version_table, key_table = conn.execute(
            "SELECT to_regclass(%s)::text, to_regclass(%s)::text",
            (f"{SCHEMA}.schema_version", f"{SCHEMA}.idempotency_keys"),
        ).fetchone() or (None, None)
        if version_table is None and key_table is not None:
            raise ForeignStore(
                self._where,
                f"has a {SCHEMA}.idempotency_keys table that the reference server did not"
                " create; it was left as it is",
            )
        if version_table is None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(quoted))
        conn.execute(sql.SQL("SET LOCAL search_path = {}").format(quoted))
        if version_table is None:
            return 0
        found = conn.execute("SELECT version FROM schema_version").fetchone()
        if found is None:
            raise ForeignStore(self._where, f"{self.source} holds no version; it was left as it is")
        return int(found[0])

    def write(self, conn: Conn, version: int) -> None:
        conn.execute(
            "INSERT INTO schema_version (version) VALUES (%s)"
            " ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
            (version,),
        )


def _v1(conn: Conn) -> None:
    for statement in _DDL:
        conn.execute(statement)


def _open_schema(conn: Conn, where: str) -> None:
    """Create the schema and its tables, or check that they are this version's."""

    @contextlib.contextmanager
    def exclusive() -> Iterator[None]:
        with conn.transaction():
            conn.execute(_LOCK, _MAINTENANCE_LOCK)
            yield

    upgrade(
        conn, (_v1,), _ServerVersion(where), exclusive=exclusive, where=where,
        what="reference-server ",
    )  # fmt: skip
