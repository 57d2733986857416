"""What differs between SQLite and PostgreSQL in the text of a statement, and what
every feature's SQL uses of a connection.

A feature writes each statement once, as a template, and renders it for a `Dialect`
(`SQLITE` or `POSTGRES`) when it is made: each statement is then a plain constant
string, which both drivers' statement caches key on. What differs between the
features' own tables (their names, the column that orders them, how a time is
stored) is the feature's, not the database's, and stays with its statements.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["POSTGRES", "SQLITE", "Connection", "Cursor", "Dialect"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """How one database spells what the features' statements need."""

    #: a parameter's placeholder (`?` for sqlite3, `%s` for psycopg)
    param: str
    #: a parameter holding JSON text (PostgreSQL casts it to jsonb)
    json: str
    #: `a {same} b` holds when both are NULL, or equal
    same: str
    #: `column {any}` matches the values of one list parameter (`json_each` over a JSON
    #: array; `= ANY` over an array): no statement grows with the list
    any: str
    #: appended to a read whose rows a transaction then writes or deletes; none where
    #: a write transaction locks the whole database (SQLite)
    lock: str = ""
    #: a list of strings as that parameter
    values: Callable[[Sequence[str]], object]
    #: the LIMIT parameter meaning "all rows"
    unlimited: int | None
    #: appended to a read of rows to work on, so that rows another process holds are
    #: left to it; none where a write transaction locks the whole database
    skip_locked: str = ""
    #: the larger of two values
    greatest: str
    #: the position of one string in another, from 1 (0: absent)
    strpos: str


SQLITE = Dialect(
    param="?",
    json="?",
    same="IS",
    # A list travels as one JSON array: SQLite's limit on parameters never applies.
    any="IN (SELECT value FROM json_each(?))",
    values=json.dumps,
    unlimited=-1,
    greatest="max",
    strpos="instr",
)

POSTGRES = Dialect(
    param="%s",
    json="%s::jsonb",
    same="IS NOT DISTINCT FROM",
    any="= ANY(%s)",
    values=list,
    # Rows checked and then deleted stay as checked until the commit.
    lock=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    unlimited=None,
    greatest="GREATEST",
    strpos="strpos",
)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What SQL written once for both databases uses of a sqlite3 or psycopg
    connection (or a psycopg cursor)."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> Cursor: ...
