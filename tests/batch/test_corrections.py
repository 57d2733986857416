"""A row refused for its content (a 400 that cannot have been applied) or never sent,
then corrected in the file, is sent again with its corrected content, once, and the run
says so; the server's reason is in the report. A row that was applied, or may have
been, is still never paid again. Through the command, against the reference server on
127.0.0.1, with the ledger counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from idemclient.testing import LiveServer

from .support import command, exactly_once, key_of, read_report, run

#: An HR export's columns the server sets itself: refused with a 400, nothing applied.
EXPORT = "ref,id,status,amount,currency,value_date\n{rows}"
FIXED = "ref,amount,currency,value_date\n{rows}"
REFS = ["HR-1", "HR-2", "HR-3"]


def export(tmp_path: Path, template: str = EXPORT, amount: int = 100) -> Path:
    rows = "".join(
        (f"{ref},{n},active," if template is EXPORT else f"{ref},")
        + f"{amount + n},GBP,2026-11-30\n"
        for n, ref in enumerate(REFS)
    )
    path = tmp_path / "payroll.csv"
    path.write_text(template.format(rows=rows))
    return path


def submit(live: LiveServer, file: Path, store: Path, *extra: str, report: Path | None = None):  # type: ignore[no-untyped-def]
    return run(command(live.url, file, store, *extra, report=report))


def test_a_row_refused_for_its_content_is_paid_once_its_content_corrected(
    live: LiveServer, tmp_path: Path
) -> None:
    store = tmp_path / "batches.db"
    refused = submit(live, export(tmp_path), store, report=tmp_path / "r1.csv")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    first = read_report(tmp_path / "r1.csv")
    # The server's reason, from its answer's body, in the report.
    assert all("these fields are set by the server: id, status" in r["reason"] for r in first)
    assert live.server.ledger() == ()
    fixed = submit(live, export(tmp_path, FIXED), store, report=tmp_path / "r2.csv")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "corrected in the file" in fixed.stdout  # the run says so
    second = read_report(tmp_path / "r2.csv")
    assert all("corrected in the file since: sent under a new key" in r["reason"] for r in second)
    # A key of its own: the refused one may be answered with its refusal again.
    assert all(a["key"] != b["key"] for a, b in zip(first, second, strict=True))
    exactly_once(live, REFS)
    again = submit(live, export(tmp_path, FIXED), store)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 succeeded (3 already done)" in again.stdout
    # Another machine, its store empty, runs the corrected file: found, not paid again.
    other = submit(live, export(tmp_path, FIXED), tmp_path / "elsewhere.db")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "3 found on the server by look-up" in other.stdout
    exactly_once(live, REFS)


def test_a_correction_paid_first_from_another_store_is_found_not_paid_again(
    live: LiveServer, tmp_path: Path
) -> None:
    store = tmp_path / "batches.db"
    assert submit(live, export(tmp_path), store).returncode == 4
    # Another machine, which never saw the refusal, pays the corrected file first (under
    # the rows' own keys: the server kept nothing under them).
    other = submit(live, export(tmp_path, FIXED), tmp_path / "elsewhere.db")
    assert other.returncode == 0, other.stdout + other.stderr
    fixed = submit(live, export(tmp_path, FIXED), store, report=tmp_path / "r.csv")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert all("found on the server" in r["reason"] for r in read_report(tmp_path / "r.csv"))
    exactly_once(live, REFS)


def test_a_correction_refused_again_is_corrected_again_and_paid_once(
    live: LiveServer, tmp_path: Path
) -> None:
    store = tmp_path / "batches.db"
    assert submit(live, export(tmp_path), store).returncode == 4
    # Corrected, but not enough: another column the server sets.
    path = tmp_path / "payroll.csv"
    path.write_text("ref,created,amount,currency,value_date\n" + "".join(
        f"{ref},2026-11-01,{100 + n},GBP,2026-11-30\n" for n, ref in enumerate(REFS)
    ))  # fmt: skip
    again = submit(live, path, store, report=tmp_path / "r.csv")
    assert again.returncode == 4, again.stdout + again.stderr
    assert all("set by the server: created" in r["reason"] for r in read_report(tmp_path / "r.csv"))
    fixed = submit(live, export(tmp_path, FIXED), store)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    exactly_once(live, REFS)
    # Paid: any other content of those rows is refused again, nothing sent.
    changed = submit(live, export(tmp_path, FIXED, amount=500), store)
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert "other content" in changed.stderr
    exactly_once(live, REFS)


def test_a_row_never_sent_is_sent_with_its_corrected_content_under_its_own_key(
    live: LiveServer, tmp_path: Path
) -> None:
    store = tmp_path / "batches.db"
    first = REFS[0]
    live.server.answer(503, key=key_of(first), retry_after=3600)  # not sent: come back later
    waited = submit(live, export(tmp_path, FIXED), store)
    assert waited.returncode == 3, waited.stdout + waited.stderr
    fixed = submit(live, export(tmp_path, FIXED, amount=700), store, report=tmp_path / "r.csv")
    assert fixed.returncode == 2, fixed.stdout + fixed.stderr  # the other rows were paid
    # Only the row never sent goes with its new content; the paid ones are refused.
    corrected = export(tmp_path, FIXED)
    text = corrected.read_text().replace(f"{first},100,", f"{first},700,")
    corrected.write_text(text)
    done = submit(live, corrected, store, report=tmp_path / "r.csv")
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [r for r in read_report(tmp_path / "r.csv") if r["ref"] == first]
    assert row["key"] == key_of(first)  # nothing reached the server under it: the same key
    assert "corrected in the file since: sent under its key" in row["reason"]
    exactly_once(live, REFS)
    [entry] = [e for e in live.server.ledger() if e.reference == first]
    assert entry.idempotency_key == key_of(first)


@pytest.mark.parametrize("look_up", [(), ("--no-lookup",)], ids=["looked up", "no look-up"])
@pytest.mark.parametrize("how", ["paid", "maybe applied"])
def test_a_row_applied_or_maybe_applied_is_never_paid_again_with_other_content(
    live: LiveServer, tmp_path: Path, how: str, look_up: tuple[str, ...]
) -> None:
    # Not even without a look-up to catch it: the store's record alone refuses it.
    store = tmp_path / "batches.db"
    extra: tuple[str, ...] = ()
    if how == "maybe applied":
        live.server.drop(key=key_of(REFS[0]))  # applied, its answer lost
        extra = ("--max-attempts", "1")
    first = submit(live, export(tmp_path, FIXED), store, *extra, *look_up)
    assert first.returncode in (0, 3), first.stdout + first.stderr
    changed = submit(live, export(tmp_path, FIXED, amount=900), store, *look_up)
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert "other content" in changed.stderr
    exactly_once(live, REFS)


def test_a_correction_sent_leaves_every_other_content_refused_without_a_look_up(
    live: LiveServer, tmp_path: Path
) -> None:
    store = tmp_path / "batches.db"
    assert submit(live, export(tmp_path), store, "--no-lookup").returncode == 4
    fixed = submit(live, export(tmp_path, FIXED), store, "--no-lookup")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    # The refused row, corrected again: its first correction was paid.
    changed = submit(live, export(tmp_path, FIXED, amount=900), store, "--no-lookup")
    assert changed.returncode == 2, changed.stdout + changed.stderr
    exactly_once(live, REFS)
