"""The code in docs/guides/testing.md works as written."""

from __future__ import annotations

from pathlib import Path

import idemclient
from idemclient.testing import ReferenceServer


def checkout(psp: idemclient.Client, order: dict[str, object]) -> idemclient.Outcome:
    return psp.post(
        "/v1/payments",
        json={"amount": order["amount"], "currency": "EUR", "reference": order["number"]},
        operation_id=f"order-{order['number']}",
    )


def test_checkout_survives_a_dropped_answer(
    reference_server: ReferenceServer, tmp_path: Path
) -> None:
    order = {"number": "1042", "amount": 2500}
    reference_server.drop(path="/v1/payments")  # apply, then cut the connection
    with idemclient.Client(
        base_url="https://psp.test",
        transport=reference_server.transport,  # in-process: no socket
        headers={"Authorization": "Bearer shop-1"},
        store=tmp_path / "payments.db",
        clock=reference_server.clock,  # one clock: nothing really sleeps
    ) as psp:
        outcome = checkout(psp, order)
    assert outcome.replayed
    [payment] = reference_server.ledger()
    assert (payment.ext1_applied, payment.ext2_applied) == (1, 1)
