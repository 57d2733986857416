"""Our tables in a PostgreSQL schema: recognising them, creating them, and migrating them.

Each idemclient component that keeps tables in PostgreSQL (the store; the inbox) lives
in one PostgreSQL schema (namespace) of its own, so that it never meets the
application's own tables. A `Layout` says what the component's tables are called and
how to migrate them. They are ours when the layout's version table says so. Anything
else found under our table names (a foreign main table, a version table that is not
ours, a newer schema version) raises an error naming it, and nothing in the database
is changed.

Every process that opens a component runs `open_schema`; a transaction-scoped advisory
lock makes them take turns, so that several hosts starting at once migrate it once.
DDL is transactional in PostgreSQL: a migration that fails leaves the tables exactly at
the version they had.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from .._errors import ForeignStore, StoreTooNew
from .._outcome import UNFINISHED_STATES, State
from ._scrub import scrubbed

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STORE",
    "Layout",
    "Migration",
    "StoreIdentity",
    "create_version_table",
    "open_schema",
    "read_identity",
]

APPLICATION = "idemclient"

#: A migration gets a connection inside the migrating transaction and the quoted
#: schema name to prefix its tables with.
Migration = Callable[[psycopg.Connection[Any], str], None]


def create_version_table(conn: psycopg.Connection[Any], schema: str, name: str) -> None:
    """The one-row table that says the tables beside it are ours, and at which version."""
    conn.execute(
        f"""
        CREATE TABLE {schema}.{name} (
            -- one row: the component's identity and the version of its tables
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            application text NOT NULL CHECK (application = '{APPLICATION}'),
            store_id uuid NOT NULL,
            version integer NOT NULL,
            migrated_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )


def _v1(conn: psycopg.Connection[Any], schema: str) -> None:
    states = ", ".join(f"'{s.value}'" for s in State)
    unfinished = ", ".join(f"'{s}'" for s in UNFINISHED_STATES)
    create_version_table(conn, schema, "store_version")
    # Times are the client's clock as epoch seconds (double precision), exactly as the
    # client compares them; read them with to_timestamp(). `seq` orders operations
    # created in the same instant (a batch) as they were recorded.
    conn.execute(
        f"""
        CREATE TABLE {schema}.operations (
            id text PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            key text NOT NULL CONSTRAINT operations_key UNIQUE,
            method text NOT NULL,
            url text NOT NULL,
            headers jsonb NOT NULL,  -- [[name, value], ...], secrets removed
            body bytea NOT NULL,
            fingerprint text NOT NULL,
            reference text,
            state text NOT NULL CHECK (state IN ({states})),
            attempts integer NOT NULL DEFAULT 0,
            maybe_applied boolean NOT NULL DEFAULT false,
            evidence text NOT NULL DEFAULT '',
            not_before double precision,
            lease_owner text,
            lease_expires double precision,
            status_code integer,
            response_headers jsonb,
            response_body bytea,
            response_sha256 text,
            response_size bigint,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            finished_at double precision,
            CONSTRAINT operations_finished_has_answer
                CHECK ((finished_at IS NULL) = (state IN ({unfinished})))
        )
        """
    )
    # Partial indexes: unfinished operations stay quick to find among millions of
    # finished ones, and reaping reads only the finished ones.
    conn.execute(
        f"CREATE INDEX operations_unfinished ON {schema}.operations (created_at, seq)"
        " WHERE finished_at IS NULL"
    )
    conn.execute(
        f"CREATE INDEX operations_finished ON {schema}.operations (finished_at)"
        " WHERE finished_at IS NOT NULL"
    )
    conn.execute(
        f"CREATE INDEX operations_reference ON {schema}.operations (reference)"
        " WHERE reference IS NOT NULL"
    )


def _v2(conn: psycopg.Connection[Any], schema: str) -> None:
    # Reaping keeps a finished operation's key and state and drops only its bodies:
    # `reaped_at` says when, and the reaper's index holds only what it has still to do.
    conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN reaped_at double precision")
    conn.execute(f"DROP INDEX IF EXISTS {schema}.operations_finished")
    conn.execute(
        f"CREATE INDEX operations_unreaped ON {schema}.operations (finished_at)"
        " WHERE finished_at IS NOT NULL AND reaped_at IS NULL"
    )
    # The latest time the store has seen (every host's clock), so that a clock that
    # went back is noticed and one that jumped ahead reaps nothing it should not.
    conn.execute(
        f"""
        CREATE TABLE {schema}.store_clock (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            high_water double precision NOT NULL
        )
        """
    )
    conn.execute(
        f"INSERT INTO {schema}.store_clock (high_water) SELECT coalesce(GREATEST("
        f"max(created_at), max(finished_at)), 0) FROM {schema}.operations"
    )
    # Operations are kept until purged now, where earlier versions deleted them after a
    # week: what those versions wrote and this one never does goes (see `_scrub`).
    with conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(
            f"SELECT id, method, url, headers, body, fingerprint, response_headers"
            f" FROM {schema}.operations"
        ).fetchall()
        for operation_id, method, url, headers, body, stored, answer in rows:
            clean = scrubbed(method, url, headers, bytes(body), stored, answer)
            if clean is not None:
                cur.execute(
                    f"UPDATE {schema}.operations SET url = %s, headers = %s::jsonb,"
                    f" fingerprint = %s, response_headers = %s::jsonb WHERE id = %s",
                    (*clean, operation_id),
                )


