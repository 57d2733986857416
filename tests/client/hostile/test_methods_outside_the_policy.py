"""`Client.put` / `Client.delete` with a policy that gives their method no key are
refused before anything is sent: an unsafe request with no key and no record could not
be retried safely, and would come back with no outcome."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, RetryPolicy, State

from .psp import PSP


@pytest.mark.parametrize("method", ["put", "delete"])
def test_a_method_outside_the_policy_is_refused_before_it_is_sent(
    tmp_path: Path, method: str
) -> None:
    psp = PSP()
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
    ) as client:
        with pytest.raises(ValueError, match="not an operation under this client's policy"):
            getattr(client, method)("/v1/payments/pay_1")
        assert list(client.store.operations()) == []
    assert psp.seen == []


def test_a_method_the_policy_covers_is_an_operation(tmp_path: Path) -> None:
    psp = PSP()
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        policy=RetryPolicy(methods=frozenset({"POST", "PUT"})),
    ) as client:
        outcome = client.put("/v1/payments/pay_1", json={"amount": 1})
    assert outcome.state is State.SUCCEEDED
    [(_, _, key, _)] = psp.seen
    assert key == outcome.key
