"""GoCardless against the reference server in its dialect: a key whose payment was
declined, sent again, is answered "already created" (409 naming the resource); so is a
key whose request the server still holds in flight, naming a pending resource. Neither
is a success: the fetched resource says what the payment came to. One effect each."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named
from idemclient.testing import ReferenceServer, serve

AUTH = {"Authorization": "Bearer alice"}


def _surely_ended(client: Client) -> None:
    """Wait out the hold on an attempt that may still run at the server (GoCardless's
    does not guard a key in flight): the client sends it again only after that."""
    clock = client.settings.clock
    assert isinstance(clock, ManualClock)
    clock.advance(named("gocardless").in_flight_for + CLOCK_SKEW)


PATH = "/v1/payments"
BODY = {"amount": 100, "currency": "EUR", "reference": "r1"}


@pytest.fixture(params=["in-process", "loopback"])
def gocardless(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Client, Any]]:
    """A client and the server, on one ManualClock (the client's `settings.clock`)."""
    clock = ManualClock()
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer(profile="gocardless", clock=clock))
        if request.param == "loopback":
            where: dict[str, Any] = {"base_url": stack.enter_context(serve(server)).url}
        else:
            where = {"base_url": "http://psp.test", "transport": server.transport}
        client = stack.enter_context(
            Client(
                store=tmp_path / "c.db",
                clock=clock,
                headers=AUTH,
                profile="gocardless",
                policy=RetryPolicy(max_attempts=1),
                **where,
            )
        )
        yield client, server


def test_a_declined_payment_named_again_is_failed_not_succeeded(
    gocardless: tuple[Client, Any],
) -> None:
    client, server = gocardless
    server.external_fault(1, "decline")
    server.drop(path=PATH)  # declined, and the answer lost
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    _surely_ended(client)
    (resumed,) = client.resume()  # sent again: "already created", naming it
    assert resumed.state is State.FAILED
    assert resumed.json()["status"] == "declined"
    again = client.post(PATH, json=BODY, operation_id="op")  # from the store
    assert again.state is State.FAILED
    (entry,) = server.ledger()
    assert (entry.status, entry.ext1_applied) == ("declined", 1)


def test_a_declined_payment_named_on_a_retry_is_failed(gocardless: tuple[Client, Any]) -> None:
    client, server = gocardless
    server.external_fault(1, "decline")
    server.drop(path=PATH)
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    _surely_ended(client)
    outcome = client.post(PATH, json=BODY, operation_id="op")  # issued again: resumed
    assert outcome.state is State.FAILED
    assert outcome.existing is not None
    assert len(server.ledger()) == 1


def test_an_applied_payment_named_again_is_succeeded(gocardless: tuple[Client, Any]) -> None:
    client, server = gocardless
    server.drop(path=PATH)
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    _surely_ended(client)
    (resumed,) = client.resume()
    assert resumed.state is State.SUCCEEDED
    assert resumed.json()["status"] == "succeeded"
    assert [e.ext2_applied for e in server.ledger()] == [1]


def test_a_payment_in_flight_at_a_dead_worker_is_held_then_settled_once(
    gocardless: tuple[Client, Any],
) -> None:
    client, server = gocardless
    server.crash("H1_DONE", path=PATH)  # the resource exists, pending; the worker died
    with pytest.raises(Indeterminate):
        client.post(PATH, json=BODY, operation_id="op")
    # At once: held, nothing sent (the first may still be running at the server).
    (held,) = client.resume()
    assert held.state is State.INDETERMINATE
    assert held.maybe_applied
    assert [e.status for e in server.ledger()] == ["pending"]
    _surely_ended(client)
    server.recover()
    (settled,) = client.resume()
    assert settled.state is State.SUCCEEDED
    (entry,) = server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)


def test_the_batch_reads_a_named_resource_as_the_client_does(
    gocardless: tuple[Client, Any], tmp_path: Path
) -> None:
    from idemclient.batch import read_batch, submit

    client, server = gocardless
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "employee_id,amount,currency,value_date\nE1,1000,EUR,2026-12-01\n", encoding="utf-8"
    )
    batch = read_batch(rows, reference_column="employee_id")
    server.external_fault(1, "decline")
    server.drop(path=PATH)
    first = submit(batch, client, path=PATH, lookup=None)
    assert [row.state for row in first.rows] == ["indeterminate"]
    _surely_ended(client)
    again = submit(batch, client, path=PATH, lookup=None)  # sent again: "already created"
    assert [row.state for row in again.rows] == ["failed"]
    (entry,) = server.ledger()
    assert entry.status == "declined"
