"""Reading a payout file: every row checked before anything is recorded or sent.

A file is accepted whole or not at all. Every problem found is reported with its row
number (data rows count from 1; row 0 is the file itself), so that a person can fix
them all in one pass.

Every cell is read in Unicode NFC (`José` as one code point for é, however it was
saved): two forms of one text are one text, and one reference.

A batch has no identity of its own: a row is its reference, within the batch's scope
when one is given (`batch_reference`, for references that repeat across files, such as
an employee id every month). Nothing is taken from the file's name or path, so a
renamed or copied file is the same rows.
"""

from __future__ import annotations

import csv
import datetime
import os
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from .._errors import BatchInvalid
from ._currencies import MINOR_UNITS
from ._sniff import HEAD, bad_byte, not_csv

__all__ = ["AmountFormat", "Batch", "PayoutRow", "read_batch"]

AmountFormat = Literal["minor", "major"]

#: The largest amount a JSON number carries exactly in every common parser (2**53 - 1).
MAX_AMOUNT = 9_007_199_254_740_991
MAX_REFERENCE_LENGTH = 255
_MINOR = re.compile(r"[0-9]+")
_MAJOR = re.compile(r"([0-9]+)(?:\.([0-9]+))?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: An amount written in major units, with its decimals (12.5, 3570.01).
_DECIMAL = re.compile(r"[0-9]*[.,][0-9]+")
#: The option that names each column, on the command line and from Python.
_OPTIONS = {
    "reference": ("--ref-column", "reference_column"),
    "amount": ("--amount-column", "amount_column"),
    "currency": ("--currency-column", "currency_column"),
    "date": ("--date-column", "date_column"),
}


@dataclass(frozen=True, slots=True)
class PayoutRow:
    """One validated row. `values` keeps every column as read, in the order of
    `columns` (one tuple shared by every row of a batch)."""

    number: int
    reference: str
    amount: int
    currency: str
    value_date: datetime.date
    columns: tuple[str, ...]
    values: tuple[str, ...]

    def payload(self, reference: str | None = None) -> dict[str, object]:
        """The JSON body: every column, with the amount in integer minor units and
        `reference` (the row's own by default; its scoped one in a scoped batch) as
        `reference`."""
        body: dict[str, object] = dict(zip(self.columns, self.values, strict=True))
        body.update(
            amount=self.amount,
            currency=self.currency,
            value_date=self.value_date.isoformat(),
            reference=self.reference if reference is None else reference,
        )
        return body


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch: its rows, and the scope of their references.

    `reference` is the scope (`--batch-ref`): None, the default, when every reference
    stands on its own; a name such as ``2026-11`` when references repeat across files.
    In a scope, a row's end-to-end reference is ``<scope>/<reference>``.
    """

    source: str
    reference: str | None
    #: a tuple; from the command, rows kept on disk and read back a chunk at a time
    #: (`_staged`)
    rows: Sequence[PayoutRow]

    @property
    def scope(self) -> str | None:
        """The scope of the rows' references (the same as `reference`)."""
        return self.reference

    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, object]],
        *,
        reference: str | None = None,
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
        rows, problems = _validate(
            reference,
            header,
            ((n, [r.get(name, "") for name in header]) for n, r in enumerate(listed, start=1)),
            _Columns(reference_column, amount_column, currency_column, date_column),
            amount_format,
        )
        if problems:
            raise BatchInvalid(source, problems)
        return cls(source=source, reference=reference, rows=rows)


@dataclass(frozen=True, slots=True)
class _Columns:
    reference: str
    amount: str
    currency: str
    date: str


class RowSink(Protocol):
    """Where the rows of a file go as they are checked (`read_into`), and where each
    reference was first met (its row number), to find the ones that repeat."""

    @property
    def first_use(self) -> MutableMapping[str, int]: ...

    def append(self, row: PayoutRow) -> None: ...

    def done(self) -> Sequence[PayoutRow]:
        """Every row appended, in order."""
        ...


class _Held(list[PayoutRow]):
    """Rows held in memory, as `read_batch` gives them (a tuple)."""

    def __init__(self) -> None:
        super().__init__()
        self.first_use: dict[str, int] = {}

    def done(self) -> tuple[PayoutRow, ...]:
        return tuple(self)


