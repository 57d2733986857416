"""A send recorded long after its intent is a time the store has seen: a host clock set
back below it while no client ran is seen at the next start, so that the operation,
maybe applied and perhaps past the server's key retention, is looked up, never sent
again on the age its intent's stamp shows."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, NotSent, Outcome, ReconcileRequired

from .fakes import FakePSP, SetClock, error, forgets

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
DAY = 24 * 3600.0
HOUR = 3600.0


def _client(psp: FakePSP, store: Path, clock: ManualClock) -> Client:
    return Client(store=store, clock=clock, transport=psp.transport(), base_url="https://psp.test")


def _pay(c: Client) -> Outcome:
    return c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")


def test_a_clock_set_back_below_a_late_send_is_seen_and_nothing_is_paid_twice(
    tmp_path: Path,
) -> None:
    psp = FakePSP(
        *[error(httpx.ConnectError)] * 8,  # the intent's first call: nothing reaches it
        *[error(httpx.ReadTimeout, apply=True)] * 8,  # an hour on: applied, unanswered
    )
    store = tmp_path / "c.db"
    clock = SetClock()
    with _client(psp, store, clock) as c:
        with pytest.raises(NotSent):
            _pay(c)
        clock.advance(HOUR)  # the same process, an hour on: sent, maybe applied
        with pytest.raises(Indeterminate):
            _pay(c)
    # Two days pass with nothing running: the server forgets the key after 24 hours,
    # and the host's clock comes back set 55 minutes behind the last send.
    clock.advance(2 * DAY)
    forgets(psp)
    clock.offset = -(2 * DAY + 55 * 60)
    with _client(psp, store, clock) as c, pytest.raises(ReconcileRequired):
        _pay(c)  # by its intent's stamp, five minutes old: it would be sent again
    assert sum(psp.effects.values()) == 1
