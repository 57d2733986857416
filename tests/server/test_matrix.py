"""Every row of the response matrix, in-process and over a real socket (the `env` fixture).

| situation                                   | answer                                   |
|---------------------------------------------|------------------------------------------|
| new key                                     | 201 with the resource                    |
| finished key, same request                  | stored status + body, byte-identical,    |
|                                             | Idempotent-Replayed: true                |
| started key, fresh lease                    | 409 + Retry-After                        |
| same key, different body or endpoint        | 422                                      |
| missing or malformed Idempotency-Key        | 400 problem+json                         |
| missing or malformed Authorization          | 401                                      |
| invalid body                                | 400, not stored                          |
| scripted 429 / 503                          | passed through, never stored as final    |
| external timeout, probe unknown             | 202 with the id, lease released          |
| external system down                        | 202 with the id, lease released          |
| declined by an external system              | 402, stored and replayed                 |
"""

from __future__ import annotations

import pytest

from .server_helpers import BODY, Env

PROBLEM = "application/problem+json"


def test_a_new_key_creates_the_resource(env: Env) -> None:
    response = env.post("k-new")
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    assert "idempotent-replayed" not in response.headers
    payment = response.json()
    assert payment["id"].startswith("pay_")
    assert response.headers["location"] == f"/v1/payments/{payment['id']}"
    assert payment | BODY == payment  # every field sent comes back
    assert (payment["object"], payment["status"]) == ("payment", "succeeded")
    [entry] = env.control.ledger()
    assert (entry.resource_id, entry.key_state, entry.journal) == (
        payment["id"],
        "finished",
        ("H1", "H2", "H3"),
    )


def test_a_payout_is_created_the_same_way(env: Env) -> None:
    response = env.post("k-payout", path="/v1/payouts")
    assert response.status_code == 201
    assert response.json()["id"].startswith("po_")
    assert response.json()["object"] == "payout"


def test_a_finished_key_replays_the_stored_response_byte_for_byte(env: Env) -> None:
    first = env.post("k-replay", {**BODY, "memo": "ünïcode ✓"})
    env.control.advance(3600)  # the world moves on; the stored answer does not
    again = env.post("k-replay", {"memo": "ünïcode ✓", **BODY})  # same object, other order
    assert again.status_code == first.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == first.headers["location"]
    assert len(env.control.ledger()) == 1


def test_a_started_key_with_a_fresh_lease_is_409_with_retry_after(env: Env) -> None:
    env.control.crash("H1_DONE")  # the worker dies holding the lease
    with pytest.raises(Exception, match="disconnected"):
        env.post("k-flight")
    response = env.post("k-flight")
    assert response.status_code == 409
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["status"] == 409
    assert problem["resource_id"] == env.control.ledger()[0].resource_id
    # Nothing ran: the request is exactly where the dead worker left it.
    assert env.control.key_record("alice", "k-flight").recovery_point == "H1_DONE"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({**BODY, "amount": 9999}, "/v1/payments"),  # another amount
        ({**BODY, "memo": "extra"}, "/v1/payments"),  # one more field
        (BODY, "/v1/payouts"),  # the same body on another endpoint
    ],
)
def test_a_key_reused_for_another_request_is_422(env: Env, body: dict, path: str) -> None:
    assert env.post("k-reuse").status_code == 201
    response = env.post("k-reuse", body, path=path)
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "urn:idemclient:problem:idempotency-key-reused"
    assert len(env.control.ledger()) == 1


def test_a_key_reused_while_the_first_request_is_in_flight_is_422_not_409(env: Env) -> None:
    env.control.crash("EXT1_SENT")
    with pytest.raises(Exception, match="disconnected"):
        env.post("k-reuse-started")
    assert env.post("k-reuse-started", {**BODY, "amount": 1}).status_code == 422


@pytest.mark.parametrize(
    "key",
    [
        None,  # missing
        "",  # empty
        "k" * 256,  # too long
        "white space",
        "ключ",  # non-ASCII
        "a/b",
    ],
)
def test_a_missing_or_malformed_key_is_400_and_stores_nothing(env: Env, key: str | None) -> None:
    if key is not None and not key.isascii():
        # httpx refuses non-ASCII header values; send the UTF-8 bytes as a raw client would.
        response = env.client().post(
            "/v1/payments", json=BODY, headers=[(b"Idempotency-Key", key.encode())]
        )
    else:
        response = env.post(key)
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "urn:idemclient:problem:invalid-idempotency-key"
    assert env.control.ledger() == ()


