"""An operator's repairs and upkeep on a SQL store: an unfinished operation moved to
another origin, old bodies reaped, finished operations purged.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx

from .._outcome import State
from .._redaction import origin_of
from ._base import Durability, OperationRecord, holder_is_live
from ._sql_base import SQLBase
from ._sql_written import returned

__all__ = ["SQLOperators"]


class SQLOperators(SQLBase):
    """The operators' repairs and upkeep: see the module docstring."""

    def move(self, operation_id: str, *, origin: str, now: float) -> OperationRecord:
        target = httpx.URL(origin)
        if target.scheme not in ("http", "https") or not target.host:
            raise ValueError(f"origin {origin!r} is not an http(s) scheme and host")
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
            if record.state.finished:
                raise ValueError(
                    f"operation {operation_id!r} is {record.state.words}: a finished"
                    " operation is never sent again, so it is not moved"
                )
            if holder_is_live(record, now=now):
                raise ValueError(
                    f"operation {operation_id!r} is being sent by {record.lease_owner}"
                    " right now; it was not moved"
                )
            url = httpx.URL(record.url).copy_with(
                scheme=target.scheme, host=target.host, port=target.port
            )
            if origin_of(url) == origin_of(record.url):
                return record
            row = returned(
                conn.execute(self._sql.move, (str(url), now, operation_id, record.lease_owner))
            )
            if row is None:  # pragma: no cover - the transaction holds the row
                raise ValueError(f"operation {operation_id!r} changed while being moved")
            return self._record(row)

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        before = now - self.retention
        with self._write(durable=False) as conn:
            reaped = int(conn.execute(self._sql.reap, (b"", b"", now, before, batch)).rowcount)
            if reaped:
                # A reaped operation's end is no longer read as a time the store has
                # seen (`Statements.seen`): the store's mark passes it instead.
                conn.execute(self._sql.advance, (before,))
        return reaped

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(operation_ids)
        sql = self._sql
        listed = sql.dialect.values(ids)
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            found = dict(conn.execute(sql.purgeable, (listed,)).fetchall())
            for operation_id in ids:
                if operation_id not in found:
                    raise KeyError(f"no operation {operation_id!r} in {self.path!r}")
                state = State(found[operation_id])
                if not state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {state.words}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            conn.execute(sql.forget_not_found_of, (listed,))
            conn.execute(sql.forget_contents_of, (listed,))
            return conn.execute(sql.purge, (listed,)).rowcount
