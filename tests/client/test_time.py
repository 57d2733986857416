"""Time passing and clocks that jump: an operation id the store has known never gets a
second key, whatever the clock says at a client's start."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from idemclient import AnswerNotKept, Client, Indeterminate, ManualClock, ReconcileRequired, State
from idemclient.store import SQLiteStore

from .fakes import FakePSP, error

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
DAY = 24 * 3600.0
NOW = 1_800_000_000.0


def client(psp: FakePSP, store: Path, clock: ManualClock) -> Client:
    return Client(store=store, clock=clock, transport=psp.transport(), base_url="https://psp.test")


def test_an_operation_reissued_after_reaping_keeps_its_key_and_is_not_sent(tmp_path: Path) -> None:
    psp = FakePSP()
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        first = c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with client(psp, store, ManualClock(NOW + 8 * DAY)):
        pass  # reaping goes by the time the store had seen before: the next start reaps
    with client(psp, store, ManualClock(NOW + 8 * DAY + 60)) as c:
        again = c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert (again.key, again.state, again.from_store) == (first.key, State.SUCCEEDED, True)
    assert again.body_omitted  # what it said was reaped: flagged, never an empty body
    assert again.response is not None
    with pytest.raises(AnswerNotKept):
        again.response.json()
    assert len(psp.requests) == 1
    assert sum(psp.effects.values()) == 1
    with SQLiteStore(store) as opened:
        [record] = opened.operations()
    assert record.body == b""  # what was reaped: the bodies, not the operation
    assert record.response is not None
    assert record.response.body_omitted


def test_one_start_with_a_clock_a_month_fast_forgets_nothing(tmp_path: Path) -> None:
    psp = FakePSP()
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with client(psp, store, ManualClock(NOW + 30 * DAY)):
        pass  # a host whose clock was a month fast, once
    with client(psp, store, ManualClock(NOW + 60)):
        pass  # and the right time again
    with SQLiteStore(store) as opened:
        [record] = opened.operations()
    assert record.body != b""
    assert record.response is not None
    assert not record.response.body_omitted


def test_a_clock_that_went_back_is_reported_and_never_resends_blindly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c, pytest.raises(Indeterminate):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    sent = len(psp.requests)
    with (
        caplog.at_level(logging.WARNING, logger="idemclient"),
        client(psp, store, ManualClock(NOW - 2 * DAY)) as c,
        pytest.raises(ReconcileRequired, match="unknown"),
    ):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert "went back" in caplog.text
    assert len(psp.requests) == sent  # its age is unknown: looked up, never re-sent
