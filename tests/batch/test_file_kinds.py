"""Files that are not what the command reads (CSV, UTF-8, a header naming the columns):
each is told what it is, where, and how to export the file the command reads.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import pytest

from idemclient.batch import BatchInvalid, read_batch

from .support import run

HEADER = "ref,employee_id,name,account,amount,currency,value_date\n"
ROW = "r{n},E{n},Ada,GB00,100,GBP,2026-11-30\n"


def problems_of(path: Path, **options: object) -> list[tuple[int, str]]:
    with pytest.raises(BatchInvalid) as caught:
        read_batch(path, **options)  # type: ignore[arg-type]
    return caught.value.problems


def rows(count: int) -> str:
    return "".join(ROW.format(n=n) for n in range(count))


@pytest.mark.parametrize("line", [2, 9, 25_002])
def test_a_byte_that_is_not_utf8_is_named_at_its_exact_line(tmp_path: Path, line: int) -> None:
    # The header is line 1; the Latin-1 "é" is on `line`, far past the decoder's first
    # chunk for 25,002 (where the line number was 65 lines off).
    before = rows(line - 2).encode()
    bad = b"r-x,E-x,Jos\xe9,GB00,100,GBP,2026-11-30\n"
    path = tmp_path / "latin1.csv"
    path.write_bytes(HEADER.encode() + before + bad + rows(3).encode())
    [(row, reason)] = problems_of(path)
    assert row == 0
    assert f"line {line} " in reason, reason
    assert "byte 0xe9" in reason
    assert "CSV UTF-8" in reason  # how to save it as the command reads it


def test_a_bad_byte_after_a_byte_order_mark_counts_the_first_line_as_one(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + HEADER.encode() + b"r1,E1,Zo\xeb,GB00,1,GBP,2026-11-30\n")
    assert "line 2 " in problems_of(path)[0][1]


def _workbook() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        book.writestr("[Content_Types].xml", "<Types/>")
        book.writestr("xl/workbook.xml", "<workbook/>")
    return out.getvalue()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (_workbook(), "Excel workbook (.xlsx)"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "Excel 97-2003 workbook (.xls)"),
        ("\ufeff" + HEADER + rows(1), "UTF-16"),  # Excel's "Unicode Text"
    ],
    ids=["xlsx", "xls", "utf-16"],
)
def test_a_workbook_or_utf16_file_is_named_with_how_to_export_csv_utf8(
    tmp_path: Path, content: bytes | str, named: str
) -> None:
    path = tmp_path / "payroll.csv"  # named .csv: it is the content that tells
    path.write_bytes(content.encode("utf-16") if isinstance(content, str) else content)
    [(row, reason)] = problems_of(path)
    assert row == 0
    assert named in reason, reason
    assert "CSV UTF-8" in reason


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_named_too(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "payroll.csv"
    path.write_bytes((HEADER + rows(1)).encode(encoding))
    assert "UTF-16" in problems_of(path)[0][1]


@pytest.mark.parametrize("hint", ["sep=,", "sep=;", '"sep=,"'])
def test_excels_separator_line_is_named_not_read_as_the_header(tmp_path: Path, hint: str) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(f"{hint}\n" + HEADER + rows(1))
    [(row, reason)] = problems_of(path)
    assert row == 0
    assert "sep=" in reason, reason
    assert "Excel" in reason
    assert "CSV UTF-8" in reason


def test_decimal_amounts_read_as_minor_units_hint_the_major_format(tmp_path: Path) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(HEADER + "r1,E1,A,GB00,12.5,GBP,2026-11-30\nr2,E2,B,GB00,3.75,GBP,2026-11-30\n")
    problems = problems_of(path)
    hints = [reason for row, reason in problems if "--amount-format major" in reason]
    assert len(hints) == 1  # said once for the file, not for every row
    assert [row for row, _ in problems if row] == [1, 2]
    assert read_batch(path, amount_format="major").rows[0].amount == 1250


def test_whole_minor_units_give_no_major_format_hint(tmp_path: Path) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(HEADER + "r1,E1,A,GB00,12x,GBP,2026-11-30\n")
    assert not any("--amount-format" in reason for _, reason in problems_of(path))


@pytest.mark.parametrize(
    ("header", "option", "found"),
    [
        ("REF,amount,currency,value_date", "--ref-column", "REF"),
        ("ref,Amount,currency,value_date", "--amount-column", "Amount"),
        ("ref,amount,Currency,value_date", "--currency-column", "Currency"),
        ("ref,amount,currency,Value_Date", "--date-column", "Value_Date"),
    ],
)
def test_a_column_named_in_another_case_gets_did_you_mean(
    tmp_path: Path, header: str, option: str, found: str
) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(header + "\nr1,100,GBP,2026-11-30\n")
    [(row, reason)] = problems_of(path)
    assert row == 0
    assert f"did you mean {found!r}" in reason, reason
    assert f"{option} {found}" in reason


def test_the_command_says_what_a_workbook_is(tmp_path: Path) -> None:
    path = tmp_path / "payroll.xlsx"
    path.write_bytes(_workbook())
    argv = [
        sys.executable, "-m", "idemclient", "batch", "submit", str(path),
        "--url", "http://127.0.0.1:9", "--token", "t", "--store", str(tmp_path / "s.db"),
    ]  # fmt: skip
    done = run(argv)
    assert done.returncode == 2, done.stderr
    assert "Excel workbook (.xlsx)" in done.stderr
    assert not (tmp_path / "s.db").exists()  # refused before the store is opened
