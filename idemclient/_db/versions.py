"""The schema-version runner: one feature's tables brought to the version this
idemclient writes, by append-only migrations, or refused, untouched, when newer.

A feature says where its tables keep their version (a `Marker`: SQLite's
`user_version`, a row in a version table beside them...) and lists its migrations:
`steps[n - 1]` takes the tables from version n - 1 to n, and is never edited once
released, only followed by more. `upgrade` runs what is missing, under the
feature's exclusive lock (a write transaction, an advisory lock), so that processes
starting together migrate once; a migration that fails leaves the version it had.

Driver-neutral: the connection type is the feature's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from .._errors import StoreTooNew

__all__ = ["Marker", "Step", "UserVersion", "refuse_newer", "upgrade"]

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)

#: One migration, given the connection inside the migrating transaction.
Step = Callable[[C], None]


class Marker(Protocol[C_contra]):
    """Where a feature's tables say which version they are at."""

    #: what holds the version, for messages ("table x", "the file's header")
    @property
    def source(self) -> str: ...

    def read(self, conn: C_contra) -> int:
        """The version found, 0 when there are no tables of ours yet. Raises
        `ForeignStore` when our names hold something idemclient did not create."""
        ...

    def write(self, conn: C_contra, version: int) -> None:
        """Record that the tables are at `version` now (same transaction as the steps)."""
        ...


def refuse_newer(found: int, latest: int, *, where: str, source: str, what: str = "") -> None:
    """Raise `StoreTooNew` for tables a newer idemclient wrote (`found` > `latest`)."""
    if found > latest:
        raise StoreTooNew(
            where,
            f"{source} says {what}schema version {found}; this idemclient understands up"
            f" to {latest}. Nothing was changed.",
        )


def upgrade(
    conn: C,
    steps: Sequence[Step[C]],
    marker: Marker[C],
    *,
    exclusive: Callable[[], AbstractContextManager[Any]],
    where: str,
    what: str = "",
    one_at_a_time: bool = False,
) -> int:
    """Bring the tables to version `len(steps)`; return the version found first.

    Each pass reads the version under `exclusive()` (another process may have migrated
    meanwhile), refuses a newer one, and runs the missing steps and records the new
    version before the lock is given back: all of them at once, or with
    `one_at_a_time` each in a pass of its own (a long upgrade then keeps what it did).
    """
    latest = len(steps)
    first: int | None = None
    while True:
        with exclusive():
            found = marker.read(conn)
            first = found if first is None else first
            refuse_newer(found, latest, where=where, source=marker.source, what=what)
            if found == latest:
                return first
            target = found + 1 if one_at_a_time else latest
            for step in steps[found:target]:
                step(conn)
            marker.write(conn, target)


class UserVersion:
    """SQLite's own version field (`PRAGMA user_version`), in the file's header."""

    source = "the file's header"

    def read(self, conn: Any) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def write(self, conn: Any, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")
