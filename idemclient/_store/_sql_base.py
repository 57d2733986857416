"""What every room of a SQL store (`_sqlstore`) stands on: its options, its connections,
a row read as a record.

Each room runs the `Statements` of the backend's `Dialect` (see `_statements`) on the
backend's connections:

- `_use()`: a connection for reads;
- `_write(durable=)`: a connection for one write statement, committed on its own;
- `_transaction(durable=)`: one transaction, committed when the block ends, rolled
  back if it raises;
- `_admit()`: the admission of one intent, `begin`'s first write.

`durable` says whether the commit must survive a power loss (see `Durability`). Each
backend turns its driver's errors into ours inside those context managers.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Self

from .._db.dialect import Connection
from .._redaction import DEFAULT_SECRET_HEADERS, HeaderRule
from ._base import Durability, Intent, OperationRecord
from ._cipher import PLAIN, BodyEncryption, Cipher
from ._rows import dump_headers, record_from_row
from ._statements import Statements

__all__ = ["FIND_CHUNK", "SQLBase", "chunked"]

#: The most values one look-up statement lists: a file of a hundred thousand rows is a
#: few statements, and no list parameter grows without bound.
FIND_CHUNK = 5_000


class SQLBase(ABC):
    """The options and connections of a SQL backend, and the reads every room shares."""

    durability: Durability
    max_stored_body: int
    retention: float
    #: the header names never written: the defaults and the user's (see `header_rule`
    #: for every name that looks secret)
    secret_headers: frozenset[str]
    #: which request headers are written with their values (see `_redaction`)
    header_rule: HeaderRule
    _cipher: Cipher = PLAIN
    _sql: Statements
    #: `finish` answers from the caller's `known` record instead of reading the row
    #: back (the backend says whether that saves anything).
    _answer_from_known: ClassVar[bool]

    @property
    @abstractmethod
    def path(self) -> str: ...

    @abstractmethod
    def _use(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _write(self, *, durable: bool) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _transaction(self, *, durable: bool) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _admit(self, values: tuple[Any, ...]) -> bool:
        """Run `Statements.admit` with `values` (see `admission_values`), committed
        before it returns: True if the row was written, False if its id or key was
        there first."""

    def _configure(
        self,
        *,
        where: str,
        max_stored_body: int,
        secret_headers: Collection[str],
        persist_headers: Collection[str],
        encryption: BodyEncryption | None,
    ) -> None:
        """The options every backend takes, checked (before anything is opened)."""
        if max_stored_body < 0:
            raise ValueError("max_stored_body must be >= 0")
        if encryption is not None and not isinstance(encryption, BodyEncryption):
            raise TypeError("encryption must be a BodyEncryption (or None)")
        self.max_stored_body = max_stored_body
        self.header_rule = HeaderRule.of(secret_headers, persist_headers)
        self.secret_headers = DEFAULT_SECRET_HEADERS | self.header_rule.secret
        self._cipher = Cipher(encryption, where)

    @property
    def encrypted(self) -> bool:
        """Whether bodies are written encrypted (see `BodyEncryption`)."""
        return self._cipher.enabled

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside a transaction --------------------------------------------------------

    def _record(self, row: Any) -> OperationRecord:
        return record_from_row(row, self._cipher)

    def _stored_headers(self, intent: Intent) -> str:
        return dump_headers(*self.header_rule.split_request(intent.headers))

    def _limit(self, limit: int | None) -> int | None:
        return self._sql.dialect.unlimited if limit is None else limit

    def _fetch(self, conn: Connection, operation_id: str) -> OperationRecord:
        row = conn.execute(self._sql.select_id, (operation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no operation {operation_id!r} in {self.path!r}")
        return self._record(row)


def chunked(values: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(values)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
