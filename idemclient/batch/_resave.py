"""The same payment under another reference: a file re-saved by a spreadsheet.

A payout file opened in a spreadsheet and saved again comes back with its references
changed where a spreadsheet reads them as numbers (`00123` becomes `123`, `1E5` becomes
`100000`) or stores them in another Unicode form, and every other column as it was.
To the store those rows are new references, to the server's look-up too: each would be
paid a second time. What tells is the payment itself: a row whose payment content
equals a row the store holds under another reference is held before anything is sent,
naming both, unless the operator says it is a new payment (`--new-payment REF` for a
row, `--new-payments` for the whole file).

"The payment content" is every column of the row but its reference: the account, the
amount (in minor units), the currency, the value date, the name, the employee id...,
each compared as a person would read it, not as bytes: in Unicode NFC, without case,
with runs of spaces as one, and a number as its value (`00123`, `123` and `123.0` are
one; `1E5` and `100000` are one: a spreadsheet writes either for the other). The
reference is left out wherever it is, in the reference column and in any other column
that carries the same value (as the content compares them); so is the key, where a
profile's server reads it from the body. Two payments of the same amount to the same
account on the same value date with every other column equal are the same payment, or
a payment the operator means twice: the operator says which.

Found through an index, not by reading bodies: each row the batch records keeps a
digest of its payment content beside it (`Store.note_contents`, indexed), so a file's
new rows are matched with one look-up per chunk of digests, whatever the store holds.
Rows recorded by earlier versions (or left without one by a process killed between two
writes) are digested once, at the next run, from the bodies the store still holds; a
row whose body was reaped (`retention`, a week by default, after it finished) before
that has no digest, and is not seen here.

What counts: a row of the same operation, recorded by the batch command, under another
reference that this file does not have (two identical rows of one file are the file's
own business), and not refused (a refusal paid nothing). It may be paid, maybe paid,
or recorded and not sent yet (the file it came from would pay it when run).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .. import State
from .._errors import BatchInvalid
from .._seam import origin_of
from ..store import Intent, OperationRecord, Store
from ._identity import OPERATION_ID_PREFIX, nfc

__all__ = [
    "HELD",
    "HELD_ADVICE",
    "Held",
    "Resaved",
    "backfill",
    "payment_digest",
    "recorded_digest",
]

#: What to do about rows held as payments made under another reference.
HELD_ADVICE = (
    "held, nothing sent: each row below is the same payment (account, amount, currency,"
    " value date and every other column) as a row the store holds under another"
    " reference, as a spreadsheet's re-save of the file leaves it (00123 read as 123, 1E5"
    " as 100000, an accent decomposed). Submit the file as it was first submitted. If a"
    " row truly is a new payment, identical to the earlier one, say so: --new-payment REF"
    " for that row (repeatable), or --new-payments for the whole file (new_payments= from"
    " Python)"
)

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?")
#: How a held row's reason begins.
HELD = "held, not sent: "
#: The digest's scheme: a new one is a new name, never a changed meaning.
_SCHEME = "v1:"
#: How many digests are asked of the store at once.
_CHUNK = 1_000


class Held(BatchInvalid):
    """A batch held before anything was sent: rows whose payment the store holds under
    another reference (and nothing else wrong with it)."""


@dataclass(frozen=True, slots=True)
class Resaved:
    """A row held, and the row of the store it is the same payment as."""

    number: int
    reference: str
    #: the row's reference as the file has it (`--new-payment` takes it so)
    bare: str
    record: OperationRecord

    def why(self) -> str:
        record = self.record
        if record.state is State.SUCCEEDED:
            what = "paid"
        elif record.maybe_applied or record.state is State.IN_FLIGHT:
            what = "maybe paid"
        else:
            what = "recorded, not paid yet"
        return (
            f"{HELD}reference {self.reference!r} is the same payment as"
            f" {record.reference!r} ({what} at {origin_of(record.url)},"
            f" {record.operation_id}); if it is a new payment, --new-payment"
            f" {_shell(self.bare)}"
        )


def _shell(text: str) -> str:
    return shlex.quote(text)


def _canonical(value: Any) -> str:
    """A value as the content compares it (see the module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = " ".join(nfc(str(value)).split()).casefold()
    if _NUMBER.fullmatch(text):
        try:
            number = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern is Decimal's syntax
            return text
        if number.is_finite():
            shown = format(number.normalize(), "f")
            return "0" if shown in ("-0", "+0") else shown
    return text


def _tails(reference: str) -> list[str]:
    """`reference` and what follows each "/" in it: itself, in any scope."""
    found = [reference]
    rest = reference
    while "/" in rest:
        rest = rest.split("/", 1)[1]
        found.append(rest)
    return found


def payment_digest(payload: Mapping[str, Any], reference: str, key: str | None = None) -> str:
    """The digest of a row's payment content: its columns but the reference (in any
    column, in any scope), and the key (`key`, where the body carries it)."""
    left_out = {_canonical(tail) for tail in _tails(reference)}
    pairs = sorted(
        (_canonical(name), shown)
        for name, value in payload.items()
        if name != "reference"
        and not (key is not None and value == key)
        and (shown := _canonical(value)) not in left_out
    )
    text = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return _SCHEME + hashlib.sha256(text.encode()).hexdigest()


def recorded_digest(request: Intent | OperationRecord) -> str:
    """The digest of a recorded request's payment content; "" when its body is gone
    (reaped) or is not a JSON object: nothing to compare."""
    if not request.body or request.reference is None:
        return ""
    try:
        payload = json.loads(request.body)
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    return payment_digest(payload, request.reference, request.key)


def backfill(store: Store, operation: str, *, most: int = 1_000_000) -> int:
    """Digest the rows of `operation` the store holds without one (recorded by an
    earlier version, or by a process killed between its two writes), a chunk at a time;
    how many. Bounded: a store that keeps none of them (read-only) is not asked for
    ever."""
    prefix = f"{OPERATION_ID_PREFIX}{operation}/"
    done = 0
    after = ""
    while done < most:
        found = store.undigested(id_prefix=prefix, limit=_CHUNK, after=after)
        if not found:
            break
        store.note_contents((request.operation_id, recorded_digest(request)) for request in found)
        done += len(found)
        after = found[-1].operation_id
        if len(found) < _CHUNK:
            break
    return done


def held(
    store: Store,
    operation: str,
    rows: Iterable[tuple[int, str, str, str]],
    of_this_file: Callable[[str], bool],
) -> Iterator[Resaved]:
    """The rows held: `rows` are (row number, reference, reference as the file has it,
    digest) of the rows a run would record anew; `of_this_file(reference)` says whether
    a reference (in NFC) is one of the file's."""
    prefix = f"{OPERATION_ID_PREFIX}{operation}/"
    for chunk in _chunks(rows, _CHUNK):
        by_digest: dict[str, list[tuple[int, str, str]]] = {}
        for number, reference, bare, digest in chunk:
            by_digest.setdefault(digest, []).append((number, reference, bare))
        matches = [
            (digest, operation_id)
            for digest, operation_id in store.find_contents(by_digest)
            if operation_id.startswith(prefix)
        ]
        if not matches:
            continue
        records = {r.operation_id: r for r in store.find(operation_ids=(o for _, o in matches))}
        for digest, operation_id in matches:
            record = records.get(operation_id)
            if record is None or record.reference is None or record.state is State.FAILED:
                continue
            if of_this_file(nfc(record.reference)):
                continue  # a row of this very file: not another reference's payment
            for number, reference, bare in by_digest[digest]:
                yield Resaved(number, reference, bare, record)


_Row = tuple[int, str, str, str]


def _chunks(rows: Iterable[_Row], size: int) -> Iterator[Sequence[_Row]]:
    chunk: list[_Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
