"""The inbox: process each message once, in the same transaction as its effect.

At-least-once delivery means duplicates. The cure is the seed's: insert the message id
into a processed-messages table in the same transaction as the effect; if the insert
conflicts, the message was seen, so drop it. A crash before the commit loses both the
id and the effect, so the redelivery is processed as new; after the commit, both are
there, so the redelivery is dropped. Never lost, never twice.

Three ways in, from the most guarded to the most flexible:

- `process(sender, message_id, handler)`: the inbox opens the transaction, records the
  id, calls `handler(tx)` only for a new message, and commits both;
- `receive(sender, message_id)`: the same as a context manager; the body must skip
  its work when `delivery.duplicate` is true;
- `record(tx, sender, message_id)`: inside a transaction the application opened itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from .._errors import InvalidKey, InvalidMessageId
from ..clock import Clock, SystemClock
from ..keys import validate_key
from ._storage import InboxStorage, SQLiteInboxStorage

__all__ = [
    "DEFAULT_RETENTION",
    "Delivery",
    "Inbox",
    "Receipt",
    "SQLiteInbox",
    "validate_message_id",
]

Tx = TypeVar("Tx")
R = TypeVar("R")

#: How long processed ids are kept: far longer than any sender keeps retrying (the
#: reference server gives up within a day), so a late redelivery is still recognised.
DEFAULT_RETENTION = 30 * 24 * 3600.0


def validate_message_id(value: object, *, what: str = "message id") -> str:
    """`value` if it follows the key rules (1..255 of ``A-Z a-z 0-9 - _ . : ~``).

    Raises `InvalidMessageId` (an `InvalidKey`, a `ValueError`) otherwise.
    """
    try:
        return validate_key(value)
    except InvalidKey as exc:
        raise InvalidMessageId(value, exc.reason, what=what) from None


@dataclass(frozen=True, slots=True)
class Receipt(Generic[R]):
    """What became of one message: processed now (with the handler's result), or a
    duplicate that was dropped (`result` None, the handler not called)."""

    sender: str
    message_id: str
    duplicate: bool
    result: R | None = None


@dataclass(frozen=True, slots=True)
class Delivery(Generic[Tx]):
    """One message inside its transaction. Write the effect through `tx`, unless
    `duplicate`: then the message was processed before and nothing must be done."""

    sender: str
    message_id: str
    duplicate: bool
    tx: Tx


class Inbox(Generic[Tx]):
    """Processed message ids, kept `retention` seconds, in the application's database.

    Ids are scoped per sender: two senders may both send `evt_1`. Both are checked by
    the key rules before anything is written. `clock` stamps each id (and decides what
    is old enough to reap); tests pass a `ManualClock`.
    """

    def __init__(
        self,
        storage: InboxStorage[Tx],
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Clock | None = None,
    ) -> None:
        if not (math.isfinite(retention) and retention > 0):
            raise ValueError(f"retention must be a positive number of seconds, not {retention!r}")
        self.storage = storage
        self.retention = float(retention)
        self.clock: Clock = clock if clock is not None else SystemClock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.storage.name!r}, retention={self.retention})"

    def process(self, sender: str, message_id: str, handler: Callable[[Tx], R]) -> Receipt[R]:
        """Run `handler(tx)` once per (sender, message id), committed with the id.

        A duplicate returns at once with `duplicate=True`, the handler not called. If
        the handler raises, nothing is recorded (the transaction rolls back, taking the
        effect with it) and the exception propagates: the message is processed as new
        when it comes again.
        """
        with self.receive(sender, message_id) as delivery:
            if delivery.duplicate:
                return Receipt(delivery.sender, delivery.message_id, duplicate=True)
            result = handler(delivery.tx)
        return Receipt(delivery.sender, delivery.message_id, duplicate=False, result=result)

    @contextlib.contextmanager
    def receive(self, sender: str, message_id: str) -> Iterator[Delivery[Tx]]:
        """A transaction holding the id: commit on a normal exit, roll back on an error.

        When `delivery.duplicate` is true the body must do nothing (a context manager
        cannot skip its own body); `process` does that check for you.
        """
        sender, message_id = self._validate(sender, message_id)
        with self.storage.transaction() as tx:
            new = self.storage.insert(tx, sender, message_id, self.clock.time())
            yield Delivery(sender, message_id, duplicate=not new, tx=tx)

    def record(self, tx: Tx, sender: str, message_id: str) -> bool:
        """Record the id inside the transaction the application opened on `tx`.

        True: a new message, do the work in this same transaction. False: seen before,
        drop it. Outside a transaction it raises, because the id would commit on its
        own, and a crash before the effect would then lose the message.
        """
        sender, message_id = self._validate(sender, message_id)
        if not self.storage.in_transaction(tx):
            raise ValueError(
                "inbox.record needs an open transaction, the one that will hold the effect"
            )
        return self.storage.insert(tx, sender, message_id, self.clock.time())

    def advance(self, tx: Tx, sender: str, resource: str, version: float) -> bool:
        """The ordering guard: True if `version` is newer than what `resource` is at.

        The inbox applies each event once but promises no order: a sender may deliver
        `payment.succeeded` before `payment.created`, and a retry may bring an old
        state after a new one. Call this in the handler, with the event's own order
        (its sequence number, or its creation time: never the delivery's timestamp,
        which a retry renews), before changing the resource. True: the version is now
        recorded as the resource's, in the handler's transaction (committed with the
        effect, rolled back with it), so apply the event. False: an equal or newer
        version was applied already; leave the resource as it is. Concurrent
        deliveries for one resource take turns on its row, so the greatest version
        wins whatever the order of arrival.

        `resource` is any text naming it (1..255 characters), scoped per sender like
        message ids. One row per resource is kept; it is never reaped.
        """
        sender = validate_message_id(sender, what="sender")
        if not isinstance(resource, str) or not 0 < len(resource) <= 255:
            raise ValueError(f"a resource is 1..255 characters of text, not {resource!r}")
        if isinstance(version, bool) or not isinstance(version, int | float):
            raise TypeError(f"a version is a number (a sequence or a time), not {version!r}")
        if not math.isfinite(version):
            raise ValueError(f"a version is a finite number, not {version!r}")
        if not self.storage.in_transaction(tx):
            raise ValueError("inbox.advance needs the open transaction that will hold the effect")
        return self.storage.advance(tx, sender, resource, version, self.clock.time())

    def seen(self, sender: str, message_id: str) -> bool:
        """Whether this message was processed (and its id not yet reaped)."""
        sender, message_id = self._validate(sender, message_id)
        return self.storage.contains(sender, message_id)

    def reap(self, *, batch: int = 10_000) -> int:
        """Forget ids received more than `retention` seconds ago; returns how many.

        Ids inside the window are never touched. Call it from a periodic job; each
        call deletes at most `batch` ids in one short transaction.
        """
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch!r}")
        return self.storage.delete_older(self.clock.time() - self.retention, batch=batch)

    def close(self) -> None:
        self.storage.close()

    def __enter__(self) -> Inbox[Tx]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def _validate(sender: str, message_id: str) -> tuple[str, str]:
        return (
            validate_message_id(sender, what="sender"),
            validate_message_id(message_id),
        )


class SQLiteInbox(Inbox[sqlite3.Connection]):
    """An inbox in a SQLite database: a path, or the application's own connection.

    The handler gets the `sqlite3.Connection` the transaction is open on and writes
    the application's effect through it. See `SQLiteInboxStorage` for how the file is
    opened and what is changed on a connection handed over.
    """

    def __init__(
        self,
        database: str | os.PathLike[str] | sqlite3.Connection,
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Clock | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        storage = SQLiteInboxStorage(database, busy_timeout=busy_timeout)
        try:
            super().__init__(storage, retention=retention, clock=clock)
        except BaseException:
            storage.close()
            raise
