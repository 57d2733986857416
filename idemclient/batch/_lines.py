"""The report's lines, kept out of memory while a run goes: a million rows are a
million lines, and a run holds none of them.

Each line is written as its row finishes (from any of the run's threads), into a
private temporary SQLite database (`_scratch`). The report reads them back in row
order (`Stored`), a page at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import astuple, fields
from typing import overload

from ._report_row import ReportRow
from ._scratch import scratch

__all__ = ["Lines", "Stored"]

_FIELDS = tuple(f.name for f in fields(ReportRow))
#: The fields stored as 0 or 1 (SQLite has no booleans).
_FLAGS = frozenset(f.name for f in fields(ReportRow) if f.type in ("bool", bool))
_FLAG_AT = tuple(i for i, name in enumerate(_FIELDS) if name in _FLAGS)
#: Lines written at once, and read back at once.
_BATCH = 1_000


class Lines:
    """Report lines by row index (0 for a batch's first row), written as rows finish."""

    def __init__(self) -> None:
        self._db = scratch(f"CREATE TABLE line (idx INTEGER PRIMARY KEY, {', '.join(_FIELDS)})")
        marks = ", ".join("?" for _ in range(len(_FIELDS) + 1))
        self._put = f"INSERT OR REPLACE INTO line (idx, {', '.join(_FIELDS)}) VALUES ({marks})"
        self._select = f"SELECT {', '.join(_FIELDS)} FROM line"
        self._pending: list[tuple[object, ...]] = []
        self._lock = threading.Lock()
        self._closed = False

    def put(self, index: int, line: ReportRow) -> None:
        with self._lock:
            self._pending.append((index, *astuple(line)))
            if len(self._pending) >= _BATCH:
                self._flush()

    def get(self, index: int) -> ReportRow | None:
        with self._lock:
            self._flush()
            found = self._db.execute(self._select + " WHERE idx = ?", (index,)).fetchone()
        return None if found is None else _line(found)

    def between(self, start: int, stop: int) -> list[ReportRow]:
        """The lines of rows `start` to `stop` (not included) that have one, in order."""
        with self._lock:
            self._flush()
            found = self._db.execute(
                self._select + " WHERE idx >= ? AND idx < ? ORDER BY idx", (start, stop)
            ).fetchall()
        return [_line(values) for values in found]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pending.clear()
                self._db.close()

    def _flush(self) -> None:
        if self._pending:
            with self._db:
                self._db.executemany(self._put, self._pending)
            self._pending.clear()


def _line(values: Sequence[object]) -> ReportRow:
    listed = list(values)
    for at in _FLAG_AT:
        listed[at] = bool(listed[at])
    return ReportRow(*listed)  # type: ignore[arg-type]  # the columns are its fields, in order


class Stored(Sequence[ReportRow]):
    """The lines of a whole batch of `count` rows, read from `lines` a page at a time:
    every row has one once the report is made."""

    def __init__(self, lines: Lines, count: int) -> None:
        self._lines = lines
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[ReportRow]:
        for start in range(0, self._count, _BATCH):
            yield from self._lines.between(start, start + _BATCH)

    @overload
    def __getitem__(self, index: int) -> ReportRow: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ReportRow]: ...

    def __getitem__(self, index: int | slice) -> ReportRow | Sequence[ReportRow]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        at = index + self._count if index < 0 else index
        if not 0 <= at < self._count:
            raise IndexError("report line index out of range")
        line = self._lines.get(at)
        if line is None:
            raise LookupError(f"row index {at} has no line yet")
        return line
