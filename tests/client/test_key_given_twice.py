"""A key given twice for one request, two ways that disagree (key= and the key header,
identity= and the header, key= and a profile's key header or body field, the header
given twice, the client's default headers and the call), is refused before anything is
recorded or sent, naming where each value came from. The same key given both ways is
one key, and is fine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, State, key_from_identity, wrap
from idemclient.errors import IdemError, InvalidKey

from .fakes import FakePSP

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


@pytest.fixture
def make(store_path: Path, clock: ManualClock, psp: FakePSP) -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def build(**options: Any) -> Client:
        client = Client(
            store=store_path,
            clock=clock,
            transport=psp.transport(),
            base_url="http://psp.test",
            **options,
        )
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()


def _refused(error: InvalidKey, *named: str) -> None:
    """The error is of the library's tree, a ValueError, and names every source and
    value given."""
    assert isinstance(error, IdemError)
    assert isinstance(error, ValueError)
    text = str(error)
    for word in named:
        assert word in text, (word, text)
    assert "nothing was recorded or sent" in text


def _nothing_happened(client: Client, psp: FakePSP) -> None:
    assert client.store.operations() == []
    assert psp.requests == []


@pytest.mark.parametrize(
    ("call", "named"),
    [
        # key= and the header the server reads the key from
        (
            {"key": "k3", "headers": {"Idempotency-Key": "k4"}},
            ("key=", "'k3'", "Idempotency-Key header", "'k4'"),
        ),
        # identity= makes a key: the header's is another
        (
            {"identity": ("invoice-7", "charge"), "headers": {"Idempotency-Key": "k4"}},
            ("identity=", key_from_identity("invoice-7", "charge"), "'k4'"),
        ),
        # the header given twice, with two values
        (
            {"headers": [("Idempotency-Key", "k3"), ("Idempotency-Key", "k4")]},
            ("Idempotency-Key header", "'k3'", "'k4'"),
        ),
        # key= beside a header given twice, once with another value
        (
            {"key": "k3", "headers": [("Idempotency-Key", "k3"), ("Idempotency-Key", "k4")]},
            ("key=", "'k4'"),
        ),
    ],
)
def test_two_different_keys_for_one_request_are_refused_before_anything_is_recorded(
    make: Callable[..., Client], psp: FakePSP, call: dict[str, Any], named: tuple[str, ...]
) -> None:
    client = make()
    with pytest.raises(InvalidKey) as refused:
        client.post("/v1/payments", json=PAYMENT, operation_id="op", **call)
    _refused(refused.value, *named)
    _nothing_happened(client, psp)


@pytest.mark.parametrize(
    "call",
    [
        {"key": "k3", "headers": {"Idempotency-Key": "k3"}},
        {"headers": [("Idempotency-Key", "k3"), ("Idempotency-Key", "k3")]},
        {"key": "k3", "headers": {"idempotency-key": "k3"}},  # a header's name has no case
    ],
)
def test_the_same_key_given_both_ways_is_one_key(
    make: Callable[..., Client], psp: FakePSP, call: dict[str, Any]
) -> None:
    client = make()
    outcome = client.post("/v1/payments", json=PAYMENT, **call)
    assert (outcome.state, outcome.key) == (State.SUCCEEDED, "k3")
    assert psp.keys == ["k3"]
    assert [r.headers.get_list("idempotency-key") for r in psp.requests] == [["k3"]]


def test_a_key_in_the_clients_default_headers_and_another_in_the_call_are_refused(
    make: Callable[..., Client], psp: FakePSP
) -> None:
    client = make(headers={"Idempotency-Key": "k-default"})
    with pytest.raises(InvalidKey) as refused:
        client.post("/v1/payments", json=PAYMENT, key="k3")
    _refused(refused.value, "key=", "'k3'", "client's default headers", "'k-default'")
    with pytest.raises(InvalidKey):
        client.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": "k4"})
    _nothing_happened(client, psp)
    # The same key, or none in the call: one key.
    assert client.post("/v1/payments", json=PAYMENT, key="k-default").key == "k-default"


def test_under_a_profile_the_key_header_it_reads_is_the_one_checked(
    make: Callable[..., Client], psp: FakePSP
) -> None:
    client = make(profile="paypal")
    with pytest.raises(InvalidKey) as refused:
        client.post(
            "/v2/checkout/orders", json=PAYMENT, key="k3", headers={"PayPal-Request-Id": "k4"}
        )
    _refused(refused.value, "key=", "'k3'", "PayPal-Request-Id header", "'k4'")
    _nothing_happened(client, psp)
    outcome = client.post(
        "/v2/checkout/orders", json=PAYMENT, key="k3", headers={"PayPal-Request-Id": "k3"}
    )
    assert outcome.key == "k3"
    assert [r.headers.get_list("paypal-request-id") for r in psp.requests] == [["k3"]]


def test_a_quoted_key_header_is_compared_by_its_key(
    make: Callable[..., Client], psp: FakePSP
) -> None:
    # The IETF draft's header is a quoted string: '"k3"' is the key k3.
    client = make(profile="ietf")
    with pytest.raises(InvalidKey):
        client.post("/v1/payments", json=PAYMENT, key="k3", headers={"Idempotency-Key": '"k4"'})
    _nothing_happened(client, psp)
    outcome = client.post(
        "/v1/payments", json=PAYMENT, key="k3", headers={"Idempotency-Key": '"k3"'}
    )
    assert outcome.key == "k3"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"key": "k3"}, ("key=", "'k3'")),
        ({"identity": "invoice-7"}, ("identity=", key_from_identity("invoice-7"))),
    ],
)
def test_a_body_field_key_and_another_given_in_the_call_are_refused(
    make: Callable[..., Client], psp: FakePSP, given: dict[str, Any], named: tuple[str, ...]
) -> None:
    client = make(profile="square")
    body = {**PAYMENT, "idempotency_key": "k4"}
    with pytest.raises(InvalidKey) as refused:
        client.post("/v2/payments", json=body, operation_id="op", **given)
    _refused(refused.value, *named, "body's 'idempotency_key'", "'k4'")
    _nothing_happened(client, psp)
    outcome = client.post("/v2/payments", json={**PAYMENT, "idempotency_key": "k3"}, key="k3")
    assert outcome.key == "k3"
    assert [json.loads(r.content)["idempotency_key"] for r in psp.requests] == ["k3"]


def test_the_async_client_refuses_two_keys_too(store_path: Path, psp: FakePSP) -> None:
    async def main() -> None:
        async with AsyncClient(
            store=store_path,
            clock=ManualClock(),
            transport=psp.transport(),
            base_url="http://psp.test",
        ) as client:
            with pytest.raises(InvalidKey) as refused:
                await client.post(
                    "/v1/payments", json=PAYMENT, key="k3", headers={"Idempotency-Key": "k4"}
                )
            _refused(refused.value, "key=", "'k3'", "'k4'")
            assert await client.aoperation("k3") is None

    asyncio.run(main())
    assert psp.requests == []


def test_a_wrapped_client_refuses_the_key_header_given_twice(
    store_path: Path, psp: FakePSP
) -> None:
    http = wrap(
        httpx.Client(transport=psp.transport(), base_url="http://psp.test"),
        store=store_path,
        clock=ManualClock(),
    )
    with http:
        with pytest.raises(InvalidKey) as refused:
            http.post(
                "/v1/payments",
                json=PAYMENT,
                headers=[("Idempotency-Key", "k3"), ("Idempotency-Key", "k4")],
            )
        _refused(refused.value, "Idempotency-Key header", "'k3'", "'k4'")
        response = http.post(
            "/v1/payments",
            json=PAYMENT,
            headers=[("Idempotency-Key", "k3"), ("Idempotency-Key", "k3")],
        )
        assert response.status_code == 201
    assert psp.keys == ["k3"]
