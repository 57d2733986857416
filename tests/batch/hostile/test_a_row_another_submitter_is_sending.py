"""The same file run by two submitters on one store at once (an operator who starts it
again in a second terminal while the first still runs): the second finds a row whose
lease the first holds, its payment applied at the server and its answer not yet back.
It neither sends it nor waits for it, and says so: that row is in flight, and it is not
"already done" (in the report, and in the counts of rows done before this run)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from idemclient.testing import LiveServer

from ..support import command, exactly_once, key_of, payroll, read_report, references, run, wait_for

ROWS = 3
#: The tenant the submitters' token is at the reference server.
TENANT = "payroll-ops"


def test_a_row_another_submitter_is_sending_is_in_flight_not_already_done(
    live: LiveServer, tmp_path: Path
) -> None:
    file, store = tmp_path / "payroll.csv", tmp_path / "b.db"
    file.write_text(payroll(ROWS))
    first = references(ROWS)[0]
    live.server.delay(6.0, key=key_of(first))  # applied, its answer held back 6 s
    sending = [*command(live.url, file, store), "--timeout", "20"]
    with subprocess.Popen(
        sending, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as one:
        applied = wait_for(one, lambda: live.server.key_record(TENANT, key_of(first)) is not None)
        assert applied, "the first submitter ended before its first row reached the server"
        report = tmp_path / "r.json"
        other = run(command(live.url, file, store, "--deadline", "1", report=report))
        one.communicate(timeout=60)
    assert one.returncode == 0
    exactly_once(live, references(ROWS))
    assert other.returncode == 3, other.stdout + other.stderr  # run again: it is unsettled
    [held] = [row for row in read_report(report) if row["ref"] == first]
    assert held["state"] == "in_flight"
    assert held["already_done"] == "False", held
    counts = json.loads(report.read_text())["batch"]["counts"]
    assert counts["already_done"] == ROWS - 1
    assert counts["in_flight"] == 1
