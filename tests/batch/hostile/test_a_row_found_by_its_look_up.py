"""A row found on the server by its look-up is recorded as what it came to in one
write, or not at all: killed at that write (SIGKILL), or the store failing there, the
next run looks it up again and pays nothing. A store left by an earlier version that
recorded it in two writes and was killed between them (a row known, in flight, never
attempted) is looked up before that row's first send, never sent blind, once the lease
that version's process left has lapsed: its owner's name does not say in which PID
namespace its pid is, so it is never judged dead by that pid."""

from __future__ import annotations

import sys
from pathlib import Path

from idemclient.testing import LiveServer

from ..support import command, payroll, references, run
from .old_version import TWO_WRITES, extract, lapse_leases, old_process

DAY = 86_400.0
ROWS = 3

# The command, SIGKILLed the moment it would record a row found by look-up.
KILLED_AT_RECORDING = """
import os, signal, sys
from idemclient._store import _sqlstore
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
_sqlstore.SQLStore.{method} = killed
sys.argv = ["idemclient", *sys.argv[1:]]
from idemclient.cli import main
main()
"""

# The command, its store failing (locked, full) when it would record a found row.
STORE_FAILS_AT_RECORDING = """
import sys
from idemclient.errors import StoreUnavailable
from idemclient._store import _sqlstore
def fails(self, *args, **kwargs):
    raise StoreUnavailable(self.path, "cannot be used: database is locked")
_sqlstore.SQLStore.record_settled = fails
sys.argv = ["idemclient", *sys.argv[1:]]
from idemclient.cli import main
main()
"""


def paid_on_another_machine(live: LiveServer, tmp_path: Path) -> list[str]:
    """The file paid, then its store gone (a new machine, a deleted file) and two days
    passed: the server forgot the keys, not the payouts. The command to run now."""
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    first = run(command(live.url, tmp_path / "nov.csv", store, "--concurrency", "1"))
    assert first.returncode == 0, first.stderr
    for leftover in tmp_path.glob("b.db*"):
        leftover.unlink()
    live.server.advance(2 * DAY)
    assert live.server.reap() == ROWS
    return command(live.url, tmp_path / "nov.csv", store, "--concurrency", "1")


def assert_paid_once(live: LiveServer) -> None:
    counts: dict[str, int] = {}
    for entry in live.server.ledger():
        counts[entry.reference] = counts.get(entry.reference, 0) + 1
    assert counts == dict.fromkeys(references(ROWS), 1), counts


def test_killed_while_recording_a_found_row_the_next_run_pays_nothing(
    live: LiveServer, tmp_path: Path
) -> None:
    argv = paid_on_another_machine(live, tmp_path)
    killed = run(
        [sys.executable, "-c", KILLED_AT_RECORDING.format(method="record_settled"), *argv[3:]]
    )
    assert killed.returncode == -9, (killed.returncode, killed.stderr)
    again = run(argv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 found on the server by look-up" in again.stdout
    assert_paid_once(live)


def test_the_store_failing_while_recording_a_found_row_the_next_run_pays_nothing(
    live: LiveServer, tmp_path: Path
) -> None:
    argv = paid_on_another_machine(live, tmp_path)
    failed = run([sys.executable, "-c", STORE_FAILS_AT_RECORDING, *argv[3:]])
    assert failed.returncode == 3, (failed.returncode, failed.stderr)  # "run it again"
    assert "database is locked" in failed.stderr
    again = run(argv)  # as told
    assert again.returncode == 0, again.stdout + again.stderr
    assert_paid_once(live)


def test_a_row_an_earlier_version_left_half_recorded_is_looked_up_not_sent(
    live: LiveServer, tmp_path: Path
) -> None:
    argv = paid_on_another_machine(live, tmp_path)
    # The version that recorded a found row in two writes, killed between them: every
    # row is left in flight, leased by a dead process, never attempted.
    old = extract(tmp_path / "old", TWO_WRITES)
    killed = run(
        [sys.executable, "-c", KILLED_AT_RECORDING.format(method="settle"), *argv[3:]],
        **old_process(old),
    )
    assert killed.returncode == -9, (killed.returncode, killed.stderr)
    # Its owner's name says nothing of its PID namespace: a run at once respects its
    # lease, sends nothing for that row, and says to run again.
    again = run(argv)
    assert again.returncode == 3, again.stdout + again.stderr
    assert "1 in flight" in again.stdout
    assert_paid_once(live)
    lapse_leases(tmp_path / "b.db")
    last = run(argv)
    assert last.returncode == 0, last.stdout + last.stderr
    assert "found on the server by look-up" in last.stdout
    assert_paid_once(live)
