"""Checkout.com keeps only 2xx answers under a key: after a 5xx that may have been
applied, the same key sent again runs the payment again. Neither the call nor a later
re-issue or resume may send it again; it is looked up."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, Indeterminate, ReconcileRequired, RetryPolicy, State

from ..scripted import Scripted


@pytest.mark.parametrize("status", [500, 502, 504])
def test_a_reissue_after_an_unstored_answer_is_looked_up_not_sent(
    make: Callable[..., Client], status: int
) -> None:
    server = Scripted(httpx.Response(status))
    client = make(server, "checkout")
    with pytest.raises(Indeterminate):
        client.post("/payments", json={"amount": 100}, key="k-1")
    for _ in range(2):  # and stays so: the stop does not forget why
        with pytest.raises(ReconcileRequired, match=f"HTTP {status}"):
            client.post("/payments", json={"amount": 100}, key="k-1")
    assert client.resume()[0].state is State.INDETERMINATE
    assert len(server.posts) == 1


def test_after_a_stored_kind_of_answer_the_reissue_is_sent(make: Callable[..., Client]) -> None:
    # A read timeout is not an answer the server chose not to keep: the key holds.
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "checkout", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(Indeterminate):
        client.post("/payments", json={"amount": 100}, key="k-2")
    assert client.post("/payments", json={"amount": 100}, key="k-2").state is State.SUCCEEDED
    assert len(server.posts) == 2


def test_a_profile_that_keeps_5xx_answers_sends_the_reissue(make: Callable[..., Client]) -> None:
    server = Scripted(*[httpx.Response(500)] * 8)
    client = make(server, "stripe")
    with pytest.raises(Indeterminate):
        client.post("/v1/payment_intents", json={"amount": 100}, key="k-3")
    assert client.post("/v1/payment_intents", json={"amount": 100}, key="k-3").succeeded
