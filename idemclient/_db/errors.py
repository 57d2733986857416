"""The one mapping of the database drivers' errors onto idemclient's.

A damaged file, or one that is not a database, is `StoreCorrupt`; our tables changed
under us (a dropped table or column) is `StoreCorrupt` too; anything else the driver
says (busy, locked, read-only, closed, unreachable, timed out) is `StoreUnavailable`:
it cannot be used right now, and nothing in it was changed. Every error is raised
`from` the driver's, which stays readable as its `__cause__`.

Driver-neutral: psycopg's errors are told apart by their SQLSTATE, so that this module
imports no optional dependency.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from .._errors import StoreCorrupt, StoreError, StoreUnavailable

__all__ = ["pg_error", "sqlite_busy", "sqlite_error", "sqlite_errors"]

#: SQLite's result codes for a file that is damaged or not a database at all.
_DAMAGED = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
#: SQLite's primary result codes that ask the caller to try again.
_BUSY = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
#: PostgreSQL's SQLSTATEs for a table or column that is not there (any more).
_UNDEFINED = frozenset({"42P01", "42703"})  # undefined_table, undefined_column


def sqlite_error(name: str, error: sqlite3.Error) -> StoreError:
    """SQLite's error as ours, naming the database. Only a damaged file, or one that is
    not a database, is called damaged; anything else (busy, read-only, closed, used
    from the wrong thread) means it cannot be used right now, and the file is fine."""
    code = getattr(error, "sqlite_errorcode", None)
    damaged = code in _DAMAGED if code is not None else type(error) is sqlite3.DatabaseError
    if damaged:
        return StoreCorrupt(name, f"is damaged: {error}")
    return StoreUnavailable(name, f"cannot be used: {error}")


def sqlite_busy(error: sqlite3.Error) -> bool:
    """Whether SQLite answered "busy" or "locked": another connection holds the file."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY


@contextlib.contextmanager
def sqlite_errors(name: str) -> Iterator[None]:
    """SQLite's errors raised inside the block, as ours (see `sqlite_error`)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise sqlite_error(name, exc) from exc


def pg_error(where: str, schema: str, error: Exception) -> StoreError:
    """psycopg's error as ours, naming the database (`where`) and the quoted schema."""
    if getattr(error, "sqlstate", None) in _UNDEFINED:
        return StoreCorrupt(where, f"the tables in schema {schema} changed: {error}")
    return StoreUnavailable(where, f"cannot be used: {error}".strip())
