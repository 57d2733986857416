"""The rows both storage backends return: plain frozen values, whatever the database.

Each backend reads its own column types back into these (PostgreSQL's timestamps as
epoch seconds, for one), so the protocol core never learns which database it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EventRow",
    "ExternalRecord",
    "KeyRow",
    "LedgerRow",
    "ResourceRow",
    "RowHeld",
    "StorageDown",
]


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One row of `idempotency_keys`."""

    client: str
    key: str
    request_hash: bytes
    endpoint: str
    request_body: bytes
    state: str
    recovery_point: str | None
    resource_id: str | None
    response_code: int | None
    response_body: bytes | None
    locked_at: float | None
    lease_owner: str | None
    attempts: int
    last_attempt_at: float | None
    created_at: float


@dataclass(frozen=True, slots=True)
class ResourceRow:
    """One payment or payout."""

    id: str
    kind: str
    client: str
    idempotency_key: str
    reference: str
    amount: int
    currency: str
    status: str
    fields: str
    ext1: str | None
    ext2: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class EventRow:
    """One row of the webhook outbox."""

    id: str
    client: str
    type: str
    resource_id: str
    body: bytes
    created_at: float
    state: str
    attempts: int
    posts: int
    next_attempt_at: float
    delivered_at: float | None
    last_status: int | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class ExternalRecord:
    """What an external system holds under one derived key."""

    outcome: str
    reference: str
    calls: int


#: A resource, its key's state and recovery point, its effect counts
#: (E1 applied, E2 applied, E1 calls, E2 calls), and the handlers that ran for it.
LedgerRow = tuple[ResourceRow, str | None, str | None, tuple[int, int, int, int], list[str]]


class RowHeld(Exception):
    """Another transaction (a frozen server's, say) holds the row past the lock
    timeout: nothing was done, and the request may come again shortly."""


class StorageDown(Exception):
    """The database cannot be used right now: unreachable (no connection within the
    backend's bound), or lost in the middle of a statement.

    `maybe_written`: whether a write may have committed before the failure (it came
    while a commit was on its way, or with a statement that commits on its own);
    False means nothing of the failed operation was written. `detail` is for the log.
    """

    def __init__(self, detail: str, *, maybe_written: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.maybe_written = maybe_written
