"""SQLite connections: a file checked before SQLite touches it, connected the one way
every idemclient database is, in WAL mode, and its write transactions.

A file is checked before SQLite opens it (`check_file`): created privately (mode 0600)
when absent; refused, untouched, when it is not a SQLite file, is truncated, or cannot
be written by this process (SQLite would otherwise open it read-only and leave
read-only -wal and -shm files behind). Connections run in autocommit mode
(`isolation_level=None`): every transaction is explicit, and a write transaction is
`BEGIN IMMEDIATE` (`immediate`), which takes the write lock at once, so that what it
reads cannot change before it writes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from .._errors import StoreCorrupt, StoreUnavailable
from .errors import sqlite_busy, sqlite_errors

__all__ = ["MEMORY", "check_file", "connect", "immediate", "retry_busy", "use_wal"]

T = TypeVar("T")

#: The name of a database that lives in memory only.
MEMORY = ":memory:"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100


def connect(path: str, *, busy_timeout: float, check: bool = True) -> sqlite3.Connection:
    """A connection to the database at `path` (created if absent), shareable by threads
    behind the caller's lock, waiting up to `busy_timeout` for another's write lock.

    With `check` (a file idemclient owns), the file is checked first (see
    `check_file`) and SQLite's refusal to open it is `StoreUnavailable`; without, the
    file is SQLite's business alone, and so is its error."""
    if check and path != MEMORY:
        check_file(path)
    try:
        return sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        if not check:
            raise
        raise StoreUnavailable(path, f"cannot be opened: {exc}") from exc


def use_wal(conn: sqlite3.Connection, name: str, *, required: bool = True) -> None:
    """Switch the database to write-ahead logging: readers never wait for a writer.
    `required`: a file system that refuses it is `StoreUnavailable`."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if required and mode != "wal":
        raise StoreUnavailable(name, f"cannot use write-ahead logging (journal mode {mode!r})")


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection, *, name: str | None = None) -> Iterator[sqlite3.Connection]:
    """One write transaction, `BEGIN IMMEDIATE`: committed when the block ends, rolled
    back if it raises. With `name`, SQLite's errors in beginning and committing it are
    ours (the block's own are left as they are)."""

    def ours() -> contextlib.AbstractContextManager[None]:
        return sqlite_errors(name) if name is not None else contextlib.nullcontext()

    try:
        # Begun inside the handler: whatever stops the block right after BEGIN (a
        # Ctrl-C) rolls it back, never leaves the connection in a transaction that
        # later writes would join and never commit.
        with ours():
            conn.execute("BEGIN IMMEDIATE")
        yield conn
        with ours():
            conn.execute("COMMIT")
    except BaseException:
        # SQLite may have rolled back already (a full disk, say): never twice.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def retry_busy(attempt: Callable[[], T], *, conn: sqlite3.Connection, busy_timeout: float) -> T:
    """`attempt()`, again while SQLite answers "busy" without waiting, within
    `busy_timeout`. While other processes create or recover the same file, SQLite may
    answer "busy" at once (switching to WAL, recovering a WAL): it asks the caller to
    try again, so we do."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.005
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not (sqlite_busy(exc) and time.monotonic() + pause < deadline):
                raise
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            time.sleep(pause)
            pause = min(pause * 2, 0.25)


def check_file(path: str) -> None:
    """Create `path` privately (mode 0600) if it does not exist; else refuse, leaving it
    as found, a file that is not a SQLite database or that this process cannot write.
    An empty file was created by us, before a crash: nothing to lose."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreUnavailable(path, f"cannot be created: {exc.strerror}") from exc
    else:
        os.close(fd)
        return
    try:
        with open(path, "rb") as existing:
            header = existing.read(_HEADER_SIZE)
    except IsADirectoryError as exc:
        raise StoreUnavailable(path, "is a directory, not a store file") from exc
    except OSError as exc:
        raise StoreUnavailable(path, f"cannot be read: {exc.strerror}") from exc
    if header and not header.startswith(_SQLITE_MAGIC):
        raise StoreCorrupt(path, "is not a SQLite database (wrong file header)")
    if header and len(header) < _HEADER_SIZE:
        raise StoreCorrupt(path, "is truncated: shorter than a SQLite header")
    _check_writable(path)


def _check_writable(path: str) -> None:
    """Refuse a database this process cannot write, before SQLite opens it.

    SQLite opens a file it cannot write read-only, and then creates the -wal and -shm
    files beside it, read-only too. Those outlive the failed open and keep the database
    unusable even after the file is made writable again. So the file, and any -wal or
    -shm already beside it, are opened for writing here first (nothing is written),
    and the directory must be writable when SQLite has still to create them.
    """
    for candidate in (path, f"{path}-wal", f"{path}-shm"):
        try:
            fd = os.open(candidate, os.O_RDWR)
        except FileNotFoundError:
            continue
        except OSError as exc:
            which = "" if candidate == path else f" ({os.path.basename(candidate)} beside it)"
            raise StoreUnavailable(
                path, f"is read-only for this process{which}: {exc.strerror}; nothing was changed"
            ) from exc
        os.close(fd)
    directory = os.path.dirname(os.path.abspath(path))
    companions = all(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-shm"))
    if not companions and not os.access(directory, os.W_OK):
        name = os.path.basename(path)
        raise StoreUnavailable(
            path,
            f"its directory {directory!r} is not writable, and SQLite must create"
            f" {name}-wal and {name}-shm there; nothing was changed",
        )
