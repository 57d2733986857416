"""`idemclient batch submit --profile P` as a real process against `ReferenceServer` in
profile P on 127.0.0.1: the sample payroll file (20 rows) through faults (503 with
Retry-After, apply-then-drop) and a SIGKILL, run again until it exits 0, every row paid
exactly once in the server's ledger, under every built-in profile. Each run again is
made a little later, as an operator would (`tests.support.later_cli`: the server's clock
and the command's move on together, nobody sleeps)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient._time import CLOCK_SKEW
from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve
from tests.support.processes import kill_when

from .server_speakers import ALL

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "examples" / "payroll-sample.csv"
ROWS = 20
#: `--in-flight-for` below: the in-process server ends a request within milliseconds
IN_FLIGHT_FOR = 1.0
#: how much later each run again is made: past a held row's window (the in_flight_for,
#: and the skew allowed between the clocks of the store's hosts, which no option lifts)
LATER = IN_FLIGHT_FOR + CLOCK_SKEW + 1.0


@pytest.fixture(params=ALL)
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, LiveServer]]:
    name = str(request.param)
    server = ReferenceServer(profile=name, clock=SystemClock(), db=str(tmp_path / "psp.sqlite3"))
    with server, serve(server) as running:
        yield name, running


def _argv(name: str, url: str, work: Path, *, later: float = 0.0) -> list[str]:
    """The command, run by a process whose clock reads `later` seconds ahead."""
    return [
        sys.executable,
        "-m",
        "tests.support.later_cli",
        str(later),
        "batch",
        "submit",
        str(SAMPLE),
        "--url",
        url,
        "--token",
        "payroll-ops",
        "--store",
        str(work / "batches.db"),
        "--concurrency",
        "4",
        "--timeout",
        "1",
        "--profile",
        name,
        # The in-process server ends a request within milliseconds: a row killed in
        # flight is held (or its look-up's "none" not believed) for one second and the
        # hosts' skew, not the profile's fifteen minutes, and the runs again settle it.
        "--in-flight-for",
        str(IN_FLIGHT_FOR),
    ]


def test_the_payroll_file_is_paid_once_per_row_under_each_profile(
    live: tuple[str, LiveServer], tmp_path: Path
) -> None:
    name, running = live
    server = running.server
    server.answer(503, times=2, path="/v1/payouts", retry_after=1)
    server.drop(times=3, path="/v1/payouts")  # applied, then the connection is cut
    argv = _argv(name, running.url, tmp_path)
    # The faults hold the run for seconds after its first payment: it is killed then.
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert kill_when(process, lambda: bool(server.ledger()))
    codes = []
    for run in range(1, 7):  # the same command until it says every row is done
        server.clock.advance(LATER)  # each run again a little later than the last
        again = _argv(name, running.url, tmp_path, later=run * LATER)
        done = subprocess.run(
            again, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
        )
        codes.append(done.returncode)
        if done.returncode == 0:
            break
    assert codes[-1] == 0, (codes, done.stdout, done.stderr)
    assert f"{ROWS} rows, {ROWS} succeeded" in done.stdout
    ledger = server.ledger()
    assert len(ledger) == ROWS, [e.reference for e in ledger]
    assert all((e.ext1_applied, e.ext2_applied) == (1, 1) for e in ledger)
    assert len({e.reference for e in ledger}) == ROWS
