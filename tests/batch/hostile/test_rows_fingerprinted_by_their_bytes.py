"""Rows the version before fingerprints by meaning left unsettled (their fingerprints
over the body's bytes) are paid once by this version's run of the same file: each is
sent again with its key, never under a new one; and once their bodies are reaped, the
rows are still known by those fingerprints, and nothing is paid again."""

from __future__ import annotations

from pathlib import Path

from idemclient.keys import key_from_identity
from idemclient.testing import LiveServer

from ..support import command, payroll, run
from .old_version import BYTES_FINGERPRINTS, age, extract, old_submit

DAY = 86_400.0
ROWS = 4


def test_rows_left_unsettled_before_the_upgrade_are_paid_once_after_it(
    live: LiveServer, tmp_path: Path
) -> None:
    old = extract(tmp_path / "old", BYTES_FINGERPRINTS)
    file = tmp_path / "payroll.csv"
    file.write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    for reference in ("2026-11-E1000", "2026-11-E1002"):  # applied, their answers lost
        live.server.drop(key=key_from_identity(reference, "payout"))
    # Without look-ups, so that the rows left unsettled are sent again, not found.
    argv = command(live.url, file, store, "--no-lookup")
    first = old_submit(old, *argv[argv.index(str(file)) :], "--max-attempts", "1")
    assert first.returncode == 3, first.stdout + first.stderr
    assert len(live.server.ledger()) == ROWS
    again = run(argv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{ROWS} succeeded" in again.stdout
    assert len(live.server.ledger()) == ROWS
    age(store, 8 * DAY)  # the store's retention is seven days: the bodies go
    for _ in range(2):  # the first run reaps them as the client starts
        later = run(argv)
        assert later.returncode == 0, later.stdout + later.stderr
        assert f"{ROWS} succeeded" in later.stdout
        assert len(live.server.ledger()) == ROWS, later.stdout
