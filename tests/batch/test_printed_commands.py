"""Every command `batch submit` prints works when pasted: run here as printed, from
another directory, with the token in IDEMCLIENT_TOKEN as for the batch itself. A row
that may have been applied and that a rerun cannot settle (past the key retention,
sent without a look-up) is not told to run again (it would exit 3 for ever): it gets
its own exit code and the command that settles it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve

from .support import command, exactly_once, key_of, payroll, read_report, references, run

ROWS = 3
TOKEN = "payroll-ops"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll.csv").write_text(payroll(ROWS))
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


def printed(text: str) -> list[str]:
    """The `idemclient ...` commands in `text`, as printed between backticks."""
    return re.findall(r"`(idemclient [^`]+)`", text)


def paste(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a printed command as a shell would (its quoting), from `cwd`."""
    argv = shlex.split(line)
    assert argv[0] == "idemclient"
    env = {**os.environ, "IDEMCLIENT_TOKEN": TOKEN}
    return run([sys.executable, "-m", "idemclient", *argv[1:]], cwd=cwd, env=env)


def no_stray_parentheses(lines: list[dict[str, str]]) -> None:
    assert not [line["reason"] for line in lines if "()" in line["reason"]]


def test_a_row_a_rerun_cannot_settle_gets_its_own_exit_code_and_a_command_that_settles_it(
    live: LiveServer, work: Path
) -> None:
    first = references(ROWS)[0]
    live.server.drop(key=key_of(first))  # applied, then its answer lost
    argv = command(live.url, work / "payroll.csv", work / "batches.db", "--no-lookup")
    sent = run([*argv, "--max-attempts", "1"])
    assert sent.returncode == 3, sent.stderr  # the lost answer: run again
    # Past the key retention (1 s, and the clocks' skew): never sent again, and without
    # a look-up a rerun cannot tell whether it was applied.
    late = [*argv, "--key-retention", "1", "--report", str(work / "r.csv")]
    for _ in range(2):  # every rerun says the same: it does not loop at "run again"
        again = run(late)
        assert again.returncode == 5, again.stdout + again.stderr
        assert "run the same command again" not in again.stdout
        assert "a rerun cannot settle" in again.stdout
    lines = read_report(work / "r.csv")
    no_stray_parentheses(lines)
    [held] = [line for line in lines if line["reconcile"] == "True"]
    assert (held["ref"], held["state"]) == (first, "indeterminate")
    [settle] = printed(held["reason"])
    assert printed(again.stderr) == [settle]  # told as it happened too
    assert "pass lookup=" not in settle
    # Pasted from another directory, with the token in the environment: it settles it.
    done = paste(settle, work / "elsewhere")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout
    finished = run(late)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    exactly_once(live, references(ROWS))


def test_a_row_maybe_applied_at_another_url_is_settled_by_the_command_printed(
    live: LiveServer, work: Path
) -> None:
    first = references(ROWS)[0]
    other = ReferenceServer(clock=SystemClock(), db=str(work / "other.sqlite3"))
    with other, serve(other) as elsewhere:
        other.drop(key=key_of(first))  # applied there, its answer lost
        tried = run(
            command(elsewhere.url, work / "payroll.csv", work / "b.db", "--max-attempts", "1")
        )
        assert tried.returncode == 3, tried.stderr
        moved = run(command(live.url, work / "payroll.csv", work / "b.db"))
        assert moved.returncode == 2, moved.stdout + moved.stderr
        [settle] = printed(moved.stderr)
        assert f"--url {elsewhere.url}" in settle  # where it went, not this run's URL
        done = paste(settle, work / "elsewhere")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "succeeded" in done.stdout
        assert len(other.ledger()) == ROWS
    assert live.server.ledger() == ()


def test_ops_reconcile_takes_the_batch_look_up_for_a_batch_row_by_default(
    live: LiveServer, work: Path
) -> None:
    first = references(ROWS)[0]
    live.server.drop(key=key_of(first))
    sent = run(command(live.url, work / "payroll.csv", work / "batches.db", "--max-attempts", "1"))
    assert sent.returncode == 3, sent.stderr
    # Under the generic profile, which knows no look-up: the batch's is taken.
    done = paste(
        f"idemclient ops reconcile batch/payout/{first} --store {work / 'batches.db'}"
        f" --url {live.url}",
        work,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout
