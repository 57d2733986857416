"""A key in the `Idempotency-Key` header, where the profile's server reads its key
elsewhere (PayPal's `PayPal-Request-Id`, Checkout.com's `Cko-Idempotency-Key`,
Razorpay's `X-Payout-Idempotency`, Square's and Wise's body fields), is refused before
anything is recorded or sent, naming the place that server reads: the caller meant it as
the payment's key, and that server never sees it. The same key given where the server
reads it too is one key, and goes; two different ones are refused. The same rule under
`Client`, `AsyncClient` and `wrap()`, for a profile chosen by the host and for one
chosen by name; a profile whose key is the `Idempotency-Key` header is untouched.

Each provider's server is the reference server speaking its dialect at the provider's
host (an in-process transport), its ledger counted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, NotSent, State, wrap
from idemclient.errors import InvalidKey, MissingKey
from idemclient.testing import ReferenceServer

from .server_speakers import AUTH, BODY, KEY_AT, PATH

KEY = "123e4567-e89b-42d3-a456-000000000042"
OTHER = "123e4567-e89b-42d3-a456-000000000043"

#: A provider's host and its profile, whose server reads the key elsewhere.
ELSEWHERE = [
    ("api-m.paypal.com", "paypal"),
    ("api.checkout.com", "checkout"),
    ("api.razorpay.com", "razorpay"),
    ("connect.squareup.com", "square"),
    ("api.wise.com", "wise"),
]


def _with_key_where_read(name: str, key: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of a request with `key` where `name`'s server reads it."""
    kind, where = KEY_AT[name]
    if kind == "field":
        return {**BODY, where: key}, {}
    return dict(BODY), {where: key}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.mark.parametrize("chosen", ["by host", "by name"])
@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_a_key_only_in_the_idempotency_key_header_is_refused_naming_where_it_goes(
    host: str, name: str, chosen: str, clock: ManualClock, tmp_path: Path
) -> None:
    profile = None if chosen == "by host" else name
    with (
        ReferenceServer(profile=name, clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url=f"https://{host}",
            headers=AUTH,
            profile=profile,
        ) as client,
    ):
        with pytest.raises(MissingKey) as refused:
            client.post(
                PATH[name], json=BODY, headers={"Idempotency-Key": KEY}, operation_id="order-1"
            )
        assert KEY_AT[name][1] in str(refused.value)
        assert "Idempotency-Key header" in str(refused.value)
        assert client.store.get("order-1") is None  # nothing recorded
        assert client.store.get(KEY) is None
        assert server.ledger() == ()


@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_a_wrapped_client_refuses_it_the_same_way(
    host: str, name: str, clock: ManualClock, tmp_path: Path
) -> None:
    with (
        ReferenceServer(profile=name, clock=clock) as server,
        wrap(
            httpx.Client(transport=server.transport, base_url=f"https://{host}", headers=AUTH),
            store=tmp_path / "w.db",
            clock=clock,
        ) as http,
    ):
        with pytest.raises(MissingKey, match=KEY_AT[name][1]):
            http.post(PATH[name], json=BODY, headers={"Idempotency-Key": KEY})
        assert server.ledger() == ()
    with Client(store=tmp_path / "w.db", clock=clock) as reader:
        assert reader.store.unfinished() == []
        assert reader.store.get(KEY) is None


@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_the_same_key_where_the_server_reads_it_too_is_one_key_and_is_paid_once(
    host: str, name: str, clock: ManualClock, tmp_path: Path
) -> None:
    body, headers = _with_key_where_read(name, KEY)
    with (
        ReferenceServer(profile=name, clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url=f"https://{host}",
            headers=AUTH,
        ) as client,
    ):
        outcome = client.post(PATH[name], json=body, headers={**headers, "Idempotency-Key": KEY})
        assert (outcome.state, outcome.key) == (State.SUCCEEDED, KEY)
        assert len(server.ledger()) == 1


