"""A row that may have been applied (its answer was lost) is looked up before it is
sent again, whatever its age: a server that forgot its key sooner than
--key-retention says (Mollie keeps keys an hour; a server's clock may run ahead) would
pay it again. Found, it is recorded and not sent; not found, it is sent under its key.
A 401 after such a lost answer leaves it indeterminate (exit 3, "run again"), never
counted among the rows nothing was applied for."""

from __future__ import annotations

from pathlib import Path

from idemclient.testing import LiveServer

from ..support import command, key_of, payroll, read_report, run

ROWS = 2


def test_a_maybe_applied_row_is_looked_up_before_it_is_sent_again(
    live: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    argv = command(live.url, tmp_path / "nov.csv", store, "--max-attempts", "1")
    live.server.drop(key=key_of("2026-11-E1000"))  # applied, then the answer is lost
    first = run(argv)
    assert first.returncode == 3, first.stdout  # "run the same command again"
    assert len(live.server.ledger()) == ROWS
    # The server forgets the key before the client thinks it would (its retention is
    # shorter than the default --key-retention, or its clock ran ahead).
    live.server.advance(2 * 86_400.0)
    assert live.server.reap() == ROWS
    again = run(argv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 found on the server by look-up" in again.stdout
    assert len(live.server.ledger()) == ROWS


def test_a_401_after_a_lost_answer_is_indeterminate_not_nothing_applied(
    live: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "nov.csv").write_text(payroll(1))
    key = key_of("2026-11-E1000")
    live.server.drop(key=key)  # handled in full, then the connection is cut
    live.server.answer(401, key=key)  # the retry: the token was revoked meanwhile
    done = run(
        command(live.url, tmp_path / "nov.csv", tmp_path / "b.db", report=tmp_path / "r.csv")
    )
    assert len(live.server.ledger()) == 1  # the row was applied
    (line,) = read_report(tmp_path / "r.csv")
    assert line["state"] == "indeterminate", line
    assert done.returncode == 3, (done.returncode, done.stdout)
    assert "nothing was applied" not in done.stdout, done.stdout
    assert "1 row(s) after an attempt that may have been applied" in done.stdout
    assert "check the token" in done.stdout
