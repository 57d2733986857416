"""Which recorded operations may carry a new row's very content under another reference
(`_duplicates`), found without holding the file or the store in memory.

A row's duplicate is recorded under a reference that is one of the row's values, in any
scope (``E1000``, ``2026-11/E1000``, ``a/b/E1000``). Asking the store for each chunk of
rows would read every reference it holds once per chunk (a store that keeps years of
monthly files for the same employees makes that slow); holding every value of a
million-row file to ask once would not be bounded. So the file's values are kept in a
private temporary SQLite database (`_scratch`), the store's references
are read once, a page at a time (`Store.references`), and each reference whose tail is
one of the file's values is noted with its operation id: the candidates. A chunk of
rows then asks for its own values' candidates, and the store for those records only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from ..store import Store
from ._duplicates import reference_tails
from ._scratch import scratch

__all__ = ["Kin"]

#: References read from the store at once.
_PAGE = 5_000


class Kin:
    """The file's values (`add`), then the store's operations whose reference ends with
    one of them (`gather`), by value (`of`)."""

    def __init__(self) -> None:
        self._db = scratch(
            "CREATE TABLE value (value TEXT PRIMARY KEY) WITHOUT ROWID",
            "CREATE TABLE kin (tail TEXT, operation_id TEXT)",
        )
        self._pending: list[tuple[str]] = []
        self._any = False

    def add(self, values: Iterable[str]) -> None:
        """Values of a new row (each a reference it may have been recorded under)."""
        self._pending += ((value,) for value in values)
        self._any = True
        if len(self._pending) >= _PAGE:
            self._flush()

    def gather(self, store: Store) -> bool:
        """Read every reference `store` holds once, a page at a time, and note each
        whose tail is one of the values added; whether any was."""
        self._flush()
        if not self._any:
            return False
        found = False
        page = store.references(limit=_PAGE)
        while page:
            tails = [
                (tail, operation_id) for ref, operation_id in page for tail in reference_tails(ref)
            ]
            wanted = {
                value
                for (value,) in self._db.execute(
                    "SELECT value FROM value WHERE value IN (SELECT value FROM json_each(?))",
                    (json.dumps(sorted({tail for tail, _id in tails})),),
                )
            }
            if wanted:
                found = True
                with self._db:
                    self._db.executemany(
                        "INSERT INTO kin VALUES (?, ?)",
                        [(tail, operation_id) for tail, operation_id in tails if tail in wanted],
                    )
            page = store.references(after=page[-1], limit=_PAGE)
        self._db.execute("CREATE INDEX kin_tail ON kin (tail)")
        return found

    def of(self, values: Iterable[str]) -> Sequence[str]:
        """The operation ids whose reference ends with one of `values`."""
        listed = json.dumps(sorted(set(values)))
        return [
            operation_id
            for (operation_id,) in self._db.execute(
                "SELECT DISTINCT operation_id FROM kin WHERE tail IN"
                " (SELECT value FROM json_each(?))",
                (listed,),
            )
        ]

    def close(self) -> None:
        self._db.close()

    def _flush(self) -> None:
        if self._pending:
            with self._db:
                self._db.executemany("INSERT OR IGNORE INTO value VALUES (?)", self._pending)
            self._pending.clear()
