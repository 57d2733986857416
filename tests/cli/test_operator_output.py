"""What the commands show operators is true and safe: a purge piped to `tee` still asks,
JSON documents keep their schema (a refused batch, an operation without an answer), a
dry run's JSON holds no row bodies unless asked, look-up retries show under -v, and an
`ops` settlement reports through the hooks (its log record)."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from idemclient import Client, Indeterminate, ManualClock
from idemclient.cli import main
from idemclient.clock import SystemClock, set_testing
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, serve

from ..batch.support import command, payroll, run

PAYMENT = {"amount": 500, "currency": "EUR", "reference": "inv-9"}


@pytest.fixture(autouse=True)
def no_real_sleeps() -> Iterator[None]:
    set_testing(True)
    yield
    set_testing(False)


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with ReferenceServer(clock=SystemClock()) as server, serve(server) as running:
        yield running


@pytest.fixture
def store_with_history(tmp_path: Path, live: LiveServer) -> Path:
    """A store holding one succeeded and one indeterminate operation (no answer)."""
    path = tmp_path / "ops.db"
    with Client(
        store=path,
        clock=ManualClock(start=time.time()),
        base_url=live.url,
        headers={"Authorization": "Bearer shop-1"},
    ) as client:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
        live.server.drop(path="/v1/payments", times=8)
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments", json={**PAYMENT, "reference": "inv-10"}, operation_id="order-2"
            )
    return path


def _stored(store: Path) -> list[str]:
    with SQLiteStore(store) as opened:
        return [r.operation_id for r in opened.operations()]


def test_purge_piped_to_tee_at_a_terminal_asks_first(store_with_history: Path) -> None:
    """`idemclient ops purge ID | tee log`: stdin and stderr are the terminal, stdout a
    pipe. It asks (on stderr), a "no" purges nothing, and the question is not in stdout
    (the log)."""
    parent, child = pty.openpty()
    try:
        os.write(parent, b"n\n")  # the person's answer, waiting in the terminal's input
        done = subprocess.run(
            [sys.executable, "-m", "idemclient", "ops", "purge", "--store",
             str(store_with_history), "order-1"],
            stdin=child, stdout=subprocess.PIPE, stderr=child, timeout=60, check=False,
        )  # fmt: skip
        os.close(child)
        child = -1
        terminal = b""
        while True:
            try:
                data = os.read(parent, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not data:
                break
            terminal += data
    finally:
        if child != -1:
            os.close(child)
        os.close(parent)
    assert done.returncode == 1, terminal
    assert b"Delete 1 finished operation(s)" in terminal
    assert b"nothing purged" in terminal
    assert b"Delete" not in done.stdout
    assert b"purged" not in done.stdout
    assert _stored(store_with_history) == ["order-1", "order-2"]


def test_show_json_keeps_response_null_without_an_answer(store_with_history: Path) -> None:
    result = CliRunner().invoke(
        main, ["ops", "show", "--store", str(store_with_history), "order-2", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["state"] == "indeterminate"
    assert "response" in document
    assert document["response"] is None


def test_ops_reconcile_reports_through_the_hooks(
    store_with_history: Path, live: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="idemclient"):
        result = CliRunner().invoke(
            main,
            ["ops", "reconcile", "order-2", "--store", str(store_with_history),
             "--url", live.url, "--token", "shop-1",
             "--lookup", "/v1/payments?idempotency_key={key}"],
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    outcomes = [r for r in caplog.records if getattr(r, "idemclient.event", "") == "outcome"]
    assert [getattr(r, "idemclient.operation_id") for r in outcomes] == ["order-2"]
    assert getattr(outcomes[0], "idemclient.state") == "succeeded"


# -- batch submit ------------------------------------------------------------------------


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll.csv").write_text(payroll(6))
    return tmp_path


def test_a_refused_batch_prints_its_refusal_as_json(live: LiveServer, work: Path) -> None:
    with Client(
        store=work / "other.db", base_url=live.url, headers={"Authorization": "Bearer payroll-ops"}
    ) as elsewhere:  # the same reference paid from elsewhere, with another amount
        elsewhere.post(
            "/v1/payouts",
            json={"reference": "2026-11-E1002", "amount": 999, "currency": "GBP"},
            key="paid-by-hand",
        )
    done = run(command(live.url, work / "payroll.csv", work / "b.db", "--json"))
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert document["refused"] is True
    assert document["exit_code"] == 2
    assert set(document["counts"]) >= {"succeeded", "not_sent"}
    assert "refused before anything was sent" in document["summary"]
    assert "other content" in done.stderr
    assert len(live.server.ledger()) == 1  # nothing of the batch was sent


def test_a_dry_run_s_json_holds_no_row_body_unless_verbose(live: LiveServer, work: Path) -> None:
    store = work / "b.db"
    quiet = run(command(live.url, work / "payroll.csv", store, "--dry-run", "--json"))
    assert quiet.returncode == 0, quiet.stderr
    document = json.loads(quiet.stdout)
    assert document["bodies"] is False
    assert all(row["body"] is None for row in document["rows"])
    assert "TEST" not in quiet.stdout  # no account number (GB..TEST...)
    loud = run(command(live.url, work / "payroll.csv", store, "--dry-run", "--json", "-v"))
    assert loud.returncode == 0, loud.stderr
    rows = json.loads(loud.stdout)["rows"]
    assert all("TEST" in row["body"] for row in rows)


def test_look_up_retries_show_under_verbose(live: LiveServer, work: Path) -> None:
    live.server.answer(503, path="/v1/payouts", retry_after_ms=20)  # the first look-up
    loud = run(command(live.url, work / "payroll.csv", work / "loud.db", "--verbose"))
    assert loud.returncode == 0, loud.stderr
    assert re.search(
        r"^retry: look-up of 2026-11-E10\d\d after attempt 1: HTTP 503; next look-up in",
        loud.stderr,
        re.M,
    ), loud.stderr
    live.server.answer(503, path="/v1/payouts", retry_after_ms=20)
    (work / "dec.csv").write_text(payroll(6, prefix="2026-12-E"))
    quiet = run(command(live.url, work / "dec.csv", work / "quiet.db"))
    assert quiet.returncode == 0, quiet.stderr
    assert "retry:" not in quiet.stderr
