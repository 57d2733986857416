"""A store in this process's memory: the whole interface in plain Python, for tests.

Not durable: everything it holds is gone when the process ends, and nothing is shared
with another process. It keeps what the SQL stores keep, by the same rules (the same
leases, the same answers, secret headers never kept, bodies over `max_stored_body`
kept as their size and hash), so a client's behaviour on it is the behaviour a durable
store gives, minus the disk. It passes `idemclient.testing.store_contract`, as the
durable stores do, and shows that the interface can be implemented without SQL.

Every method runs under one lock: threads of the process share it safely. Records are
immutable: each write replaces the operation's record whole. `MemoryStore` is put
together here from rooms of one job each, on `MemoryRows` (`_memory_rows`):
`_memory_sending` (a client's writes and reads), `_memory_clock` (the high-water mark,
a step back), `_memory_batch` (the batch's) and `_memory_operators` (listings, repairs,
upkeep).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Collection
from typing import Self

from .._forks import afresh_in_child
from .._redaction import DEFAULT_SECRET_HEADERS, HeaderRule
from ._memory_batch import MemoryBatch
from ._memory_clock import MemoryClock
from ._memory_operators import MemoryOperators
from ._memory_sending import MemorySending
from ._rows import DEFAULT_MAX_STORED_BODY

__all__ = ["MemoryStore"]

_names = itertools.count(1)


class MemoryStore(MemorySending, MemoryClock, MemoryBatch, MemoryOperators):
    """An `AdminStore` in memory (see the module docstring): for tests, never durable.

    Takes the options of `SQLiteStore` that mean something without a disk:
    `max_stored_body`, `retention`, `secret_headers` and `persist_headers`.
    """

    def __init__(
        self,
        *,
        max_stored_body: int = DEFAULT_MAX_STORED_BODY,
        retention: float = 7 * 24 * 3600.0,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        name: str | None = None,
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        self.max_stored_body = max_stored_body
        self.retention = retention
        self.header_rule = HeaderRule.of(secret_headers, persist_headers)
        self.secret_headers = DEFAULT_SECRET_HEADERS | self.header_rule.secret
        self._path = f"memory:{name or next(_names)}"
        self._lock = threading.RLock()
        self._closed = False
        self._rows = {}
        self._by_key = {}
        self._seq = itertools.count()
        self._high_water = 0.0
        self._not_found = {}
        self._contents = {}
        afresh_in_child(self)

    def _locks_afresh(self) -> None:
        """In a forked child (`_forks`): its lock made afresh (its rows are its own copy)."""
        self._lock = threading.RLock()

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"MemoryStore({self._path!r})"

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
