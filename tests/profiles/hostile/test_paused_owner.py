"""A process paused (or slow) mid-request while another resumes the same operation:
under a profile whose server does not refuse a second request with a key still running
(paypal, square, wise, django-idempotency-key), the second must not send: the server
would run it beside the first, a second payment. It waits on the store for the first
owner's answer, and within its deadline, stops (maybe applied), never with a new key.
The reference server is given a long lease so that it, too, still holds the first
request in flight when the client's lease has lapsed."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from idemclient import Client, Indeterminate, ManualClock, ReconcileRequired, State
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named
from idemclient.testing import ReferenceServer, serve

AUTH = {"Authorization": "Bearer alice"}
BODY = {"amount": 100, "currency": "EUR", "reference": "r1"}
PATHS = {
    "paypal": "/v2/checkout/orders",
    "square": "/v2/payments",
    "wise": "/v1/transfers",
    "django-idempotency-key": "/v1/payments",
    # Guarded: the second request is answered "still running" and polled, never run.
    "reference": "/v1/payments",  # 409 with Retry-After
    "adyen": "/v71/payments",  # 422 with errorCode 704
    "razorpay": "/v1/payouts",  # 500 with idempotency_key_in_use
}


@pytest.fixture(params=["in-process", "loopback"])
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Pair:
    """Two clients of one store (two processes, as far as the store can tell), and a
    server whose first payment is held mid-way until released."""

    def __init__(self, stack: ExitStack, profile: str, where: str, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.server = stack.enter_context(
            ReferenceServer(profile=profile, clock=self.clock, lease=3600.0)
        )
        if where == "loopback":
            place: dict[str, Any] = {"base_url": stack.enter_context(serve(self.server)).url}
        else:
            place = {"base_url": "http://psp.test", "transport": self.server.transport}

        def client() -> Client:
            return stack.enter_context(
                Client(
                    store=tmp_path / "shared.db",
                    clock=self.clock,
                    headers=AUTH,
                    profile=profile,
                    **place,
                )
            )

        self.first, self.second = client(), client()
        self.path = PATHS[profile]


@pytest.mark.parametrize("profile", list(PATHS))
@pytest.mark.parametrize("how", ["resume", "issued again"])
def test_a_paused_sender_s_operation_is_never_sent_beside_it(
    profile: str, how: str, where: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        pair = Pair(stack, profile, where, tmp_path)
        gate = pair.server.hold_external(1, timeout=30.0)
        done: dict[str, Any] = {}

        def first() -> None:
            try:
                done["first"] = pair.first.post(pair.path, json=BODY, operation_id="op")
            except Indeterminate as exc:
                # Over a socket the first caller's own deadline passes while it is
                # paused: its answer is lost to it, never a reason to pay again.
                done["first"] = exc.outcome

        thread = threading.Thread(target=first)
        thread.start()
        try:
            assert gate.wait_until_reached(10.0)  # the server holds it in flight
            pair.clock.advance(200.0)  # past the first sender's lease: it is paused
            if how == "resume":
                (second,) = pair.second.resume()
                assert second.state is State.INDETERMINATE
                assert second.maybe_applied
            else:
                with pytest.raises(Indeterminate) as raised:
                    pair.second.post(pair.path, json=BODY, operation_id="op")
                assert raised.value.outcome.key == pair.second.store.get("op").key  # type: ignore[union-attr]
        finally:
            gate.release()
            thread.join(30.0)
        assert done["first"].state in (State.SUCCEEDED, State.INDETERMINATE)
        # One payment, under the one key; the second caller reads the first's answer.
        (entry,) = pair.server.ledger()
        assert entry.idempotency_key == done["first"].key
        if done["first"].state is State.INDETERMINATE and profile == "django-idempotency-key":
            # Its server keeps keys 300 s: a maybe-applied operation is looked up, not sent.
            with pytest.raises(ReconcileRequired):
                pair.second.post(pair.path, json=BODY, operation_id="op")
        else:
            if done["first"].state is State.INDETERMINATE and not named(profile).guards_in_flight:
                # The client holds it until the first attempt has surely ended.
                with pytest.raises(Indeterminate, match="in_flight_for"):
                    pair.second.post(pair.path, json=BODY, operation_id="op")
                pair.clock.advance(named(profile).in_flight_for + CLOCK_SKEW)
            again = pair.second.post(pair.path, json=BODY, operation_id="op")
            assert again.state is State.SUCCEEDED
        assert len(pair.server.ledger()) == 1