#: MIGRATIONS[n - 1] takes a store from schema version n - 1 to n. Append only.
MIGRATIONS: Sequence[Migration] = (_v1, _v2)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """Which store a database holds: its random id (made once, at creation) and the
    version of its tables."""

    store_id: str
    version: int


@dataclass(frozen=True, slots=True)
class Layout:
    """One component's tables in a schema.

    `version_table` holds the one row that makes the schema's tables ours;
    `main_table` is the table whose presence without it means someone else's;
    `migrations[n - 1]` takes the tables from version n - 1 to n (the first creates the
    version table with `create_version_table`). `noun` and `opener` name the
    component in errors ("give the store another schema (PostgresStore(..., schema=...))").
    """

    version_table: str
    main_table: str
    migrations: Sequence[Migration]
    noun: str
    opener: str


#: The client store's tables.
STORE = Layout("store_version", "operations", MIGRATIONS, "store", "PostgresStore")


def lock_id(schema: str) -> int:
    """The advisory lock that serialises opening our tables in `schema` (signed 64 bits)."""
    digest = hashlib.sha256(f"{APPLICATION}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def open_schema(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    where: str,
    layout: Layout = STORE,
    migrations: Sequence[Migration] | None = None,
) -> StoreIdentity:
    """Check and migrate `layout`'s tables in `schema`; `conn` must be idle (no
    transaction open). `migrations` replaces the layout's own (for tests).

    `where` names the database in errors. Returns the tables' identity.
    """
    steps = layout.migrations if migrations is None else migrations
    quoted = sql.Identifier(schema).as_string(conn)
    latest = len(steps)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        found = _inspect(conn, layout, quoted, where)
        if found is not None and found.version > latest:
            raise StoreTooNew(
                where,
                f"{quoted}.{layout.version_table} says schema version {found.version}; this"
                f" idemclient understands up to {latest}. Nothing was changed.",
            )
        if found is not None and found.version == latest:
            return found
        if found is None:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        version = 0 if found is None else found.version
        for step in steps[version:]:
            step(conn, quoted)
        store_id = str(uuid.uuid4()) if found is None else found.store_id
        conn.execute(
            f"INSERT INTO {quoted}.{layout.version_table} (application, store_id, version)"
            " VALUES (%s, %s, %s) ON CONFLICT (singleton) DO UPDATE"
            " SET version = excluded.version, migrated_at = now()",
            (APPLICATION, store_id, latest),
        )
        return StoreIdentity(store_id, latest)


def read_identity(
    conn: psycopg.Connection[Any], schema: str, *, where: str, layout: Layout = STORE
) -> StoreIdentity | None:
    """The identity of `layout`'s tables in `schema`, None if there are none, without
    changing anything and without an SQL error (so an application's transaction stays
    usable). Raises `ForeignStore` when our table names hold something else."""
    return _inspect(conn, layout, sql.Identifier(schema).as_string(conn), where)


def _inspect(
    conn: psycopg.Connection[Any], layout: Layout, quoted: str, where: str
) -> StoreIdentity | None:
    versions = f"{quoted}.{layout.version_table}"
    main = f"{quoted}.{layout.main_table}"
    elsewhere = (
        f"it was left as it is. Give the {layout.noun} another schema"
        f" ({layout.opener}(..., schema=...))."
    )
    with conn.cursor(row_factory=tuple_row) as cur:
        version_table, main_table = cur.execute(
            "SELECT to_regclass(%s)::text, to_regclass(%s)::text", (versions, main)
        ).fetchone() or (None, None)
        if version_table is None:
            if main_table is not None:
                raise ForeignStore(
                    where,
                    f"table {main} was not created by idemclient (there is no {versions}"
                    f" beside it); {elsewhere}",
                )
            return None
        # Read the columns through the catalogue first: selecting columns that a
        # foreign table lacks would be an SQL error.
        columns = {
            name
            for (name,) in cur.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attnum > 0 AND NOT attisdropped",
                (versions,),
            )
        }
        if not {"application", "store_id", "version"} <= columns:
            raise ForeignStore(
                where, f"table {versions} was not created by idemclient; {elsewhere}"
            )
        row = cur.execute(
            f"SELECT application::text, store_id::text, version::integer FROM {versions} LIMIT 2"
        ).fetchall()
    if len(row) != 1 or row[0][0] != APPLICATION:
        raise ForeignStore(
            where,
            f"table {versions} does not describe one idemclient {layout.noun}; it was"
            " left as it is",
        )
    _, store_id, version = row[0]
    return StoreIdentity(str(store_id), int(version))
