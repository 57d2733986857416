"""Tenancy: client B can never see or replay client A's operation, by key, by resource
id or by end-to-end reference; through idemclient clients with their own tokens, and
through raw HTTP. Whatever B asks about A's things is answered exactly as a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from idemclient import Client, State
from idemclient.testing import LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, exactly_once, payment


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with serve() as running:
        yield running


def client_for(live: LiveServer, tmp_path: Path, token: str) -> Client:
    return Client(
        store=tmp_path / f"{token}.db",
        base_url=live.url,
        headers={"Authorization": f"Bearer {token}"},
    )


def same_as_a_miss(seen: httpx.Response, miss: httpx.Response) -> bool:
    return (seen.status_code, seen.content, seen.headers.get("content-type")) == (
        miss.status_code,
        miss.content,
        miss.headers.get("content-type"),
    )


def test_b_never_sees_or_replays_a_through_idemclient(
    live: LiveServer, tmp_path: Path, figures: Figures
) -> None:
    with (
        client_for(live, tmp_path, "alice") as alice,
        client_for(live, tmp_path, "bob") as bob,
    ):
        mine = alice.post(PATH, json=payment("inv-77"), key="order-77", operation_id="order-77")
        secret = alice.post(PATH, json=payment("inv-78"), key="order-78")
        assert mine.response is not None
        assert secret.response is not None
        alices_id = mine.response.json()["id"]

        # By id, by reference, by key: exactly what a miss gets.
        assert same_as_a_miss(
            bob.get(f"{PATH}/{alices_id}"), bob.get(f"{PATH}/pay_000000000000000000000000")
        )
        assert same_as_a_miss(
            bob.get(PATH, params={"reference": "inv-78"}),
            bob.get(PATH, params={"reference": "inv-nobody"}),
        )
        assert same_as_a_miss(
            bob.get(PATH, params={"idempotency_key": "order-78"}),
            bob.get(PATH, params={"idempotency_key": "order-nobody"}),
        )

        # Alice's key, the same body: a payment of Bob's own, never Alice's answer.
        his = bob.post(PATH, json=payment("inv-77"), key="order-77", operation_id="order-77")
        assert his.state is State.SUCCEEDED
        assert not his.replayed
        assert his.response is not None
        assert his.response.json()["id"] != alices_id
        # Alice's key with another body: not 422, which would tell Bob the key is taken.
        other = bob.post(PATH, json={**payment("inv-78"), "amount": 1}, key="order-78")
        assert other.state is State.SUCCEEDED
        assert not other.replayed

        # Searching by the key they share finds only his own.
        found = bob.get(PATH, params={"idempotency_key": "order-77"}).json()["data"]
        assert [p["id"] for p in found] == [his.response.json()["id"]]

        # Alice is untouched: her key still replays her own answer, byte for byte.
        again = httpx.post(
            f"{live.url}{PATH}",
            json=payment("inv-77"),
            headers={"Authorization": "Bearer alice", "Idempotency-Key": "order-77"},
        )
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == mine.response.content
        assert alice.get(f"{PATH}/{alices_id}").status_code == 200

    ledger = live.server.ledger()
    assert sorted(e.client for e in ledger) == ["alice", "alice", "bob", "bob"]
    assert all(exactly_once(e) for e in ledger)
    figures.count("tenancy", cross_tenant_probes=5, leaks=0)


@pytest.mark.parametrize(
    ("authorization", "is_alice"),
    [
        ("Bearer alice", True),
        ("bearer alice", True),  # the scheme is case-insensitive
        ("BEARER  alice", True),
        ("Bearer ALICE", False),  # the token is not
        ("Bearer alice=", False),  # token68 padding makes another token
        ("Bearer alic", False),
        ("Bearer alicee", False),
    ],
)
def test_raw_http_sees_alices_payment_only_with_alices_exact_token(
    live: LiveServer, authorization: str, is_alice: bool, figures: Figures
) -> None:
    url = f"{live.url}{PATH}"
    created = httpx.post(
        url,
        json=payment("inv-raw"),
        headers={"Authorization": "Bearer alice", "Idempotency-Key": "raw-1"},
    )
    assert created.status_code == 201
    as_them = {"Authorization": authorization}
    by_id = httpx.get(f"{url}/{created.json()['id']}", headers=as_them)
    by_key = httpx.get(url, params={"idempotency_key": "raw-1"}, headers=as_them)
    by_reference = httpx.get(url, params={"reference": "inv-raw"}, headers=as_them)
    # The quoted form of her key, from them: their own payment, or her stored answer.
    quoted = httpx.post(
        url, json=payment("inv-raw"), headers={**as_them, "Idempotency-Key": '"raw-1"'}
    )
    assert quoted.status_code == 201
    if is_alice:
        assert by_id.status_code == by_key.status_code == by_reference.status_code == 200
        assert quoted.content == created.content
        assert quoted.headers["idempotent-replayed"] == "true"
    else:
        miss = httpx.get(f"{url}/pay_000000000000000000000000", headers=as_them)
        assert same_as_a_miss(by_id, miss)
        search_miss = httpx.get(url, params={"reference": "inv-nobody"}, headers=as_them)
        assert all(same_as_a_miss(seen, search_miss) for seen in (by_key, by_reference))
        assert "idempotent-replayed" not in quoted.headers
        assert quoted.json()["id"] != created.json()["id"]
    assert len(live.server.ledger()) == (1 if is_alice else 2)
    figures.count("tenancy", cross_tenant_probes=0 if is_alice else 4)


_tokens = st.from_regex(r"[A-Za-z0-9\-._~+/]{1,24}=?", fullmatch=True)
_keys = st.from_regex(r"[A-Za-z0-9\-_.:~]{1,40}", fullmatch=True)


# Any text the server stores: a NUL or a lone surrogate is refused before admission (400),
# on every backend alike (tests/server/test_storable_input.py).
_references = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alice=_tokens, bob=_tokens, key=_keys, reference=_references)
def test_for_any_two_tokens_and_any_key_b_learns_nothing_of_a(
    figures: Figures, alice: str, bob: str, key: str, reference: str
) -> None:
    assume(alice != bob)
    with ReferenceServer() as server:
        as_alice = httpx.Client(
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": f"Bearer {alice}"},
        )
        as_bob = httpx.Client(
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": f"Bearer {bob}"},
        )
        body = payment(reference)
        created = as_alice.post(PATH, json=body, headers={"Idempotency-Key": key})
        assert created.status_code == 201
        miss_id = as_bob.get(f"{PATH}/pay_000000000000000000000000")
        assert same_as_a_miss(as_bob.get(f"{PATH}/{created.json()['id']}"), miss_id)
        miss_search = as_bob.get(PATH, params={"idempotency_key": "k-nobody"})
        assert same_as_a_miss(as_bob.get(PATH, params={"idempotency_key": key}), miss_search)
        assert same_as_a_miss(as_bob.get(PATH, params={"reference": reference}), miss_search)
        replay = as_bob.post(PATH, json=body, headers={"Idempotency-Key": key})
        assert replay.status_code == 201
        assert "idempotent-replayed" not in replay.headers
        assert replay.json()["id"] != created.json()["id"]
        clients = sorted(entry.client for entry in server.ledger())
    assert clients == sorted([alice, bob])
    figures.count("tenancy", cross_tenant_probes=4, random_tenant_pairs=1)
