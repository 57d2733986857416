"""A look-up template that puts the reference inside a search query's quotes (Stripe's
``metadata['reference']:'{reference}'``): a reference with a quote in it must not change
the query. Read unescaped, it could match another payment (an operation never applied
reported as succeeded) or none (an applied one settled as not sent, and paid twice).
The reference server reads the query as Stripe's search language does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State, profiles
from idemclient._reconcile import Unquotable, fill, quoting_of
from idemclient._time import CLOCK_SKEW
from idemclient.testing import ReferenceServer, serve

from ..scripted import Scripted

AUTH = {"Authorization": "Bearer alice"}
PATH = "/v1/payment_intents"
STRIPE_SEARCH = profiles.stripe.lookup.template if profiles.stripe.lookup else ""


@pytest.fixture(params=["in-process", "loopback"])
def stripe(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Client, Any]]:
    clock = ManualClock()
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer(profile="stripe", clock=clock))
        if request.param == "loopback":
            where: dict[str, Any] = {"base_url": stack.enter_context(serve(server)).url}
        else:
            where = {"base_url": "http://psp.test", "transport": server.transport}
        client = stack.enter_context(
            Client(
                store=tmp_path / "c.db",
                clock=clock,
                headers=AUTH,
                profile="stripe",
                policy=RetryPolicy(max_attempts=1),
                **where,
            )
        )
        yield client, server


def _pay(client: Client, reference: str, operation_id: str) -> Any:
    body = {"amount": 100, "currency": "EUR", "reference": reference}
    return client.post(
        PATH,
        json={**body, "metadata": {"reference": reference}},
        operation_id=operation_id,
        reference=reference,
    )


def test_a_quote_in_the_reference_cannot_make_the_look_up_find_another_payment(
    stripe: tuple[Client, Any],
) -> None:
    client, server = stripe
    assert _pay(client, "inv-A", "op-a").state is State.SUCCEEDED
    # B never reaches the phase machine: a 500 it may count as applied.
    server.answer(500, path=PATH)
    injected = "inv-B' OR metadata['reference']:'inv-A"
    with pytest.raises(Indeterminate):
        _pay(client, injected, "op-b")
    # Once the server has had its time to finish the attempt (see test_early_look_up).
    client.settings.clock.advance(profiles.stripe.in_flight_for + CLOCK_SKEW)  # type: ignore[attr-defined]
    outcome = client.reconcile("op-b")
    # Read as one quoted string, no payment has that reference: never applied.
    assert outcome.state is State.NOT_SENT
    assert [entry.reference for entry in server.ledger()] == ["inv-A"]


def test_a_quote_in_the_reference_cannot_make_the_look_up_miss_its_payment(
    stripe: tuple[Client, Any],
) -> None:
    client, server = stripe
    reference = "inv-C' AND status:'never"
    server.drop(path=PATH)  # applied, the answer lost
    with pytest.raises(Indeterminate):
        _pay(client, reference, "op-c")
    outcome = client.reconcile("op-c")
    assert outcome.state is State.SUCCEEDED
    assert [p["reference"] for p in outcome.json()["data"]] == [reference]
    # Settled, so issuing it again pays nothing more.
    assert _pay(client, reference, "op-c").state is State.SUCCEEDED
    assert [entry.reference for entry in server.ledger()] == [reference]


def test_an_apostrophe_in_a_reference_is_found(stripe: tuple[Client, Any]) -> None:
    client, server = stripe
    server.drop(path=PATH)
    with pytest.raises(Indeterminate):
        _pay(client, 'O\'Brien "Ltd" 7', "op-d")
    assert client.reconcile("op-d").state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_a_reference_the_query_cannot_carry_is_left_unsettled_and_not_looked_up(
    stripe: tuple[Client, Any],
) -> None:
    client, server = stripe
    server.drop(path=PATH)
    with pytest.raises(Indeterminate):
        _pay(client, "inv\\E", "op-e")
    with pytest.raises(Indeterminate, match="cannot carry safely"):
        client.reconcile("op-e")
    record = client.store.get("op-e")
    assert record is not None
    assert record.state is State.INDETERMINATE
    assert record.maybe_applied
    assert len(server.ledger()) == 1


# -- fill, pure ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "quoting"),
    [
        ("/v1/payments?reference={reference}", "url"),  # a whole query value
        ("/v1/orders/{reference}/payments", "url"),  # a path segment
        (STRIPE_SEARCH, "search"),  # inside %27...%27
        ("/search?query=ref:'{reference}'", "search"),  # inside a literal quote
        ('/search?query=ref:"{key}"', "search"),  # the key too
        ("/search?query=ref%3A%22{reference}%22", "search"),  # %22, any case of hex
        ("/search?k={key}&query=ref:'{reference}'", "search"),  # the second slot decides
    ],
)
def test_how_a_template_quotes_its_slots_is_read_from_it(template: str, quoting: str) -> None:
    assert quoting_of(template) == quoting


@pytest.mark.parametrize(
    ("reference", "inside"),
    [
        ("inv-1", "inv-1"),
        ("it's", "it%5C%27s"),  # \'
        ('say "hi"', "say%20%5C%22hi%5C%22"),  # \"
        ("x' OR status:'y", "x%5C%27%20OR%20status%3A%5C%27y"),
    ],
)
def test_a_search_slot_escapes_quotes_then_url_quotes(reference: str, inside: str) -> None:
    url = fill("/s?query=r:'{reference}'", key="k", reference=reference, name="op")
    assert url == f"/s?query=r:'{inside}'"


@pytest.mark.parametrize("reference", ["a\\b", "a\nb", "a\x00b", "a\x7fb"])
def test_a_search_slot_refuses_what_it_cannot_quote(reference: str) -> None:
    with pytest.raises(Unquotable, match="cannot carry safely"):
        fill(STRIPE_SEARCH, key="k", reference=reference, name="op")
    # A plain URL slot carries anything: the server reads the value whole.
    assert fill("/p?reference={reference}", key="k", reference=reference, name="op")


def test_the_stripe_profile_says_its_look_up_is_a_search() -> None:
    assert profiles.stripe.lookup is not None
    assert profiles.stripe.lookup.quoting == "search"
    with pytest.raises(ValueError, match="quoting"):
        profiles.Lookup("/x?q={reference}", quoting="sql")


def test_the_batch_sends_nothing_when_a_search_look_up_cannot_carry_a_reference(
    make: Callable[..., Client], tmp_path: Path
) -> None:
    from idemclient.batch import BatchInvalid, read_batch, submit

    rows = tmp_path / "rows.csv"
    rows.write_text(
        "employee_id,amount,currency,value_date\nE\\1,1000,EUR,2026-12-01\n", encoding="utf-8"
    )
    batch = read_batch(rows, reference_column="employee_id")
    server = Scripted(get=lambda request: httpx.Response(200, json={"data": []}))
    client = make(server, "stripe")
    with pytest.raises(BatchInvalid, match="cannot carry safely"):
        submit(batch, client, path=PATH, lookup="/v1/payouts/search?query=ref:'{reference}'")
    assert server.requests == []  # not asked, and nothing sent
    assert client.store.operations() == []
