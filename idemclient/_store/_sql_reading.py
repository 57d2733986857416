"""A SQL store's look-ups: one operation by its id or key, many by ids or references, the
unfinished ones, and an operator's listings and counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._outcome import State
from ._base import OperationRecord
from ._sql_base import FIND_CHUNK, SQLBase, chunked

__all__ = ["SQLReading"]


def _prefixes(id_prefix: str, reference_prefix: str) -> tuple[object, ...]:
    """The arguments of a statement's prefix filter (`_statements._PREFIXES`): an empty
    prefix lets every row through."""
    return (len(id_prefix), id_prefix, len(reference_prefix), reference_prefix)


class SQLReading(SQLBase):
    """The store's reads: see the module docstring."""

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        return None if row is None else self._record(row)

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._use() as conn:
            row = conn.execute(self._sql.select_key, (key,)).fetchone()
        return None if row is None else self._record(row)

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        sql = self._sql
        found: dict[str, OperationRecord] = {}
        with self._use() as conn:
            # In chunks: a file of a hundred thousand rows is a few statements, and no
            # list parameter grows without bound.
            for statement, values in (
                (sql.find_ids, operation_ids),
                (sql.find_references, references),
            ):
                for chunk in chunked(values, FIND_CHUNK):
                    for row in conn.execute(statement, (sql.dialect.values(chunk),)).fetchall():
                        record = self._record(row)
                        found[record.operation_id] = record
        return list(found.values())

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._use() as conn:
            rows = conn.execute(self._sql.unfinished, (self._limit(limit),)).fetchall()
        return [self._record(r) for r in rows]

    def operations(
        self,
        *,
        states: Iterable[State] | None = None,
        limit: int | None = None,
        id_prefix: str = "",
        reference_prefix: str = "",
    ) -> Sequence[OperationRecord]:
        sql = self._sql
        args: tuple[object, ...] = _prefixes(id_prefix, reference_prefix)
        if states is None:
            statement, args = sql.operations, (*args, self._limit(limit))
        else:
            wanted = sql.dialect.values([State(s).value for s in states])
            statement, args = sql.operations_in, (wanted, *args, self._limit(limit))
        with self._use() as conn:
            rows = conn.execute(statement, args).fetchall()
        return [self._record(r) for r in rows]

    def counts(self, *, id_prefix: str = "", reference_prefix: str = "") -> dict[State, int]:
        with self._use() as conn:
            found = {
                State(state): n
                for state, n in conn.execute(
                    self._sql.counts, _prefixes(id_prefix, reference_prefix)
                )
            }
        return {state: found.get(state, 0) for state in State}