def test_the_quoted_structured_field_form_of_a_key_is_the_same_key(env: Env) -> None:
    first = env.post('"k-quoted"')
    assert first.status_code == 201
    again = env.post("k-quoted")
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content


@pytest.mark.parametrize(
    "authorization",
    [
        None,  # missing
        "Bearer",  # no token
        "Basic YWxpY2U6c2VjcmV0",  # another scheme
        "Bearer a b",  # not one token
    ],
)
def test_missing_or_malformed_authorization_is_401(env: Env, authorization: str | None) -> None:
    headers = {"Idempotency-Key": "k-auth"}
    if authorization is not None:
        headers["Authorization"] = authorization
    response = env.client(token=None).post("/v1/payments", json=BODY, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.headers["content-type"] == PROBLEM
    assert env.control.ledger() == ()


def test_an_invalid_body_is_400_and_not_stored_so_the_key_stays_usable(env: Env) -> None:
    bad = env.post("k-body", {**BODY, "amount": "12.50"})
    assert bad.status_code == 400
    assert bad.headers["content-type"] == PROBLEM
    assert env.control.key_record("alice", "k-body") is None
    fixed = env.post("k-body")
    assert fixed.status_code == 201
    assert "idempotent-replayed" not in fixed.headers


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_never_stored_as_the_final_answer(env: Env, status: int) -> None:
    env.control.answer(status, retry_after=7, key="k-transient")
    transient = env.post("k-transient")
    assert transient.status_code == status
    assert transient.headers["retry-after"] == "7"
    assert env.control.key_record("alice", "k-transient") is None
    retried = env.post("k-transient")
    assert retried.status_code == 201
    assert "idempotent-replayed" not in retried.headers


def test_an_external_timeout_with_an_unknown_probe_is_202_and_resumable(env: Env) -> None:
    env.control.external_fault(2, "timeout", times=2)  # the call, then the probe
    response = env.post("k-202")
    assert response.status_code == 202
    payment = response.json()
    assert payment["status"] == "authorized"  # neither failed nor succeeded
    assert response.headers["location"] == f"/v1/payments/{payment['id']}"
    record = env.control.key_record("alice", "k-202")
    assert (record.state, record.recovery_point, record.locked_at) == ("started", "EXT2_SENT", None)
    assert record.response_code is None  # a 202 is not a final answer
    retried = env.post("k-202")  # the lease was released: the retry takes over at once
    assert retried.status_code == 201
    assert retried.json()["id"] == payment["id"]


def test_an_external_system_down_is_202_accepted_and_finished_by_recovery(env: Env) -> None:
    # Admitted, its first phase run: the recovery worker finishes it whether or not the
    # client sends again, so the answer says "accepted", never a 503's "nothing done".
    env.control.external_fault(1, "down", times=2)  # the call and the probe are refused
    response = env.post("k-down")
    assert response.status_code == 202
    assert response.headers["retry-after"] == "1"
    payment = response.json()
    assert response.headers["location"] == f"/v1/payments/{payment['id']}"
    record = env.control.key_record("alice", "k-down")
    assert (record.state, record.recovery_point, record.locked_at) == ("started", "EXT1_SENT", None)
    assert record.response_code is None
    env.control.recover()  # no retry: the server goes on alone
    [entry] = env.control.ledger()
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
    retried = env.post("k-down")
    assert retried.status_code == 201
    assert retried.headers["idempotent-replayed"] == "true"
    assert retried.json()["id"] == payment["id"]


def test_a_decline_is_a_final_402_stored_and_replayed(env: Env) -> None:
    env.control.external_fault(1, "decline")
    declined = env.post("k-decline")
    assert declined.status_code == 402
    assert declined.headers["content-type"] == PROBLEM
    assert declined.json()["resource"]["status"] == "declined"
    again = env.post("k-decline")
    assert again.status_code == 402
    assert again.content == declined.content
    assert again.headers["idempotent-replayed"] == "true"
    [entry] = env.control.ledger()
    # Declined at E1: nothing is sent to E2, and Handler3 records the decline.
    assert (entry.status, entry.ext1_applied, entry.ext2_applied) == ("declined", 1, 0)
    assert entry.journal == ("H1", "H2", "H3")


def test_unknown_routes_are_404_and_wrong_methods_405(env: Env) -> None:
    client = env.client()
    assert client.get("/v1/refunds").status_code == 404
    assert client.delete("/v1/payments").status_code == 405
    put = client.put("/v1/payments/pay_1", json=BODY)
    assert (put.status_code, put.headers["allow"]) == (405, "GET")
