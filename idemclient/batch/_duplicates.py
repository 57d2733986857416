"""The same payment under another identity: found before a row's first send.

A row is its reference within the batch's scope (`_identity`). Between two runs of one
file, an operator who adds, removes or changes the scope (`--batch-ref`), or reads the
references from another column (`--ref-column`), gives every row another identity: as
far as identity goes, each row is a new payment, and would be paid again. The content
tells: a payout file's rows carry their value date, so last month's identical salary
is not this month's, and a row whose every column (the value date included) the store
holds already under another reference is the same payment submitted again.

So before a row's first send, the store is asked (`Store.find(reference_tails=...)`,
one pass) for the records whose reference is one of the row's values, in any scope
(``E1000``, ``2026-11/E1000``); among those the batch command made for the same
operation (or an earlier version of it did), one with exactly this row's content is
this row's twin, and the row is refused, unless the operator says the rows are new
payments (`--new-payments`). Pure functions; the run asks the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .._outcome import State
from .._redaction import origin_of
from .._store import OperationRecord
from ._identity import OPERATION_ID_PREFIX, RowIdentity, is_batch_operation
from ._plan import Request, same_content
from ._rows import PayoutRow

__all__ = ["TWIN_ADVICE", "by_tail", "tails_of", "twin_problem", "twins"]

TWIN_ADVICE = (
    "a row whose very content (every column, the value date included) the store holds"
    " under another reference is the same payment: was this file submitted before with"
    " another --batch-ref, or none, or another --ref-column? Submit it again as it was"
    " first submitted. If these truly are new payments, identical to earlier ones, give"
    " them references of their own, or pass --new-payments (new_payments=True)"
)


def tails_of(row: PayoutRow) -> set[str]:
    """What a row's reference may have been in an earlier run: any of its values (the
    reference column may have been another)."""
    return {value for value in row.values if value}


def _reference_tails(reference: str) -> list[str]:
    """`reference` and what follows each "/" in it: the bare reference, in any scope."""
    found = [reference]
    rest = reference
    while "/" in rest:
        rest = rest.split("/", 1)[1]
        found.append(rest)
    return found


def _made_by_the_batch(record: OperationRecord, operation: str) -> bool:
    """A row the batch command recorded for `operation` (or an earlier version of it,
    whose operation id was its key)."""
    if record.method != "POST":
        return False
    if is_batch_operation(record.operation_id):
        return record.operation_id.startswith(f"{OPERATION_ID_PREFIX}{operation}/")
    return record.operation_id == record.key


def by_tail(
    records: Iterable[OperationRecord], operation: str
) -> Mapping[str, Sequence[OperationRecord]]:
    """The batch's records of `operation`, under every tail of their reference."""
    index: dict[str, list[OperationRecord]] = defaultdict(list)
    for record in records:
        if record.reference is None or not _made_by_the_batch(record, operation):
            continue
        for tail in _reference_tails(record.reference):
            index[tail].append(record)
    return index


def twins(
    identity: RowIdentity,
    row: PayoutRow,
    request: Request,
    index: Mapping[str, Sequence[OperationRecord]],
) -> list[OperationRecord]:
    """The records of another identity that hold exactly this row's content."""
    found: dict[str, OperationRecord] = {}
    for value in tails_of(row):
        for record in index.get(value, ()):
            if record.operation_id == identity.operation_id or record.operation_id in found:
                continue
            if same_content(record, request) is True:
                found[record.operation_id] = record
    return sorted(found.values(), key=lambda record: record.created_at)


def twin_problem(identity: RowIdentity, found: Sequence[OperationRecord]) -> str:
    """Why a row with twins is refused, naming them."""
    shown = "; ".join(_described(record) for record in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"reference {identity.reference!r} is the very same payment as {shown}{more},"
        " recorded under another reference: refused, nothing sent"
    )


def _described(record: OperationRecord) -> str:
    state = record.state
    if state is State.SUCCEEDED:
        what = "paid"
    elif state is State.FAILED:
        what = "refused by the server"
    elif record.maybe_applied or state is State.IN_FLIGHT:
        what = "maybe paid"
    else:
        what = "recorded, not paid yet"
    return f"{record.reference!r} ({what} at {origin_of(record.url)}, {record.operation_id})"
