"""Turning what a caller passes as `store=` into a `Store`."""

from __future__ import annotations

import os

from ._base import Store
from ._sqlite import SQLiteStore

__all__ = ["INSTALL_POSTGRES", "POSTGRES_SCHEMES", "open_store"]

#: URL schemes that libpq accepts; any other string is the path of a SQLite file.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

INSTALL_POSTGRES = "pip install 'idemclient[postgres]'"


def open_store(spec: Store | str | os.PathLike[str]) -> Store:
    """A `Store` given as it is, a PostgreSQL URL, or the path of a SQLite file."""
    if isinstance(spec, str) and spec.startswith(POSTGRES_SCHEMES):
        # Imported only now: psycopg is an optional dependency.
        try:
            from ._postgres import PostgresStore
        except ImportError as exc:
            raise ImportError(
                f"a PostgreSQL store needs psycopg 3 and psycopg-pool, which are not"
                f" installed ({exc}); install them with: {INSTALL_POSTGRES}"
            ) from exc
        return PostgresStore(spec)
    if isinstance(spec, str | os.PathLike):
        return SQLiteStore(spec)
    return spec
