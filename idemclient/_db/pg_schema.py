"""idemclient's tables in a PostgreSQL schema: the version table that makes them ours,
and opening them through the schema-version runner (`versions.upgrade`).

Each feature that keeps tables in PostgreSQL (the store; the inbox) lives in one
PostgreSQL schema (namespace) of its own, so that it never meets the application's
own tables. A `Layout` says what the feature's tables are called and how to migrate
them. They are ours when the layout's version table says so. Anything else found under
our table names (a foreign main table, a version table that is not ours, a newer
schema version) raises an error naming it, and nothing in the database is changed.

Every process that opens a feature's tables runs `open_schema`; a transaction-scoped
advisory lock makes them take turns, so that several hosts starting at once migrate
once. DDL is transactional in PostgreSQL: a migration that fails leaves the tables
exactly at the version they had.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from .._errors import ForeignStore
from .versions import upgrade

__all__ = [
    "APPLICATION",
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


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """Which tables a database holds: their random id (made once, at creation) and
    their version."""

    store_id: str
    version: int


@dataclass(frozen=True, slots=True)
class Layout:
    """One feature's tables in a schema.

    `version_table` holds the one row that makes the schema's tables ours;
    `main_table` is the table whose presence without it means someone else's;
    `migrations[n - 1]` takes the tables from version n - 1 to n (the first creates the
    version table with `create_version_table`). `noun` and `opener` name the
    feature in errors ("give the store another schema (PostgresStore(..., schema=...))").
    """

    version_table: str
    main_table: str
    migrations: Sequence[Migration]
    noun: str
    opener: str


def lock_id(schema: str) -> int:
    """The advisory lock that serialises opening our tables in `schema` (signed 64 bits)."""
    digest = hashlib.sha256(f"{APPLICATION}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _VersionRow:
    """The layout's version table as the runner's `Marker`; keeps the identity found."""

    def __init__(self, layout: Layout, schema: str, quoted: str, where: str) -> None:
        self._layout, self._schema, self._quoted, self._where = layout, schema, quoted, where
        self.source = f"{quoted}.{layout.version_table}"
        self.found: StoreIdentity | None = None

    def read(self, conn: psycopg.Connection[Any]) -> int:
        self.found = _inspect(conn, self._layout, self._quoted, self._where)
        if self.found is None:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._quoted}")
            return 0
        return self.found.version

    def write(self, conn: psycopg.Connection[Any], version: int) -> None:
        store_id = str(uuid.uuid4()) if self.found is None else self.found.store_id
        conn.execute(
            f"INSERT INTO {self.source} (application, store_id, version)"
            " VALUES (%s, %s, %s) ON CONFLICT (singleton) DO UPDATE"
            " SET version = excluded.version, migrated_at = now()",
            (APPLICATION, store_id, version),
        )
        self.found = StoreIdentity(store_id, version)


def open_schema(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    where: str,
    layout: Layout,
    migrations: Sequence[Migration] | None = None,
) -> StoreIdentity:
    """Check and migrate `layout`'s tables in `schema`; `conn` must be idle (no
    transaction open). `migrations` replaces the layout's own (for tests).

    `where` names the database in errors. Returns the tables' identity.
    """
    quoted = sql.Identifier(schema).as_string(conn)
    marker = _VersionRow(layout, schema, quoted, where)
    steps = [
        _in_schema(step, quoted)
        for step in (layout.migrations if migrations is None else migrations)
    ]

    @contextlib.contextmanager
    def exclusive() -> Iterator[None]:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
            yield

    upgrade(conn, steps, marker, exclusive=exclusive, where=where)
    assert marker.found is not None
    return marker.found


def _in_schema(step: Migration, quoted: str) -> Callable[[psycopg.Connection[Any]], None]:
    return lambda conn: step(conn, quoted)


def read_identity(
    conn: psycopg.Connection[Any], schema: str, *, where: str, layout: Layout
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
