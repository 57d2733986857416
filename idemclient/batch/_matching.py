"""Whether a payment the server holds is this row: by what it shows (the row's
reference, or its key) and by its content (`matches_payment`), never by content
alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._identity import same_text

__all__ = ["KEY_FIELD", "SERVER_FIELDS", "matches_payment", "shows_row"]

#: Names a PSP sets on its own payments: never compared with a row's columns.
SERVER_FIELDS = frozenset({"id", "object", "status", "created", "idempotency_key", "external"})


#: Where a payment found by a look-up shows the key it was made with (the reference
#: server's name); its reference is in the look-up's `reference_field`.
KEY_FIELD = "idempotency_key"


def shows_row(
    payment: Mapping[str, Any], *, reference: str, key: str | None, reference_field: str
) -> bool | None:
    """Whether a payment a look-up names is this row's, by what it shows: its
    `reference_field` (this row's reference, or another row's) or its key. None when it
    shows neither, so that it cannot tell."""
    if key is not None and payment.get(KEY_FIELD) == key:
        return True
    shown = payment.get(reference_field)
    if isinstance(shown, str | int) and not isinstance(shown, bool):
        return same_text(str(shown), reference)
    return None


def matches_payment(
    payload: Mapping[str, Any],
    payment: Mapping[str, Any],
    *,
    reference: str | None = None,
    key: str | None = None,
    reference_field: str = "reference",
) -> bool:
    """Whether a payment the server holds is this row: it shows this row's reference
    (in `reference_field`; `reference` defaults to the payload's) or its key, and it has
    this row's content: the same amount and currency (both must be shown), and the same
    value for every other column of the row that the payment shows too.

    A payment that shows neither the reference nor the key is never this row, whatever
    its content: a look-up that ignores its filter answers with other payments, and
    last month's identical salary is not this month's."""
    wanted = reference if reference is not None else str(payload.get("reference", ""))
    if not shows_row(payment, reference=wanted, key=key, reference_field=reference_field):
        return False
    if any(name not in payment for name in ("amount", "currency")):
        return False
    return all(
        same_text(payment[name], value)
        for name, value in payload.items()
        if name in payment and name not in SERVER_FIELDS and name != "reference"
    )
