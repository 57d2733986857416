"""The SQLite store's file: recognising it, creating it privately, and migrating it.

A file is ours when its SQLite header carries idemclient's application id and its
operations table has the columns we read. Anything else (not SQLite, damaged, another
program's database, a newer schema) raises an error naming the file, and the file is
left exactly as it was found. So is a file this process cannot write: it is refused
before SQLite opens it (see `_check_writable`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence

import sqlite_utils

from .._errors import ForeignStore, StoreCorrupt, StoreError, StoreTooNew, StoreUnavailable
from ._scrub import scrubbed

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "REQUIRED_COLUMNS",
    "SCHEMA_VERSION",
    "open_database",
    "store_error",
]

APPLICATION_ID = 0x49444D43  # "IDMC"
PAGE_SIZE = 2048
_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100


#: SQLite's result codes for a file that is damaged or not a database at all.
_DAMAGED = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


def store_error(name: str, error: sqlite3.Error) -> StoreError:
    """SQLite's error as ours, naming the database. Only a damaged file, or one that is
    not a database, is called damaged; anything else (busy, read-only, closed, used
    from the wrong thread) means it cannot be used right now, and the file is fine."""
    code = getattr(error, "sqlite_errorcode", None)
    damaged = code in _DAMAGED if code is not None else type(error) is sqlite3.DatabaseError
    if damaged:
        return StoreCorrupt(name, f"is damaged: {error}")
    return StoreUnavailable(name, f"cannot be used: {error}")


def _v1(db: sqlite_utils.Database) -> None:
    operations = db.table("operations")
    operations.create(
        {
            "id": str,
            "key": str,
            "method": str,
            "url": str,
            "headers": str,  # JSON pairs, secrets removed
            "body": bytes,
            "fingerprint": str,
            "reference": str,
            "state": str,
            "attempts": int,
            "maybe_applied": int,
            "evidence": str,
            "not_before": float,
            "lease_owner": str,
            "lease_expires": float,
            "status_code": int,
            "response_headers": str,
            "response_body": bytes,
            "response_sha256": str,
            "response_size": int,
            "created_at": float,
            "updated_at": float,
            "finished_at": float,
        },
        pk="id",
        not_null={
            "key",
            "method",
            "url",
            "headers",
            "body",
            "fingerprint",
            "state",
            "attempts",
            "maybe_applied",
            "evidence",
            "created_at",
            "updated_at",
        },
        defaults={"attempts": 0, "maybe_applied": 0, "evidence": ""},
    )
    operations.create_index(["key"], index_name="operations_key", unique=True)
    # Partial indexes (sqlite-utils has no syntax for them): the unfinished operations
    # stay fast to find among millions of finished ones, and reaping reads only the
    # finished ones.
    db.execute(
        "CREATE INDEX operations_unfinished ON operations (created_at) WHERE finished_at IS NULL"
    )
    db.execute(
        "CREATE INDEX operations_finished ON operations (finished_at) WHERE finished_at IS NOT NULL"
    )
    db.execute(
        "CREATE INDEX operations_reference ON operations (reference) WHERE reference IS NOT NULL"
    )


def _v2(db: sqlite_utils.Database) -> None:
    # Nothing looks operations up by reference, and every index is one more page to
    # write in each intent's commit: the hottest write of the library.
    db.execute("DROP INDEX IF EXISTS operations_reference")


def _v3(db: sqlite_utils.Database) -> None:
    # The batch command finds the rows an earlier run recorded by their end-to-end
    # reference. Partial: operations without a reference (most of a merchant
    # application's) never write a page of it.
    db.execute(
        "CREATE INDEX IF NOT EXISTS operations_reference ON operations (reference)"
        " WHERE reference IS NOT NULL"
    )


def _v4(db: sqlite_utils.Database) -> None:
    # Reaping keeps a finished operation's key and state and drops only its bodies:
    # `reaped_at` says when, and the reaper's index holds only what it has still to do.
    db.table("operations").add_column("reaped_at", float)
    db.execute("DROP INDEX IF EXISTS operations_finished")
    db.execute(
        "CREATE INDEX operations_unreaped ON operations (finished_at)"
        " WHERE finished_at IS NOT NULL AND reaped_at IS NULL"
    )
    # The latest time the store has seen, so that a clock that went back is noticed
    # and a clock that jumped ahead reaps nothing it should not.
    db.execute(
        "CREATE TABLE store_clock (id INTEGER PRIMARY KEY CHECK (id = 1), high_water REAL NOT NULL)"
    )
    db.execute(
        "INSERT INTO store_clock (id, high_water) SELECT 1, coalesce(max(max(created_at),"
        " max(coalesce(finished_at, 0))), 0) FROM operations"
    )
    # Operations are kept until purged now, where earlier versions deleted them after a
    # week: what those versions wrote and this one never does goes (see `_scrub`).
    # What is taken out is overwritten, not left in free pages of the file.
    db.execute("PRAGMA secure_delete = ON")
    rows = db.execute(
        "SELECT id, method, url, headers, body, fingerprint, response_headers FROM operations"
    ).fetchall()
    for operation_id, method, url, headers, body, stored, answer in rows:
        clean = scrubbed(method, url, headers, bytes(body), stored, answer)
        if clean is not None:
            db.execute(
                "UPDATE operations SET url = ?, headers = ?, fingerprint = ?,"
                " response_headers = ? WHERE id = ?",
                (*clean, operation_id),
            )


#: The columns of `operations` that every schema version from 1 on has. A file that
#: claims to be a store (our application id, a schema version) without them is damaged.
REQUIRED_COLUMNS = frozenset(
    {
        "id",
        "key",
        "method",
        "url",
        "headers",
        "body",
        "fingerprint",
        "reference",
        "state",
        "attempts",
        "maybe_applied",
        "evidence",
        "not_before",
        "lease_owner",
        "lease_expires",
        "status_code",
        "response_headers",
        "response_body",
        "response_sha256",
        "response_size",
        "created_at",
        "updated_at",
        "finished_at",
    }
)

Migration = Callable[[sqlite_utils.Database], None]

#: MIGRATIONS[n - 1] takes a store from schema version n - 1 to n. Append only.
MIGRATIONS: Sequence[Migration] = (_v1, _v2, _v3, _v4)
SCHEMA_VERSION = len(MIGRATIONS)


def open_database(
    path: str, *, busy_timeout: float, migrations: Sequence[Migration] = MIGRATIONS
) -> sqlite3.Connection:
    """Open (creating with mode 0600 if absent) and migrate the store at `path`."""
    in_memory = path == ":memory:"
    if not in_memory:
        _create_or_check_header(path)
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise StoreUnavailable(path, f"cannot be opened: {exc}") from exc
    deadline = time.monotonic() + busy_timeout
    pause = 0.005
    while True:
        try:
            _check_and_migrate(conn, path, in_memory, migrations)
        except sqlite3.OperationalError as exc:
            # While other processes create or recover the same file, SQLite may answer
            # "busy" without waiting (switching to WAL, recovering a WAL): it asks the
            # caller to try again, so we do, within the busy timeout.
            if _busy(exc) and time.monotonic() + pause < deadline:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
                continue
            conn.close()
            raise store_error(path, exc) from exc
        except sqlite3.Error as exc:
            conn.close()
            raise store_error(path, exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn


def _busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def _create_or_check_header(path: str) -> None:
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
    # An empty file was created by us, before a crash: nothing to lose.
    if header and not header.startswith(_SQLITE_MAGIC):
        raise StoreCorrupt(path, "is not a SQLite database (wrong file header)")
    if header and len(header) < _HEADER_SIZE:
        raise StoreCorrupt(path, "is truncated: shorter than a SQLite header")
    _check_writable(path)


def _check_writable(path: str) -> None:
    """Refuse a store this process cannot write, before SQLite opens it.

    SQLite opens a file it cannot write read-only, and then creates the -wal and -shm
    files beside it, read-only too. Those outlive the failed open and keep the store
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


