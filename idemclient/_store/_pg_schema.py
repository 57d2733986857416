"""The client store's tables in PostgreSQL: their migrations, and their `Layout`.

Opening them (the version table that makes them ours, the advisory lock that makes
hosts take turns, refusing foreign or newer tables) is the database layer's
(`_db.pg_schema.open_schema`); what is here is the store's own: its tables, as each
version made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from .._db.pg_schema import Layout, Migration, create_version_table
from .._outcome import UNFINISHED_STATES, State
from ._scrub import scrubbed

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "STORE"]


def _v1(conn: psycopg.Connection[Any], schema: str) -> None:
    states = ", ".join(f"'{s.value}'" for s in State if s is not State.CHALLENGED)
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


def _v3(conn: psycopg.Connection[Any], schema: str) -> None:
    # Each operation keeps the server profile it was sent under (see the SQLite
    # store's version 5). Null: recorded before profiles, under the generic one.
    conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN profile text")


def _v4(conn: psycopg.Connection[Any], schema: str) -> None:
    # The largest step back of a clock seen while an operation was unfinished (see the
    # SQLite store's version 6). Null: none seen.
    conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN clock_stepped double precision")


def _v5(conn: psycopg.Connection[Any], schema: str) -> None:
    # When an attempt that may have been applied was last sent (see the SQLite store's
    # version 7). Null: none, or written by an earlier version.
    conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN sent_at double precision")


def _v6(conn: psycopg.Connection[Any], schema: str) -> None:
    # A lease taken for a look-up, which sends nothing (see the SQLite store's version
    # 8). False: a send's lease, or none.
    conn.execute(
        f"ALTER TABLE {schema}.operations ADD COLUMN lease_look_up boolean NOT NULL DEFAULT false"
    )


def _v7(conn: psycopg.Connection[Any], schema: str) -> None:
    # A replay-looking answer no attempt of the operation explains (see the SQLite
    # store's version 9). False for the rows before: none was seen.
    conn.execute(
        f"ALTER TABLE {schema}.operations"
        " ADD COLUMN replay_unexplained boolean NOT NULL DEFAULT false"
    )


def _v8(conn: psycopg.Connection[Any], schema: str) -> None:
    # The server's own time beside the row's stamps, at or before the first send and at
    # the latest send (see the SQLite store's version 10). Null: not known.
    conn.execute(
        f"ALTER TABLE {schema}.operations ADD COLUMN server_created_at double precision,"
        " ADD COLUMN server_sent_at double precision"
    )


def _v9(conn: psycopg.Connection[Any], schema: str) -> None:
    # Look-ups that found nothing, kept as they come (see the SQLite store's version 11).
    conn.execute(
        f"""
        CREATE TABLE {schema}.not_found (
            operation_id text PRIMARY KEY,
            key text NOT NULL,
            url text NOT NULL,
            reading text NOT NULL,
            asked_at double precision NOT NULL,
            server_at double precision
        )
        """
    )
    conn.execute(f"CREATE INDEX not_found_asked ON {schema}.not_found (asked_at)")


def _v10(conn: psycopg.Connection[Any], schema: str) -> None:
    # A digest of each batch row's payment content (see the SQLite store's version 12).
    conn.execute(
        f"CREATE TABLE {schema}.contents (operation_id text PRIMARY KEY, digest text NOT NULL)"
    )
    conn.execute(f"CREATE INDEX contents_digest ON {schema}.contents (digest)")


def _v11(conn: psycopg.Connection[Any], schema: str) -> None:
    # The latest send of an unfinished operation, read at each start (see the SQLite
    # store's version 13): only the rows with such a send are indexed.
    conn.execute(
        f"CREATE INDEX operations_sent ON {schema}.operations (sent_at)"
        " WHERE finished_at IS NULL AND sent_at IS NOT NULL"
    )


#: MIGRATIONS[n - 1] takes a store from schema version n - 1 to n. Append only.
MIGRATIONS: Sequence[Migration] = (
    _v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11,
)  # fmt: skip
SCHEMA_VERSION = len(MIGRATIONS)


#: The client store's tables.
STORE = Layout("store_version", "operations", MIGRATIONS, "store", "PostgresStore")
