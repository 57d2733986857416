"""Attacks on django-idempotency-key's 409 (a replay, or the application's own
conflict): histories where the client reads a 409 as a refusal, or as the stored
success, though the key may have been sent by another process."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, ManualClock, NotSent, ReconcileRequired, State

from ..scripted import Scripted

CONFLICT = {"detail": "an order with this number exists"}
# Asked to wait past the call's patience: nothing reached the server, not_sent.
BUSY = httpx.Response(429, headers={"Retry-After": "3600"})


def test_a_callers_key_continued_by_operation_id_alone_is_still_one_others_may_know(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    # The operation was recorded with the caller's key (an order number others may
    # send under too); issued again by its operation id alone, it is sent under that
    # same key. A 409 to it, with no attempt of ours before that may have been applied,
    # is another sender's payment replayed or the application's refusal: never
    # `failed` (the caller would pay again under another key).
    server = Scripted(BUSY, httpx.Response(409, json={"id": "ord_paid_elsewhere"}))
    client = make(server, "django-idempotency-key")
    with pytest.raises(NotSent):
        client.post("/orders", json={"number": 1}, key="order-1", operation_id="o-1")
    clock.advance(3600)
    with pytest.raises(ReconcileRequired) as raised:
        client.post("/orders", json={"number": 1}, operation_id="o-1")
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied) == (State.INDETERMINATE, True)
    assert [r.headers["idempotency-key"] for r in server.posts] == ["order-1", "order-1"]
