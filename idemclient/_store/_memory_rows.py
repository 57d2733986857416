"""The records a `MemoryStore` holds, and the steps under its lock that its rooms share:
a record made, replaced, found by id or key, listed in the order it was made.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .._errors import StoreUnavailable
from .._outcome import State
from .._redaction import HeaderRule
from ._base import Intent, NotFound, OperationRecord, StoredResponse
from ._rows import as_stored

__all__ = ["MemoryRows", "Row", "latest"]


@dataclass(slots=True)
class Row:
    record: OperationRecord
    #: the order rows were made in (the SQL stores' rowid)
    seq: int
    reaped: bool = False


class MemoryRows:
    """The records of a `MemoryStore` and the steps its rooms share, each run under its lock."""

    max_stored_body: int
    retention: float
    header_rule: HeaderRule
    secret_headers: frozenset[str]
    _path: str
    _lock: threading.RLock
    _closed: bool
    _rows: dict[str, Row]
    _by_key: dict[str, str]
    _seq: Iterator[int]
    _high_water: float
    _not_found: dict[str, NotFound]
    _contents: dict[str, str]

    @contextmanager
    def _open(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(self._path, "is closed")
            yield

    def _kept(self, response: StoredResponse | None) -> StoredResponse | None:
        return as_stored(response, self.header_rule, self.max_stored_body)[0]

    def _fetch(self, operation_id: str) -> OperationRecord:
        row = self._rows.get(operation_id)
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self._path!r}")
        return row.record

    def _found_for(self, intent: Intent) -> OperationRecord | None:
        """The stored operation that answers for `intent`: the one with its id, else
        the one with its key."""
        row = self._rows.get(intent.operation_id)
        if row is None:
            operation_id = self._by_key.get(intent.key)
            row = None if operation_id is None else self._rows[operation_id]
        return None if row is None else row.record

    def _new(
        self,
        intent: Intent,
        state: State,
        now: float,
        owner: str | None,
        lease_until: float | None,
    ) -> OperationRecord:
        headers, withheld = self.header_rule.split_request(intent.headers)
        record = OperationRecord(
            operation_id=intent.operation_id,
            key=intent.key,
            method=intent.method,
            url=intent.url,
            headers=headers,
            body=intent.body,
            fingerprint=intent.fingerprint,
            reference=intent.reference,
            state=state,
            attempts=0,
            maybe_applied=False,
            evidence="",
            not_before=None,
            lease_owner=owner,
            lease_expires=lease_until,
            response=None,
            created_at=now,
            updated_at=now,
            finished_at=None,
            withheld_headers=withheld,
            profile=intent.profile,
            server_created_at=intent.server_created_at,
        )
        self._rows[intent.operation_id] = Row(record, next(self._seq))
        self._by_key[intent.key] = intent.operation_id
        return record

    def _put(self, record: OperationRecord, **changes: object) -> OperationRecord:
        new = dataclasses.replace(record, **changes)  # type: ignore[arg-type]
        self._rows[record.operation_id].record = new
        return new

    def _ordered(self) -> list[OperationRecord]:
        rows = sorted(self._rows.values(), key=lambda r: (r.record.created_at, r.seq))
        return [row.record for row in rows]


def latest(stored: float | None, sent: float | None) -> float | None:
    if stored is None or sent is None:
        return sent if stored is None else stored
    return max(stored, sent)
