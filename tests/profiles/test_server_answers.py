"""The reference server speaks every server profile (`ReferenceServer(profile=...)`).

Each answer is asserted with the literal status, headers and body that provider gives
(see tests/profiles/server_speakers.py for where each puts the key), in process here;
test_server_live.py runs the same answers over a real loopback socket and the
`idemclient server --profile` command.

| profile                | still running         | other request        | replay                  |
|------------------------|-----------------------|----------------------|-------------------------|
| reference, generic     | 409 problem+json      | 422 problem+json     | stored + marker         |
| ietf                   | 409 problem+json      | 422 problem+json     | stored, no marker       |
| stripe                 | 409 idempotency_error | 400 idempotency_error| stored + marker         |
| adyen                  | 422 704 + transient   | the first answer     | stored, no marker       |
| mollie                 | 409 hal+json          | 400 hal+json         | stored + marker         |
| checkout               | 409, no body          | the first answer     | stored (2xx only)       |
| drf-idempotency-key    | 409 Request in progress | 409 Parameter mismatch | stored, no marker   |
| django-idempotency-key | runs again            | runs again           | 409 + stored (2xx only) |
| paypal, wise           | runs again            | the first answer     | stored, no marker       |
| square                 | runs again            | 400 IDEMPOTENCY_KEY_REUSED | stored, no marker |
| razorpay               | 500 key in use; 409   | 400 BAD_REQUEST_ERROR| stored, no marker       |
| gocardless             | 409 conflict + id     | 409 conflict + id    | 409 conflict + id       |
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from idemclient import profiles
from idemclient._profile import Match, codes_in
from idemclient.testing import ReferenceServer

from .server_speakers import (
    ALL,
    BODY,
    JSON,
    PROBLEM,
    Speaker,
    gocardless_conflict,
    in_process,
    replay_status,
    uuid_key,
)

HOUR = 3600.0
DAY = 24 * HOUR
KEY = uuid_key(1)
OTHER = {**BODY, "amount": 9999}

STRIPE_IN_USE = {
    "error": {
        "type": "idempotency_error",
        "code": "idempotency_key_in_use",
        "message": "A request with this idempotency key is still being processed; retry later.",
    }
}
STRIPE_REUSED = {
    "error": {
        "type": "idempotency_error",
        "message": "This idempotency key was already used with other request parameters.",
    }
}
ADYEN_IN_PROGRESS = {
    "status": 422,
    "errorCode": "704",
    "message": "request already processed or in progress",
    "errorType": "validation",
}
MOLLIE_CONFLICT = {
    "status": 409,
    "title": "Conflict",
    "detail": "A request with this idempotency key is still being processed.",
}
MOLLIE_REUSED = {
    "status": 400,
    "title": "Bad Request",
    "detail": "This idempotency key was already used with another request.",
}
SQUARE_REUSED = {
    "errors": [
        {
            "category": "INVALID_REQUEST_ERROR",
            "code": "IDEMPOTENCY_KEY_REUSED",
            "detail": "This idempotency key was already used with another request.",
        }
    ]
}
RAZORPAY_IN_USE = {
    "error": {
        "code": "SERVER_ERROR",
        "description": "A request with this idempotency key is still being processed.",
        "source": "NA",
        "step": "NA",
        "reason": "idempotency_key_in_use",
        "metadata": {},
    }
}
RAZORPAY_TRANSFER_IN_USE = {
    "error": {
        "code": "BAD_REQUEST_ERROR",
        "description": "A request with this idempotency key is still being processed.",
        "source": "NA",
        "step": "NA",
        "reason": "NA",
        "metadata": {},
    }
}
RAZORPAY_REUSED = {
    "error": {
        "code": "BAD_REQUEST_ERROR",
        "description": "This idempotency key was already used with another request.",
        "source": "NA",
        "step": "NA",
        "reason": "NA",
        "metadata": {},
    }
}
REFERENCE_LIKE = ("reference", "generic", "ietf")
#: a second request while the first runs is run too: no in-flight guard
RUNS_AGAIN = ("paypal", "square", "wise", "django-idempotency-key")
#: the same key with another request gets the first request's answer: keyed by the key
KEY_ONLY = ("adyen", "paypal", "checkout", "wise")
MARKED = ("reference", "generic", "stripe", "mollie")


@pytest.fixture(params=ALL)
def speaker(request: pytest.FixtureRequest) -> Iterator[Speaker]:
    speaker = in_process(request.param)
    with speaker.stack:
        yield speaker


# -- the key, where each provider reads it ----------------------------------------------


def test_a_new_key_is_read_where_the_provider_puts_it(speaker: Speaker) -> None:
    created = speaker.post(KEY)
    assert created.status_code == 201, created.text
    payment = created.json()
    assert payment["idempotency_key"] == KEY
    assert (payment["amount"], payment["currency"], payment["reference"]) == (1250, "EUR", "inv-1")
    [entry] = speaker.server.ledger()
    assert (entry.idempotency_key, entry.ext1_applied, entry.ext2_applied) == (KEY, 1, 1)
    # The resource is read back under /v1/ whatever path created it.
    assert speaker.get(created.headers["location"]).json() == payment


@pytest.mark.parametrize(
    ("name", "path", "at"),
    [
        ("square", "/v2/orders", ("field", "idempotency_key")),
        ("razorpay", "/v1/transfers", ("header", "X-Transfer-Idempotency")),
        ("wise", "/v1/profiles/42/balance-movements", ("header", "X-idempotence-uuid")),
        ("stripe", "/v2/money_management/outbound_payments", ("header", "Idempotency-Key")),
        ("checkout", "/v1/payments", ("header", "Cko-Idempotency-Key")),
    ],
)
def test_an_endpoint_with_its_own_key_slot_reads_it_there(
    name: str, path: str, at: tuple[str, str]
) -> None:
    signed = {"X-Signature": "c2lnbmVk"}
    with in_process(name) as speaker:
        first = speaker.post(KEY, path=path, at=at, headers=signed)
        assert first.status_code == 201, first.text
        again = speaker.post(KEY, path=path, at=at, headers=signed)
        assert (again.status_code, again.content) == (201, first.content)
        assert len(speaker.server.ledger()) == 1


def test_a_body_field_key_is_not_kept_in_the_resource() -> None:
    with in_process("square") as speaker:
        payment = speaker.post("sq-1").json()
    assert "idempotency_key" in payment  # the server's own field, not the body's
    assert payment["idempotency_key"] == "sq-1"
    with in_process("wise") as speaker:
        transfer = speaker.post(KEY).json()
    assert "customerTransactionId" not in transfer


def test_the_ietf_key_is_a_quoted_string() -> None:
    with in_process("ietf") as speaker:
        bare = speaker.post(KEY, at=("header", "Idempotency-Key"))
        assert bare.status_code == 400
        assert bare.headers["content-type"] == PROBLEM
        assert bare.json()["type"] == "urn:idemclient:problem:invalid-idempotency-key"
        assert speaker.post(KEY).status_code == 201  # '"<key>"'
        assert speaker.server.key_record("alice", KEY) is not None


@pytest.mark.parametrize(
    ("name", "path", "good", "bad"),
    [
        ("stripe", "/v1/payment_intents", "s" * 255, "s" * 256),
        ("adyen", "/v71/payments", "a" * 64, "a" * 65),
        ("paypal", "/v2/checkout/orders", "p" * 108, "p" * 109),
        ("square", "/v2/payments", "q" * 45, "q" * 46),
        ("square", "/v2/orders", "q" * 192, "q" * 193),
        ("square", "/v1/payments", "q" * 45, "q" * 46),
        ("razorpay", "/v1/payouts", "abcd", "abc"),
        ("razorpay", "/v1/payouts", "r" * 36, "r" * 37),
        ("wise", "/v1/transfers", KEY, "not-a-uuid"),
        ("drf-idempotency-key", "/v1/payments", KEY, "12345"),
        ("reference", "/v1/payments", "k" * 255, "k" * 256),
    ],
)
def test_a_key_outside_the_providers_format_is_refused_before_anything_is_stored(
    name: str, path: str, good: str, bad: str
) -> None:
    with in_process(name) as speaker:
        refused = speaker.post(bad, path=path)
        assert refused.status_code == 400, refused.text
        assert refused.headers["content-type"] == PROBLEM
        assert refused.json()["type"] == "urn:idemclient:problem:invalid-idempotency-key"
        assert speaker.server.ledger() == ()
        assert speaker.post(good, path=path).status_code == 201


def test_a_body_field_key_that_is_not_a_string_is_refused() -> None:
    with in_process("square") as speaker:
        response = speaker.client.post("/v2/payments", json={**BODY, "idempotency_key": 12})
        assert response.status_code == 400
        assert speaker.server.ledger() == ()


@pytest.mark.parametrize(
    ("name", "path", "headers"),
    [
        ("razorpay", "/v1/payouts", {}),
        ("wise", "/v1/transfers", {}),
        ("wise", "/v1/profiles/42/balance-movements", {"X-Signature": "c2ln"}),
        ("square", "/v2/payments", {}),
        ("reference", "/v1/payments", {}),
        ("generic", "/v1/payments", {}),
        ("ietf", "/v1/payments", {}),
    ],
)
def test_a_key_the_provider_requires_is_400_when_missing(
    name: str, path: str, headers: dict[str, str]
) -> None:
    with in_process(name) as speaker:
        response = speaker.post(None, path=path, headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["type"] == "urn:idemclient:problem:invalid-idempotency-key"
        assert speaker.server.ledger() == ()


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("stripe", "/v1/payment_intents"),
        ("adyen", "/v71/payments"),
        ("paypal", "/v2/checkout/orders"),
        ("square", "/v2/orders"),
        ("gocardless", "/v1/payments"),
        ("checkout", "/payments"),
        ("mollie", "/v2/payments"),
        ("razorpay", "/v1/transfers"),
        ("django-idempotency-key", "/v1/payments"),
        ("drf-idempotency-key", "/v1/payments"),
    ],
)
def test_where_a_key_is_optional_a_request_without_one_runs_every_time(
    name: str, path: str
) -> None:
    with in_process(name) as speaker:
        first = speaker.post(None, path=path)
        second = speaker.post(None, path=path)
        assert (first.status_code, second.status_code) == (201, 201)
        assert first.json()["id"] != second.json()["id"]
        assert len(speaker.server.ledger()) == 2


def test_a_key_in_another_providers_header_is_no_key() -> None:
    # A PayPal-like server applies a request whose key it cannot see: twice is twice.
    with in_process("paypal") as speaker:
        at = ("header", "Idempotency-Key")
        assert speaker.post(KEY, at=at).status_code == 201
        assert speaker.post(KEY, at=at).status_code == 201
        assert len(speaker.server.ledger()) == 2
    # A server that requires its key says so.
    with in_process("razorpay") as speaker:
        assert speaker.post(KEY, at=("header", "Idempotency-Key")).status_code == 400


# -- replay -----------------------------------------------------------------------------


def test_a_finished_key_gets_the_providers_replay(speaker: Speaker) -> None:
    first = speaker.post(KEY)
    assert first.status_code == 201
    again = speaker.post(KEY)
    name = speaker.name
    if name == "gocardless":
        # No replay: 409 naming the resource, which a GET then fetches.
        assert again.status_code == 409
        assert again.headers["content-type"] == JSON
        assert again.json() == gocardless_conflict(first.json()["id"])
        fetched = speaker.get(f"/v1/payments/{first.json()['id']}")
        assert (fetched.status_code, fetched.json()) == (200, first.json())
    elif name == "django-idempotency-key":
        assert (again.status_code, again.content) == (409, first.content)
        assert "idempotent-replayed" not in again.headers
    else:
        assert (again.status_code, again.content) == (201, first.content)
        if name in MARKED:
            assert again.headers["idempotent-replayed"] == "true"
        else:
            assert "idempotent-replayed" not in again.headers
    assert len(speaker.server.ledger()) == 1


@pytest.mark.parametrize("name", ["checkout", "django-idempotency-key"])
def test_where_only_2xx_is_stored_a_decline_leaves_the_key_unused(name: str) -> None:
    with in_process(name) as speaker:
        speaker.server.external_fault(1, "decline")
        first = speaker.post(KEY)
        assert first.status_code == 402
        again = speaker.post(KEY)
        # Ran again: a second resource, and the answer is not a replay.
        assert again.status_code == 402
        assert "idempotent-replayed" not in again.headers
        assert len(speaker.server.ledger()) == 2
        assert speaker.server.key_record("alice", KEY) is None


@pytest.mark.parametrize("name", ["stripe", "reference", "drf-idempotency-key", "razorpay"])
def test_where_errors_are_stored_a_decline_is_replayed(name: str) -> None:
    with in_process(name) as speaker:
        speaker.server.external_fault(1, "decline")
        first = speaker.post(KEY)
        again = speaker.post(KEY)
        assert (first.status_code, again.status_code) == (402, 402)
        assert again.content == first.content
        assert len(speaker.server.ledger()) == 1


# -- still running ----------------------------------------------------------------------


def test_a_key_still_running_gets_the_providers_answer(speaker: Speaker) -> None:
    speaker.server.crash("H1_DONE")  # the first worker dies holding the lease
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(KEY)
    [first] = speaker.server.ledger()
    response = speaker.post(KEY)
    name = speaker.name
    if name in REFERENCE_LIKE:
        assert response.status_code == 409
        assert response.headers["content-type"] == PROBLEM
        assert response.headers["retry-after"] == "1"
        assert response.json()["type"] == "urn:idemclient:problem:request-in-flight"
        assert response.json()["resource_id"] == first.resource_id
    elif name == "stripe":
        assert (response.status_code, response.json()) == (409, STRIPE_IN_USE)
    elif name == "adyen":
        assert (response.status_code, response.json()) == (422, ADYEN_IN_PROGRESS)
        assert response.headers["transient-error"] == "true"
    elif name == "mollie":
        assert (response.status_code, response.json()) == (409, MOLLIE_CONFLICT)
        assert response.headers["content-type"] == "application/hal+json"
    elif name == "checkout":
        assert (response.status_code, response.content) == (409, b"")
    elif name == "drf-idempotency-key":
        assert (response.status_code, response.json()) == (409, {"detail": "Request in progress"})
        assert "retry-after" not in response.headers
    elif name == "gocardless":
        assert response.status_code == 409
        assert response.json() == gocardless_conflict(first.resource_id)
    elif name == "razorpay":
        assert (response.status_code, response.json()) == (500, RAZORPAY_IN_USE)
    else:
        # No in-flight guard: the duplicate runs too, and pays again.
        assert name in RUNS_AGAIN
        assert response.status_code == 201, response.text
        assert response.json()["id"] != first.resource_id
        assert response.json()["idempotency_key"] == KEY
        assert len(speaker.server.ledger()) == 2
        return
    assert len(speaker.server.ledger()) == 1


def test_a_razorpay_transfer_still_running_is_409() -> None:
    at = ("header", "X-Transfer-Idempotency")
    with in_process("razorpay") as speaker:
        speaker.server.crash("H1_DONE")
        with pytest.raises(httpx.RemoteProtocolError):
            speaker.post(KEY, path="/v1/transfers", at=at)
        response = speaker.post(KEY, path="/v1/transfers", at=at)
        assert (response.status_code, response.json()) == (409, RAZORPAY_TRANSFER_IN_USE)
        assert len(speaker.server.ledger()) == 1


# -- same key, other request ------------------------------------------------------------


def test_a_key_reused_for_another_request_gets_the_providers_answer(speaker: Speaker) -> None:
    first = speaker.post(KEY)
    response = speaker.post(KEY, OTHER)
    name = speaker.name
    if name in REFERENCE_LIKE:
        assert response.status_code == 422
        assert response.json()["type"] == "urn:idemclient:problem:idempotency-key-reused"
    elif name == "stripe":
        assert (response.status_code, response.json()) == (400, STRIPE_REUSED)
    elif name == "square":
        assert (response.status_code, response.json()) == (400, SQUARE_REUSED)
    elif name == "mollie":
        assert (response.status_code, response.json()) == (400, MOLLIE_REUSED)
    elif name == "razorpay":
        assert (response.status_code, response.json()) == (400, RAZORPAY_REUSED)
    elif name == "drf-idempotency-key":
        assert (response.status_code, response.json()) == (409, {"detail": "Parameter mismatch"})
    elif name == "gocardless":
        assert response.status_code == 409
        assert response.json() == gocardless_conflict(first.json()["id"])
    elif name == "django-idempotency-key":
        # Its record is keyed by the request too: another body is another request.
        assert response.status_code == 201
        assert response.json()["amount"] == 9999
        assert len(speaker.server.ledger()) == 2
        return
    else:
        # Keyed by the key alone: the first request's answer, the second not applied.
        assert name in KEY_ONLY
        assert (response.status_code, response.content) == (201, first.content)
    assert len(speaker.server.ledger()) == 1


# -- retention --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path", "at", "kept"),
    [
        ("mollie", "/v2/payments", None, HOUR),
        ("stripe", "/v1/payment_intents", None, DAY),
        ("stripe", "/v2/money_management/outbound_payments", None, 30 * DAY),
        ("paypal", "/v2/checkout/orders", None, 6 * HOUR),
        ("adyen", "/v71/payments", None, 7 * DAY),
        ("checkout", "/payments", None, DAY),
        ("razorpay", "/v1/payouts", None, 7 * DAY),
        ("razorpay", "/v1/transfers", ("header", "X-Transfer-Idempotency"), HOUR),
        ("square", "/v2/payments", None, HOUR),
        ("gocardless", "/v1/payments", None, HOUR),
        ("wise", "/v1/transfers", None, HOUR),
        ("django-idempotency-key", "/v1/payments", None, 300.0),
        ("drf-idempotency-key", "/v1/payments", None, HOUR),
        ("ietf", "/v1/payments", None, DAY),
        ("generic", "/v1/payments", None, DAY),
    ],
)
def test_a_key_is_forgotten_after_the_providers_retention(
    name: str, path: str, at: tuple[str, str] | None, kept: float
) -> None:
    with in_process(name) as speaker:
        first = speaker.post(KEY, path=path, at=at)
        assert first.status_code == 201
        speaker.server.advance(kept - 1)
        still = speaker.post(KEY, path=path, at=at)
        assert still.status_code == replay_status(name)
        assert len(speaker.server.ledger()) == 1
        speaker.server.advance(2)
        again = speaker.post(KEY, path=path, at=at)
        assert again.status_code == 201
        assert "idempotent-replayed" not in again.headers
        assert again.json()["id"] != first.json()["id"]
        assert len(speaker.server.ledger()) == 2


def test_the_reference_profile_keeps_a_key_until_the_reaper_drops_it() -> None:
    with in_process("reference") as speaker:
        first = speaker.post("k-ref")
        speaker.server.advance(DAY + 1)
        assert speaker.post("k-ref").headers["idempotent-replayed"] == "true"
        assert speaker.server.reap() == 1
        assert speaker.post("k-ref").json()["id"] != first.json()["id"]


@pytest.mark.parametrize(
    ("name", "ttl"),
    [("reference", DAY), ("stripe", 30 * DAY), ("paypal", 45 * DAY), ("mollie", HOUR)],
)
def test_the_reaper_keeps_keys_the_longest_retention_by_default(name: str, ttl: float) -> None:
    with ReferenceServer(profile=name) as server:
        assert server.key_ttl == ttl
        assert server.profile.name == name
    with ReferenceServer(profile=name, key_ttl=60) as server:
        assert server.key_ttl == 60


# -- Wise's strong customer authentication ----------------------------------------------


def test_wise_challenges_a_balance_movement_until_it_is_signed() -> None:
    path = "/v1/profiles/42/balance-movements"
    at = ("header", "X-idempotence-uuid")
    with in_process("wise") as speaker:
        challenged = speaker.post(KEY, path=path, at=at)
        assert challenged.status_code == 403
        token = challenged.headers["x-2fa-approval"]
        assert re.fullmatch(r"[0-9a-f]{32}", token)
        assert challenged.json() == {
            "status": 403,
            "error": "Forbidden",
            "message": (
                "This request needs a signed one-time token (strong customer authentication)."
            ),
            "path": path,
        }
        assert speaker.server.ledger() == ()  # nothing read, nothing stored
        assert speaker.server.key_record("alice", KEY) is None
        signed = {"x-2fa-approval": token, "X-Signature": "c2lnbmVkLXRva2Vu"}
        done = speaker.post(KEY, path=path, at=at, headers=signed)
        assert done.status_code == 201
        # Transfers are not challenged.
        assert speaker.post(uuid_key(2)).status_code == 201


# -- look-ups ---------------------------------------------------------------------------


def test_stripe_s_look_up_finds_a_payment_by_reference_in_stripe_s_words() -> None:
    with in_process("stripe") as speaker:
        paid = speaker.post(KEY).json()
        speaker.server.external_fault(1, "decline")
        declined = speaker.post(uuid_key(2), {**BODY, "reference": "inv-2"})
        assert declined.status_code == 402
        found = speaker.get(
            "/v1/payment_intents/search?query=metadata%5B%27reference%27%5D%3A%27inv-1%27"
        )
        assert found.status_code == 200
        assert found.json() == {"object": "list", "data": [paid], "has_more": False}
        by_params = speaker.get(
            "/v1/payment_intents/search", params={"query": "metadata['reference']:'inv-2'"}
        )
        [item] = by_params.json()["data"]
        assert (item["reference"], item["status"]) == ("inv-2", "canceled")
        assert speaker.get(
            "/v1/payment_intents/search", params={"query": "metadata['reference']:'none'"}
        ).json() == {"object": "list", "data": [], "has_more": False}
        # Another client finds nothing.
        other = speaker.client.get(
            "/v1/payment_intents/search",
            params={"query": "metadata['reference']:'inv-1'"},
            headers={"Authorization": "Bearer mallory"},
        )
        assert other.json()["data"] == []


@pytest.mark.parametrize("name", ALL)
def test_every_profile_serves_the_reference_search(name: str) -> None:
    with in_process(name) as speaker:
        paid = speaker.post(KEY).json()
        found = speaker.get("/v1/payments", params={"reference": "inv-1"}).json()
        expected = [paid] if paid["object"] == "payment" else []
        assert found == {"object": "list", "data": expected}


# -- faults work in every profile -------------------------------------------------------


def test_a_scripted_503_is_passed_through_and_never_stored(speaker: Speaker) -> None:
    speaker.server.answer(503, retry_after=2)
    refused = speaker.post(KEY)
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "2")
    assert speaker.server.ledger() == ()
    assert speaker.post(KEY).status_code == 201


def test_a_scripted_429_matches_the_key_where_the_provider_puts_it(speaker: Speaker) -> None:
    speaker.server.answer(429, retry_after=1, key=KEY)
    assert speaker.post(uuid_key(7)).status_code == 201  # another key passes
    assert speaker.post(KEY).status_code == 429
    assert speaker.post(KEY).status_code == 201


def test_apply_then_drop_then_the_providers_answer_to_the_retry(speaker: Speaker) -> None:
    speaker.server.drop()
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(KEY)
    [entry] = speaker.server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
    retry = speaker.post(KEY)
    assert retry.status_code == replay_status(speaker.name)
    assert len(speaker.server.ledger()) == 1


def test_a_crash_is_finished_by_the_retry_exactly_once(speaker: Speaker) -> None:
    speaker.server.crash("EXT1_SENT")
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(KEY)
    speaker.server.advance(speaker.server.lease + 1)
    finished = speaker.post(KEY)
    assert finished.status_code == 201, finished.text
    [entry] = speaker.server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied, entry.journal) == (1, 1, ("H1", "H2", "H3"))


# -- a profile of your own ---------------------------------------------------------------


def test_a_profile_of_your_own_answers_as_its_fields_say() -> None:
    mine = profiles.stripe.replace(
        name="mine",
        key=profiles.KeySlot("X-Request-Key"),
        in_progress=(Match(frozenset({425}), codes=frozenset({"busy"})),),
        code_paths=("error.code",),
    )
    with in_process("reference", profile=mine) as speaker:
        at = ("header", "X-Request-Key")
        assert speaker.post(None, at=at).status_code == 400  # your own server requires it
        first = speaker.post("mine-1", at=at)
        assert first.status_code == 201
        again = speaker.post("mine-1", at=at)
        assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
        reused = speaker.post("mine-1", OTHER, at=at)
        assert reused.status_code == 400
        assert reused.json() == {
            "error": {"code": "idempotency_error"},
            "detail": "idempotency key reused",
        }
        speaker.server.crash("H1_DONE")
        with pytest.raises(httpx.RemoteProtocolError):
            speaker.post("mine-2", at=at)
        busy = speaker.post("mine-2", at=at)
        assert busy.status_code == 425
        assert busy.json() == {"error": {"code": "busy"}, "detail": "request in progress"}
        # Its own classifier reads these answers as what they are.
        codes = codes_in(busy.content, mine.code_paths)
        assert mine.in_progress[0].matches(425, busy.headers, codes)
        codes = codes_in(reused.content, mine.code_paths)
        assert mine.mismatch[0].matches(400, reused.headers, codes)


def test_a_profile_of_your_own_names_the_existing_resource_where_its_fields_say() -> None:
    mine = profiles.gocardless.replace(name="gc-own")
    with in_process("gocardless", profile=mine) as speaker:
        first = speaker.post(KEY)
        again = speaker.post(KEY)
        assert again.status_code == 409
        assert again.json() == {
            "error": {
                "errors": [
                    {
                        "reason": "idempotent_creation_conflict",
                        "links": {"conflicting_resource_id": first.json()["id"]},
                    }
                ]
            },
            "detail": "already created",
        }
        assert mine.existing is not None
        codes = codes_in(again.content, mine.code_paths)
        assert mine.existing.match.matches(409, again.headers, codes)


def test_a_profile_of_your_own_with_a_challenge_challenges_every_post() -> None:
    mine = profiles.generic.replace(
        name="sca", challenge=Match(frozenset({401}), header=("X-Challenge", "*"))
    )
    with in_process("generic", profile=mine) as speaker:
        challenged = speaker.post(KEY)
        assert challenged.status_code == 401
        assert re.fullmatch(r"[0-9a-f]{32}", challenged.headers["x-challenge"])
        assert speaker.server.ledger() == ()
        assert speaker.post(KEY, headers={"X-Signature": "s"}).status_code == 201


def test_an_unknown_profile_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no profile named 'nope'"):
        ReferenceServer(profile="nope")


def test_the_default_server_is_the_reference_profile() -> None:
    with ReferenceServer() as server:
        assert server.profile is profiles.reference
        assert "profile='reference'" in repr(server)
