"""What the run says when a look-up gets no usable answer (issue 28, item 8).

A look-up the server answers "later" (429, 503, a 5xx, no answer at all) is not a
look-up that does not work: the run sends nothing, exits 3 ("run again later") and
says how long the server asked to wait. `--no-lookup` is suggested only where the
look-up can never work here (no such search: 404, 405, 501; an answer that is not a
list), never for refused credentials or a passing trouble, where it would pay twice
what the server already holds. A send that the server asks to wait longer than a row
may wait is named in the summary, with when to run again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from idemclient import Client, ManualClock, RetryPolicy, State
from idemclient.batch import Batch, ExitCode, submit
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer

from .support import command, key_of, payroll, references, run

ROWS = 6
NO_LOOKUP = "--no-lookup"
Fault = Callable[[ReferenceServer], None]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll.csv").write_text(payroll(ROWS))
    return tmp_path


def _submit(live: LiveServer, work: Path, *extra: str) -> tuple[int, str, str]:
    done = run(command(live.url, work / "payroll.csv", work / "batches.db", *extra))
    return done.returncode, done.stdout, done.stderr


def _nothing_recorded_or_paid(live: LiveServer, work: Path) -> None:
    assert live.server.ledger() == ()
    with SQLiteStore(work / "batches.db") as store:
        counts = store.counts()
    assert counts[State.SUCCEEDED] == counts[State.IN_FLIGHT] == counts[State.INDETERMINATE] == 0


@pytest.mark.parametrize(
    ("fault", "exit_code", "said", "suggests_no_lookup"),
    [
        # a rate limit whose wait is longer than the deadline: run again later
        (
            lambda s: s.answer(429, retry_after=120, path="/v1/payouts"),
            3,
            ["HTTP 429", "asked to wait 120 s", "run the same command again"],
            False,
        ),
        # the same, with an HTTP-date
        (
            lambda s: s.answer(503, retry_after_date_in=600, path="/v1/payouts"),
            3,
            ["HTTP 503", "asked to wait 600 s"],
            False,
        ),
        # credentials: fix the token, never go without the look-up
        (lambda s: s.answer(401, times=100, path="/v1/payouts"), 2, ["check the token"], False),
        (lambda s: s.answer(403, times=100, path="/v1/payouts"), 2, ["HTTP 403"], False),
        # no such search here: the one case where --no-lookup is the way
        (lambda s: s.answer(404, times=100, path="/v1/payouts"), 2, ["HTTP 404"], True),
        (lambda s: s.answer(405, times=100, path="/v1/payouts"), 2, ["HTTP 405"], True),
        (
            lambda s: s.answer(
                200,
                times=100,
                path="/v1/payouts",
                headers={"Content-Type": "text/html"},
                body=b"<html>payouts</html>",
            ),
            2,
            ["not JSON"],
            True,
        ),
    ],
    ids=["429-retry-after-120", "503-retry-after-date", "401", "403", "404", "405", "html"],
)
def test_each_answer_to_a_look_up_gets_its_exit_code_and_advice(
    live: LiveServer,
    work: Path,
    fault: Fault,
    exit_code: int,
    said: list[str],
    suggests_no_lookup: bool,
) -> None:
    fault(live.server)
    code, out, err = _submit(live, work, "--report", str(work / "r.csv"))
    assert code == exit_code, err
    told = out + err
    for words in said:
        assert words in told
    assert (NO_LOOKUP in told) is suggests_no_lookup
    if exit_code == 3:
        assert "does not work" not in told
    _nothing_recorded_or_paid(live, work)
    live.server.clear_faults()
    again = _submit(live, work)
    assert again[0] == 0, again[2]
    assert sorted(e.reference for e in live.server.ledger()) == references(ROWS)


def _batch(n: int) -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(n)
        ]
    )


@pytest.mark.parametrize(
    "fault",
    [
        lambda s: s.answer(503, times=1000, path="/v1/payouts"),  # a storm, no Retry-After
        lambda s: s.answer(502, times=1000, path="/v1/payouts"),
        lambda s: s.drop(times=1000, path="/v1/payouts"),  # no answer at all
    ],
    ids=["503-storm", "502-storm", "no-answer"],
)
def test_a_look_up_the_server_keeps_answering_later_is_run_again_later(
    tmp_path: Path, fault: Fault
) -> None:
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:
        fault(server)
        with Client(
            store=tmp_path / "s.db",
            clock=clock,
            policy=RetryPolicy(max_attempts=3, deadline=30),
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": "Bearer payroll-ops"},
        ) as client:
            report = submit(_batch(5), client, concurrency=2)
            assert client.store.counts()[State.PENDING] == 0
        assert server.ledger() == ()
    assert report.exit_code is ExitCode.RUN_AGAIN
    summary = report.summary()
    assert "the look-ups were cut short" in summary
    assert "run the same command again" in summary
    assert "--no-lookup" not in summary
    assert {row.state for row in report.rows} == {"not_sent"}
    assert all("look-ups were cut short" in row.reason for row in report.rows)


def test_a_send_the_server_asks_to_wait_past_the_deadline_is_named_in_the_summary(
    live: LiveServer, work: Path
) -> None:
    held = references(ROWS)[2]
    live.server.answer(429, retry_after=120, key=key_of(held))  # its POST only
    code, out, err = _submit(live, work, "--report", str(work / "r.csv"))
    assert code == 3, err
    assert "1 row(s) not sent: the server asked to wait 120 s (Retry-After)" in out
    assert "longer than a row may wait (60 s)" in out
    assert "run the same command again after" in out
    # The server's wait is honoured: run before it ends, the row is still held, and
    # the summary still says until when.
    again = _submit(live, work)
    assert again[0] == 3, again[2]
    assert "1 row(s) not sent: the server asked to wait" in again[1]
    assert sorted(e.reference for e in live.server.ledger()) == [
        ref for ref in references(ROWS) if ref != held
    ]
