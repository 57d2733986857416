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

A reference is compared in Unicode NFC: `José` typed (one code point for é) and `José`
saved by a spreadsheet or another system decomposed (e and a combining accent) look the
same and are one reference. A file's cells are read in NFC (`_rows`), so a row's
reference, its operation id and its key are the NFC form's. A store written before
this holds a row under the form its file had: the row is found under each form
(`forms`), and keeps the key it was recorded with (`recorded`): one reference, one key.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .. import State
from ..keys import key_from_identity
from ..store import OperationRecord
from ._rows import PayoutRow

__all__ = [
    "OPERATION_ID_PREFIX",
    "RowIdentity",
    "forms",
    "identify",
    "is_batch_operation",
    "legacy_key",
    "nfc",
    "recorded",
    "same_text",
]

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


def nfc(text: str) -> str:
    """`text` in Unicode NFC (the composed form: é as one code point)."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def same_text(a: object, b: object) -> bool:
    """Equal, strings compared in NFC."""
    if isinstance(a, str) and isinstance(b, str):
        return a == b or nfc(a) == nfc(b)
    return a == b


def forms(text: str) -> tuple[str, ...]:
    """`text` and the other forms an earlier version or another system may have
    recorded it in (NFD), each once."""
    other = unicodedata.normalize("NFD", text)
    return (text,) if other == text else (text, other)


def other_ids(identity: RowIdentity) -> tuple[str, ...]:
    """The operation ids the row had in a store written with its reference in another
    Unicode form."""
    return tuple(
        f"{OPERATION_ID_PREFIX}{identity.operation}/{form}{identity.variant}"
        for form in forms(identity.reference)[1:]
    )


def recorded(
    by_id: Mapping[str, OperationRecord], identity: RowIdentity
) -> OperationRecord | str | None:
    """The store's record of the row: under its operation id, else under another form
    of its reference (an earlier version's). A refusal (why) when several forms are
    recorded and they may not be one payment: a second form was sent by a version
    that compared the bytes, and another of it may be paid."""
    found = [by_id[i] for i in (identity.operation_id, *other_ids(identity)) if i in by_id]
    if len(found) <= 1:
        return found[0] if found else None
    if all(record.state is State.SUCCEEDED for record in found) or all(
        not record.maybe_applied and record.state in (State.PENDING, State.NOT_SENT)
        for record in found[1:]
    ):
        return found[0]  # this version's, the others paid too, or never sent
    shown = ", ".join(f"{r.operation_id!r} ({r.state.words})" for r in found)
    return (
        f"is recorded under {len(found)} Unicode forms of one reference ({shown}):"
        " settle them by hand (idemclient ops show) before submitting it again"
    )
