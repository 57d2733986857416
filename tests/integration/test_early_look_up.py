"""A look-up that finds nothing right after an attempt that may have been applied does
not say "never applied": the server may still be running that attempt (a request it
admitted and had not begun when it died, which its recovery finishes). Settled
`not_sent` at once, such an operation was sent again past the server's key retention
and paid twice. Its "none" counts once the server profile's `in_flight_for` has passed
since the last send; until then the operation stays unsettled and maybe applied.
Against the reference server, in process and over a loopback socket."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    ReconcileRequired,
    RetryPolicy,
    State,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.testing import ReferenceServer, serve

PAYMENT = {"amount": 700, "currency": "EUR", "reference": "inv-9"}
BY_REFERENCE = "/v1/payments?reference={reference}"
#: how long after a send a look-up's "none" is not believed: the server's in_flight_for,
#: and the skew allowed between the clocks of the store's hosts
WINDOW = profiles.reference.in_flight_for + CLOCK_SKEW
DAY = 86_400.0


@pytest.fixture(params=["in-process", "loopback"])
def psp(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Client, ReferenceServer, ManualClock]]:
    clock = ManualClock()
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer(clock=clock))
        if request.param == "loopback":
            where: dict[str, Any] = {"base_url": stack.enter_context(serve(server)).url}
        else:
            where = {"base_url": "https://psp.test", "transport": server.transport}
        client = stack.enter_context(
            Client(
                headers={"Authorization": "Bearer shop-1"},
                store=tmp_path / "s.db",
                clock=clock,
                policy=RetryPolicy(max_attempts=1),
                **where,
            )
        )
        yield client, server, clock


def _pay(client: Client) -> Any:
    return client.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")


def test_a_payment_the_server_finishes_after_an_early_look_up_is_paid_once(
    psp: tuple[Client, ReferenceServer, ManualClock],
) -> None:
    client, server, clock = psp
    server.crash("ADMITTED", path="/v1/payments")  # admitted, not begun, then died
    with pytest.raises(Indeterminate):
        _pay(client)
    with pytest.raises(Indeterminate, match="may still be running it") as early:
        client.reconcile("o", lookup=BY_REFERENCE)
    # It says when a "none" will count, and nothing was settled.
    assert early.value.outcome.not_before is not None
    assert clock.time() < early.value.outcome.not_before <= clock.time() + WINDOW
    record = client.store.get("o")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
    # The server's recovery makes the payment; past its key retention it forgets the key.
    clock.advance(WINDOW)
    server.recover()
    assert [e.reference for e in server.ledger()] == ["inv-9"]
    clock.advance(2 * DAY)
    server.reap()
    with pytest.raises(ReconcileRequired):  # maybe applied and old: never sent blindly
        _pay(client)
    assert client.reconcile("o", lookup=BY_REFERENCE).state is State.SUCCEEDED
    assert _pay(client).state is State.SUCCEEDED  # from the store
    assert len(server.ledger()) == 1


def test_a_payment_never_applied_is_settled_not_sent_once_the_window_has_passed(
    psp: tuple[Client, ReferenceServer, ManualClock],
) -> None:
    client, server, clock = psp
    server.answer(500, path="/v1/payments")  # answered before anything ran
    with pytest.raises(Indeterminate):
        _pay(client)
    with pytest.raises(Indeterminate, match="not found"):
        client.reconcile("o", lookup=BY_REFERENCE)
    clock.advance(WINDOW)
    settled = client.reconcile("o", lookup=BY_REFERENCE)
    assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)
    assert _pay(client).state is State.SUCCEEDED  # sent again with its key
    assert len(server.ledger()) == 1


def test_a_look_up_past_retention_is_not_held_by_the_stop_that_asked_for_it(
    psp: tuple[Client, ReferenceServer, ManualClock],
) -> None:
    # The common path: old and maybe applied, the call stops and asks for a look-up.
    # That stop sent nothing: the look-up right after it counts.
    client, server, clock = psp
    server.answer(500, path="/v1/payments")
    with pytest.raises(Indeterminate):
        _pay(client)
    clock.advance(2 * DAY)
    with pytest.raises(ReconcileRequired):
        _pay(client)
    settled = client.reconcile("o", lookup=BY_REFERENCE)
    assert settled.state is State.NOT_SENT
    assert _pay(client).state is State.SUCCEEDED
    assert len(server.ledger()) == 1
