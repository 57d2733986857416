"""Reading a payout file: every row checked before anything is recorded or sent.

A file is accepted whole or not at all. Every problem found is reported with its row
number (data rows count from 1; row 0 is the file itself), so that a person can fix
them all in one pass.
"""

from __future__ import annotations

import csv
import datetime
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._errors import BatchInvalid
from ._currencies import MINOR_UNITS

__all__ = ["AmountFormat", "Batch", "PayoutRow", "read_batch"]

AmountFormat = Literal["minor", "major"]

#: The largest amount a JSON number carries exactly in every common parser (2**53 - 1).
MAX_AMOUNT = 9_007_199_254_740_991
MAX_REFERENCE_LENGTH = 255
_MINOR = re.compile(r"[0-9]+")
_MAJOR = re.compile(r"([0-9]+)(?:\.([0-9]+))?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class PayoutRow:
    """One validated row. `fields` keeps every column as read, in file order."""

    number: int
    reference: str
    amount: int
    currency: str
    value_date: datetime.date
    fields: tuple[tuple[str, str], ...]

    def payload(self) -> dict[str, object]:
        """The JSON body: every column, with the amount in integer minor units and the
        row's reference as `reference`."""
        body: dict[str, object] = dict(self.fields)
        body.update(
            amount=self.amount,
            currency=self.currency,
            value_date=self.value_date.isoformat(),
            reference=self.reference,
        )
        return body


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch: its reference (part of every row's key) and its rows."""

    source: str
    reference: str
    rows: tuple[PayoutRow, ...]

    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, object]],
        *,
        reference: str,
        source: str = "<records>",
        reference_column: str = "ref",
        amount_column: str = "amount",
        currency_column: str = "currency",
        date_column: str = "value_date",
        amount_format: AmountFormat = "minor",
    ) -> Batch:
        """Validate rows given as mappings (for example from a database query)."""
        listed = [{str(k): "" if v is None else str(v) for k, v in r.items()} for r in records]
        header: list[str] = []
        for record in listed:
            header.extend(name for name in record if name not in header)
        return _validate(
            source,
            reference,
            header,
            [(n, record) for n, record in enumerate(listed, start=1)],
            _Columns(reference_column, amount_column, currency_column, date_column),
            amount_format,
        )


@dataclass(frozen=True, slots=True)
class _Columns:
    reference: str
    amount: str
    currency: str
    date: str


