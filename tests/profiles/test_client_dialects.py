"""The client speaking each provider's idempotency dialect, against scripted answers.

Every answer here is written from the provider's documentation or official SDK (see
docs/profiles.md), not computed from the profile, so a wrong profile fails too. The
reference server speaking the same dialects is tested in tests/profiles/test_server_*.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    KeyConflict,
    ManualClock,
    NotSent,
    ReconcileRequired,
    RetryPolicy,
    State,
    profiles,
    wrap,
)
from idemclient._time import CLOCK_SKEW
from idemclient.errors import ChallengeRequired, InvalidKey, MissingKey, OperationMismatch
from idemclient.profiles import named
from idemclient.store import SQLiteStore

from .scripted import Scripted


def _json(status: int, body: object, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


# -- where the key goes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "path", "header", "quoted"),
    [
        ("generic", "/v1/payments", "Idempotency-Key", False),
        ("stripe", "/v1/payment_intents", "Idempotency-Key", False),
        ("paypal", "/v2/checkout/orders", "PayPal-Request-Id", False),
        ("checkout", "/payments", "Cko-Idempotency-Key", False),
        ("razorpay", "/v1/payouts", "X-Payout-Idempotency", False),
        ("razorpay", "/v1/transfers", "X-Transfer-Idempotency", False),
        ("wise", "/v4/profiles/1/balance-movements", "X-idempotence-uuid", False),
        ("ietf", "/payments", "Idempotency-Key", True),
    ],
)
def test_the_key_goes_in_the_header_the_server_reads(
    make: Callable[..., Client], profile: str, path: str, header: str, quoted: bool
) -> None:
    server = Scripted(httpx.Response(503), httpx.Response(201, json={"id": "p"}))
    client = make(server, profile)
    outcome = client.post(path, json={"amount": 100}, key="0b3c2c1e-9f0a-4d4e-8f7d-3a1c9e2b4f60")
    assert outcome.state is State.SUCCEEDED
    sent = [r.headers.get(header) for r in server.posts]
    expected = '"0b3c2c1e-9f0a-4d4e-8f7d-3a1c9e2b4f60"' if quoted else outcome.key
    assert sent == [expected, expected]  # the same key on the retry
    assert all("idempotency-key" not in r.headers for r in server.posts) or header == (
        "Idempotency-Key"
    )


@pytest.mark.parametrize(
    ("profile", "path", "field"),
    [
        ("square", "/v2/payments", "idempotency_key"),
        ("wise", "/v1/transfers", "customerTransactionId"),
    ],
)
def test_a_body_field_key_is_put_in_the_json_body_and_kept_across_retries(
    make: Callable[..., Client], profile: str, path: str, field: str
) -> None:
    server = Scripted(httpx.ConnectError, httpx.Response(200, json={"id": "p"}))
    client = make(server, profile)
    outcome = client.post(path, json={"amount": 100})
    keys = [json.loads(r.content)[field] for r in server.posts]
    assert keys == [outcome.key, outcome.key]
    assert all("idempotency-key" not in r.headers for r in server.posts)


def test_a_body_field_the_caller_set_is_the_key(make: Callable[..., Client]) -> None:
    server = Scripted()
    client = make(server, "square")
    outcome = client.post("/v2/payments", json={"idempotency_key": "mine-1", "amount": 5})
    assert outcome.key == "mine-1"
    with pytest.raises(ValueError, match="differ"):
        client.post("/v2/payments", json={"idempotency_key": "mine-2"}, key="other")


def test_a_reissued_body_field_operation_keeps_its_recorded_key(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.ConnectError)
    client = make(server, "square", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(NotSent) as first:
        client.post("/v2/payments", json={"amount": 5}, operation_id="order-9")
    outcome = client.post("/v2/payments", json={"amount": 5}, operation_id="order-9")
    assert outcome.key == first.value.outcome.key
    keys = {json.loads(r.content)["idempotency_key"] for r in server.posts}
    assert keys == {outcome.key}


def test_a_body_field_profile_refuses_a_body_that_is_not_json(
    make: Callable[..., Client], tmp_path: Path
) -> None:
    server = Scripted()
    client = make(server, "square")
    with pytest.raises(MissingKey, match="json="):
        client.post("/v2/payments", content=b"amount=5")
    assert server.requests == []
    assert client.store.unfinished() == []


def test_wrap_with_a_body_field_profile_needs_the_key_in_the_body(tmp_path: Path) -> None:
    server = Scripted()
    http = wrap(
        httpx.Client(transport=httpx.MockTransport(server), base_url="https://sq.test"),
        store=tmp_path / "w.db",
        profile="square",
        clock=ManualClock(),
    )
    with http, pytest.raises(MissingKey, match="idempotency_key"):
        http.post("/v2/payments", json={"amount": 5})
    assert server.requests == []
    http2 = wrap(
        httpx.Client(transport=httpx.MockTransport(server), base_url="https://sq.test"),
        store=tmp_path / "w2.db",
        profile="square",
        clock=ManualClock(),
    )
    with http2:
        response = http2.post("/v2/payments", json={"amount": 5, "idempotency_key": "k-1"})
    assert response.status_code == 201
    assert [json.loads(r.content)["idempotency_key"] for r in server.posts] == ["k-1"]


# -- what a key may be ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "path", "key"),
    [
        ("razorpay", "/v1/payouts", "abc"),  # 4..36
        ("razorpay", "/v1/payouts", "a" * 37),
        ("adyen", "/v71/payments", "k" * 65),  # <= 64
        ("square", "/v2/payments", "k" * 46),  # CreatePayment: <= 45
        ("wise", "/v1/transfers", "not-a-uuid"),
        ("drf-idempotency-key", "/orders", "not-a-uuid"),
        ("paypal", "/v2/checkout/orders", "k" * 109),  # orders: <= 108
    ],
)
def test_a_key_the_server_would_not_take_is_refused_before_anything_is_recorded(
    make: Callable[..., Client], profile: str, path: str, key: str
) -> None:
    server = Scripted()
    client = make(server, profile)
    with pytest.raises(InvalidKey, match=profile):
        client.post(path, json={"amount": 1}, key=key)
    assert server.requests == []
    assert client.store.find(operation_ids=[key]) == []


def test_a_key_limit_is_per_endpoint(make: Callable[..., Client]) -> None:
    server = Scripted()
    client = make(server, "square")
    assert client.post("/v2/orders", json={"a": 1}, key="k" * 192).state is State.SUCCEEDED
    with pytest.raises(InvalidKey):
        client.post("/v2/payments", json={"a": 1}, key="k" * 46)


# -- what the answers mean -----------------------------------------------------------------


def test_stripe_in_progress_is_polled_and_a_changed_body_is_a_key_conflict(
    make: Callable[..., Client],
) -> None:
    in_use = _json(409, {"error": {"type": "idempotency_error", "code": "idempotency_key_in_use"}})
    server = Scripted(in_use, httpx.Response(200, json={"id": "pi_1"}))
    client = make(server, "stripe")
    assert client.post("/v1/payment_intents", json={"amount": 1}).state is State.SUCCEEDED
    assert len(server.posts) == 2

    mismatch = _json(
        400,
        {
            "error": {
                "type": "idempotency_error",
                "message": "Keys for idempotent requests can"
                " only be used with the same parameters they were first used with.",
            }
        },
    )
    client = make(Scripted(mismatch), "stripe")
    with pytest.raises(KeyConflict, match="HTTP 400"):
        client.post("/v1/payment_intents", json={"amount": 2})

    declined = _json(402, {"error": {"type": "card_error", "code": "card_declined"}})
    client = make(Scripted(declined), "stripe")
    assert client.post("/v1/payment_intents", json={"amount": 3}).state is State.FAILED


def test_stripe_should_retry_is_obeyed_without_asking(make: Callable[..., Client]) -> None:
    server = Scripted(httpx.Response(500, headers={"Stripe-Should-Retry": "false"}))
    client = make(server, "stripe")
    with pytest.raises(Indeterminate):
        client.post("/v1/payment_intents", json={"amount": 1})
    assert len(server.posts) == 1


def test_under_generic_a_stripe_idempotency_error_is_only_a_refusal(
    make: Callable[..., Client],
) -> None:
    mismatch = _json(400, {"error": {"type": "idempotency_error"}})
    client = make(Scripted(mismatch), "generic")
    assert client.post("/v1/payment_intents", json={"amount": 1}).state is State.FAILED


def test_adyen_704_is_still_running_and_other_422s_are_refusals(
    make: Callable[..., Client],
) -> None:
    running = _json(
        422,
        {
            "status": 422,
            "errorCode": "704",
            "message": "request already processed or in progress",
            "errorType": "validation",
        },
        **{"transient-error": "true"},
    )
    server = Scripted(running, httpx.Response(200, json={"pspReference": "X"}))
    client = make(server, "adyen")
    assert client.post("/v71/payments", json={"amount": 1}).state is State.SUCCEEDED
    assert len(server.posts) == 2

    invalid = _json(422, {"status": 422, "errorCode": "101", "message": "Invalid card number"})
    client = make(Scripted(invalid), "adyen")
    outcome = client.post("/v71/payments", json={"amount": 2})
    assert outcome.state is State.FAILED  # not a KeyConflict: a validation error


def test_gocardless_conflict_is_done_and_the_resource_is_fetched_through_the_client(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    conflict = _json(
        409,
        {
            "error": {
                "type": "invalid_state",
                "code": 409,
                "message": "A resource has already been created with this idempotency key",
                "errors": [
                    {
                        "reason": "idempotent_creation_conflict",
                        "message": "A resource has already been created with this key",
                        "links": {"conflicting_resource_id": "PM00ABC"},
                    }
                ],
            }
        },
    )
    resource = {"payments": {"id": "PM00ABC", "status": "confirmed"}}  # collected
    server = Scripted(httpx.ReadTimeout, conflict, get=lambda request: _json(200, resource))
    client = make(server, "gocardless", policy=RetryPolicy())
    # A timeout on a server not known to guard a request in flight: not retried.
    with pytest.raises(Indeterminate):
        client.post("/payments", json={"amount": 1}, operation_id="pay-1")
    clock.advance(named("gocardless").in_flight_for + CLOCK_SKEW)  # the first attempt surely ended
    outcome = client.post("/payments", json={"amount": 1}, operation_id="pay-1")
    assert outcome.state is State.SUCCEEDED
    assert outcome.existing == "PM00ABC"
    assert outcome.json() == resource  # the resource, read through its envelope
    fetch = server.requests[-1]
    assert (fetch.method, fetch.url.path) == ("GET", "/payments/PM00ABC")
    assert fetch.headers["authorization"] == "Bearer sk_test"

    other = _json(
        409,
        {
            "error": {
                "type": "invalid_state",
                "code": 409,
                "errors": [{"reason": "mandate_is_inactive", "message": "inactive"}],
            }
        },
    )
    client = make(Scripted(other), "gocardless")
    assert client.post("/payments", json={"amount": 2}).state is State.FAILED


def test_drf_middleware_in_progress_and_mismatch_share_409(make: Callable[..., Client]) -> None:
    running = _json(409, {"detail": "Request in progress"})
    server = Scripted(running, httpx.Response(201, json={"id": 1}))
    client = make(server, "drf-idempotency-key")
    assert client.post("/orders", json={"n": 1}).state is State.SUCCEEDED
    assert len(server.posts) == 2
    changed = _json(409, {"detail": "Parameter mismatch"})
    server = Scripted(changed)
    client = make(server, "drf-idempotency-key")
    with pytest.raises(KeyConflict):
        client.post("/orders", json={"n": 2})
    assert len(server.posts) == 1  # not retried eight times


def test_django_idempotency_key_replay_409_is_the_stored_success(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    replay = _json(409, {"id": 7, "amount": 1})
    # Sent again at once where the profile allows it (no hold, keys kept a day).
    django = named("django-idempotency-key").replace(in_flight_for=0.0, key_retention=86400.0)
    client = make(Scripted(httpx.ReadTimeout, replay), django)
    # After an attempt of ours that may have been applied: a 409 with no attempt of
    # ours before it may be the application's own refusal, or the replay of another
    # process's payment (tests/profiles/hostile/test_replay_status.py).
    with pytest.raises(Indeterminate):
        client.post("/orders", json={"amount": 1}, key="order-7")
    clock.advance(CLOCK_SKEW)  # the hold: in_flight_for (none here) and the hosts' skew
    outcome = client.post("/orders", json={"amount": 1}, key="order-7")
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert outcome.json() == {"id": 7, "amount": 1}


def test_no_retry_after_maybe_applied_where_the_server_has_no_in_flight_guard(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "django-idempotency-key")
    with pytest.raises(Indeterminate, match="not known to refuse a second request"):
        client.post("/orders", json={"amount": 1})
    assert len(server.posts) == 1
    # A refusal before anything reached the server is still retried.
    server = Scripted(httpx.ConnectError, httpx.Response(201))
    client = make(server, "django-idempotency-key")
    assert client.post("/orders", json={"amount": 1}).state is State.SUCCEEDED


def test_checkout_does_not_retry_an_answer_its_server_does_not_keep(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.Response(500))
    client = make(server, "checkout")
    with pytest.raises(Indeterminate, match="does not keep an HTTP 500"):
        client.post("/payments", json={"amount": 1})
    assert len(server.posts) == 1


def test_wise_strong_customer_authentication_is_its_own_state(
    make: Callable[..., Client],
) -> None:
    challenge = httpx.Response(
        403, headers={"x-2fa-approval": "ott-123", "x-2fa-approval-result": "REJECTED"}
    )
    server = Scripted(challenge)
    client = make(server, "wise")
    path = "/v4/profiles/1/balance-movements"
    with pytest.raises(ChallengeRequired) as raised:
        client.post(path, json={"amount": 1}, operation_id="move-1")
    outcome = raised.value.outcome
    assert outcome.state is State.CHALLENGED
    assert not outcome.maybe_applied
    assert outcome.response is not None
    assert outcome.response.headers["x-2fa-approval"] == "ott-123"
    assert isinstance(raised.value, NotSent)  # nothing applied
    done = client.post(
        path, json={"amount": 1}, operation_id="move-1", headers={"x-2fa-approval": "ott-123"}
    )
    assert done.state is State.SUCCEEDED
    assert done.key == outcome.key
    assert server.posts[-1].headers["x-2fa-approval"] == "ott-123"


# -- retention, and the profile an operation was sent under --------------------------------


def test_mollie_keys_are_kept_an_hour(make: Callable[..., Client], clock: ManualClock) -> None:
    server = Scripted(httpx.ReadTimeout, httpx.ReadTimeout)
    client = make(server, "mollie", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(Indeterminate):
        client.post("/v2/payments", json={"amount": 1}, operation_id="m-1")
    clock.advance(3600)
    with pytest.raises(ReconcileRequired, match="mollie"):
        client.post("/v2/payments", json={"amount": 1}, operation_id="m-1")
    assert len(server.posts) == 1


def test_an_explicit_policy_retention_wins_and_is_deprecated(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    with pytest.warns(DeprecationWarning, match="key_retention"):
        policy = RetryPolicy(max_attempts=1, key_retention=7 * 86400)
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "mollie", policy=policy)
    with pytest.raises(Indeterminate):
        client.post("/v2/payments", json={"amount": 1}, operation_id="m-2")
    clock.advance(2 * 3600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcome = client.post("/v2/payments", json={"amount": 1}, operation_id="m-2")
    assert outcome.state is State.SUCCEEDED


def test_an_operation_is_never_sent_on_under_another_profile(
    make: Callable[..., Client], tmp_path: Path
) -> None:
    server = Scripted(httpx.ConnectError)
    stripe = make(server, "stripe", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(NotSent):
        stripe.post("/v1/payment_intents", json={"amount": 1}, operation_id="op-1")
    stripe.close()
    paypal = make(server, "paypal")
    with pytest.raises(OperationMismatch, match="stripe server profile"):
        paypal.post("/v1/payment_intents", json={"amount": 1}, operation_id="op-1")
    outcomes = paypal.resume()
    assert [o.state for o in outcomes] == [State.NOT_SENT]
    assert "stripe" in outcomes[0].evidence
    assert len(server.posts) == 1
    record = SQLiteStore(tmp_path / "store.db").find(operation_ids=["op-1"])[0]
    assert record.profile == "stripe"


def test_an_unknown_profile_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no profile named 'strpie'"):
        Client(store=tmp_path / "x.db", profile="strpie")


def test_a_profile_of_your_own_from_a_builtin() -> None:
    mine = profiles.stripe.replace(name="stripe-eu", key_retention=12 * 3600.0)
    assert mine.key == profiles.stripe.key
    assert mine.resolve("POST", "/v1/charges", frozenset()).key_retention == 12 * 3600.0
    with pytest.raises(ValueError, match="name"):
        profiles.stripe.replace(name="Stripe EU")


# -- the batch and reconcile under a profile ------------------------------------------------


def _rows(tmp_path: Path) -> Path:
    path = tmp_path / "rows.csv"
    path.write_text(
        "employee_id,amount,currency,value_date\nE1,1000,EUR,2026-12-01\n", encoding="utf-8"
    )
    return path


def test_the_batch_sends_the_key_where_a_header_profile_reads_it(
    make: Callable[..., Client], tmp_path: Path
) -> None:
    from idemclient.batch import read_batch, submit

    batch = read_batch(_rows(tmp_path), reference_column="employee_id")
    server = Scripted()
    client = make(server, "razorpay")
    report = submit(batch, client, path="/v1/payouts", lookup=None)
    assert [row.state for row in report.rows] == ["succeeded"]
    (sent,) = server.posts
    assert sent.headers["X-Payout-Idempotency"] == report.rows[0].key
    assert "idempotency-key" not in sent.headers
    (record,) = client.store.find(references=["E1"])
    assert record.profile == "razorpay"


def test_the_batch_puts_the_key_in_the_body_where_the_profile_reads_it_there(
    make: Callable[..., Client], tmp_path: Path, clock: ManualClock
) -> None:
    from idemclient.batch import read_batch, submit

    batch = read_batch(_rows(tmp_path), reference_column="employee_id")
    server = Scripted(httpx.ReadTimeout)
    client = make(server, "wise")
    first = submit(batch, client, path="/v1/transfers", lookup=None)
    assert [row.state for row in first.rows] == ["indeterminate"]  # not retried (wise)
    clock.advance(named("wise").in_flight_for + CLOCK_SKEW)  # the first attempt surely ended
    again = submit(batch, client, path="/v1/transfers", lookup=None)
    assert [row.state for row in again.rows] == ["succeeded"]
    bodies = [json.loads(r.content) for r in server.posts]
    assert [b["customerTransactionId"] for b in bodies] == [again.rows[0].key] * 2
    assert bodies[0] == bodies[1]
    assert "idempotency-key" not in server.posts[0].headers
    # The same file under another reference scope is the same payments: refused as twins.
    renamed = read_batch(_rows(tmp_path), reference_column="employee_id", batch_reference="b2")
    from idemclient.batch import BatchInvalid

    with pytest.raises(BatchInvalid, match="very same payment"):
        submit(renamed, client, path="/v1/transfers", lookup=None)
    assert len(server.posts) == 2


def test_reconcile_uses_the_profile_look_up(make: Callable[..., Client]) -> None:
    def found(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/payments"
        assert request.url.params["reference"] == "inv-1"
        return httpx.Response(200, json=[{"reference": "inv-1", "status": "succeeded"}])

    server = Scripted(httpx.ReadTimeout, get=found)
    client = make(server, "reference", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(Indeterminate):
        client.post("/v1/payments", json={"amount": 1}, operation_id="op", reference="inv-1")
    outcome = client.reconcile("op")
    assert outcome.state is State.SUCCEEDED
    assert len(server.posts) == 1
    with pytest.raises(ValueError, match="knows no look-up"):
        make(Scripted(), "mollie").reconcile("op")


def test_django_idempotency_key_423_is_busy_and_retried(make: Callable[..., Client]) -> None:
    server = Scripted(httpx.Response(423), httpx.Response(201, json={"id": 1}))
    client = make(server, "django-idempotency-key")
    outcome = client.post("/orders", json={"amount": 1})
    assert outcome.state is State.SUCCEEDED
    assert not outcome.replayed
    assert len(server.posts) == 2


def test_the_batch_refuses_rows_recorded_under_another_profile(
    make: Callable[..., Client], tmp_path: Path
) -> None:
    from idemclient.batch import BatchInvalid, read_batch, submit

    batch = read_batch(_rows(tmp_path), reference_column="employee_id")
    server = Scripted(httpx.ConnectError, httpx.ConnectError, httpx.ConnectError)
    first = make(server, "generic", policy=RetryPolicy(max_attempts=1))
    assert [r.state for r in submit(batch, first, path="/v1/payouts", lookup=None).rows] == [
        "not_sent"
    ]
    first.close()
    with pytest.raises(BatchInvalid, match="sent under the generic server profile"):
        submit(batch, make(server, "razorpay"), path="/v1/payouts", lookup=None)
    assert len(server.posts) == 1


@pytest.mark.anyio
async def test_the_async_client_speaks_the_profile_too(tmp_path: Path) -> None:
    from idemclient import AsyncClient

    seen: list[httpx.Request] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client asks the time first
            return httpx.Response(200)
        await request.aread()
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(409)  # Checkout.com: the first request is still running
        return httpx.Response(200, json={"id": "pi_1"})

    async with AsyncClient(
        store=tmp_path / "a.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(answer),
        base_url="https://api.checkout.test",
        profile="checkout",
    ) as client:
        outcome = await client.post("/payments", json={"amount": 100})
    assert outcome.state is State.SUCCEEDED
    assert [r.headers["Cko-Idempotency-Key"] for r in seen] == [outcome.key] * 2
