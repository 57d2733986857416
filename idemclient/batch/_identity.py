"""Who a row is: its reference within the batch's scope, and the operation.

A row's identity is what the operator names, never an incidental fact: not the file's
name or path (a renamed copy is the same rows), not a field of its content (an edited
value date is the same row with other content, refused, not a second payment).

- end-to-end reference: the row's reference, or ``<scope>/<reference>`` in a scope; it
  is what the server is sent as `reference` and asked about by a look-up;
- operation id in the store: ``batch/<operation>/<end-to-end reference>``, readable in
  `idemclient ops list`;
- key: ``uuid5(namespace, end-to-end reference, operation)``, the same on any machine.

Stores written before this scheme (keys from the batch reference, which defaulted to
the file's name, and the value date) hold rows whose operation id is their key; those
are found by reference and keep their keys (see `_plan`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .._keys import key_from_identity
from ._rows import PayoutRow

__all__ = ["OPERATION_ID_PREFIX", "RowIdentity", "identify", "is_batch_operation", "legacy_key"]

OPERATION_ID_PREFIX = "batch/"


@dataclass(frozen=True, slots=True)
class RowIdentity:
    #: the row's own reference (its reference column)
    bare: str
    #: the reference the server sees: `bare`, or "<scope>/<bare>"
    reference: str
    #: the operation's name (payout)
    operation: str
    key: str
    #: after the operation id: a corrected content's own (see `_corrections`), or none
    variant: str = ""

    @property
    def operation_id(self) -> str:
        """The row's operation id in the store: made when asked, not kept (a run holds
        a hundred thousand identities)."""
        return f"{OPERATION_ID_PREFIX}{self.operation}/{self.reference}{self.variant}"


def scoped(scope: str | None, reference: str) -> str:
    return reference if scope is None else f"{scope}/{reference}"


def identify(
    row: PayoutRow, *, scope: str | None, operation: str, namespace: uuid.UUID
) -> RowIdentity:
    reference = scoped(scope, row.reference)
    return RowIdentity(
        bare=row.reference,
        reference=reference,
        operation=operation,
        key=key_from_identity(reference, operation, namespace=namespace),
    )


def legacy_key(
    row: PayoutRow, *, batch_reference: str, operation: str, namespace: uuid.UUID
) -> str:
    """The key an earlier version gave this row in a batch called `batch_reference`
    (then the file's name by default): it counted the value date as identity."""
    return key_from_identity(
        batch_reference, row.reference, operation, row.value_date.isoformat(), namespace=namespace
    )


def is_batch_operation(operation_id: str) -> bool:
    """Recorded by this version of the batch command (not an earlier one, not a client)."""
    return operation_id.startswith(OPERATION_ID_PREFIX)
