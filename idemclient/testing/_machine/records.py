"""What a test can read back from the sandbox: ledger entries, key rows, recovery reports.

Each record is a frozen value that travels as a JSON object over `/_sandbox/` and comes
back as the same value through `SandboxClient`, so in-process and live tests assert on
the same types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, cast

__all__ = ["KeyRecord", "LedgerEntry", "RecoveryReport", "WebhookEventRecord", "WebhookReport"]


class _JsonRecord:
    """Round-trips a flat dataclass through a JSON object (tuples travel as lists)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        # cast: every subclass is a dataclass, which the mixin itself cannot declare
        return {
            f.name: list(value) if isinstance(value := getattr(self, f.name), tuple) else value
            for f in dataclasses.fields(cast(Any, self))
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        values = {
            f.name: tuple(data[f.name]) if isinstance(data[f.name], list) else data[f.name]
            for f in dataclasses.fields(cast(Any, cls))
        }
        return cls(**values)


@dataclass(frozen=True, slots=True)
class LedgerEntry(_JsonRecord):
    """One resource and every effect it caused: what "exactly once" is asserted against."""

    resource_id: str
    #: "payment" or "payout"
    kind: str
    client: str
    idempotency_key: str
    reference: str
    amount: int
    currency: str
    #: pending, authorized, succeeded or declined
    status: str
    #: state of the key row: "started", "finished", or None once the key was reaped
    key_state: str | None
    recovery_point: str | None
    #: instructions external system 1 applied for this resource (1 means exactly once)
    ext1_applied: int
    ext2_applied: int
    #: deliveries external system 1 received for it, replays included
    ext1_calls: int
    ext2_calls: int
    #: the handlers that ran for it, in order: ("H1", "H2", "H3") when complete
    journal: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeyRecord(_JsonRecord):
    """The server's row for one (client, idempotency key)."""

    client: str
    key: str
    endpoint: str
    #: "started" or "finished"
    state: str
    recovery_point: str | None
    resource_id: str | None
    response_code: int | None
    response_body: str | None
    #: the lease: None when finished or released for the next actor
    locked_at: float | None
    #: external calls intended so far (EXTn_SENT commits)
    attempts: int
    last_attempt_at: float | None
    created_at: float


@dataclass(frozen=True, slots=True)
class RecoveryReport(_JsonRecord):
    """What one recovery sweep did."""

    #: started rows found with an expired or released lease
    examined: int
    #: of those, rows this sweep took over (a racing retry may win the rest)
    resumed: int
    #: of those, rows it brought to finished
    finished: int
    #: of those, rows still unresolved (an external system still unknown or down)
    unresolved: int


@dataclass(frozen=True, slots=True)
class WebhookReport(_JsonRecord):
    """What one pass of the webhook delivery loop did."""

    #: pending events that were due
    due: int
    #: of those, acknowledged with a 2xx now
    delivered: int
    #: attempted and not acknowledged (to be retried, or abandoned)
    failed: int
    #: of the failed, given up for good after the last attempt
    abandoned: int
    #: held back by an injected delay, not attempted
    postponed: int
    #: due, but their client has no endpoint configured yet
    waiting: int
    #: HTTP requests sent, injected duplicates included
    posts: int


@dataclass(frozen=True, slots=True)
class WebhookEventRecord(_JsonRecord):
    """One webhook event in the server's outbox, and how its delivery is going."""

    #: evt_...: the message id every delivery of it carries
    id: str
    #: payment.succeeded, payment.declined, payout.succeeded, payout.declined
    type: str
    client: str
    resource_id: str
    #: "pending", "delivered" or "abandoned"
    state: str
    #: delivery attempts made
    attempts: int
    #: HTTP requests sent, injected duplicates included
    posts: int
    created_at: float
    #: when a pending event is next due (server clock)
    next_attempt_at: float
    delivered_at: float | None
    #: the receiver's last HTTP status, or None if there was no answer
    last_status: int | None
    last_error: str | None
    #: the exact body every delivery sends (JSON text)
    body: str
