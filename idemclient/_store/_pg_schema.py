"""The PostgreSQL store's tables: recognising them, creating them, and migrating them.

The store lives in one PostgreSQL schema (namespace), `idemclient` unless told
otherwise, so that it never meets the application's own tables. It is ours when its
`store_version` table says so. Anything else found under our table names (a foreign
`operations` table, a version table that is not ours, a newer schema version) raises
an error naming it, and nothing in the database is changed.

Every process that opens the store runs `open_schema`; a transaction-scoped advisory
lock makes them take turns, so that several hosts starting at once migrate it once.
DDL is transactional in PostgreSQL: a migration that fails leaves the store exactly at
the version it had.
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

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "StoreIdentity", "open_schema"]

APPLICATION = "idemclient"

#: A migration gets a connection inside the migrating transaction and the quoted
#: schema name to prefix its tables with.
Migration = Callable[[psycopg.Connection[Any], str], None]


def _v1(conn: psycopg.Connection[Any], schema: str) -> None:
    states = ", ".join(f"'{s.value}'" for s in State)
    unfinished = ", ".join(f"'{s}'" for s in UNFINISHED_STATES)
    conn.execute(
        f"""
        CREATE TABLE {schema}.store_version (
            -- one row: the store's identity and the version of its tables
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            application text NOT NULL CHECK (application = '{APPLICATION}'),
            store_id uuid NOT NULL,
            version integer NOT NULL,
            migrated_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
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


#: MIGRATIONS[n - 1] takes a store from schema version n - 1 to n. Append only.
MIGRATIONS: Sequence[Migration] = (_v1,)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """Which store a database holds: its random id (made once, at creation) and the
    version of its tables."""

    store_id: str
    version: int


def lock_id(schema: str) -> int:
    """The advisory lock that serialises opening the store in `schema` (signed 64 bits)."""
    digest = hashlib.sha256(f"{APPLICATION}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def open_schema(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    where: str,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> StoreIdentity:
    """Check and migrate the store in `schema`; `conn` must be in autocommit mode.

    `where` names the database in errors. Returns the store's identity.
    """
    quoted = sql.Identifier(schema).as_string(conn)
    latest = len(migrations)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        found = _inspect(conn, schema, quoted, where)
        if found is not None and found.version > latest:
            raise StoreTooNew(
                where,
                f"{quoted}.store_version says schema version {found.version}; this"
                f" idemclient understands up to {latest}. Nothing was changed.",
            )
        if found is not None and found.version == latest:
            return found
        if found is None:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        version = 0 if found is None else found.version
        for step in migrations[version:]:
            step(conn, quoted)
        store_id = str(uuid.uuid4()) if found is None else found.store_id
        conn.execute(
            f"INSERT INTO {quoted}.store_version (application, store_id, version)"
            " VALUES (%s, %s, %s) ON CONFLICT (singleton) DO UPDATE"
            " SET version = excluded.version, migrated_at = now()",
            (APPLICATION, store_id, latest),
        )
        return StoreIdentity(store_id, latest)


def read_identity(
    conn: psycopg.Connection[Any], schema: str, *, where: str
) -> StoreIdentity | None:
    """The identity of the store in `schema`, None if there is none, without changing
    anything and without an SQL error (so an application's transaction stays usable).
    Raises `ForeignStore` when our table names hold something else."""
    return _inspect(conn, schema, sql.Identifier(schema).as_string(conn), where)


def _inspect(
    conn: psycopg.Connection[Any], schema: str, quoted: str, where: str
) -> StoreIdentity | None:
    with conn.cursor(row_factory=tuple_row) as cur:
        version_table, operations_table = cur.execute(
            "SELECT to_regclass(%s)::text, to_regclass(%s)::text",
            (f"{quoted}.store_version", f"{quoted}.operations"),
        ).fetchone() or (None, None)
        if version_table is None:
            if operations_table is not None:
                raise ForeignStore(
                    where,
                    f"table {quoted}.operations was not created by idemclient (there is no"
                    f" {quoted}.store_version beside it); it was left as it is. Give the"
                    " store another schema (PostgresStore(..., schema=...)).",
                )
            return None
        # Read the columns through the catalogue first: selecting columns that a
        # foreign table lacks would be an SQL error.
        columns = {
            name
            for (name,) in cur.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attnum > 0 AND NOT attisdropped",
                (f"{quoted}.store_version",),
            )
        }
        if not {"application", "store_id", "version"} <= columns:
            raise ForeignStore(
                where,
                f"table {quoted}.store_version was not created by idemclient; it was left"
                " as it is. Give the store another schema (PostgresStore(..., schema=...)).",
            )
        row = cur.execute(
            f"SELECT application::text, store_id::text, version::integer"
            f" FROM {quoted}.store_version LIMIT 2"
        ).fetchall()
    if len(row) != 1 or row[0][0] != APPLICATION:
        raise ForeignStore(
            where,
            f"table {quoted}.store_version does not describe one idemclient store; it was"
            " left as it is",
        )
    _, store_id, version = row[0]
    return StoreIdentity(str(store_id), int(version))
