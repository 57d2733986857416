"""Reading payout files: all or nothing, every problem named with its row."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

from idemclient.batch import Batch, BatchInvalid, read_batch
from idemclient.batch._staged import StagedRows, stage_batch

SAMPLE = Path(__file__).parents[2] / "examples" / "payroll-sample.csv"
HEADER = "ref,employee_id,name,account,amount,currency,value_date\n"


def write(tmp_path: Path, text: str, name: str = "payroll-2026-11.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems_of(path: Path, **options: object) -> list[tuple[int, str]]:
    with pytest.raises(BatchInvalid) as caught:
        read_batch(path, **options)  # type: ignore[arg-type]
    return caught.value.problems


def test_the_sample_file_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "payroll-sample.csv"
    shutil.copy(SAMPLE, path)
    batch = read_batch(path)
    assert batch.reference is batch.scope is None  # never from the file's name
    assert len(batch.rows) == 20
    first = batch.rows[0]
    assert (first.number, first.reference, first.amount, first.currency) == (
        1,
        "2026-11-E1000",
        357001,
        "GBP",
    )
    assert first.value_date == datetime.date(2026, 11, 30)
    assert first.payload() == {
        "ref": "2026-11-E1000",
        "employee_id": "E1000",
        "name": "Ada Lovelace",
        "account": "GB51TEST31234094394852",
        "amount": 357001,
        "currency": "GBP",
        "value_date": "2026-11-30",
        "reference": "2026-11-E1000",
    }


def test_batch_reference_is_the_scope_of_the_references(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "r1,E1,A,GB00,100,GBP,2026-11-30\n")
    batch = read_batch(path, batch_reference="2026-11")
    assert batch.reference == batch.scope == "2026-11"
    assert batch.rows[0].reference == "r1"  # the row's own; the server sees 2026-11/r1


def test_every_problem_is_listed_with_its_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER
        + "r1,E1,A,GB00,100,GBP,2026-11-30\n"  # fine
        + ",E2,B,GB00,100,GBP,2026-11-30\n"  # empty reference
        + "r1,E3,C,GB00,100,GBP,2026-11-30\n"  # duplicate reference
        + "r4,E4,D,GB00,12.50,GBP,2026-11-30\n"  # not minor units
        + "r5,E5,E,GB00,100,GPB,2026-11-30\n"  # typo in the currency
        + "r6,E6,F,GB00,100,GBP,2026-02-30\n"  # no such date
        + "r7,E7,G,GB00,0,GBP,2026-11-30\n"  # zero
        + "r8,E8,H,GB00,-5,GBP,30/11/2026\n"  # negative and a non-ISO date
        + "r9,E9,I,GB00,100,GBP\n",  # a field short
    )
    assert problems_of(path) == [(9, "has 6 fields; the header has 7")]  # shape first


def test_every_value_problem_is_listed_with_its_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER
        + "r1,E1,A,GB00,100,GBP,2026-11-30\n"
        + ",E2,B,GB00,100,GBP,2026-11-30\n"
        + "r1,E3,C,GB00,100,GBP,2026-11-30\n"
        + "r4,E4,D,GB00,12.50,GBP,2026-11-30\n"
        + "r5,E5,E,GB00,100,GPB,2026-11-30\n"
        + "r6,E6,F,GB00,100,GBP,2026-02-30\n"
        + "r7,E7,G,GB00,0,GBP,2026-11-30\n"
        + "r8,E8,H,GB00,-5,GBP,30/11/2026\n",
    )
    hint, *problems = problems_of(path)
    assert hint[0] == 0
    assert "--amount-format major" in hint[1]  # for the 12.50 of row 4
    assert [row for row, _ in problems] == [2, 3, 4, 5, 6, 7, 8, 8]
    reasons = dict(problems[:6])  # rows 2..7, one problem each
    assert "empty reference" in reasons[2]
    assert "repeats row 1" in reasons[3]
    assert "not a whole number of minor units" in reasons[4]
    assert "'GPB' is not an ISO 4217 code" in reasons[5]
    assert "'2026-02-30' is not a date" in reasons[6]
    assert "greater than zero" in reasons[7]
    assert [reason for row, reason in problems if row == 8] == [
        "amount '-5' is negative: an amount must be positive (greater than zero)",
        "value date '30/11/2026' is not a date (YYYY-MM-DD)",
    ]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        (HEADER, "no rows"),
        ("ref,amount,currency\nr1,100,GBP\n", "missing column(s): value_date"),
        ("ref,ref,amount,currency,value_date\nr,r,1,GBP,2026-01-01\n", "repeats column(s) ref"),
    ],
)
def test_file_level_problems(tmp_path: Path, text: str, reason: str) -> None:
    problems = problems_of(write(tmp_path, text))
    assert problems[0][0] == 0
    assert reason in problems[0][1]


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + "r1,E1,Zoë,GB00,100,GBP,2026-11-30\n").encode("latin-1"))
    assert "not UTF-8" in problems_of(path)[0][1]


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + "r1,E1,A,GB00,100,GBP,2026-11-30\n").encode())
    assert read_batch(path).rows[0].reference == "r1"


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("3570.01", "GBP", 357001),
        ("3570.1", "GBP", 357010),
        ("3570", "GBP", 357000),
        ("500", "JPY", 500),
        ("1.234", "KWD", 1234),
    ],
)
def test_major_units_become_minor_units(
    tmp_path: Path, amount: str, currency: str, minor: int
) -> None:
    path = write(tmp_path, HEADER + f"r1,E1,A,GB00,{amount},{currency},2026-11-30\n")
    assert read_batch(path, amount_format="major").rows[0].amount == minor


@pytest.mark.parametrize(("amount", "currency"), [("1.001", "GBP"), ("1.5", "JPY"), ("1,5", "EUR")])
def test_major_units_with_too_many_decimals_are_refused(
    tmp_path: Path, amount: str, currency: str
) -> None:
    path = write(tmp_path, HEADER + f'r1,E1,A,GB00,"{amount}",{currency},2026-11-30\n')
    assert problems_of(path, amount_format="major")[0][0] == 1


def test_columns_can_be_renamed(tmp_path: Path) -> None:
    path = write(tmp_path, "id,sum,ccy,date\nrow-1,250,EUR,2026-12-01\n")
    batch = read_batch(
        path, reference_column="id", amount_column="sum", currency_column="ccy", date_column="date"
    )
    assert batch.rows[0].payload()["reference"] == "row-1"


def test_records_from_python_are_validated_the_same_way() -> None:
    good = Batch.from_records(
        [{"ref": "a", "amount": 100, "currency": "EUR", "value_date": "2026-12-01"}],
        reference="run-1",
    )
    assert good.rows[0].amount == 100
    with pytest.raises(BatchInvalid, match="row 1"):
        Batch.from_records(
            [{"ref": "a", "amount": "x", "currency": "EUR", "value_date": "2026-12-01"}],
            reference="run-1",
        )


@pytest.mark.parametrize(
    ("amount", "amount_format"),
    [("-100", "minor"), ("-0", "minor"), ("-3570.01", "major"), ("-5", "major")],
)
def test_a_negative_amount_is_told_to_be_positive(
    tmp_path: Path, amount: str, amount_format: str
) -> None:
    path = write(tmp_path, HEADER + f"r1,E1,A,GB00,{amount},GBP,2026-11-30\n")
    [(row, reason)] = problems_of(path, amount_format=amount_format)
    assert (row, reason) == (
        1,
        f"amount '{amount}' is negative: an amount must be positive (greater than zero)",
    )


@pytest.mark.parametrize(
    ("delimiter", "name"), [(";", "semicolon"), ("\t", "tab"), ("|", "vertical bar")]
)
def test_a_file_separated_by_another_character_is_named(
    tmp_path: Path, delimiter: str, name: str
) -> None:
    text = (HEADER + "r1,E1,A,GB00,100,GBP,2026-11-30\n").replace(",", delimiter)
    path = write(tmp_path, text)
    [(row, reason)] = problems_of(path)
    assert row == 0
    assert f"looks {name}-separated" in reason
    assert "--delimiter" in reason
    assert read_batch(path, delimiter=delimiter).rows[0].amount == 100


def test_a_comma_file_read_as_semicolons_is_named_too(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "r1,E1,A,GB00,100,GBP,2026-11-30\n")
    assert "looks comma-separated" in problems_of(path, delimiter=";")[0][1]
    with pytest.raises(ValueError, match="one character"):
        read_batch(path, delimiter=";;")


def test_rows_kept_on_disk_read_back_as_they_were_checked(tmp_path: Path) -> None:
    lines = ["ref,name,amount,currency,value_date"] + [
        # yen have no minor units; the others two decimals
        f"R{n},Zoë {n},{n + 1},JPY,2026-11-30"
        if n % 7 == 0
        else f"R{n},Zoë {n},{n + 1}.5{n % 10},EUR,2026-11-30"
        for n in range(2_345)  # more than one page of rows
    ]
    (tmp_path / "p.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = {"batch_reference": "2026-11", "amount_format": "major"}
    held = read_batch(tmp_path / "p.csv", **options)  # type: ignore[arg-type]
    staged = stage_batch(tmp_path / "p.csv", **options)
    assert isinstance(staged.rows, StagedRows)
    assert (staged.source, staged.scope) == (held.source, held.scope)
    assert len(staged.rows) == len(held.rows) == 2_345
    assert list(staged.rows) == list(held.rows)
    assert staged.rows[0] == held.rows[0]
    assert staged.rows[-1] == held.rows[-1]
    assert list(staged.rows[1_000:1_003]) == list(held.rows[1_000:1_003])
    assert list(staged.rows[5:1:-2]) == list(held.rows[5:1:-2])
    with pytest.raises(IndexError):
        staged.rows[2_345]
    (tmp_path / "bad.csv").write_text("ref,amount,currency,value_date\nR1,-5,EUR,2026-11-30\n")
    with pytest.raises(BatchInvalid, match="negative"):
        stage_batch(tmp_path / "bad.csv")
    # A repeated reference is found by the rows' own index on disk, as in memory.
    lines.append(lines[1500].replace(".5", ".6", 1))
    (tmp_path / "p.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(BatchInvalid) as staged_error:
        stage_batch(tmp_path / "p.csv", **options)
    with pytest.raises(BatchInvalid) as held_error:
        read_batch(tmp_path / "p.csv", **options)  # type: ignore[arg-type]
    assert staged_error.value.problems == held_error.value.problems
    assert staged_error.value.problems == [(2346, "reference 'R1499' repeats row 1500")]
