"""A receiving process killed (SIGKILL) mid-delivery: the redelivery finishes the job,
with exactly one effect.

The reference server runs in this process on the real clock and delivers over a real
loopback connection to a receiver in a child process.
"""

from __future__ import annotations

import selectors
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from idemclient.clock import SystemClock
from idemclient.testing import ReferenceServer
from idemclient.testing._machine.webhooks import retry_delay

from .conftest import SECRET, effects, recorded_ids

CHILD = Path(__file__).with_name("receiver_child.py")


@contextmanager
def receiver_process(db: Path, mode: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), SECRET, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        # A bounded wait for the one line the child prints when it listens.
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=20), "the receiver did not start"
        line = process.stdout.readline()
        assert line.startswith("listening on "), line + process.stderr.read()
        yield line.split()[-1], process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=20)


def pay_three(server: ReferenceServer) -> None:
    with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
        for n in range(3):
            response = client.post(
                "/v1/payments",
                json={"amount": 100, "currency": "EUR", "reference": f"order-{n}"},
                headers={"Authorization": "Bearer alice", "Idempotency-Key": f"k-{n}"},
            )
            assert response.status_code == 201


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize(
    ("mode", "committed_before_the_kill"),
    [
        ("before-commit", 0),  # effect written, not committed: it must not survive
        ("after-commit", 1),  # committed, the 2xx never left: the redelivery is a duplicate
    ],
)
def test_a_receiver_killed_mid_delivery_finishes_on_redelivery_exactly_once(
    app_db: Path, mode: str, committed_before_the_kill: int, journal: str
) -> None:
    with sqlite3.connect(app_db) as conn:  # a rollback journal, or a write-ahead log
        assert conn.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0] == journal
    # The real clock: the child verifies signatures against its own wall clock.
    with ReferenceServer(clock=SystemClock()) as server:
        pay_three(server)
        first = server.webhook_events()[0]
        with receiver_process(app_db, mode) as (url, doomed):
            server.set_webhook_endpoint(url, secrets=[SECRET])
            report = server.deliver_webhooks()
            assert doomed.wait(timeout=20) == -9  # SIGKILL, by its own hand
        # The first delivery died with the receiver; the rest found nobody listening.
        assert (report.delivered, report.failed) == (0, 3)
        assert effects(app_db) == ({first.id: 1} if committed_before_the_kill else {})
        assert len(recorded_ids(app_db)) == committed_before_the_kill

        with receiver_process(app_db, "normal") as (url, _):
            server.set_webhook_endpoint(url, secrets=[SECRET])
            server.clock.advance(retry_delay(1))  # the first retry is now due
            assert server.deliver_webhooks().delivered == 3
            events = server.webhook_events()
    assert effects(app_db) == {e.id: 1 for e in events}
    assert {e.state for e in events} == {"delivered"}
    assert [e.attempts for e in events] == [2, 2, 2]
