"""What the reference server needs of its storage, and choosing a backend by `db`.

`StorageBackend` is everything the protocol core, the external systems and the
`ReferenceServer` call. Two backends implement it, with the same transactions and
the same fencing, so the protocol cannot tell them apart:

- `Storage` (`_storage`): SQLite, a file or `:memory:`. The default.
- `PostgresStorage` (`_pg_storage`): PostgreSQL with the seed's schema, the key table
  partitioned by day. Chosen by a `postgresql://` (or `postgres://`) URL.

The row types (`KeyRow`, `ResourceRow`, `ExternalRecord`, `EventRow`, `LedgerRow`)
are in `_rows`; both backends return them. What the two do the same way is written
once, in `_transactions` and `_statements`.

Every write is one local transaction. Phase writes (`handler1` .. `release`) are fenced
by the lease owner: they return False, having written nothing, when `owner` no longer
holds the row. Times are the server's injected clock, in seconds since the epoch,
never the database's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from ..._db import is_postgres_url, postgres_missing
from .._protocol.rules import Phase
from .rows import EventRow, ExternalRecord, KeyRow, LedgerRow, ResourceRow
from .sqlite import Storage

__all__ = ["LedgerRow", "StorageBackend", "is_postgres_url", "open_storage"]


class StorageBackend(Protocol):
    """The reference server's durable state. Implementations are thread-safe."""

    @property
    def path(self) -> str:
        """Where the state is, for people (a URL never shows its password)."""
        ...

    def close(self) -> None: ...

    # -- admission and takeover ----------------------------------------------------------

    def admit(
        self,
        *,
        client: str,
        key: str,
        request_hash: bytes,
        endpoint: str,
        request_body: bytes,
        owner: str,
        now: float,
    ) -> tuple[bool, KeyRow]:
        """Insert the key, or find it. `(True, row)` means this attempt owns the request;
        `(False, row)` returns the row that was there."""
        ...

    def take_over(
        self, *, client: str, key: str, owner: str, now: float, stale_before: float
    ) -> KeyRow | None:
        """One conditional update: a new lease on a started row whose lease is older than
        `stale_before` (or released). None: another actor won, or the row moved on."""
        ...

    # -- phases ----------------------------------------------------------------------------

    def handler1(
        self, *, client: str, key: str, owner: str, now: float, resource: ResourceRow
    ) -> bool: ...

    def mark_sent(self, *, client: str, key: str, owner: str, now: float, point: Phase) -> bool: ...

    def record_external(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        point: Phase,
        system: int,
        answer: str,
    ) -> bool: ...

    def handler2(self, *, client: str, key: str, owner: str, now: float, status: str) -> bool: ...

    def finish(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        status: str,
        response_code: int,
        response_body: bytes,
        events: Sequence[EventRow] = (),
    ) -> bool:
        """Handler3, with the webhook `events` queued, in order, in the same transaction."""
        ...

    def release(self, *, client: str, key: str, owner: str, now: float) -> bool: ...

    def forget(self, *, client: str, key: str, created_before: float) -> bool:
        """Delete the finished key (client, key) if it was created at or before
        `created_before`; never a started one. Whether a row went."""
        ...

    # -- reads and maintenance -------------------------------------------------------------

    def key_row(self, client: str, key: str) -> KeyRow | None: ...

    def resource(self, resource_id: str) -> ResourceRow | None: ...

    def find_resources(
        self,
        *,
        client: str,
        kind: str,
        resource_id: str | None = None,
        reference: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[ResourceRow]: ...

    def stale_keys(self, *, stale_before: float, limit: int) -> list[tuple[str, str]]:
        """Started rows whose lease expired or was released, oldest first."""
        ...

    def reap(self, *, created_before: float, now: float) -> int:
        """Drop finished keys created before `created_before` (never a started one);
        how many. A backend may drop coarser units (PostgreSQL: whole days), keeping
        some keys longer, never shorter."""
        ...

    def reset(self) -> None:
        """Forget keys, resources, journal, external books and webhook events."""
        ...

    # -- the webhook outbox ----------------------------------------------------------------

    def due_events(self, *, now: float, limit: int) -> list[EventRow]:
        """Pending events due at `now`, soonest first."""
        ...

    def claim_event(self, event: EventRow, *, until: float) -> bool:
        """Hold `event` (as read) for one deliverer until `until`. False: someone else has it."""
        ...

    def postpone_event(self, event_id: str, *, until: float) -> None: ...

    def event_result(
        self,
        event_id: str,
        *,
        state: str,
        posts: int,
        next_attempt_at: float,
        delivered_at: float | None,
        status: int | None,
        error: str | None,
    ) -> None:
        """Record one delivery attempt: delivered, abandoned, or pending until later."""
        ...

    def events(self) -> list[EventRow]:
        """Every webhook event, oldest first."""
        ...

    # -- the external systems' own books ---------------------------------------------------

    def external_apply(
        self,
        *,
        system: int,
        key: str,
        resource_id: str,
        outcome: str,
        reference: str,
        amount: int,
        now: float,
    ) -> tuple[ExternalRecord, bool]: ...

    def external_lookup(self, *, system: int, key: str) -> ExternalRecord | None: ...

    def external_forget(self, *, system: int, key: str, applied_before: float) -> bool:
        """Forget `key` at `system` if it was applied before `applied_before`: a later
        instruction under it is a new one. Its effect stays counted on its resource."""
        ...

    # -- inspection ------------------------------------------------------------------------

    def ledger_rows(self) -> list[LedgerRow]: ...


def open_storage(db: str | os.PathLike[str]) -> StorageBackend:
    """The backend `db` names: a `postgresql://` URL, or a SQLite path (or `:memory:`)."""
    if is_postgres_url(db):
        assert isinstance(db, str)
        # Imported only now: psycopg is an optional dependency.
        try:
            from .postgres import PostgresStorage
        except ImportError as exc:
            raise postgres_missing("the reference server on PostgreSQL", exc) from exc
        return PostgresStorage(db)
    return Storage(db)
