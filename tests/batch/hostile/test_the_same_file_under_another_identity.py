"""A row whose very content (every column, the value date included) the store holds
under another reference is the same payment: the file run again with a scope added,
removed or changed (`--batch-ref`), or with its references read from another column
(`--ref-column`), is refused before anything is sent (exit 2), naming the row it
repeats and how to go on; `--new-payments` says the rows are new payments. A new
month's file, with the same employee ids in a new scope and a new value date, is paid."""

from __future__ import annotations

from pathlib import Path

import pytest

from idemclient.testing import LiveServer

from ..support import command, payroll, read_report, run

ROWS = 4


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((), ("--batch-ref", "2026-11")),
        (("--batch-ref", "2026-11"), ()),
        (("--batch-ref", "2026-11"), ("--batch-ref", "nov-2026")),
        (("--batch-ref", "a/b"), ("--batch-ref", "a")),  # a scope may hold a "/"
        ((), ("--ref-column", "employee_id")),
        (("--ref-column", "employee_id", "--batch-ref", "2026-11"), ()),
    ],
    ids=["scope added", "scope removed", "scope changed", "scope cut", "ref column", "both"],
)
def test_the_same_file_under_another_identity_is_refused_not_paid_again(
    live: LiveServer, tmp_path: Path, first: tuple[str, ...], second: tuple[str, ...]
) -> None:
    # References 2026-11-E1000..., employee ids E1000... in a column of their own.
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "batches.db"
    done = run(command(live.url, tmp_path / "nov.csv", store, *first))
    assert done.returncode == 0, done.stderr
    assert len(live.server.ledger()) == ROWS
    # The same file, the same store, the same rows: only the identity options changed.
    report = tmp_path / "r.csv"
    again = run(command(live.url, tmp_path / "nov.csv", store, *second, report=report))
    assert len(live.server.ledger()) == ROWS, again.stdout + again.stderr
    assert again.returncode == 2, again.stdout + again.stderr
    assert "the very same payment as" in again.stderr
    assert "--new-payments" in again.stderr
    lines = read_report(report)  # written, each row with why
    assert [line["state"] for line in lines] == ["not_sent"] * ROWS
    assert all("the very same payment as" in line["reason"] for line in lines)
    # Run as it was first run, it is done.
    same = run(command(live.url, tmp_path / "nov.csv", store, *first))
    assert same.returncode == 0, same.stdout + same.stderr
    assert len(live.server.ledger()) == ROWS


def test_new_payments_says_identical_rows_are_paid_again(live: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "nov.csv").write_text(payroll(ROWS, prefix="E"))
    store = tmp_path / "batches.db"
    assert run(command(live.url, tmp_path / "nov.csv", store)).returncode == 0
    again = run(
        command(live.url, tmp_path / "nov.csv", store, "--batch-ref", "bonus", "--new-payments")
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(live.server.ledger()) == 2 * ROWS


def test_next_months_file_with_the_same_employee_ids_is_paid(
    live: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "nov.csv").write_text(payroll(ROWS, prefix="E", value_date="2026-11-30"))
    (tmp_path / "dec.csv").write_text(payroll(ROWS, prefix="E", value_date="2026-12-31"))
    store = tmp_path / "batches.db"
    nov = run(command(live.url, tmp_path / "nov.csv", store, "--batch-ref", "2026-11"))
    assert nov.returncode == 0, nov.stderr
    # The same amounts and accounts, another value date: another payment.
    dec = run(command(live.url, tmp_path / "dec.csv", store, "--batch-ref", "2026-12"))
    assert dec.returncode == 0, dec.stdout + dec.stderr
    assert len(live.server.ledger()) == 2 * ROWS
