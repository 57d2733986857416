"""`batch submit --dry-run`, `--json` and `--verbose`, through the command in a real
process against the reference server on 127.0.0.1."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock, RetryPolicy
from idemclient.batch import Batch
from idemclient.batch._preview import preview
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer

from .support import command, key_of, payroll, run

ROWS = 12
#: Answers queued for every request: if any request reached the server, one is used.
TRIPWIRE = 1000


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll.csv").write_text(payroll(ROWS))
    return tmp_path


def _tripwire(live: LiveServer) -> None:
    live.server.answer(503, times=TRIPWIRE)
    assert live.server.pending_faults() == TRIPWIRE


def _snapshot(store: Path) -> list[tuple[str, str, int, float]]:
    with SQLiteStore(store) as opened:
        return [
            (r.operation_id, r.state.value, r.attempts, r.updated_at)
            for r in opened.operations(limit=10_000)
        ]


def test_a_dry_run_on_a_new_store_shows_every_row_and_touches_nothing(
    live: LiveServer, work: Path
) -> None:
    store = work / "never-created.db"
    _tripwire(live)
    done = run(command(live.url, work / "payroll.csv", store, "--dry-run"))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("row ")]
    assert len(rows) == ROWS
    assert all("new" in line and "store: unknown" in line for line in rows)
    assert all(f"POST {live.url}/v1/payouts" in line for line in rows)
    assert f"{ROWS} would be sent, {ROWS} looked up first" in done.stdout
    assert "Nothing was looked up, recorded or sent." in done.stdout
    assert f"{ROWS} new" in done.stdout
    assert not store.exists()  # not even created
    assert live.server.pending_faults() == TRIPWIRE  # no request reached the server
    assert not live.server.ledger()


def test_a_dry_run_shows_what_the_store_knows_and_records_nothing(
    live: LiveServer, work: Path
) -> None:
    store = work / "batches.db"
    first = run(command(live.url, work / "payroll.csv", store))
    assert first.returncode == 0, first.stderr
    (work / "more.csv").write_text(payroll(ROWS + 3))  # three rows more
    before = _snapshot(store)
    _tripwire(live)
    done = run(command(live.url, work / "more.csv", store, "--dry-run", "--json", "-v"))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["dry_run"] is True
    assert document["counts"]["done"] == ROWS
    assert document["counts"]["new"] == 3
    by_step = {row["reference"]: row for row in document["rows"]}
    finished = by_step["2026-11-E1000"]
    assert finished["stored_state"] == "succeeded"
    assert finished["method"] is None
    assert finished["key"] == key_of("2026-11-E1000")
    fresh = by_step[f"2026-11-E{1000 + ROWS}"]
    assert fresh["stored_state"] is None
    assert fresh["method"] == "POST"
    assert json.loads(fresh["body"])["reference"] == f"2026-11-E{1000 + ROWS}"
    assert _snapshot(store) == before  # nothing recorded, nothing changed
    assert live.server.pending_faults() == TRIPWIRE
    assert len(live.server.ledger()) == ROWS


def test_a_dry_run_refuses_what_a_run_would_refuse(live: LiveServer, work: Path) -> None:
    store = work / "batches.db"
    assert run(command(live.url, work / "payroll.csv", store)).returncode == 0
    (work / "changed.csv").write_text(payroll(ROWS, amount=999))  # same references, new amounts
    before = _snapshot(store)
    done = run(command(live.url, work / "changed.csv", store, "--dry-run"))
    assert done.returncode == 2
    assert "other content" in done.stderr
    assert "dry run: nothing was looked up, recorded or sent" in done.stderr
    assert _snapshot(store) == before


def test_the_summary_as_json(live: LiveServer, work: Path) -> None:
    done = run(command(live.url, work / "payroll.csv", work / "b.db", "--json"))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["exit_code"] == 0
    assert summary["counts"]["succeeded"] == ROWS
    assert summary["summary"].startswith("batch ")
    assert "rows" not in summary


def test_verbose_shows_the_retry_lines(live: LiveServer, work: Path) -> None:
    live.server.answer(503, key=key_of("2026-11-E1003"), retry_after_ms=20)
    quiet = run(command(live.url, work / "payroll.csv", work / "quiet.db"))
    assert quiet.returncode == 0, quiet.stderr
    assert "retry:" not in quiet.stderr
    (work / "december.csv").write_text(payroll(ROWS, prefix="2026-12-E"))
    live.server.answer(503, key=key_of("2026-12-E1004"), retry_after_ms=20)
    loud = run(command(live.url, work / "december.csv", work / "loud.db", "--verbose"))
    assert loud.returncode == 0, loud.stderr
    assert re.search(
        r"^retry: batch/payout/2026-12-E1004 after attempt 1: HTTP 503 .*; next attempt in",
        loud.stderr,
        re.M,
    ), loud.stderr
    assert "\x1b[" not in loud.stderr + loud.stdout  # a pipe: no colour


def test_a_dry_runs_json_written_a_row_at_a_time_is_its_document(tmp_path: Path) -> None:
    batch = Batch.from_records(
        [
            {"ref": f"E{i:05d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(2_500)  # more than one chunk
        ]
    )
    with (
        SQLiteStore(tmp_path / "s.db") as store,
        httpx.Client(base_url="http://psp.test", headers={"Authorization": "Bearer t"}) as http,
    ):
        shown = preview(batch, store=store, clock=ManualClock(), policy=RetryPolicy(), http=http)
        for bodies in (True, False):
            out = io.StringIO()
            shown.write_json(out, bodies=bodies)
            document = shown.document(bodies=bodies)
            assert out.getvalue() == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        assert len(document["rows"]) == 2_500
        assert shown.counts()["new"] == 2_500