def read_batch(
    path: str | os.PathLike[str],
    *,
    batch_reference: str | None = None,
    reference_column: str = "ref",
    amount_column: str = "amount",
    currency_column: str = "currency",
    date_column: str = "value_date",
    amount_format: AmountFormat = "minor",
) -> Batch:
    """Read and validate a CSV payout file (UTF-8, a header row, comma-separated).

    The batch reference defaults to the file name without its extension, so the same
    file submitted again gets the same keys. Raises `BatchInvalid` listing every
    problem; raises `OSError` when the file cannot be read.
    """
    file = Path(path)
    source = str(file)
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BatchInvalid(
            source, [(0, f"is not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from exc
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        table = list(reader)
    except csv.Error as exc:
        raise BatchInvalid(source, [(0, f"is not valid CSV: {exc}")]) from exc
    table = [row for row in table if any(cell.strip() for cell in row)]  # blank lines
    if not table:
        raise BatchInvalid(source, [(0, "is empty: a header row and at least one row are needed")])
    header = [name.strip() for name in table[0]]
    problems: list[tuple[int, str]] = []
    if len(set(header)) != len(header):
        duplicated = sorted({name for name in header if header.count(name) > 1})
        problems.append((0, f"header repeats column(s) {', '.join(duplicated)}"))
    records: list[tuple[int, dict[str, str]]] = []
    for number, cells in enumerate(table[1:], start=1):
        if len(cells) != len(header):
            problems.append((number, f"has {len(cells)} fields; the header has {len(header)}"))
            continue
        records.append((number, dict(zip(header, (c.strip() for c in cells), strict=True))))
    if problems:
        raise BatchInvalid(source, problems)
    reference = batch_reference if batch_reference is not None else file.stem
    columns = _Columns(reference_column, amount_column, currency_column, date_column)
    return _validate(source, reference, header, records, columns, amount_format)


def _validate(
    source: str,
    batch_reference: str,
    header: Sequence[str],
    records: Sequence[tuple[int, Mapping[str, str]]],
    columns: _Columns,
    amount_format: AmountFormat,
) -> Batch:
    problems: list[tuple[int, str]] = []
    if not batch_reference.strip() or _CONTROL.search(batch_reference):
        problems.append(
            (0, f"batch reference {batch_reference!r} is empty or has control characters")
        )
    required = (columns.reference, columns.amount, columns.currency, columns.date)
    missing = [name for name in required if name not in header]
    if missing:
        problems.append(
            (0, f"missing column(s): {', '.join(missing)} (found: {', '.join(header)})")
        )
        raise BatchInvalid(source, problems)
    if not records:
        problems.append((0, "has a header but no rows"))
    rows: list[PayoutRow] = []
    first_use: dict[str, int] = {}
    for number, record in records:
        row_problems: list[str] = []
        reference = record.get(columns.reference, "")
        if not reference:
            row_problems.append(f"empty reference ({columns.reference})")
        elif len(reference) > MAX_REFERENCE_LENGTH:
            row_problems.append(f"reference is over {MAX_REFERENCE_LENGTH} characters")
        elif _CONTROL.search(reference):
            row_problems.append("reference has control characters")
        elif reference in first_use:
            row_problems.append(f"reference {reference!r} repeats row {first_use[reference]}")
        else:
            first_use[reference] = number
        currency = record.get(columns.currency, "")
        if currency not in MINOR_UNITS:
            row_problems.append(f"currency {currency!r} is not an ISO 4217 code")
        amount = _amount(record.get(columns.amount, ""), MINOR_UNITS.get(currency), amount_format)
        if isinstance(amount, str):
            row_problems.append(amount)
        value_date = _date(record.get(columns.date, ""))
        if isinstance(value_date, str):
            row_problems.append(value_date)
        if row_problems or isinstance(amount, str) or isinstance(value_date, str):
            problems.extend((number, problem) for problem in row_problems)
            continue
        rows.append(
            PayoutRow(
                number=number,
                reference=reference,
                amount=amount,
                currency=currency,
                value_date=value_date,
                fields=tuple((name, record.get(name, "")) for name in header),
            )
        )
    if problems:
        raise BatchInvalid(source, problems)
    return Batch(source=source, reference=batch_reference, rows=tuple(rows))


def _amount(text: str, exponent: int | None, amount_format: AmountFormat) -> int | str:
    """Integer minor units, or a reason why not."""
    if amount_format == "minor":
        if not _MINOR.fullmatch(text):
            return f"amount {text!r} is not a whole number of minor units"
        value = int(text)
    else:
        match = _MAJOR.fullmatch(text)
        if not match:
            return f"amount {text!r} is not a decimal amount"
        if exponent is None:
            return f"amount {text!r}: unknown currency, cannot read major units"
        whole, fraction = match.group(1), match.group(2) or ""
        if len(fraction) > exponent:
            return f"amount {text!r} has more than {exponent} decimal place(s) for its currency"
        value = int(whole + fraction.ljust(exponent, "0"))
    if value <= 0:
        return f"amount {text!r} must be greater than zero"
    if value > MAX_AMOUNT:
        return f"amount {text!r} is too large"
    return value


def _date(text: str) -> datetime.date | str:
    try:
        if len(text) != 10:
            raise ValueError(text)
        return datetime.date.fromisoformat(text)
    except ValueError:
        return f"value date {text!r} is not a date (YYYY-MM-DD)"
