"""Under a profile whose server runs a second request beside one still in flight under
its key (`guards_in_flight=False`), an attempt that may have been applied holds the
operation for the profile's `in_flight_for`, and the skew allowed between the clocks of
the store's hosts (`CLOCK_SKEW`): no call, re-issue or `resume()` sends it before then,
in any process (the hold is the store's `not_before`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named

from ..scripted import Scripted

BODY = {"amount": 100, "currency": "EUR"}
PATH = "/v2/payments/captures"
KEY = "0b9c6f1e-2d4a-4c8e-9f10-3a5b7c9d1e2f"


@pytest.mark.parametrize("profile", ["paypal", "square", "wise", "gocardless"])
def test_a_maybe_applied_attempt_holds_the_operation_for_in_flight_for(
    make: Callable[..., Client], clock: ManualClock, profile: str
) -> None:
    assert named(profile).in_flight_for == 900.0
    hold = named(profile).in_flight_for + CLOCK_SKEW
    server = Scripted(httpx.ReadTimeout)
    client = make(server, profile, policy=RetryPolicy(max_attempts=3))
    body = {**BODY, "idempotency_key": KEY, "customerTransactionId": KEY}
    with pytest.raises(Indeterminate):
        client.post(PATH, json=body, key=KEY)
    assert len(server.posts) == 1  # not retried: the first may still run there
    clock.advance(hold / 2)
    with pytest.raises(Indeterminate, match="in_flight_for") as held:
        client.post(PATH, json=body, key=KEY)
    assert held.value.outcome.maybe_applied
    (resumed,) = client.resume()
    assert resumed.state is State.INDETERMINATE
    assert len(server.posts) == 1  # nothing sent while held, by a call or a resume
    clock.advance(hold / 2)
    outcome = client.post(PATH, json=body, key=KEY)
    assert outcome.state is State.SUCCEEDED
    assert len(server.posts) == 2


def test_the_hold_is_kept_in_the_store_for_another_process(
    make: Callable[..., Client], clock: ManualClock, store_path: Path
) -> None:
    server = Scripted(httpx.ReadTimeout)
    first = make(server, "paypal")
    with pytest.raises(Indeterminate):
        first.post(PATH, json=BODY, operation_id="op")
    first.close()
    second = make(server, "paypal")  # a new process on the same store file
    (resumed,) = second.resume()
    assert resumed.state is State.INDETERMINATE
    assert resumed.not_before is not None
    assert len(server.posts) == 1


def test_a_refusal_while_held_does_not_extend_the_hold(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "paypal")
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    for _ in range(5):
        clock.advance(100)
        with pytest.raises(Indeterminate, match="in_flight_for"):
            client.post(PATH, json=BODY, operation_id="op")
    # 1,200 s after the attempt (in_flight_for and the skew), whatever was refused
    clock.advance(700)
    # (a short hold left is waited out within the call: here none is left)
    assert client.post(PATH, json=BODY, operation_id="op").state is State.SUCCEEDED


def test_a_server_that_guards_its_keys_is_retried_at_once(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "stripe")
    outcome = client.post("/v1/payment_intents", json=BODY, operation_id="op")
    assert outcome.state is State.SUCCEEDED
    assert len(server.posts) == 2  # its in-flight guard answers a second request safely


def test_a_profile_can_say_its_server_finishes_sooner(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, named("paypal").replace(in_flight_for=60.0))
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    clock.advance(60 + CLOCK_SKEW)
    assert client.post(PATH, json=BODY, operation_id="op").state is State.SUCCEEDED


def test_a_hold_from_a_send_stamped_by_a_slow_host_lasts_the_server_s_whole_window(
    store_path: Path, clock: ManualClock
) -> None:
    # Hosts sharing a store may be CLOCK_SKEW apart. A host 290 s slow sent it (its
    # stamp 290 s early); a host whose clock is right re-issues it 800 s after the true
    # send, within the server's in_flight_for: held, not sent beside the first.
    server = Scripted(httpx.ReadTimeout)

    def on(at: ManualClock) -> Client:
        return Client(
            store=store_path,
            clock=at,
            transport=httpx.MockTransport(server),
            base_url="https://api.psp.test",
            profile="paypal",
            headers={"Authorization": "Bearer sk_test"},
        )

    slow = ManualClock(start=clock.time() - 290.0)  # within the skew: no step seen
    with on(slow) as sender, pytest.raises(Indeterminate):
        sender.post(PATH, json=BODY, operation_id="op")
    clock.advance(800.0)
    with on(clock) as right:
        with pytest.raises(Indeterminate, match="in_flight_for"):
            right.post(PATH, json=BODY, operation_id="op")
        (resumed,) = right.resume()
        assert resumed.state is State.INDETERMINATE
        assert len(server.posts) == 1
        # The stamp, the server's in_flight_for and the skew: 910 s after the true send.
        clock.advance(110.0)
        assert right.post(PATH, json=BODY, operation_id="op").state is State.SUCCEEDED
    assert len(server.posts) == 2
