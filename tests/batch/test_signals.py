"""Ctrl-C twice, SIGTERM, SIGHUP (an SSH session dropped): `batch submit` stopped by any
of them writes a summary that counts every row and a report, and a row whose attempt
was handed to the transport is counted as an attempt that may have been applied, in the
store (`ops show`), the summary and the report. Real signals to a real process against
the reference server on 127.0.0.1; every wait is bounded and driven by the command's own
output (`-v` says each attempt as it is handed over).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from idemclient.testing import LiveServer

from .support import command, exactly_once, key_of, payroll, references, run

ROWS = 16
AT_ONCE = 8
#: Each row's first answer is held this long: the rows in flight are answered within
#: the command's grace (5 s) after one signal...
HELD = 3.0
#: ... and are still in flight when a second one comes, however loaded the machine.
HELD_LONG = 20.0

#: `python -m idemclient` with Ctrl-C at its default, as a terminal's foreground job has
#: it (a test run in the background ignores SIGINT, and its children inherit that).
#: The command as a terminal's foreground job has it: SIGINT and SIGHUP as by default,
#: whatever the tests were started with (a shell's background job ignores SIGINT, and
#: `nohup` SIGHUP: both are inherited, and the command keeps them ignored, by design).
_FOREGROUND = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler);"
    " signal.signal(signal.SIGHUP, signal.SIG_DFL);"
    " runpy.run_module('idemclient', run_name='__main__', alter_sys=True)"
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll.csv").write_text(payroll(ROWS))
    return tmp_path


def start(live: LiveServer, work: Path, held: float = HELD) -> subprocess.Popen[str]:
    for reference in references(ROWS):
        live.server.delay(held, key=key_of(reference))
    argv = command(
        live.url, work / "payroll.csv", work / "batches.db", "-v",
        "--concurrency", str(AT_ONCE), "--timeout", "30", report=work / "r.json",
    )  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", _FOREGROUND, *argv[3:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(stream: IO[str], told: list[str], reached: Callable[[list[str]], bool]) -> None:
    """Read lines into `told` until `reached(told)`; bounded by the command's output."""
    for line in stream:
        told.append(line)
        if reached(told):
            return
    raise AssertionError("the command ended first:\n" + "".join(told))


def in_flight(told: list[str]) -> set[str]:
    return {m.group(1) for line in told if (m := re.match(r"attempt: (\S+) attempt 1 ", line))}


def counted(summary: str) -> dict[str, int]:
    """The summary's counts: '16 rows, 0 succeeded, 0 replayed, 8 indeterminate, ...'."""
    return {
        name: int(n)
        for n, name in re.findall(
            r"(\d+) (rows|succeeded|indeterminate|not sent|failed|in flight)", summary
        )
    }


@pytest.mark.parametrize(
    "stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_told_twice_every_row_is_counted_and_an_attempt_in_flight_is_maybe_applied(
    live: LiveServer, work: Path, stop: signal.Signals
) -> None:
    process = start(live, work, HELD_LONG)
    assert process.stderr is not None
    told: list[str] = []
    read_until(process.stderr, told, lambda lines: len(in_flight(lines)) == AT_ONCE)
    process.send_signal(stop)
    read_until(process.stderr, told, lambda lines: "interrupting (" in lines[-1])
    process.send_signal(stop)  # do not wait for the rows in flight
    out, rest = process.communicate(timeout=60)
    err = "".join(told) + rest
    assert process.returncode == 128 + stop, err
    assert "Traceback" not in err
    assert f"stopped: {AT_ONCE} row(s) were in flight" in err
    # Every row is counted in the summary: the rows in flight too.
    counts = counted(out)
    assert counts["rows"] == ROWS, out
    assert sum(n for name, n in counts.items() if name != "rows") == ROWS, out
    assert counts["indeterminate"] == AT_ONCE, out
    document = json.loads((work / "r.json").read_text())
    assert document["batch"]["interrupted"] is True
    assert document["batch"]["signal"] == stop.name
    assert document["batch"]["exit_code"] == 128 + stop
    sent = {f"batch/payout/{row['ref']}": row for row in document["rows"]}
    flying = in_flight(told)
    for operation_id, row in sent.items():
        if operation_id in flying:
            assert (row["state"], row["attempts"]) == ("indeterminate", 1), row
            assert "may have been applied" in row["reason"]
        else:
            assert (row["state"], row["attempts"]) == ("not_sent", 0), row
    # The store says so too: an attempt, maybe applied.
    shown = run(
        [sys.executable, "-m", "idemclient", "ops", "show", sorted(flying)[0],
         "--store", str(work / "batches.db")]
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"attempts: 1$", shown.stdout, re.MULTILINE), shown.stdout
    assert re.search(r"maybe applied: True$", shown.stdout, re.MULTILINE), shown.stdout
    # The same command again pays every row once: those in flight are found, not resent.
    again = run(command(live.url, work / "payroll.csv", work / "batches.db"))
    assert again.returncode == 0, again.stdout + again.stderr
    exactly_once(live, references(ROWS))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_or_sighup_stops_the_run_with_a_summary_and_a_report(
    live: LiveServer, work: Path, stop: signal.Signals
) -> None:
    process = start(live, work)
    assert process.stderr is not None
    told: list[str] = []
    read_until(process.stderr, told, lambda lines: len(in_flight(lines)) == AT_ONCE)
    process.send_signal(stop)  # once: the rows in flight finish their attempt
    out, rest = process.communicate(timeout=60)
    err = "".join(told) + rest
    assert process.returncode == 128 + stop, err
    assert "Traceback" not in err
    assert counted(out)["rows"] == ROWS
    assert f"stopped ({stop.name})" in out
    document = json.loads((work / "r.json").read_text())
    assert document["batch"]["signal"] == stop.name
    flying = in_flight(told)
    for row in document["rows"]:
        if f"batch/payout/{row['ref']}" in flying:
            # Answered within the grace; on a machine too loaded for that, left as sent.
            assert row["state"] in ("succeeded", "indeterminate"), row
        else:
            assert row["state"] == "not_sent", row


def test_sighup_with_the_terminal_gone_still_writes_the_report(
    live: LiveServer, work: Path
) -> None:
    process = start(live, work)
    assert process.stdout is not None
    assert process.stderr is not None
    told: list[str] = []
    read_until(process.stderr, told, lambda lines: len(in_flight(lines)) == AT_ONCE)
    # The SSH session drops: nobody reads what the command writes any more.
    process.stdout.close()
    process.stderr.close()
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=60) == 128 + signal.SIGHUP
    document = json.loads((work / "r.json").read_text())
    assert document["batch"]["interrupted"] is True
    assert len(document["rows"]) == ROWS
    assert {row["state"] for row in document["rows"]} <= {"succeeded", "indeterminate", "not_sent"}
    assert sum(row["state"] == "not_sent" for row in document["rows"]) == ROWS - AT_ONCE
    again = run(command(live.url, work / "payroll.csv", work / "batches.db"))
    assert again.returncode == 0, again.stdout + again.stderr
    exactly_once(live, references(ROWS))
