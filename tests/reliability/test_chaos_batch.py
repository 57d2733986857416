"""Chaos: a 2,000-row payout file, a fifth of its requests faulted, the submitter
(`python -m idemclient batch submit`, a real process) SIGKILLed three times, and the
same command run again until it says every row is done.

The first run looks every row up on the server before sending (none is there yet);
the runs after it know every row from the store, and look up only the rows it holds
unfinished (never sent, or maybe applied), never a finished one. Faults, scripted per
row key (so they meet the payouts, not the look-ups) at random rows: 429 and 503 with Retry-After in
all three forms (seconds, HTTP-date, milliseconds), apply-then-drop, answers delayed
past the client's timeout; and, in bursts between runs, outages and timeouts of both
external systems. Exactly 2,000 effects in the ledger, each applied once at each
external system, and a report that matches the ledger row for row.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient import key_from_identity
from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve
from tests.support.processes import kill_when

from .conftest import Figures
from .support import exactly_once

ROWS = 2000
FAULTED_SHARE = 0.2
PAYOUTS = "/v1/payouts"
BATCH = "payroll-chaos"
VALUE_DATE = "2026-11-30"


@pytest.fixture
def live() -> Iterator[LiveServer]:
    # Real time on the server: the submitter is another process on the real clock.
    with ReferenceServer(clock=SystemClock()) as server, serve(server) as running:
        yield running


def write_payroll(path: Path, rng: random.Random) -> list[str]:
    references = [f"2026-11-C{n:05d}" for n in range(ROWS)]
    lines = ["ref,employee_id,name,account,amount,currency,value_date"]
    for n, reference in enumerate(references):
        account = f"GB{rng.randrange(10, 99)}TEST{rng.randrange(10**13, 10**14)}"
        amount = rng.randrange(100_00, 9_000_00)
        lines.append(f"{reference},C{n:05d},Employee {n},{account},{amount},GBP,{VALUE_DATE}")
    path.write_text("\n".join(lines) + "\n")
    return references


def script_row_faults(server: ReferenceServer, keys: list[str], rng: random.Random) -> Counter[str]:
    """A fault for each of a random fifth of the rows, matched by the row's key."""
    kinds: Counter[str] = Counter()
    for key in rng.sample(keys, int(len(keys) * FAULTED_SHARE)):
        kind = rng.choice(
            ["429-ms", "429-seconds", "503-seconds", "503-date", "drop", "drop", "timeout"]
        )
        times = rng.choice([1, 1, 2])
        if kind == "429-ms":
            server.answer(429, times=times, key=key, retry_after_ms=rng.randrange(20, 400))
        elif kind == "429-seconds":
            server.answer(429, times=times, key=key, retry_after=1)
        elif kind == "503-seconds":
            server.answer(503, times=times, key=key, retry_after=1)
        elif kind == "503-date":
            server.answer(503, times=times, key=key, retry_after_date_in=1)
        elif kind == "drop":
            server.drop(times=times, key=key)  # applied, the answer lost
        else:
            server.delay(1.5, times=1, key=key)  # applied, answered after --timeout 1
            times = 1
        kinds[kind] += times
    return kinds


def external_burst(server: ReferenceServer, rng: random.Random) -> Counter[str]:
    """An outage or a spell of timeouts at each external system."""
    kinds: Counter[str] = Counter()
    for system in (1, 2):
        mode = rng.choice(["down", "timeout", "apply_then_timeout"])
        times = rng.randrange(3, 12)
        server.external_fault(system, mode, times=times)
        kinds[f"ext{system}-{mode}"] += times
    return kinds


def count_unfinished(store: Path) -> int:
    with sqlite3.connect(store) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM operations WHERE finished_at IS NULL"
        ).fetchone()
    return int(count)


def test_a_chaotic_2000_row_batch_pays_every_row_exactly_once(
    live: LiveServer, tmp_path: Path, seed: int, figures: Figures
) -> None:
    rng = random.Random(seed)
    server = live.server
    csv = tmp_path / f"{BATCH}.csv"
    references = write_payroll(csv, rng)
    keys = [key_from_identity(ref, "payout") for ref in references]
    faults = script_row_faults(server, keys, rng)
    faults.update(external_burst(server, rng))
    report = tmp_path / "report.json"
    argv = [
        sys.executable,
        "-m",
        "idemclient",
        "batch",
        "submit",
        str(csv),
        "--url",
        live.url,
        "--token",
        "payroll-ops",
        "--store",
        str(tmp_path / "batches.db"),
        "--report",
        str(report),
        "--concurrency",
        "16",
        "--timeout",
        "1",
    ]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    kills = runs = 0
    for low, high in ((200, 600), (800, 1300), (1400, 1800)):
        target = rng.randrange(low, high)
        for _ in range(3):  # a run that ends before its kill point is simply run again
            runs += 1
            if kill_when(
                start(), lambda target=target: len(server.ledger()) >= target, limit=180, turn=0.05
            ):
                kills += 1
                faults.update(external_burst(server, rng))  # the next run meets an outage
                break
    assert kills == 3, f"seed {seed}"

    exit_codes = []
    for _ in range(6):  # the same command, until it says every row is done
        runs += 1
        unfinished = count_unfinished(tmp_path / "batches.db")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        exit_codes.append(done.returncode)
        # The store knew every row: only the unfinished ones were looked up.
        looked_up = json.loads(report.read_text())["batch"]["looked_up"]
        assert looked_up <= unfinished, (seed, looked_up, unfinished)
        if done.returncode == 0:
            break
    assert exit_codes[-1] == 0, (seed, exit_codes, done.stderr[-2000:])
    assert f"{ROWS} rows, {ROWS} succeeded" in done.stdout

    ledger = server.ledger()
    assert len(ledger) == ROWS
    assert all(exactly_once(entry) for entry in ledger)
    by_reference = {entry.reference: entry for entry in ledger}
    assert set(by_reference) == set(references)

    document = json.loads(report.read_text())
    rows = document["rows"]
    assert len(rows) == ROWS
    assert document["batch"]["found_by_lookup"] <= document["batch"]["looked_up"]
    for line, key in zip(sorted(rows, key=lambda r: r["row"]), keys, strict=True):
        entry = by_reference[line["ref"]]
        assert line["state"] == "succeeded"
        # Sent (201), or settled by its look-up, whose answer is the GET's (200).
        found = "found on the server by look-up" in line["reason"]
        assert line["http_status"] == (200 if found else 201), line
        assert line["key"] == key == entry.idempotency_key
        assert line["resource_id"] == entry.resource_id

    # Once more: every row answered from the store, nothing sent, nothing new applied.
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0
    assert len(server.ledger()) == ROWS
    assert all(line["already_done"] for line in json.loads(report.read_text())["rows"])

    consumed = (
        sum(v for k, v in faults.items() if not k.startswith("ext")) - server.pending_faults()
    )
    figures.count(
        "chaos batch",
        rows=ROWS,
        effects=len(ledger),
        submitter_sigkills=kills,
        runs=runs + 1,
        request_faults_scripted=sum(v for k, v in faults.items() if not k.startswith("ext")),
        request_faults_met=consumed,
        external_faults_scripted=sum(v for k, v in faults.items() if k.startswith("ext")),
        attempts_in_the_last_report=sum(line["attempts"] for line in rows),
        lookups_in_the_run_that_finished=document["batch"]["looked_up"],
        **{f"fault_{k.replace('-', '_')}": v for k, v in sorted(faults.items())},
    )
