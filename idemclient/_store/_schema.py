"""The SQLite store's file: recognising it, creating it privately, and migrating it.

A file is ours when its SQLite header carries idemclient's application id and its
operations table has the columns we read. Anything else (not SQLite, damaged, another
program's database, a newer schema) raises an error naming the file, and the file is
left exactly as it was found. So is a file this process cannot write: it is refused
before SQLite opens it (see `_db.sqlite.check_file`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._db.errors import sqlite_errors
from .._db.sqlite import MEMORY, connect, immediate, retry_busy, use_wal
from .._db.versions import UserVersion, refuse_newer, upgrade
from .._errors import ForeignStore, StoreCorrupt
from ._scrub import scrubbed

if TYPE_CHECKING:
    # Imported when a migration runs (a store created or upgraded), not when one opens:
    # sqlite-utils brings click, dateutil and pluggy, which most processes never use.
    import sqlite_utils

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "REQUIRED_COLUMNS",
    "SCHEMA_VERSION",
    "open_database",
]

APPLICATION_ID = 0x49444D43  # "IDMC"
PAGE_SIZE = 2048


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


def _v5(db: sqlite_utils.Database) -> None:
    # Each operation keeps the server profile it was sent under, so that it is never
    # sent on under another (its key may be where that server does not look). Null:
    # recorded before profiles, under what is now the generic one.
    db.table("operations").add_column("profile", str)


def _v6(db: sqlite_utils.Database) -> None:
    # A clock of the store's users was seen to go back (set right after running fast, or
    # set slow) while an operation was unfinished: its created_at no longer tells its
    # age. The largest step seen, in seconds; null for none (`Store.clock_went_back`).
    db.table("operations").add_column("clock_stepped", float)


def _v7(db: sqlite_utils.Database) -> None:
    # When an attempt that may have been applied was last sent: until the server has had
    # its profile's in_flight_for since, a look-up that finds nothing is not "never
    # applied" (the server may still finish that attempt). Null: none, or written by an
    # earlier version (its updated_at stands in).
    db.table("operations").add_column("sent_at", float)


def _v8(db: sqlite_utils.Database) -> None:
    # A lease taken for a look-up, not a send: nothing is sent under it, so a takeover
    # of it (the look-up's process killed) counts no send. 0: a send's lease, or none
    # (every lease an earlier version wrote counts as a send's).
    db.table("operations").add_column("lease_look_up", int, not_null_default=0)


def _v9(db: sqlite_utils.Database) -> None:
    # An answer its profile reads as the stored success's replay (django-idempotency-key's
    # 409) came to a caller's key that no attempt of the operation explains: from then
    # on no such answer is its success (`OperationRecord.replay_unexplained`). 0 for the
    # rows before: none was seen.
    db.execute("ALTER TABLE operations ADD COLUMN replay_unexplained INTEGER NOT NULL DEFAULT 0")


def _v10(db: sqlite_utils.Database) -> None:
    # The server's own time, by its Date headers, beside two of the row's stamps: at or
    # before the first send (server_created_at, a lower bound) and at the latest send
    # that may have been applied (server_sent_at, an upper bound). A host clock that was
    # wrong when it stamped the row, and set right since, leaves created_at and sent_at
    # wrong where nothing shows it; the server's stamps measure age and the in-flight
    # hold on its clock alone. Null: not known, or written by an earlier version.
    db.table("operations").add_column("server_created_at", float)
    db.table("operations").add_column("server_sent_at", float)


def _v11(db: sqlite_utils.Database) -> None:
    # Look-ups that found nothing, kept as they come, so that a batch killed during its
    # look-ups does not ask every row again; believed only for a while (the batch's
    # `_remembered`), and forgotten when a clock is seen to go back. Indexed by when
    # they were asked: the ones too old to believe are deleted by that.
    db.execute(
        "CREATE TABLE not_found (operation_id TEXT PRIMARY KEY, key TEXT NOT NULL,"
        " url TEXT NOT NULL, reading TEXT NOT NULL, asked_at REAL NOT NULL, server_at REAL)"
    )
    db.execute("CREATE INDEX not_found_asked ON not_found (asked_at)")


def _v12(db: sqlite_utils.Database) -> None:
    # A digest of each batch row's payment content, whatever its reference: a file
    # re-saved by a spreadsheet (its references changed, its payments not) is held
    # before anything is sent (the batch's `_resave`), found through the index on the
    # digest, not by reading every body. The operation's row decides: one purged takes
    # its digest with it. An empty digest: nothing to compare (its body was reaped).
    db.execute("CREATE TABLE contents (operation_id TEXT PRIMARY KEY, digest TEXT NOT NULL)")
    db.execute("CREATE INDEX contents_digest ON contents (digest)")


def _v13(db: sqlite_utils.Database) -> None:
    # The latest send of an unfinished operation, which may come long after its intent
    # (a retry after the server's wait, a resume, a takeover), is a time the store has
    # seen: a clock set back below it is seen at the next start (`advance_clock`). Only
    # the rows with such a send are indexed (none on a request's way from intent to
    # answer), so that reading the latest costs nothing per operation.
    db.execute(
        "CREATE INDEX operations_sent ON operations (sent_at)"
        " WHERE finished_at IS NULL AND sent_at IS NOT NULL"
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

Migration = Callable[["sqlite_utils.Database"], None]

#: MIGRATIONS[n - 1] takes a store from schema version n - 1 to n. Append only.
MIGRATIONS: Sequence[Migration] = (
    _v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12, _v13,
)  # fmt: skip
SCHEMA_VERSION = len(MIGRATIONS)


def open_database(
    path: str, *, busy_timeout: float, migrations: Sequence[Migration] = MIGRATIONS
) -> sqlite3.Connection:
    """Open (creating with mode 0600 if absent) and migrate the store at `path`."""
    conn = connect(path, busy_timeout=busy_timeout)
    try:
        with sqlite_errors(path):
            retry_busy(
                lambda: _check_and_migrate(conn, path, migrations),
                conn=conn,
                busy_timeout=busy_timeout,
            )
    except BaseException:
        conn.close()
        raise
    return conn


class _StoreVersion(UserVersion):
    """The schema version in the file's header, beside idemclient's application id."""

    def write(self, conn: sqlite3.Connection, version: int) -> None:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        super().write(conn, version)


def _on_database(step: Migration) -> Callable[[sqlite3.Connection], None]:
    """`step` run on the connection through sqlite-utils, imported only then."""

    def run(conn: sqlite3.Connection) -> None:
        import sqlite_utils

        step(sqlite_utils.Database(conn))

    return run


def _check_and_migrate(
    conn: sqlite3.Connection, path: str, migrations: Sequence[Migration]
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
    # Before anything is changed (the journal mode is in the header too).
    marker = _StoreVersion()
    refuse_newer(version, len(migrations), where=path, source=marker.source)
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
    if path != MEMORY:
        if tables == 0:
            # Set once, before the first table: each commit writes whole pages to the
            # WAL, and an operation's rows are small, so 2 KiB pages write about a
            # quarter less per operation than the default 4 KiB (measured).
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        use_wal(conn, path)
    # Prove that we can write before anything relies on it (read-only files and media).
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")
    # One migration a transaction, each reading the version again under the write lock:
    # another process may have migrated.
    before = upgrade(
        conn,
        [_on_database(step) for step in migrations],
        marker,
        exclusive=lambda: immediate(conn),
        where=path,
        one_at_a_time=True,
    )
    if before < len(migrations):
        # A migration may have taken values out (`_scrub`): their old pages go from the
        # write-ahead log too, and later writes need not zero what they free.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA secure_delete = OFF")
