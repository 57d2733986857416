"""Submitting a batch through the Python API, against the stand-in PSP."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, BatchInvalid, Client, ManualClock, State, key_from_identity
from idemclient.batch import Batch, BatchProgress, ExitCode, asubmit, submit
from tests.client.fakes import FakePSP, error, status


def make_batch(n: int = 30, *, amount: int = 100, reference: str = "payroll-2026-11") -> Batch:
    return Batch.from_records(
        [
            {
                "ref": f"E{i:04d}",
                "amount": amount + i,
                "currency": "GBP",
                "value_date": "2026-11-30",
            }
            for i in range(n)
        ],
        reference=reference,
    )


def make_client(psp: FakePSP, store: Path, clock: ManualClock | None = None) -> Client:
    return Client(
        store=store,
        clock=clock or ManualClock(),
        transport=psp.transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test"},
    )


def test_every_row_is_paid_once_with_its_natural_key(tmp_path: Path) -> None:
    psp = FakePSP()
    batch = make_batch(30)
    with make_client(psp, tmp_path / "s.db") as client:
        report = submit(batch, client, concurrency=4)
    assert report.exit_code is ExitCode.OK
    assert len(psp.effects) == 30
    assert set(psp.effects.values()) == {1}
    first = report.rows[0]
    assert first.key == key_from_identity("payroll-2026-11", "E0000", "payout", "2026-11-30")
    assert (first.row, first.ref, first.state, first.http_status) == (1, "E0000", "succeeded", 201)
    assert first.resource_id is not None
    assert first.resource_id.startswith("pay_")
    bodies = [json.loads(r.content) for r in psp.requests]
    assert {b["reference"] for b in bodies} == {f"E{i:04d}" for i in range(30)}
    assert all(r.url.path == "/v1/payouts" for r in psp.requests)


def test_the_same_file_twice_makes_no_new_effect_and_no_request(tmp_path: Path) -> None:
    psp = FakePSP()
    with make_client(psp, tmp_path / "s.db") as client:
        submit(make_batch(), client)
        sent = len(psp.requests)
        again = submit(make_batch(), client)
    assert len(psp.requests) == sent  # finished rows are answered from the store
    assert again.exit_code is ExitCode.OK
    assert all(row.replayed for row in again.rows)
    assert set(psp.effects.values()) == {1}


def test_the_same_file_from_another_machine_is_deduplicated_by_the_server(tmp_path: Path) -> None:
    psp = FakePSP()
    with make_client(psp, tmp_path / "a.db") as first:
        submit(make_batch(), first)
    with make_client(psp, tmp_path / "b.db") as second:  # a fresh store: no shared state
        report = submit(make_batch(), second)
    assert all(row.replayed for row in report.rows)
    assert len(psp.effects) == 30
    assert set(psp.effects.values()) == {1}


def test_a_row_changed_after_submission_is_refused_before_sending(tmp_path: Path) -> None:
    psp = FakePSP()
    with make_client(psp, tmp_path / "s.db") as client:
        submit(make_batch(5), client)
        sent = len(psp.requests)
        changed = make_batch(6, amount=999)  # rows 1..5 changed, row 6 new
        with pytest.raises(BatchInvalid) as caught:
            submit(changed, client)
        assert [row for row, _ in caught.value.problems] == [1, 2, 3, 4, 5]
        assert "different content" in caught.value.problems[0][1]
        assert len(psp.requests) == sent
        assert (
            client.store.get(key_from_identity("payroll-2026-11", "E0005", "payout", "2026-11-30"))
            is None
        )


def test_faults_are_retried_and_unsettled_rows_say_run_again(tmp_path: Path) -> None:
    psp = FakePSP(status(503, retry_after="1"), error(httpx.ReadTimeout, apply=True), status(429))
    with make_client(psp, tmp_path / "s.db") as client:
        report = submit(make_batch(10), client, concurrency=1)
        assert report.exit_code is ExitCode.OK
        assert sum(r.attempts for r in report.rows) == 13
        psp.script = [error(httpx.ReadTimeout)] * 8  # the next new row never gets an answer
        stuck = submit(make_batch(11), client, concurrency=1)
    assert stuck.exit_code is ExitCode.RUN_AGAIN
    assert stuck.rows[-1].state == "indeterminate"


def test_a_final_refusal_gives_exit_code_4(tmp_path: Path) -> None:
    psp = FakePSP(status(400))
    with make_client(psp, tmp_path / "s.db") as client:
        report = submit(make_batch(3), client, concurrency=1)
    assert report.exit_code is ExitCode.FAILED
    assert [r.state for r in report.rows] == ["failed", "succeeded", "succeeded"]


def test_refused_credentials_stop_new_rows_and_keep_them_resendable(tmp_path: Path) -> None:
    psp = FakePSP(status(401))
    with make_client(psp, tmp_path / "s.db") as client:
        report = submit(make_batch(20), client, concurrency=1)
        assert len(psp.requests) == 1  # nothing more started after the refusal
        assert report.exit_code is ExitCode.RUN_AGAIN
        assert {r.state for r in report.rows} == {"not_sent"}
        again = submit(make_batch(20), client, concurrency=1)  # "the right token"
    assert again.exit_code is ExitCode.OK
    assert len(psp.effects) == 20


def test_progress_is_reported_live(tmp_path: Path) -> None:
    psp = FakePSP(status(503))
    seen: list[BatchProgress] = []
    lock = threading.Lock()

    def record(progress: BatchProgress) -> None:
        with lock:
            seen.append(progress)

    with make_client(psp, tmp_path / "s.db") as client:
        submit(make_batch(5), client, concurrency=1, on_progress=record)
    assert any(p.retrying == 1 for p in seen)
    last = seen[-1]
    assert (last.total, last.done, last.succeeded, last.retrying) == (5, 5, 5, 0)


def test_reports_are_written_as_csv_or_json(tmp_path: Path) -> None:
    with make_client(FakePSP(), tmp_path / "s.db") as client:
        report = submit(make_batch(3), client)
    report.write(tmp_path / "r.csv")
    report.write(tmp_path / "r.json")
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "row",
        "ref",
        "key",
        "state",
        "http_status",
        "resource_id",
        "attempts",
        "replayed",
    ]
    as_json = json.loads((tmp_path / "r.json").read_text())
    assert [r["ref"] for r in as_json] == [r["ref"] for r in rows] == ["E0000", "E0001", "E0002"]
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        report.write(tmp_path / "r.txt")
    assert "3 rows, 3 succeeded" in report.summary()


@pytest.mark.anyio
async def test_async_submit(tmp_path: Path) -> None:
    psp = FakePSP(status(503), error(httpx.ReadTimeout, apply=True))
    async with AsyncClient(
        store=tmp_path / "s.db",
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    ) as client:
        report = await asubmit(make_batch(25), client, concurrency=5)
        again = await asubmit(make_batch(25), client, concurrency=5)
        assert client.store.counts()[State.SUCCEEDED] == 25
    assert report.exit_code is ExitCode.OK
    assert again.exit_code is ExitCode.OK
    assert len(psp.effects) == 25
    assert set(psp.effects.values()) == {1}
    assert [r.ref for r in report.rows] == [f"E{i:04d}" for i in range(25)]
