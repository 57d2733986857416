"""Turning what a caller passes as `store=` into a store."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import TypeVar, overload

from .._db import is_postgres_url, postgres_missing
from ._interface import AdminStore, OperationStore
from ._sqlite import SQLiteStore

__all__ = ["open_store", "store_absent"]

S = TypeVar("S", bound=OperationStore)


@overload
def open_store(
    spec: str | os.PathLike[str],
    *,
    secret_headers: Collection[str] = (),
    persist_headers: Collection[str] = (),
) -> AdminStore: ...


@overload
def open_store(
    spec: S, *, secret_headers: Collection[str] = (), persist_headers: Collection[str] = ()
) -> S: ...


def open_store(
    spec: OperationStore | str | os.PathLike[str],
    *,
    secret_headers: Collection[str] = (),
    persist_headers: Collection[str] = (),
) -> OperationStore:
    """A store given as it is, a PostgreSQL URL, or the path of a SQLite file, opened
    with the header names given. A store object has its own: naming headers beside
    one is refused, since a store shared by clients writes by one rule."""
    names = {"secret_headers": secret_headers, "persist_headers": persist_headers}
    if not isinstance(spec, str | os.PathLike):
        given = sorted(name for name, value in names.items() if value)
        if given:
            raise TypeError(
                f"{' and '.join(given)} given beside a Store object: pass them to the"
                f" store itself (e.g. SQLiteStore(path, {given[0]}=...)), whose rule every"
                " client sharing it follows; or pass the store as a path or URL"
            )
        return spec
    if is_postgres_url(spec):
        assert isinstance(spec, str)
        # Imported only now: psycopg is an optional dependency.
        try:
            from ._postgres import PostgresStore
        except ImportError as exc:
            raise postgres_missing("a PostgreSQL store", exc) from exc
        return PostgresStore(spec, secret_headers=secret_headers, persist_headers=persist_headers)
    return SQLiteStore(spec, secret_headers=secret_headers, persist_headers=persist_headers)


def store_absent(spec: str | os.PathLike[str]) -> str | None:
    """Why there is no store at `spec` to read, or None when there may be one: a SQLite
    file that does not exist, or a PostgreSQL database that holds no store (opening
    either would create one). Looked at without writing anything."""
    if is_postgres_url(spec):
        assert isinstance(spec, str)
        try:
            from .._db.postgres import display
            from ._postgres import holds_no_store
        except ImportError:
            return None  # opening it says psycopg is missing
        if holds_no_store(spec):
            return (
                f"no store at {display(spec)}: that database holds no idemclient store"
                " (is it the right one?)"
            )
        return None
    if not os.path.exists(spec):
        return f"no store at {os.fspath(spec)}"
    return None
