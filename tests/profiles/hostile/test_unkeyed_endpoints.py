"""Razorpay reads a key on Create Payout and Direct Transfers only: any other request
under its profile would carry a key the server ignores, and a retry would run it twice."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, State, wrap
from idemclient.store import SQLiteStore

from ..scripted import Scripted


@pytest.mark.parametrize(
    "path",
    [
        "/v1/payments/pay_1/refund",
        "/v1/payments/pay_1/transfers",  # a transfer from a payment, not a direct one
        "/v1/orders",
    ],
)
def test_a_request_where_razorpay_reads_no_key_is_refused_before_sending(
    make: Callable[..., Client], path: str
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "razorpay")
    with pytest.raises(ValueError, match="takes no idempotency key"):
        client.post(path, json={"amount": 100})
    assert server.requests == []
    assert client.store.operations() == []


@pytest.mark.parametrize(
    ("path", "header"),
    [("/v1/payouts", "X-Payout-Idempotency"), ("/v1/transfers", "X-Transfer-Idempotency")],
)
def test_payouts_and_direct_transfers_are_still_operations(
    make: Callable[..., Client], path: str, header: str
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "razorpay")
    outcome = client.post(path, json={"amount": 100})
    assert outcome.state is State.SUCCEEDED
    assert [r.headers[header] for r in server.posts] == [outcome.key, outcome.key]


def test_under_wrap_a_refund_passes_through_once(tmp_path: object) -> None:
    server = Scripted(httpx.ReadTimeout)
    store = SQLiteStore(tmp_path / "s.db")  # type: ignore[operator]
    http = wrap(
        httpx.Client(transport=httpx.MockTransport(server)), store=store, profile="razorpay"
    )
    with pytest.raises(httpx.ReadTimeout):
        http.post("https://api.psp.test/v1/payments/pay_1/refund", json={"amount": 100})
    assert len(server.posts) == 1
    assert "x-payout-idempotency" not in server.posts[0].headers
    assert store.operations() == []
    http.close()


def test_an_operation_recorded_ahead_is_refused_where_razorpay_reads_no_key(
    make: Callable[..., Client],
) -> None:
    # What the transactional outbox records before it sends (see postgres/_outbox.py).
    from idemclient._operations import intent_ahead

    client = make(Scripted(), "razorpay")
    with pytest.raises(ValueError, match="takes no idempotency key"):
        intent_ahead(client.http, "POST", "/v1/payments/pay_1/refund", json={"amount": 1})
    assert intent_ahead(client.http, "POST", "/v1/payouts", json={"amount": 1}).profile == (
        "razorpay"
    )


@pytest.mark.parametrize(
    ("asked", "sent", "keyed"),
    [
        ("/v1/payouts", "/v1/payments/pay_1/refund", False),
        ("/v1/payments/pay_1/refund", "/v1/payouts", True),
    ],
)
def test_a_request_hook_that_moves_the_request_is_judged_where_it_goes(
    tmp_path: object, asked: str, sent: str, keyed: bool
) -> None:
    # The transport judges the request it is given: one a request hook moved to
    # another endpoint is an operation, or not, by where it now goes.
    def move(request: httpx.Request) -> None:
        request.url = request.url.copy_with(path=sent)

    server = Scripted()
    store = SQLiteStore(tmp_path / "s.db")  # type: ignore[operator]
    http = wrap(
        httpx.Client(transport=httpx.MockTransport(server), event_hooks={"request": [move]}),
        store=store,
        profile="razorpay",
    )
    response = http.post(f"https://api.psp.test{asked}", json={"amount": 100})
    assert response.status_code == 201
    assert [r.url.path for r in server.posts] == [sent]
    assert ("x-payout-idempotency" in server.posts[0].headers) is keyed
    assert len(store.operations()) == (1 if keyed else 0)
    http.close()
