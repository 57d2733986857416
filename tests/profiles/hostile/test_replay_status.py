"""django-idempotency-key replays a stored success with HTTP 409, which is also what an
application answers for a conflict of its own. A 409 to a key no one can have sent
before is the application's refusal, not a payment made."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, State
from idemclient._call import CLOCK_SKEW
from idemclient.profiles import named

from ..scripted import Scripted

APPLICATION_CONFLICT = {"detail": "an order with this number exists"}


def test_a_409_to_a_fresh_key_is_a_refusal_not_a_replay(make: Callable[..., Client]) -> None:
    server = Scripted(httpx.Response(409, json=APPLICATION_CONFLICT))
    client = make(server, "django-idempotency-key")
    outcome = client.post("/orders", json={"number": 7})
    assert outcome.state is State.FAILED
    assert not outcome.replayed
    assert len(server.posts) == 1


def test_a_409_after_an_attempt_that_may_have_been_applied_is_the_replay(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    stored = {"id": "ord_1"}
    server = Scripted(httpx.ReadTimeout, httpx.Response(409, json=stored))
    # Sent again only once the first attempt has surely ended: the built-in profile
    # holds it for in_flight_for and the hosts' clock skew, past its server's five-minute
    # key retention, so here the server ends a request at once and keeps keys an hour.
    django = named("django-idempotency-key").replace(in_flight_for=0.0).with_retention(3600.0)
    client = make(server, django)
    with pytest.raises(Indeterminate):
        client.post("/orders", json={"number": 7}, operation_id="o-1")
    clock.advance(CLOCK_SKEW)
    outcome = client.post("/orders", json={"number": 7}, operation_id="o-1")
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert outcome.json() == stored


def test_a_409_to_a_key_the_caller_chose_may_be_a_replay(make: Callable[..., Client]) -> None:
    # The caller's key (or an identity's) may have been sent from another store.
    server = Scripted(httpx.Response(409, json={"id": "ord_2"}))
    client = make(server, "django-idempotency-key")
    outcome = client.post("/orders", json={"number": 8}, identity=("order", "8"))
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
