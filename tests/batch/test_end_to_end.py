"""`idemclient batch submit` as a real process against a live reference server on
127.0.0.1: faults injected, the submitter SIGKILLed at random points, the same command
run again until it exits 0, and the server's ledger showing every row exactly once."""

from __future__ import annotations

import csv
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from idemclient import key_from_identity
from idemclient.testing import LiveServer
from tests.support.processes import kill_when

PAYROLL = Path(__file__).parents[2] / "examples" / "payroll.csv"
ROWS = 300


def command(live_url: str, work: Path, *extra: str, token: str = "payroll-ops") -> list[str]:
    return [
        sys.executable,
        "-m",
        "idemclient",
        "batch",
        "submit",
        str(work / "payroll-2026-11.csv"),
        "--url",
        live_url,
        "--token",
        token,
        "--store",
        str(work / "batches.db"),
        "--report",
        str(work / "report.csv"),
        "--concurrency",
        "8",
        "--timeout",
        "1",
        *extra,
    ]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll-2026-11.csv").write_bytes(PAYROLL.read_bytes())
    return tmp_path


def start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_three_times_and_rerun_pays_every_row_exactly_once(
    live: LiveServer, work: Path
) -> None:
    server = live.server
    server.answer(503, times=3, path="/v1/payouts", retry_after=1)
    server.answer(429, times=4, path="/v1/payouts", retry_after_ms=200)
    server.answer(503, times=2, path="/v1/payouts", retry_after_date_in=1)
    server.drop(times=5, path="/v1/payouts")  # applied, then the connection is cut
    server.delay(1.5, times=2, path="/v1/payouts")  # longer than --timeout 1
    server.external_fault(2, "timeout", times=2)  # 202: polled until resumed
    server.external_fault(1, "down", times=1)  # 503 from the server: resumable
    argv = command(live.url, work)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    store = work / "batches.db"
    kill_points = [
        lambda: store.exists(),  # during registration, before anything is sent
        lambda: len(server.ledger()) >= rng.randrange(40, 120),
        lambda: len(server.ledger()) >= rng.randrange(150, 250),
    ]
    kills = 0
    for reached in kill_points:
        for _ in range(3):  # a run that ends before its kill point is simply run again
            if kill_when(start(argv), reached):
                kills += 1
                break
    assert kills == 3
    exit_codes = []
    for _ in range(5):  # run the same command until it says every row is done
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        exit_codes.append(done.returncode)
        if done.returncode == 0:
            break
    assert exit_codes[-1] == 0, done.stderr
    assert "300 rows, 300 succeeded" in done.stdout

    ledger = server.ledger()
    assert len(ledger) == ROWS
    assert all((e.ext1_applied, e.ext2_applied) == (1, 1) for e in ledger)
    assert len({e.reference for e in ledger}) == ROWS
    with (work / "report.csv").open() as f:
        report = list(csv.DictReader(f))
    assert len(report) == ROWS
    by_reference = {e.reference: e for e in ledger}
    for line in report:
        entry = by_reference[line["ref"]]
        assert line["state"] == "succeeded"
        assert line["key"] == entry.idempotency_key
        assert line["resource_id"] == entry.resource_id
        assert line["key"] == key_from_identity(line["ref"], "payout")

    # The same file again: answered from the store, no new effect, nothing sent.
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0
    assert len(server.ledger()) == ROWS
    with (work / "report.csv").open() as f:
        lines = list(csv.DictReader(f))
    assert {(line["already_done"], line["replayed"]) for line in lines} == {("True", "False")}


def test_the_same_file_from_a_fresh_store_is_found_on_the_server_and_not_sent(
    live: LiveServer, work: Path
) -> None:
    first = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    (work / "batches.db").unlink()  # another machine, or a lost store
    second = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert second.returncode == 0, second.stderr
    assert "300 succeeded (300 already done), 0 replayed" in second.stdout
    assert "300 found on the server by look-up" in second.stdout
    assert len(live.server.ledger()) == ROWS


def test_an_invalid_file_sends_and_records_nothing(live: LiveServer, work: Path) -> None:
    path = work / "payroll-2026-11.csv"
    lines = path.read_text().splitlines()
    lines[5] = lines[5].replace(",GBP,", ",GPB,")
    lines[9] = lines[9].rsplit(",", 1)[0] + ",2026-13-01"
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "row 5: currency 'GPB' is not an ISO 4217 code" in done.stderr
    assert "row 9: value date '2026-13-01' is not a date" in done.stderr
    assert "nothing was sent" in done.stderr
    assert live.server.ledger() == ()
    assert not (work / "batches.db").exists()


def test_a_missing_file_is_a_clear_error(live: LiveServer, work: Path) -> None:
    argv = command(live.url, work)
    argv[argv.index(str(work / "payroll-2026-11.csv"))] = str(work / "missing.csv")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "missing.csv" in done.stderr
    assert "does not exist" in done.stderr


def test_a_refused_row_exits_4_and_a_rerun_keeps_it_refused(live: LiveServer, work: Path) -> None:
    key = key_from_identity("2026-11-E1007", "payout")
    live.server.answer(400, key=key)
    done = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert done.returncode == 4, done.stderr
    assert "299 succeeded" in done.stdout
    assert "1 failed" in done.stdout
    again = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert again.returncode == 4  # a final answer is final: not sent again
    assert len(live.server.ledger()) == ROWS - 1


def test_unsettled_rows_exit_3_and_the_next_run_settles_them(live: LiveServer, work: Path) -> None:
    lost = [f"2026-11-E{n}" for n in range(1000, 1020)]
    for reference in lost:  # every answer to these rows is lost (they are applied)
        live.server.drop(times=2, key=key_from_identity(reference, "payout"))
    argv = command(live.url, work, "--max-attempts", "2")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 3
    assert "20 indeterminate" in done.stdout
    assert "run the same command again" in done.stdout
    settled = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert settled.returncode == 0, settled.stderr
    assert len(live.server.ledger()) == ROWS


def test_a_bad_token_is_named_and_nothing_is_applied(live: LiveServer, work: Path) -> None:
    argv = command(live.url, work, token="not!a!token")  # the server answers 401
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "refused the credentials (HTTP 401)" in done.stderr
    assert "check the token" in done.stderr
    assert live.server.ledger() == ()
    fixed = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert fixed.returncode == 0, fixed.stderr
    assert len(live.server.ledger()) == ROWS


def test_an_unreachable_url_is_named_before_anything_is_sent(work: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        command(f"http://127.0.0.1:{port}", work), capture_output=True, text=True, check=False
    )
    assert done.returncode == 3
    assert f"cannot reach http://127.0.0.1:{port}" in done.stderr


def test_a_store_that_is_not_ours_is_refused_and_left_alone(live: LiveServer, work: Path) -> None:
    (work / "batches.db").write_bytes(b"not a database at all, but someone's notes\n" * 10)
    done = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "batches.db" in done.stderr
    assert "not a SQLite database" in done.stderr
    assert (work / "batches.db").read_bytes().startswith(b"not a database")
    assert live.server.ledger() == ()


def test_a_run_killed_after_its_first_payment_is_finished_by_the_next(
    live: LiveServer, work: Path
) -> None:
    process = start(command(live.url, work))
    assert kill_when(process, lambda: len(live.server.ledger()) >= 1)
    assert process.returncode == -signal.SIGKILL
    done = subprocess.run(command(live.url, work), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert len(live.server.ledger()) == ROWS