def read_batch(
    path: str | os.PathLike[str],
    *,
    batch_reference: str | None = None,
    reference_column: str = "ref",
    amount_column: str = "amount",
    currency_column: str = "currency",
    date_column: str = "value_date",
    amount_format: AmountFormat = "minor",
    delimiter: str = ",",
) -> Batch:
    """Read and validate a CSV payout file (UTF-8, a header row, `delimiter`-separated).

    `batch_reference` is the scope of the rows' references (see `Batch`); none by
    default. The file's name plays no part: a renamed copy is the same rows. Raises
    `BatchInvalid` listing every problem; raises `OSError` when the file cannot be read.
    """
    return read_into(
        path,
        _Held(),
        batch_reference=batch_reference,
        reference_column=reference_column,
        amount_column=amount_column,
        currency_column=currency_column,
        date_column=date_column,
        amount_format=amount_format,
        delimiter=delimiter,
    )


def read_into(
    path: str | os.PathLike[str],
    into: RowSink,
    *,
    batch_reference: str | None = None,
    reference_column: str = "ref",
    amount_column: str = "amount",
    currency_column: str = "currency",
    date_column: str = "value_date",
    amount_format: AmountFormat = "minor",
    delimiter: str = ",",
) -> Batch:
    """`read_batch`, its rows appended to `into` as they are checked (rows of a file
    with problems are appended too, and the file is refused)."""
    if len(delimiter) != 1 or delimiter in '\r\n"' or delimiter.isalnum():
        raise ValueError(f"the delimiter must be one character such as ';', not {delimiter!r}")
    file = Path(path)
    source = str(file)
    columns = _Columns(reference_column, amount_column, currency_column, date_column)
    shape: list[tuple[int, str]] = []
    with file.open("rb") as raw:
        kind = not_csv(raw.read(HEAD))
    if kind is not None:
        raise BatchInvalid(source, [(0, kind)])
    # Streamed, row by row: a file of a hundred thousand rows is never held twice.
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        lines = (cells for cells in reader if any(cell.strip() for cell in cells))
        try:
            first = next(lines, None)
            if first is None:
                raise BatchInvalid(
                    source, [(0, "is empty: a header row and at least one row are needed")]
                )
            header = [name.strip() for name in first]
            other = _other_delimiter(header, delimiter)
            if other is not None:
                raise BatchInvalid(source, [(0, other)])
            if len(set(header)) != len(header):
                duplicated = sorted({name for name in header if header.count(name) > 1})
                raise BatchInvalid(
                    source, [(0, f"header repeats column(s) {', '.join(duplicated)}")]
                )

            def records() -> Iterator[tuple[int, list[str]]]:
                for number, cells in enumerate(lines, start=1):
                    if len(cells) != len(header):
                        shape.append(
                            (number, f"has {len(cells)} fields; the header has {len(header)}")
                        )
                        continue
                    yield number, [cell.strip() for cell in cells]

            rows, problems = _validate(
                batch_reference, header, records(), columns, amount_format, into
            )
        except UnicodeDecodeError as exc:
            # Where the parser is says little: the decoder reads ahead in chunks.
            raise BatchInvalid(source, [(0, bad_byte(file))]) from exc
        except csv.Error as exc:
            raise BatchInvalid(source, [(0, f"is not valid CSV: {exc}")]) from exc
    if shape or problems:  # a row of the wrong shape hides its values' problems
        raise BatchInvalid(source, shape or problems)
    return Batch(source=source, reference=batch_reference, rows=rows)


_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "vertical bar", ",": "comma"}


def _other_delimiter(header: Sequence[str], delimiter: str) -> str | None:
    """Why a header read as one column looks separated by another character, or None."""
    if len(header) != 1:
        return None
    for char, name in _DELIMITERS.items():
        if char != delimiter and char in header[0]:
            option = "\\t" if char == "\t" else char
            return (
                f"looks {name}-separated, not separated by {delimiter!r}: its header is one"
                f" column, {header[0][:60]!r}. Read it with --delimiter '{option}'"
                f" (delimiter='{option}' from Python)"
            )
    return None


