"""A `MemoryStore`'s clock: the high-water mark (the latest time any record was written,
which catches a host clock stepped back while nothing ran) and what a step back
changes in the unfinished records.
"""

from __future__ import annotations

from ._memory_rows import MemoryRows

__all__ = ["MemoryClock"]


class MemoryClock(MemoryRows):
    """The store's clock: see the module docstring."""

    def advance_clock(self, *, now: float) -> float:
        with self._open():
            seen = self._high_water
            for row in self._rows.values():
                record = row.record
                if record.finished_at is not None:
                    if not row.reaped:  # as the SQL stores read it (`Statements.seen`)
                        seen = max(seen, record.finished_at)
                else:  # its intent, and its latest send (which may come long after)
                    seen = max(seen, record.created_at, record.sent_at or 0.0)
            self._high_water = max(self._high_water, now)
            return seen

    def clock_went_back(self, *, step: float, now: float) -> int:
        if not step > 0.0 or step == float("inf"):
            raise ValueError(f"a clock's step back is a positive number of seconds, not {step!r}")
        marked = 0
        with self._open():
            for row in list(self._rows.values()):
                record = row.record
                if record.finished_at is not None:
                    continue
                marked += 1
                not_before = record.not_before
                sent_at = record.sent_at
                self._put(
                    record,
                    clock_stepped=max(record.clock_stepped or 0.0, step),
                    not_before=None if not_before is None else not_before - step,
                    sent_at=now if sent_at is not None and sent_at > now else sent_at,
                )
            self._high_water = min(self._high_water, now)
            self._not_found.clear()
        return marked