def _check_and_migrate(
    conn: sqlite3.Connection, path: str, in_memory: bool, migrations: Sequence[Migration]
) -> None:
    # One read transaction, so that all of these come from the same snapshot: another
    # process may be creating the store right now.
    conn.execute("BEGIN")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        (tables,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        columns = {row[1] for row in conn.execute("PRAGMA table_info(operations)")}
    finally:
        conn.execute("COMMIT")
    if app_id == 0:
        if tables:
            raise ForeignStore(
                path, "is a SQLite database that idemclient did not create (no application id)"
            )
    elif app_id != APPLICATION_ID:
        raise ForeignStore(
            path,
            f"belongs to another program (application id {app_id:#010x},"
            f" idemclient's is {APPLICATION_ID:#010x})",
        )
    latest = len(migrations)
    if version > latest:
        raise StoreTooNew(
            path, f"has schema version {version}; this idemclient understands up to {latest}"
        )
    missing = sorted(REQUIRED_COLUMNS - columns)
    if version >= 1 and missing:
        found = (
            "there is no operations table"
            if not columns
            else f"the operations table lacks {', '.join(missing)}"
        )
        raise StoreCorrupt(
            path,
            f"has idemclient's application id and schema version {version} but not its"
            f" schema: {found}",
        )
    if not in_memory:
        if tables == 0:
            # Set once, before the first table: each commit writes whole pages to the
            # WAL, and an operation's rows are small, so 2 KiB pages write about a
            # quarter less per operation than the default 4 KiB (measured).
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreUnavailable(path, f"cannot use write-ahead logging (journal mode {mode!r})")
    # Prove that we can write before anything relies on it (read-only files and media).
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")
    _migrate(conn, migrations)


def _migrate(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> None:
    db = sqlite_utils.Database(conn)
    migrated = False
    for version, step in enumerate(migrations, start=1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have migrated.
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if current >= version:
                conn.execute("ROLLBACK")
                continue
            step(db)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
            migrated = True
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    if migrated:
        # A migration may have taken values out (`_scrub`): their old pages go from the
        # write-ahead log too, and later writes need not zero what they free.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA secure_delete = OFF")
