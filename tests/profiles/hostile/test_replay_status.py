"""django-idempotency-key replays a stored success with HTTP 409, which is also what an
application answers for a conflict of its own. A 409 to a key no one can have sent
before is the application's refusal, not a payment made; after an attempt of ours that
may have been applied, the replay of it; to a key others may know (the caller's), with
no attempt of ours before, either: maybe applied, for a look-up to settle."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, ReconcileRequired, State
from idemclient._profile import DAY
from idemclient._time import CLOCK_SKEW
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


def test_a_409_to_a_key_the_caller_chose_may_be_a_replay_or_a_refusal(
    make: Callable[..., Client],
) -> None:
    # The caller's key (or an identity's) may have been sent from another store: the
    # replay of that payment, or the application's own refusal. Maybe applied, never
    # succeeded (nothing may have been paid) nor failed (it may have been).
    server = Scripted(httpx.Response(409, json=APPLICATION_CONFLICT))
    client = make(server, "django-idempotency-key")
    with pytest.raises(ReconcileRequired, match="application's own refusal") as raised:
        client.post("/orders", json={"number": 8}, identity=("order", "8"))
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied) == (State.INDETERMINATE, True)
    assert not outcome.replayed
    record = client.store.get(outcome.operation_id)
    assert record is not None
    assert record.replay_unexplained
    assert len(server.posts) == 1


# Sent again at once, where the profile allows it: no hold, and keys kept a day.
AT_ONCE = named("django-idempotency-key").replace(in_flight_for=0.0, key_retention=DAY)


def test_a_second_call_after_an_unexplained_409_does_not_take_the_next_409_as_a_replay(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    server = Scripted(
        httpx.Response(409, json=APPLICATION_CONFLICT),
        httpx.Response(409, json=APPLICATION_CONFLICT),
    )
    client = make(server, AT_ONCE)
    for _ in range(2):
        with pytest.raises(ReconcileRequired):
            client.post("/orders", json={"number": 9}, identity=("order", "9"))
        clock.advance(CLOCK_SKEW)  # the hold: in_flight_for (none here) and the skew
    assert len(server.posts) == 2  # the first 409 made the operation maybe applied


def test_after_an_unexplained_409_a_409_after_our_own_timeout_is_no_replay_either(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    # The application refuses every time; our own attempt in between timed out. Its 409
    # reads as before: the refusal, or a replay, not told apart.
    server = Scripted(
        httpx.Response(409, json=APPLICATION_CONFLICT),
        httpx.ReadTimeout,
        httpx.Response(409, json=APPLICATION_CONFLICT),
    )
    client = make(server, AT_ONCE)
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 10}, identity=("order", "10"))
    clock.advance(CLOCK_SKEW)
    with pytest.raises(Indeterminate):
        client.post("/orders", json={"number": 10}, identity=("order", "10"))
    clock.advance(CLOCK_SKEW)
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 10}, identity=("order", "10"))
    assert len(server.posts) == 3


def _found(payments: list[dict[str, str]]) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(200, json={"data": payments})


@pytest.mark.parametrize(
    ("payments", "settled"),
    [
        ([{"id": "ord_3", "status": "succeeded"}], State.SUCCEEDED),
        ([], State.NOT_SENT),
    ],
)
def test_a_look_up_settles_an_unexplained_409_either_way(
    make: Callable[..., Client],
    clock: ManualClock,
    payments: list[dict[str, str]],
    settled: State,
) -> None:
    # Found, the 409 was its replay (naming it); none found, the application's own
    # conflict (a 409 naming a payment is never settled by a look-up that misses it:
    # test_refused_settle_attacks).
    answer = {"id": "ord_3"} if payments else APPLICATION_CONFLICT
    server = Scripted(httpx.Response(409, json=answer), get=_found(payments))
    client = make(server, "django-idempotency-key")
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 11}, operation_id="o-11", key="order-11")
    # A look-up's "none" counts once the server has had in_flight_for (and the hosts'
    # clock skew) to finish.
    clock.advance(named("django-idempotency-key").in_flight_for + CLOCK_SKEW)
    outcome = client.reconcile("o-11", lookup="/orders?key={key}")
    assert outcome.state is settled
    assert len(server.posts) == 1
