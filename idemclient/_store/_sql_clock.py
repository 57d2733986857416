"""A SQL store's clock: the high-water mark (the latest time any record was written,
which catches a host clock stepped back while nothing ran) and what a step back
changes in the unfinished rows.
"""

from __future__ import annotations

from ._base import Durability
from ._sql_base import SQLBase

__all__ = ["SQLClock"]


class SQLClock(SQLBase):
    """The store's clock: see the module docstring."""

    def advance_clock(self, *, now: float) -> float:
        with self._transaction(durable=False) as conn:
            (seen,) = conn.execute(self._sql.seen).fetchone()
            conn.execute(self._sql.advance, (now,))
        return float(seen)

    def clock_went_back(self, *, step: float, now: float) -> int:
        if not step > 0.0 or step == float("inf"):
            raise ValueError(f"a clock's step back is a positive number of seconds, not {step!r}")
        # Durable as an intent is: what it keeps is what stops a second send.
        with self._transaction(durable=self.durability is not Durability.BUFFERED) as conn:
            marked = conn.execute(self._sql.stepped_back, (step, step, now, now)).rowcount
            conn.execute(self._sql.rewind, (now, now))
            # A look-up's "nothing found" is only as good as the time it was asked.
            conn.execute(self._sql.forget_not_found)
        return int(marked)
