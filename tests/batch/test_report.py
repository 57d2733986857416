"""The report file: checked before anything is sent, written whole, safe to open."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
from pathlib import Path

import pytest

from idemclient.batch import ExitCode, Report, ReportRow
from idemclient.batch._lines import Lines, Stored
from idemclient.batch._report import check_report_path


def line(
    ref: str = "E1", *, state: str = "succeeded", status: int | None = 201, reason: str = "sent now"
) -> ReportRow:
    return ReportRow(1, ref, "k-1", state, status, "po_1", 1, False, reason)


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+441234", "'+441234"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tTAB", "'\tTAB"),
        ("E-1", "E-1"),  # only a leading character counts
        ("2026-11-E1", "2026-11-E1"),
    ],
)
def test_csv_cells_a_spreadsheet_would_run_are_written_as_text(
    tmp_path: Path, cell: str, written: str
) -> None:
    Report("b", (line(cell, reason=cell),)).write(tmp_path / "r.csv")
    with (tmp_path / "r.csv").open(newline="") as f:
        [row] = list(csv.DictReader(f))
    assert (row["ref"], row["reason"]) == (written, written)
    Report("b", (line(cell),)).write(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["ref"] == cell  # JSON as is


def test_a_report_is_replaced_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.csv"
    target.write_text("the previous report\n")

    def broken(_src: str, _dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="No space"):
        Report("b", (line(),)).write(target)
    assert target.read_text() == "the previous report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]  # no temporary file left
    monkeypatch.undo()
    Report("b", (line(),)).write(target)
    assert target.read_text().startswith("row,ref,key")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
@pytest.mark.parametrize("name", ["r.csv", "r.json"])
def test_the_report_file_mode_follows_the_umask(
    tmp_path: Path, umask: int, mode: int, name: str
) -> None:
    # A report is for people: readable as any file this user writes (not the store's
    # 0600), and as the umask says, whether it is new or replaces an earlier one.
    target = tmp_path / name
    before = os.umask(umask)
    try:
        Report("b", (line(),)).write(target)
        assert target.stat().st_mode & 0o777 == mode
        target.chmod(0o600)
        Report("b", (line(),)).write(target)
    finally:
        os.umask(before)
    assert target.stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_the_json_report_has_the_batchs_metadata(tmp_path: Path) -> None:
    report = Report(
        "2026-11",
        (line(), line("E2", state="failed", status=400)),
        metadata={"source": "payroll.csv", "url": "https://psp.example"},
        notes=("1 found on the server by look-up (recorded, not sent)",),
    )
    report.write(tmp_path / "r.json")
    written = json.loads((tmp_path / "r.json").read_text())
    meta = written["batch"]
    assert (meta["source"], meta["url"], meta["exit_code"], meta["interrupted"]) == (
        "payroll.csv", "https://psp.example", 4, False,
    )  # fmt: skip
    assert meta["counts"]["failed"] == 1
    assert meta["summary"] == report.summary()
    assert "1 found on the server by look-up" in meta["summary"]
    assert [row["ref"] for row in written["rows"]] == ["E1", "E2"]


@pytest.mark.parametrize(
    ("rows", "interrupted", "code"),
    [
        ((line(),), False, ExitCode.OK),
        ((line(state="failed", status=400),), False, ExitCode.FAILED),
        (
            (line(state="failed", status=400), line(state="indeterminate")),
            False,
            ExitCode.RUN_AGAIN,
        ),
        (
            (line(state="not_sent", status=401), line(state="indeterminate")),
            False,
            ExitCode.BAD_INPUT,
        ),
        ((line(state="not_sent", status=401),), True, ExitCode.INTERRUPTED),
        # a 401 after an attempt that may have been applied: unsettled, run again
        ((line(state="indeterminate", status=401),), False, ExitCode.RUN_AGAIN),
        ((line(state="in_flight", status=401),), False, ExitCode.RUN_AGAIN),
        ((line(state="pending", status=401),), False, ExitCode.BAD_INPUT),
    ],
)
def test_exit_codes(rows: tuple[ReportRow, ...], interrupted: bool, code: ExitCode) -> None:
    assert Report("b", rows, interrupted=interrupted).exit_code is code


def test_a_refused_batch_exits_2_whatever_its_rows_say(tmp_path: Path) -> None:
    report = Report("b", (line(), line("E2", state="not_sent", status=None)), refused=True)
    assert report.exit_code is ExitCode.BAD_INPUT
    assert "refused before anything was sent" in report.summary()
    report.write(tmp_path / "r.json")
    meta = json.loads((tmp_path / "r.json").read_text())["batch"]
    assert (meta["refused"], meta["exit_code"]) == (True, 2)


def test_only_rows_nothing_was_applied_for_count_as_refused_credentials() -> None:
    report = Report(
        "b",
        (
            line("E1", state="not_sent", status=401),
            line("E2", state="indeterminate", status=401),
            line("E3", state="indeterminate", status=None),
        ),
    )
    assert (report.credentials_refused, report.credentials_refused_maybe_applied) == (1, 1)
    summary = report.summary()
    assert "nothing was applied for the 1 row(s) it refused" in summary
    assert "for 1 row(s) after an attempt that may have been applied" in summary


def test_refused_credentials_say_check_the_token_not_run_again() -> None:
    summary = Report("b", (line(state="not_sent", status=401),)).summary()
    assert "check the token" in summary
    assert "run the same command again" not in summary


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("report.txt", ".csv or .json"),
        ("missing/report.csv", "does not exist"),
        ("input.csv", "itself"),
        ("batches.db.csv", None),
        ("a-directory.csv", "is a directory"),
    ],
)
def test_a_report_path_that_cannot_be_written_is_refused_first(
    tmp_path: Path, name: str, why: str | None
) -> None:
    (tmp_path / "input.csv").write_text("ref\n")
    (tmp_path / "a-directory.csv").mkdir()
    target = tmp_path / name
    if why is None:
        check_report_path(target, not_these=(tmp_path / "input.csv",))
        assert not target.exists()  # checked, not written
        return
    with pytest.raises(ValueError, match=why):
        check_report_path(target, not_these=(tmp_path / "input.csv",))
    assert (tmp_path / "input.csv").read_text() == "ref\n"


def test_the_summary_counts_every_row_whatever_its_state() -> None:
    # A row another process is sending (in flight), and one left as recorded (pending),
    # are counted too: the parts of the summary add up to its rows.
    rows = (
        line("E1"),
        line("E2", state="in_flight", status=None),
        line("E3", state="pending", status=None),
        line("E4", state="indeterminate", status=None),
    )
    summary = Report("b", rows, interrupted=True).summary()
    assert "4 rows" in summary
    parts = re.findall(
        r"(\d+) (succeeded|indeterminate|not sent|failed|in flight|pending)", summary
    )
    assert sum(int(n) for n, _ in parts) == 4, summary


@pytest.mark.parametrize(
    ("signum", "code"),
    [(None, 130), (signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
)
def test_a_run_stopped_by_a_signal_exits_128_and_its_number(
    tmp_path: Path, signum: int | None, code: int
) -> None:
    report = Report("b", (line(),), interrupted=True, signal=signum)
    assert report.exit_code == code
    report.write(tmp_path / "r.json")
    document = json.loads((tmp_path / "r.json").read_text())["batch"]
    assert document["exit_code"] == code
    assert document["signal"] == (None if signum is None else signal.Signals(signum).name)


def many(n: int) -> list[ReportRow]:
    return [
        ReportRow(i + 1, f"E{i}", f"k{i}", "succeeded" if i % 3 else "failed", 201, f"po_{i}",
                  1, i % 2 == 0, f"=reason {i}", already_done=i % 5 == 0)
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("n", [0, 1, 7])
def test_a_report_written_a_row_at_a_time_is_the_document_itself(tmp_path: Path, n: int) -> None:
    report = Report(batch="b", rows=tuple(many(n)), metadata={"source": "b.csv"}, notes=("x",))
    report.write(tmp_path / "r.json")
    assert (tmp_path / "r.json").read_text() == json.dumps(report.document(), indent=2) + "\n"


def test_a_report_read_from_disk_writes_and_counts_as_one_held_in_memory(
    tmp_path: Path,
) -> None:
    rows = many(2_345)  # more than one page of lines
    lines = Lines()
    for index in reversed(range(len(rows))):  # as rows finish, in any order
        lines.put(index, rows[index])
    stored = Report(batch="b", rows=Stored(lines, len(rows)), metadata={"source": "b.csv"})
    held = Report(batch="b", rows=tuple(rows), metadata={"source": "b.csv"})
    assert list(stored.rows) == rows
    assert (stored.rows[0], stored.rows[-1], stored.rows[10:12]) == (rows[0], rows[-1], rows[10:12])
    assert stored.counts() == held.counts()
    assert (stored.exit_code, stored.summary()) == (held.exit_code, held.summary())
    for name in ("r.csv", "r.json"):
        stored.write(tmp_path / f"stored-{name}")
        held.write(tmp_path / f"held-{name}")
        assert (tmp_path / f"stored-{name}").read_bytes() == (
            tmp_path / f"held-{name}"
        ).read_bytes()
    assert stored.materialized().rows == tuple(rows)
    lines.close()