def _validate(
    scope: str | None,
    header: Sequence[str],
    records: Iterable[tuple[int, Sequence[str]]],
    columns: _Columns,
    amount_format: AmountFormat,
    into: RowSink | None = None,
) -> tuple[Sequence[PayoutRow], list[tuple[int, str]]]:
    """The valid rows (appended to `into`, a list by default), and every problem found
    (row 0: the file itself)."""
    problems: list[tuple[int, str]] = []
    if scope is not None and (not scope.strip() or _CONTROL.search(scope)):
        problems.append((0, f"batch reference {scope!r} is empty or has control characters"))
    # In a scope, the reference the server sees is "<scope>/<reference>".
    room = MAX_REFERENCE_LENGTH - (0 if scope is None else len(scope) + 1)
    required = (columns.reference, columns.amount, columns.currency, columns.date)
    missing = [name for name in required if name not in header]
    if missing:
        hints = "".join(f"; {hint}" for hint in _near_misses(columns, missing, header))
        problems.append(
            (0, f"missing column(s): {', '.join(missing)} (found: {', '.join(header)}){hints}")
        )
        return (), problems
    shared = tuple(header)
    at_ref, at_amount, at_currency, at_date = (shared.index(name) for name in required)
    rows: RowSink = _Held() if into is None else into
    # Where each reference was first met: kept where the rows are (on disk for a file
    # the command reads: a million references are not held either).
    first_use = rows.first_use
    seen = 0
    #: the first amount with decimals, in a file read as minor units
    decimals = ""
    for number, read in records:
        seen += 1
        # In Unicode NFC: a spreadsheet that saved "José" decomposed (e and a combining
        # accent) saved the same name, and the same reference (see `_identity`).
        values = [_nfc(value) for value in read]
        # Columns that repeat across a file (currency, date) share one string: a
        # hundred thousand rows hold a few copies, not a hundred thousand.
        values[at_currency] = sys.intern(values[at_currency])
        values[at_date] = sys.intern(values[at_date])
        row_problems: list[str] = []
        reference = values[at_ref]
        if not reference:
            row_problems.append(f"empty reference ({columns.reference})")
        elif len(reference) > room:
            row_problems.append(
                f"reference is over {MAX_REFERENCE_LENGTH} characters"
                + ("" if scope is None else f" with its scope ({scope}/)")
            )
        elif _CONTROL.search(reference):
            row_problems.append("reference has control characters")
        elif reference in first_use:
            row_problems.append(f"reference {reference!r} repeats row {first_use[reference]}")
        else:
            first_use[reference] = number
        currency = values[at_currency]
        if currency not in MINOR_UNITS:
            row_problems.append(f"currency {currency!r} is not an ISO 4217 code")
        amount = _amount(values[at_amount], MINOR_UNITS.get(currency), amount_format)
        if isinstance(amount, str):
            row_problems.append(amount)
            if amount_format == "minor" and not decimals and _DECIMAL.fullmatch(values[at_amount]):
                decimals = values[at_amount]
        value_date = _date(values[at_date])
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
                columns=shared,
                values=tuple(values),
            )
        )
    if not seen:
        problems.append((0, "has a header but no rows"))
    if decimals:
        problems.insert(
            0,
            (
                0,
                f"has amounts with decimals ({decimals!r}...) where whole minor units are"
                " read (357001 for 3570.01): if its amounts are in major units, read it"
                " with --amount-format major (amount_format='major' from Python)",
            ),
        )
    return rows.done(), problems


def _nfc(text: str) -> str:
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def _near_misses(columns: _Columns, missing: Sequence[str], header: Sequence[str]) -> list[str]:
    """For each missing column that the header has in another case (or with other
    spaces), a "did you mean", with the option that names it."""
    hints = []
    for role, (option, keyword) in _OPTIONS.items():
        wanted = getattr(columns, role)
        if wanted not in missing:
            continue
        near = [name for name in header if _folded(name) == _folded(wanted)]
        if near:
            found = near[0]
            hints.append(
                f"did you mean {found!r} for the column {wanted!r}? Column names are"
                f" compared exactly: rename it in the header, or pass {option} {found}"
                f" ({keyword}={found!r} from Python)"
            )
    return hints


def _folded(name: str) -> str:
    return " ".join(name.replace("_", " ").replace("-", " ").split()).casefold()


def _amount(text: str, exponent: int | None, amount_format: AmountFormat) -> int | str:
    """Integer minor units, or a reason why not."""
    if text.startswith("-") and (_MINOR.fullmatch(text[1:]) or _MAJOR.fullmatch(text[1:])):
        return f"amount {text!r} is negative: an amount must be positive (greater than zero)"
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
