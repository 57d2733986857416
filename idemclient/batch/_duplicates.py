"""The same payment under another identity: found before a row's first send.

A row is its reference within the batch's scope (`_identity`). Between two runs of one
file, an operator who adds, removes or changes the scope (`--batch-ref`), or reads the
references from another column (`--ref-column`), gives every row another identity: as
far as identity goes, each row is a new payment, and would be paid again. The content
tells: a payout file's rows carry their value date, so last month's identical salary
is not this month's, and a row whose every column (the value date included) the store
holds already under another reference is the same payment submitted again.

So before a row's first send, the store is asked (`Store.references`, one pass over
its references for the whole file, matched on disk: `_kin`) for the requests recorded
under a reference that is one of the row's values, in any scope (``E1000``,
``2026-11/E1000``); among those the batch
command made for the same operation (or an earlier version of it did), one with
exactly this row's content is this row's duplicate, and the row is refused, unless the
operator says the rows are new payments (`--new-payments`).

"Exactly this row's content" is the body this row would have been sent with under the
duplicate's reference: the same fingerprint (cheap, and all a reaped record keeps), or,
while the recorded body is kept, the same columns and values in any order. A scoped
store holds every earlier month of the same employee ids: each is compared, so this
costs a hash per earlier row of the same reference. Pure functions; the run asks the
store.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import encode_basestring

import httpx

from .. import State
from .._seam import Fingerprints, fingerprints, origin_of
from ..store import Intent, OperationRecord
from ._identity import OPERATION_ID_PREFIX, RowIdentity, is_batch_operation, nfc
from ._plan import JSON_BODY, Request, differences
from ._rows import PayoutRow
from ._sender import target_of

__all__ = [
    "DUPLICATE_ADVICE",
    "Paths",
    "by_tail",
    "duplicate_problem",
    "duplicates",
    "reference_tails",
    "tails_of",
]

DUPLICATE_ADVICE = (
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


def reference_tails(reference: str) -> list[str]:
    """`reference` and what follows each "/" in it: the bare reference, in any scope."""
    found = [reference]
    rest = reference
    while "/" in rest:
        rest = rest.split("/", 1)[1]
        found.append(rest)
    return found


def _made_by_the_batch(request: Intent, operation: str) -> bool:
    """A row the batch command recorded for `operation` (or an earlier version of it,
    whose operation id was its key)."""
    if request.method != "POST":
        return False
    if is_batch_operation(request.operation_id):
        return request.operation_id.startswith(f"{OPERATION_ID_PREFIX}{operation}/")
    return request.operation_id == request.key


def by_tail(requests: Iterable[Intent], operation: str) -> Mapping[str, Sequence[Intent]]:
    """The batch's recorded requests of `operation`, under every tail of their
    reference."""
    index: dict[str, list[Intent]] = defaultdict(list)
    for request in requests:
        if request.reference is None or not _made_by_the_batch(request, operation):
            continue
        for tail in reference_tails(nfc(request.reference)):  # a row's values are NFC
            index[tail].append(request)
    return index


#: Stands for the reference in a body made once per row (escaped in JSON: never data).
_MARK = f"\x00{uuid.uuid4()}\x00"


def _body_maker(request: Request) -> Callable[[str, str], bytes]:
    """Makes this row's body under any reference (and key, where the key is in the
    body): the body split once around the reference."""
    if request.key_field is not None:
        return request.body_for  # each recorded request carries its own key too
    prefix, found, suffix = request.body_for(_MARK).partition(_encoded(_MARK))
    if not found:  # pragma: no cover - the reference is always a key of the body
        return lambda reference, _key: request.body_for(reference)
    return lambda reference, _key: prefix + _encoded(reference) + suffix


def _encoded(text: str) -> bytes:
    """A string as `encode_body` writes it inside a body (its encoder's own function)."""
    return encode_basestring(text).encode()


class Paths:
    """The fingerprint of a POST to a stored URL, made ready once per URL (the rows of a
    batch share a few)."""

    def __init__(self) -> None:
        self._ready: dict[str, Fingerprints] = {}

    def __call__(self, url: str) -> Fingerprints:
        target = target_of(url)
        ready = self._ready.get(target)
        if ready is None:
            ready = self._ready[target] = fingerprints(
                "POST", httpx.URL(target), content_type=JSON_BODY
            )
        return ready


def duplicates(
    identity: RowIdentity,
    row: PayoutRow,
    request: Request,
    index: Mapping[str, Sequence[Intent]],
    paths: Paths | None = None,
) -> list[Intent]:
    """The recorded requests of another identity that carry exactly this row's
    content (see the module docstring). `paths`: stored URLs parsed once, shared by
    the rows of a run."""
    paths = paths or Paths()
    body_under = _body_maker(request)
    # What a body with this row's content holds, whatever the order of its columns: a
    # cheap test that rules out another month's row before its body is read.
    needles = (_encoded(row.value_date.isoformat()), str(row.amount).encode())
    found: dict[str, Intent] = {}
    for value in tails_of(row):
        for recorded in index.get(value, ()):
            if recorded.operation_id == identity.operation_id or recorded.operation_id in found:
                continue
            body = body_under(recorded.reference or "", recorded.key)
            same = paths(recorded.url).matches(recorded.fingerprint, body)
            if same or _same_columns(recorded.body, request, needles):
                found[recorded.operation_id] = recorded
    return list(found.values())


def _same_columns(recorded: bytes, request: Request, needles: Sequence[bytes]) -> bool:
    """A kept body with this row's columns and values, in any order."""
    if not recorded or not all(needle in recorded for needle in needles):
        return False
    try:
        payload = json.loads(recorded)
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    if request.key_field is not None:
        payload.pop(request.key_field, None)
    return not differences(payload, request.payload)


def duplicate_problem(identity: RowIdentity, found: Sequence[OperationRecord]) -> str:
    """Why a row with duplicates is refused, naming them."""
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
