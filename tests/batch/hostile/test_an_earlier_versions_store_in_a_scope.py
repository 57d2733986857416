"""A store written by an earlier version (keys from the file's name and the value date,
the rows sent with their bare reference) keeps working when the file is run in a
scope: each row is found by its very same content, whether the store still holds the
body it was sent with or has reaped it (then by its fingerprint, taken with the
reference it was sent under), and nothing is paid again, however often it runs."""

from __future__ import annotations

from pathlib import Path

from idemclient.testing import LiveServer

from ..support import command, payroll, run
from .old_version import age, extract, old_submit

DAY = 86_400.0
ROWS = 3


def test_the_same_scoped_command_on_an_earlier_versions_store_pays_nothing_again(
    live: LiveServer, tmp_path: Path
) -> None:
    old = extract(tmp_path / "old")
    (tmp_path / "payroll-nov.csv").write_text(payroll(ROWS, prefix="E"))
    store = tmp_path / "b.db"
    paid = old_submit(
        old, str(tmp_path / "payroll-nov.csv"), "--url", live.url, "--token", "ops",
        "--store", str(store),
    )  # fmt: skip
    assert paid.returncode == 0, paid.stderr
    assert len(live.server.ledger()) == ROWS
    age(store, 8 * DAY)  # paid eight days ago (the store's retention is seven)
    argv = command(live.url, tmp_path / "payroll-nov.csv", store, "--batch-ref", "2026-11")
    argv[argv.index("--token") + 1] = "ops"
    for _ in range(3):  # the first run reaps the old bodies as the client starts
        again = run(argv)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "3 succeeded" in again.stdout
        assert len(live.server.ledger()) == ROWS, again.stdout