@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_another_key_where_the_server_reads_it_is_two_keys_and_refused(
    host: str, name: str, clock: ManualClock, tmp_path: Path
) -> None:
    body, headers = _with_key_where_read(name, OTHER)
    with (
        ReferenceServer(profile=name, clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url=f"https://{host}",
            headers=AUTH,
        ) as client,
        wrap(
            httpx.Client(transport=server.transport, base_url=f"https://{host}", headers=AUTH),
            store=tmp_path / "w.db",
            clock=clock,
        ) as http,
    ):
        for send in (client.post, http.post):
            with pytest.raises(InvalidKey, match="two different keys") as refused:
                send(PATH[name], json=body, headers={**headers, "Idempotency-Key": KEY})
            assert KEY in str(refused.value)
            assert OTHER in str(refused.value)
        # key= beside it, where the client puts the key itself
        with pytest.raises(InvalidKey, match="two different keys"):
            client.post(PATH[name], json=BODY, key=OTHER, headers={"Idempotency-Key": KEY})
        assert server.ledger() == ()
        assert client.store.unfinished() == []


def test_a_key_in_the_client_s_default_headers_is_refused_too(
    clock: ManualClock, tmp_path: Path
) -> None:
    with (
        ReferenceServer(profile="paypal", clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="https://api-m.paypal.com",
            headers={**AUTH, "Idempotency-Key": KEY},
        ) as client,
    ):
        with pytest.raises(MissingKey, match="PayPal-Request-Id"):
            client.post(PATH["paypal"], json=BODY)
        outcome = client.post(PATH["paypal"], json=BODY, key=KEY)  # the same key: one key
        assert outcome.key == KEY
        assert len(server.ledger()) == 1


def test_an_operation_issued_again_by_its_id_with_the_header_is_refused_and_stays(
    clock: ManualClock, tmp_path: Path
) -> None:
    with (
        ReferenceServer(profile="checkout", clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="https://api.checkout.com",
            headers=AUTH,
        ) as client,
    ):
        server.answer(503, times=20)  # never applied: the operation stays not sent
        with pytest.raises(NotSent):
            client.post(PATH["checkout"], json=BODY, operation_id="order-1")
        before = client.store.get("order-1")
        assert before is not None
        assert before.state is State.NOT_SENT
        with pytest.raises(MissingKey, match="Cko-Idempotency-Key"):
            client.post(
                PATH["checkout"],
                json=BODY,
                operation_id="order-1",
                headers={"Idempotency-Key": KEY},
            )
        after = client.store.get("order-1")
        assert after is not None
        assert (after.key, after.state) == (before.key, before.state)
        assert server.ledger() == ()


def test_the_async_client_refuses_it_too(clock: ManualClock, tmp_path: Path) -> None:
    async def main(server: ReferenceServer) -> None:
        async with AsyncClient(
            store=tmp_path / "a.db",
            clock=clock,
            transport=server.transport,
            base_url="https://connect.squareup.com",
            headers=AUTH,
        ) as client:
            with pytest.raises(MissingKey, match="idempotency_key"):
                await client.post(PATH["square"], json=BODY, headers={"Idempotency-Key": KEY})
            assert await client.aoperation(KEY) is None

    with ReferenceServer(profile="square", clock=clock) as server:
        asyncio.run(main(server))
        assert server.ledger() == ()


@pytest.mark.parametrize("name", ["generic", "stripe", "ietf", "adyen"])
def test_where_the_server_reads_the_idempotency_key_header_it_is_the_key(
    name: str, clock: ManualClock, tmp_path: Path
) -> None:
    value = f'"{KEY}"' if KEY_AT[name][0] == "quoted" else KEY
    with (
        ReferenceServer(profile=name, clock=clock) as server,
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="https://psp.test",
            headers=AUTH,
            profile=name,
        ) as client,
    ):
        outcome = client.post(PATH[name], json=BODY, headers={"Idempotency-Key": value})
        assert (outcome.state, outcome.key) == (State.SUCCEEDED, KEY)
        assert len(server.ledger()) == 1
