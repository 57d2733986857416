"""`RetryPolicy(wait=...)`: a tenacity wait strategy a team already tuned, in place of the
policy's own backoff, still under the server's Retry-After and the one deadline.

The waits are read from a `ManualClock` (nothing sleeps); the 503s come from the
reference server, which never applies a request it answers so."""

from __future__ import annotations

from pathlib import Path

import pytest
import tenacity

import idemclient
from idemclient import Client, ManualClock, RetryPolicy
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 500, "currency": "EUR", "reference": "order-7"}


def _run(tmp_path: Path, server: ReferenceServer, policy: RetryPolicy) -> ManualClock:
    clock = ManualClock()
    with Client(
        base_url="https://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer sk_test_merchant"},
        store=tmp_path / "payments.db",
        clock=clock,
        policy=policy,
    ) as psp:
        outcome = psp.post("/v1/payments", json=PAYMENT, operation_id="order-7")
        outcome.raise_for_status()
    return clock


def test_the_strategy_decides_each_wait(tmp_path: Path) -> None:
    strategy = tenacity.wait_exponential(multiplier=1, max=5) + tenacity.wait_fixed(0.5)
    with ReferenceServer() as server:
        server.answer(503, times=4)
        clock = _run(tmp_path, server, RetryPolicy(wait=strategy))
        assert len(server.ledger()) == 1
    # tenacity's own arithmetic for attempts 1..4, no jitter of ours on top
    assert clock.sleeps == pytest.approx([1.5, 2.5, 4.5, 5.5])


def test_the_servers_retry_after_is_still_a_floor(tmp_path: Path) -> None:
    with ReferenceServer() as server:
        server.answer(503, times=1, retry_after=7)
        clock = _run(tmp_path, server, RetryPolicy(wait=tenacity.wait_fixed(1)))
    assert clock.sleeps == pytest.approx([7.0])


def test_a_wait_past_the_deadline_is_never_slept(tmp_path: Path) -> None:
    with ReferenceServer() as server:
        server.answer(503, times=1)
        policy = RetryPolicy(deadline=30.0, wait=tenacity.wait_fixed(3600))
        with pytest.raises(idemclient.NotSent, match="does not fit"):
            _run(tmp_path, server, policy)
        assert server.ledger() == ()


@pytest.mark.parametrize(
    ("wait", "message"),
    [
        (3, "must be a tenacity wait strategy"),  # a number is not a strategy
        (tenacity.wait_exception(lambda exc: 1.0), "attempt number only"),  # reads the error
    ],
)
def test_a_strategy_that_cannot_work_is_refused_when_the_policy_is_made(
    wait: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(wait=wait)  # type: ignore[arg-type]
