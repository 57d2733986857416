"""A payout file's rows kept out of memory, for the command: a million rows are read,
checked and kept on disk once, then read back a chunk at a time by each phase of the
run (`_run`), never all held at once.

They go into a private temporary SQLite database (`_scratch`), as the report's lines
do (`_lines`). What is kept is
each row as it was checked (its number, reference, amount in minor units, currency,
value date and every column's value), so a row read back is the row that was checked,
whatever happens to the file meanwhile.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, overload

from ._rows import Batch, PayoutRow, read_into
from ._scratch import scratch

__all__ = ["StagedRows", "stage_batch"]

#: Rows written at once, and read back at once.
_BATCH = 1_000


class StagedRows(Sequence[PayoutRow]):
    """Checked rows on disk, in file order; a slice is read in one query."""

    def __init__(self) -> None:
        self._db = scratch(
            "CREATE TABLE row (idx INTEGER PRIMARY KEY, number INTEGER, reference TEXT,"
            " amount INTEGER, currency TEXT, value_date TEXT, cells TEXT)"
        )
        # Each insert its own transaction would cost a journal's work a row: one open
        # transaction while the file is read (the database is private and temporary).
        self._db.execute("BEGIN")
        self._pending: list[tuple[object, ...]] = []
        self._count = 0
        self._columns: tuple[str, ...] = ()
        self.first_use = _FirstUse(self._db)

    # -- filling (as the file is checked, see `_rows.RowSink`) ------------------------

    def append(self, row: PayoutRow) -> None:
        self._columns = row.columns
        self._pending.append(
            (
                self._count,
                row.number,
                row.reference,
                row.amount,
                row.currency,
                row.value_date.isoformat(),
                json.dumps(row.values, ensure_ascii=False),
            )
        )
        self._count += 1
        if len(self._pending) >= _BATCH:
            self._flush()

    def done(self) -> StagedRows:
        self._flush()
        if self._db.in_transaction:
            self._db.execute("COMMIT")
        return self

    def close(self) -> None:
        self._db.close()

    def _flush(self) -> None:
        if self._pending:
            with self._db:
                self._db.executemany("INSERT INTO row VALUES (?, ?, ?, ?, ?, ?, ?)", self._pending)
            self._pending.clear()

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[PayoutRow]:
        for start in range(0, self._count, _BATCH):
            yield from self._between(start, min(self._count, start + _BATCH))

    @overload
    def __getitem__(self, index: int) -> PayoutRow: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PayoutRow]: ...

    def __getitem__(self, index: int | slice) -> PayoutRow | Sequence[PayoutRow]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._between(start, stop)
        at = index + self._count if index < 0 else index
        if not 0 <= at < self._count:
            raise IndexError("row index out of range")
        return self._between(at, at + 1)[0]

    def _between(self, start: int, stop: int) -> list[PayoutRow]:
        found = self._db.execute(
            "SELECT number, reference, amount, currency, value_date, cells FROM row"
            " WHERE idx >= ? AND idx < ? ORDER BY idx",
            (start, max(start, stop)),
        ).fetchall()
        return [self._row(values) for values in found]

    def _row(self, values: Sequence[Any]) -> PayoutRow:
        number, reference, amount, currency, value_date, cells = values
        # As `_rows` reads them: the currency and the date shared by every row.
        return PayoutRow(
            number=number,
            reference=reference,
            amount=amount,
            currency=sys.intern(currency),
            value_date=datetime.date.fromisoformat(value_date),
            columns=self._columns,
            values=tuple(json.loads(cells)),
        )


class _FirstUse(MutableMapping[str, int]):
    """Where each reference was first met (its row number), on disk: a file's repeated
    references are found by this table's index, not a dictionary of every reference."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        db.execute("CREATE TABLE first_use (reference TEXT PRIMARY KEY, number INTEGER)")

    def __getitem__(self, reference: str) -> int:
        found = self._db.execute(
            "SELECT number FROM first_use WHERE reference = ?", (reference,)
        ).fetchone()
        if found is None:
            raise KeyError(reference)
        return int(found[0])

    def __setitem__(self, reference: str, number: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO first_use VALUES (?, ?)", (reference, number))

    def __delitem__(self, reference: str) -> None:
        self._db.execute("DELETE FROM first_use WHERE reference = ?", (reference,))

    def __iter__(self) -> Iterator[str]:
        for (reference,) in self._db.execute("SELECT reference FROM first_use"):
            yield reference

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM first_use").fetchone()[0])


def stage_batch(path: str | os.PathLike[str], **options: Any) -> Batch:
    """`read_batch`, its rows kept on disk (`StagedRows`) rather than in memory. The
    rows are deleted when the process ends (or the batch's rows are closed)."""
    rows = StagedRows()
    try:
        return read_into(path, rows, **options)
    except BaseException:
        rows.close()
        raise
