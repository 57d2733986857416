"""Where a run keeps what would not fit in memory: a private SQLite database of its own.

`sqlite3.connect("")` opens a temporary database that SQLite keeps in a file it deletes
when the connection is closed (on POSIX, unlinked as soon as it is made, so that it
goes with the process, however the process ends), caching only a few pages of it in
memory. Nothing in it needs to survive: no journal, no flush to disk. The file's rows
(`_staged`), the report's lines (`_lines`) and the file's values for the duplicate check
(`_kin`) each keep one.
"""

from __future__ import annotations

import sqlite3

__all__ = ["scratch"]


def scratch(*tables: str) -> sqlite3.Connection:
    """A new private temporary database with `tables` (their CREATE statements),
    shared by the threads of a run (each caller keeps its own lock where it needs one)."""
    db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    for table in tables:
        db.execute(table)
    return db
