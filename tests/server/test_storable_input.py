"""What one storage backend would keep and the other refuse is refused by both, first.

SQLite keeps any string; PostgreSQL's text refuses NUL, and no driver encodes a lone
surrogate. A request carrying one was admitted, then failed on one backend only: its
key stuck started for good (every retry 409, a corrected body 422, nothing applied).
Now every such request is answered 400 problem+json, naming the field, before anything
is stored, and the same key with the body corrected is a new request, paid once.

The bodies here run in-process and over a socket (`env`); tests/server_postgres runs
them again on PostgreSQL (test_storable_input_postgres.py), where the failure was.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest

from idemclient.testing import ReferenceServer
from idemclient.testing._protocol.rules import MAX_TOKEN_LENGTH
from idemclient.testing._protocol.storable import MAX_DEPTH

from .server_helpers import BODY, Env

PROBLEM = "application/problem+json"


def _raw(**extra: str) -> bytes:
    """A payment body with `extra` fields written as raw JSON text (so a lone
    surrogate can be spelled, which no JSON encoder writes)."""
    fields = [f'"{name}": {value}' for name, value in {**_PLAIN, **extra}.items()]
    return ("{" + ", ".join(fields) + "}").encode()


_PLAIN = {"amount": "1250", "currency": '"EUR"', "reference": '"inv-1"'}


def _nested(depth: int) -> str:
    """JSON text of `depth` arrays, one inside the other."""
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # the report: a NUL in the reference (PostgreSQL 500, SQLite 201)
        (_raw(reference='"inv\\u00001"'), "reference"),
        # the same anywhere else in the body: its value kept, its name too
        (_raw(metadata='{"note": "a\\u0000b"}'), "metadata.note"),
        (_raw(lines='[{"sku": "x"}, {"sku": "\\u0000"}]'), "lines[1].sku"),
        (_raw(metadata='{"a\\u0000b": 1}'), 'metadata["a\\u0000b"]'),
        # a lone surrogate (a bare 500 on both): in the reference, a value, a name
        (_raw(reference='"\\ud800"'), "reference"),
        (_raw(memo='"ok \\udfff"'), "memo"),
        (_raw(metadata='{"\\udc00": 1}'), 'metadata["\\udc00"]'),
        # nesting past the bound: accepted, it could fail when read again deeper
        # in a stack (a look-up, a replay, the recovery worker)
        (_raw(tree=_nested(MAX_DEPTH)), "tree" + "[0]" * (MAX_DEPTH - 1)),
    ],
    ids=[
        "nul-reference",
        "nul-nested-value",
        "nul-in-a-list",
        "nul-in-a-name",
        "surrogate-reference",
        "surrogate-value",
        "surrogate-in-a-name",
        "too-deep",
    ],
)
def test_what_a_backend_cannot_store_is_400_naming_the_field_and_nothing_is_kept(
    env: Env, body: bytes, field: str
) -> None:
    client = env.client()
    headers = {"Idempotency-Key": "k-1", "content-type": "application/json"}
    response = client.post("/v1/payments", content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "urn:idemclient:problem:invalid-request-body"
    assert (problem["field"], problem["detail"].split(" ")[0]) == (field, field)
    assert env.control.key_record("alice", "k-1") is None
    assert env.control.ledger() == ()
    # Nothing was started: the same key with the body corrected is a new request.
    fixed = env.post("k-1")
    assert fixed.status_code == 201, fixed.text
    [entry] = env.control.ledger()
    assert (entry.ext1_applied, entry.ext2_applied, entry.key_state) == (1, 1, "finished")


def test_a_body_nested_to_the_bound_is_kept_and_read_back_alike(env: Env) -> None:
    tree = json.loads(_nested(MAX_DEPTH - 1))  # inside the body object: MAX_DEPTH deep
    created = env.post("k-deep", {**BODY, "tree": tree})
    assert created.status_code == 201, created.text
    payment = created.json()
    assert payment["tree"] == tree
    found = env.client().get("/v1/payments", params={"reference": BODY["reference"]})
    assert [p["tree"] for p in found.json()["data"]] == [tree]
    assert env.post("k-deep", {**BODY, "tree": tree}).content == created.content


def test_large_numbers_floats_and_long_text_are_kept_and_read_back_alike(env: Env) -> None:
    # What both backends keep (as text of canonical JSON) is accepted by both: these
    # were never refused after admission, and must not be refused now.
    extras = {
        "big": int("9" * 4000),  # Python reads up to 4,300 digits
        "tiny": 5e-324,
        "max": 1.7976931348623157e308,
        "zero": -0.0,
        "note": "\N{LATIN SMALL LETTER E WITH ACUTE}\x01" * 5_000,  # 40 KB as JSON
    }
    body = {**BODY, **extras}
    created = env.post("k-wide", body)
    assert created.status_code == 201, created.text
    assert {name: created.json()[name] for name in extras} == extras
    found = env.client().get("/v1/payments", params={"reference": BODY["reference"]})
    [payment] = found.json()["data"]
    assert {name: payment[name] for name in extras} == extras
    assert env.post("k-wide", body).content == created.content


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/v1/payments?reference=inv%00-1"),  # PostgreSQL 500, SQLite an empty list
        ("GET", "/v1/payments/pay_%00"),
        ("POST", "/v1/payments%00"),
        ("GET", "/_sandbox/key?client=alice&key=k%00"),
    ],
)
def test_a_nul_in_the_path_or_the_query_is_400(env: Env, method: str, target: str) -> None:
    response = env.client().request(method, target, json=BODY, headers={"Idempotency-Key": "k-1"})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    assert "NUL" in response.json()["detail"]
    assert env.control.ledger() == ()


def _token(length: int) -> str:
    """A bearer token of `length` characters that no compression shortens."""
    return secrets.token_urlsafe(length)[:length]


def test_a_bearer_token_past_the_bound_is_401_and_one_at_it_pays_once(env: Env) -> None:
    # The token is the client, part of PostgreSQL index entries beside a reference of
    # up to 1,020 bytes (255 characters of four bytes each): at the bound, both fit.
    body = {**BODY, "reference": "\N{EURO SIGN}\U0001f4b6" * 127 + "."}
    too_long = env.client(_token(MAX_TOKEN_LENGTH + 1)).post(
        "/v1/payments", json=body, headers={"Idempotency-Key": "k-1"}
    )
    assert too_long.status_code == 401, too_long.text
    assert too_long.headers["content-type"] == PROBLEM
    assert str(MAX_TOKEN_LENGTH) in too_long.json()["detail"]
    assert env.control.ledger() == ()
    at_bound = env.client(_token(MAX_TOKEN_LENGTH))
    created = at_bound.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-1"})
    assert created.status_code == 201, created.text
    again = at_bound.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-1"})
    assert again.content == created.content
    [entry] = env.control.ledger()
    assert (entry.reference, entry.ext1_applied, entry.ext2_applied) == (body["reference"], 1, 1)


@pytest.fixture
def server_db() -> str:
    """The database of the profile servers below (tests/server_postgres: PostgreSQL)."""
    return ":memory:"


def test_a_body_field_key_beside_a_lone_surrogate_is_400_naming_it(server_db: str) -> None:
    # Square reads its key from the body and writes the body again without it: a lone
    # surrogate elsewhere in it cannot be written (it was a bare 500 there).
    with ReferenceServer(db=server_db, profile="square") as server:
        body = b'{"idempotency_key": "sq-1", "amount": 5, "currency": "EUR", "reference": "r",'
        body += b' "note": "\\ud83d"}'
        with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
            response = client.post(
                "/v2/payments",
                content=body,
                headers={"Authorization": "Bearer alice", "content-type": "application/json"},
            )
        assert response.status_code == 400, response.text
        assert response.json()["field"] == "note"
        assert server.ledger() == ()
        assert server.key_record("alice", "sq-1") is None


def _problem_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == PROBLEM
    value: dict[str, Any] = response.json()
    return value


def test_a_nul_in_a_profiles_path_segment_is_400(server_db: str) -> None:
    # Wise's balance movements carry a profile id in the path, stored as the endpoint.
    with ReferenceServer(db=server_db, profile="wise") as server:
        with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
            response = client.post(
                "/v1/profiles/p%00/balance-movements",
                json=BODY,
                headers={
                    "Authorization": "Bearer alice",
                    "X-idempotence-uuid": "0b7a2f4e-2b7d-4c1e-9d8f-3f1f5d7a9c10",
                    "X-Signature": "signed",
                },
            )
        assert response.status_code == 400, response.text
        assert "path" in _problem_of(response)["detail"]
        assert server.ledger() == ()
