"""An operator's listings, repairs and upkeep on a `MemoryStore`: operations by state and
prefix, counts, old bodies reaped, an operation moved to another origin, finished
operations purged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import httpx

from .._outcome import State
from .._redaction import origin_of
from ._base import OperationRecord, holder_is_live
from ._memory_rows import MemoryRows

__all__ = ["MemoryOperators"]


class MemoryOperators(MemoryRows):
    """The operators' listings, repairs and upkeep: see the module docstring."""

    def operations(
        self,
        *,
        states: Iterable[State] | None = None,
        limit: int | None = None,
        id_prefix: str = "",
        reference_prefix: str = "",
    ) -> Sequence[OperationRecord]:
        wanted = None if states is None else {State(s) for s in states}
        with self._open():
            found = [
                record
                for record in self._ordered()
                if (wanted is None or record.state in wanted)
                and _prefixed(record, id_prefix, reference_prefix)
            ]
        return found[:limit] if limit is not None else found

    def counts(self, *, id_prefix: str = "", reference_prefix: str = "") -> dict[State, int]:
        counted = dict.fromkeys(State, 0)
        with self._open():
            for row in self._rows.values():
                if _prefixed(row.record, id_prefix, reference_prefix):
                    counted[row.record.state] += 1
        return counted

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        reaped = 0
        with self._open():
            for row in self._rows.values():
                if reaped >= batch:
                    break
                record = row.record
                finished = record.finished_at
                if row.reaped or finished is None or not finished < now - self.retention:
                    continue
                response = record.response
                if response is not None:
                    response = dataclasses.replace(response, body=b"")
                self._put(record, body=b"", response=response)
                row.reaped = True
                reaped += 1
            if reaped:  # its end no longer counts as a time seen: the mark passes it
                self._high_water = max(self._high_water, now - self.retention)
        return reaped

    def move(self, operation_id: str, *, origin: str, now: float) -> OperationRecord:
        target = httpx.URL(origin)
        if target.scheme not in ("http", "https") or not target.host:
            raise ValueError(f"origin {origin!r} is not an http(s) scheme and host")
        with self._open():
            record = self._fetch(operation_id)
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
            return self._put(record, url=str(url), updated_at=now)

    def purge(self, operation_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(operation_ids))
        with self._open():
            for operation_id in ids:
                record = self._fetch(operation_id)
                if not record.state.finished:
                    raise ValueError(
                        f"operation {operation_id!r} is {record.state.words}, not finished:"
                        " resume or settle it first; nothing was purged"
                    )
            for operation_id in ids:
                row = self._rows.pop(operation_id)
                del self._by_key[row.record.key]
                self._not_found.pop(operation_id, None)
                self._contents.pop(operation_id, None)
        return len(ids)


def _prefixed(record: OperationRecord, id_prefix: str, reference_prefix: str) -> bool:
    if not record.operation_id.startswith(id_prefix):
        return False
    return not reference_prefix or (record.reference or "").startswith(reference_prefix)
