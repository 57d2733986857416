"""Look-ups by id, end-to-end reference and idempotency key, scoped to the caller.

Another client's id, reference or key answers exactly as one that never existed (404
by id, an empty list for a search), never 403, never their data, so nothing can be
enumerated.
"""

from __future__ import annotations

import pytest

from .server_helpers import BODY, Env


@pytest.fixture
def alices_payment(env: Env) -> dict:
    response = env.post("k-lookup", {**BODY, "reference": "inv-77"})
    assert response.status_code == 201
    return response.json()


def test_the_owner_finds_a_payment_by_id_reference_and_key(env: Env, alices_payment: dict) -> None:
    client = env.client()
    by_id = client.get(f"/v1/payments/{alices_payment['id']}")
    assert (by_id.status_code, by_id.json()) == (200, alices_payment)
    for params in ({"reference": "inv-77"}, {"idempotency_key": "k-lookup"}):
        found = client.get("/v1/payments", params=params)
        assert found.status_code == 200
        assert found.json() == {"object": "list", "data": [alices_payment]}
    both = client.get("/v1/payments", params={"reference": "inv-77", "idempotency_key": "k-lookup"})
    assert both.json()["data"] == [alices_payment]


def test_a_reference_used_twice_lists_both_payments(env: Env) -> None:
    first = env.post("k-one").json()
    second = env.post("k-two").json()
    found = env.client().get("/v1/payments", params={"reference": BODY["reference"]}).json()
    assert [p["id"] for p in found["data"]] == [first["id"], second["id"]]


def test_another_client_gets_404_by_id_exactly_like_a_miss(env: Env, alices_payment: dict) -> None:
    bob = env.client("bob")
    theirs = bob.get(f"/v1/payments/{alices_payment['id']}")
    missing = bob.get("/v1/payments/pay_000000000000000000000000")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.headers["content-type"] == "application/problem+json"
    assert theirs.content == missing.content  # not even the wording differs
    assert alices_payment["id"] not in theirs.text


@pytest.mark.parametrize("params", [{"reference": "inv-77"}, {"idempotency_key": "k-lookup"}])
def test_a_search_of_another_clients_payments_is_an_empty_list_like_a_miss(
    env: Env, alices_payment: dict, params: dict
) -> None:
    bob = env.client("bob")
    theirs = bob.get("/v1/payments", params=params)
    missing = bob.get("/v1/payments", params=dict.fromkeys(params, "nothing-here"))
    assert theirs.status_code == missing.status_code == 200
    assert theirs.json() == {"object": "list", "data": []}
    assert theirs.content == missing.content
    assert alices_payment["id"] not in theirs.text


def test_a_search_with_no_match_is_200_with_an_empty_list_not_404(env: Env) -> None:
    # A 404 would be indistinguishable from a wrong path: a client looking a payment
    # up before paying it again must be able to tell "none" from "not the endpoint".
    for collection in ("/v1/payments", "/v1/payouts"):
        found = env.client().get(collection, params={"reference": "never-used"})
        assert found.status_code == 200
        assert found.headers["content-type"] == "application/json"
        assert found.json() == {"object": "list", "data": []}
    assert env.client().get("/v1/payuots", params={"reference": "x"}).status_code == 404


def test_another_clients_key_is_a_new_payment_not_their_response(
    env: Env, alices_payment: dict
) -> None:
    response = env.post("k-lookup", {**BODY, "reference": "inv-77"}, token="bob")
    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers
    assert response.json()["id"] != alices_payment["id"]


def test_a_payment_id_is_not_found_among_payouts(env: Env, alices_payment: dict) -> None:
    response = env.client().get(f"/v1/payouts/{alices_payment['id']}")
    assert response.status_code == 404


def test_a_payment_is_visible_while_it_is_still_in_flight(env: Env) -> None:
    env.control.crash("H2_DONE")
    with pytest.raises(Exception, match="disconnected"):
        env.post("k-partial")
    found = env.client().get("/v1/payments", params={"idempotency_key": "k-partial"})
    assert found.status_code == 200
    assert found.json()["data"][0]["status"] == "authorized"


def test_a_key_admitted_but_not_yet_handled_has_no_payment_to_show(env: Env) -> None:
    env.control.crash("ADMITTED")
    with pytest.raises(Exception, match="disconnected"):
        env.post("k-admitted")
    found = env.client().get("/v1/payments", params={"idempotency_key": "k-admitted"})
    assert (found.status_code, found.json()["data"]) == (200, [])  # nothing applied yet


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({}, 400),  # a filter is required
        ({"idempotency_key": "bad key"}, 400),  # validated like the header
        ({"idempotency_key": ""}, 400),
    ],
)
def test_a_search_needs_a_valid_filter(env: Env, params: dict, status: int) -> None:
    response = env.client().get("/v1/payments", params=params)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"


def test_look_ups_need_authentication(env: Env, alices_payment: dict) -> None:
    response = env.client(token=None).get(f"/v1/payments/{alices_payment['id']}")
    assert response.status_code == 401
