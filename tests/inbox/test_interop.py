"""Interoperability with the verifiers and signers users already run.

Standard Webhooks, both ways, against the `standardwebhooks` package (the
specification's own Python library): what its `Webhook(secret).sign` makes, our
receiver accepts (through `verify`, the WSGI application and the ASGI application);
what the reference server sends, its `Webhook.verify` accepts. Stripe: signatures made
as stripe-python makes and checks them (`stripe.WebhookSignature`), accepted by
`StripeSignature`, and ours accepted by stripe-python.

`standardwebhooks` and `stripe` read the real clock, so these tests sign and verify
at the real time (a `ManualClock` set to it); nothing sleeps.
"""

from __future__ import annotations

import base64
import io
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
import stripe

from idemclient import ManualClock
from idemclient.inbox import (
    InvalidMessageId,
    LegacySignature,
    SignatureInvalid,
    SQLiteInbox,
    StandardWebhooks,
    StripeSignature,
    WebhookReceiver,
)
from idemclient.testing import ReferenceServer

from .conftest import OTHER_SECRET, SECRET, SENDER, effects, record_effect, recorded_ids

BODY = json.dumps({"type": "payment.succeeded", "data": {"object": {"id": "pay_1"}}}).encode()
STRIPE_SECRET = "whsec_stripe_test_0123456789abcdef0123456789"
STRIPE_BODY = json.dumps(
    {"id": "evt_1PqStripe", "object": "event", "type": "payment_intent.succeeded"}
).encode()


@pytest.fixture
def clock() -> ManualClock:
    """The real time, frozen: the libraries under test read `time.time()`."""
    return ManualClock(start=float(int(time.time())))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def inbox(app_db: Path, clock: ManualClock) -> Any:
    with SQLiteInbox(app_db, clock=clock) as opened:
        yield opened


def standard_receiver(inbox: SQLiteInbox, *secrets: str) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks(list(secrets)), handler=record_effect
    )


def their_headers(secret: str, message_id: str, timestamp: float, body: bytes) -> dict[str, str]:
    """A delivery signed by the `standardwebhooks` package."""
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    signature = standardwebhooks.Webhook(secret).sign(message_id, when, body.decode())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp)),
        "webhook-signature": signature,
    }


# -- Standard Webhooks: their signer, our receiver --------------------------------------


def test_their_signature_is_accepted_by_verify(inbox: SQLiteInbox, clock: ManualClock) -> None:
    receiver = standard_receiver(inbox, SECRET)
    event = receiver.verify(their_headers(SECRET, "msg_1", clock.time(), BODY), BODY)
    assert (event.message_id, event.timestamp, event.body) == ("msg_1", clock.time(), BODY)


def test_their_rotation_header_is_accepted_with_either_secret(
    inbox: SQLiteInbox, clock: ManualClock
) -> None:
    old = their_headers(SECRET, "msg_1", clock.time(), BODY)["webhook-signature"]
    new = their_headers(OTHER_SECRET, "msg_1", clock.time(), BODY)["webhook-signature"]
    headers = {
        **their_headers(SECRET, "msg_1", clock.time(), BODY),
        "webhook-signature": f"{old} {new}",  # several, separated by spaces
    }
    for secret in (SECRET, OTHER_SECRET):
        assert standard_receiver(inbox, secret).verify(headers, BODY).message_id == "msg_1"


@pytest.mark.parametrize(
    ("case", "reason"),
    [("tampered body", "mismatch"), ("wrong secret", "mismatch"), ("stale", "stale")],
)
def test_their_delivery_altered_is_refused(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path, case: str, reason: str
) -> None:
    receiver = standard_receiver(inbox, SECRET)
    body = BODY
    if case == "tampered body":
        headers = their_headers(SECRET, "msg_1", clock.time(), BODY)
        body = BODY.replace(b"succeeded", b"failed")
    elif case == "wrong secret":
        headers = their_headers(OTHER_SECRET, "msg_1", clock.time(), BODY)
    else:
        headers = their_headers(SECRET, "msg_1", clock.time() - 301, BODY)
    with pytest.raises(SignatureInvalid) as refused:
        receiver.verify(headers, body)
    assert refused.value.reason == reason
    assert receiver.handle(headers, body).status == 401
    assert recorded_ids(app_db) == set()


def test_their_delivery_through_the_wsgi_app_is_applied_once(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    app = standard_receiver(inbox, SECRET).wsgi_app()
    headers = their_headers(SECRET, "msg_1", clock.time(), BODY)

    def call(body: bytes) -> str:
        environ: dict[str, Any] = {
            "REQUEST_METHOD": "POST",
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json",
            "wsgi.input": io.BytesIO(body),
            **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
        }
        statuses: list[str] = []
        b"".join(app(environ, lambda status, _: statuses.append(status)))
        return statuses[0]

    assert call(BODY) == "200 OK"
    assert call(BODY) == "200 OK"  # the duplicate, acknowledged and dropped
    assert call(BODY + b" ") == "401 Unauthorized"
    assert effects(app_db) == {"msg_1": 1}


@pytest.mark.anyio
async def test_their_delivery_through_the_asgi_app_is_applied_once(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    app = standard_receiver(inbox, SECRET).asgi_app()
    headers = their_headers(SECRET, "msg_1", clock.time(), BODY)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://merchant.test") as client:
        first = await client.post("/webhooks", content=BODY, headers=headers)
        again = await client.post("/webhooks", content=BODY, headers=headers)
        forged = await client.post(
            "/webhooks", content=BODY, headers={**headers, "webhook-id": "x"}
        )
    assert (first.status_code, first.json()["status"]) == (200, "processed")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert forged.status_code == 401
    assert effects(app_db) == {"msg_1": 1}


# -- Standard Webhooks: our sender, their verifier --------------------------------------


def _delivered(
    clock: ManualClock, secrets: list[str] | None
) -> tuple[list[httpx.Request], tuple[str, ...]]:
    received: list[httpx.Request] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        received.append(request)
        return httpx.Response(204)

    with ReferenceServer(clock=clock) as server:
        chosen = server.set_webhook_endpoint(
            "https://merchant.test/webhooks",
            secrets=secrets,
            transport=httpx.MockTransport(endpoint),
        )
        with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
            client.post(
                "/v1/payments",
                json={"amount": 100, "currency": "EUR", "reference": "inv-1"},
                headers={"Authorization": "Bearer alice", "Idempotency-Key": "k-1"},
            ).raise_for_status()
        assert server.deliver_webhooks().delivered == 1
    return received, chosen


@pytest.mark.parametrize("secrets", [None, [SECRET], [OTHER_SECRET, SECRET]])
def test_the_reference_servers_delivery_is_accepted_by_their_verifier(
    clock: ManualClock, secrets: list[str] | None
) -> None:
    [request], chosen = _delivered(clock, secrets)
    assert chosen[0].startswith("whsec_")
    for secret in chosen:  # a verifier holding any one of the secrets accepts it
        payload = standardwebhooks.Webhook(secret).verify(request.content, dict(request.headers))
        assert payload == json.loads(request.content)
        assert payload["id"] == request.headers["webhook-id"]


def test_their_verifier_refuses_our_delivery_altered(clock: ManualClock) -> None:
    [request], _ = _delivered(clock, [SECRET])
    headers = dict(request.headers)
    verifier = standardwebhooks.Webhook(SECRET)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        verifier.verify(request.content.replace(b"succeeded", b"declined!"), headers)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OTHER_SECRET).verify(request.content, headers)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        verifier.verify(request.content, {**headers, "webhook-id": "evt_other"})


def test_our_signature_equals_theirs_byte_for_byte(clock: ManualClock) -> None:
    ours = StandardWebhooks([SECRET]).signature(
        message_id="msg_1", timestamp=int(clock.time()), body=BODY
    )
    theirs = their_headers(SECRET, "msg_1", clock.time(), BODY)["webhook-signature"]
    assert ours == theirs
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    assert (
        StandardWebhooks([key]).signature(
            message_id="msg_1", timestamp=int(clock.time()), body=BODY
        )
        == theirs
    )  # a raw key given as bytes is the same key


# -- Stripe -------------------------------------------------------------------------------


def stripe_receiver(inbox: SQLiteInbox, *secrets: str) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(
        inbox, sender="stripe", scheme=StripeSignature(list(secrets)), handler=record_effect
    )


def stripe_header(secret: str, timestamp: float, body: bytes) -> str:
    """A Stripe-Signature made by stripe-python's own helper."""
    return stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=int(timestamp)
    )


def test_a_stripe_signed_event_is_accepted_with_its_id_from_the_body(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    receiver = stripe_receiver(inbox, STRIPE_SECRET)
    headers = {"Stripe-Signature": stripe_header(STRIPE_SECRET, clock.time(), STRIPE_BODY)}
    event = receiver.verify(headers, STRIPE_BODY)
    assert (event.sender, event.message_id, event.timestamp) == (
        "stripe",
        "evt_1PqStripe",
        clock.time(),
    )
    assert receiver.handle(headers, STRIPE_BODY).outcome == "processed"
    assert receiver.handle(headers, STRIPE_BODY).outcome == "duplicate"
    assert effects(app_db) == {"evt_1PqStripe": 1}


def test_stripe_extra_schemes_and_several_v1_are_understood(
    inbox: SQLiteInbox, clock: ManualClock
) -> None:
    t = int(clock.time())
    genuine = stripe_header(STRIPE_SECRET, t, STRIPE_BODY).split(",")[1]
    # A v0 item (Stripe's test-mode scheme) is ignored; any matching v1 is enough.
    header = f"t={t},v1={'0' * 64},{genuine},v0={'1' * 64}"
    receiver = stripe_receiver(inbox, STRIPE_SECRET)
    assert receiver.verify({"stripe-signature": header}, STRIPE_BODY).message_id == "evt_1PqStripe"
    with pytest.raises(SignatureInvalid, match="no v1"):
        receiver.verify({"Stripe-Signature": f"t={t},v0={'1' * 64}"}, STRIPE_BODY)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("tampered body", "mismatch"),
        ("wrong secret", "mismatch"),
        ("stale", "stale"),
        ("from the future", "future"),
        ("no header", "missing"),
        ("no timestamp", "malformed"),
    ],
)
def test_a_stripe_event_altered_is_refused(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path, case: str, reason: str
) -> None:
    now = clock.time()
    body = STRIPE_BODY
    header: str | None = stripe_header(STRIPE_SECRET, now, body)
    if case == "tampered body":
        body = body.replace(b"succeeded", b"failed")
    elif case == "wrong secret":
        header = stripe_header(STRIPE_SECRET + "x", now, body)
    elif case == "stale":
        header = stripe_header(STRIPE_SECRET, now - 301, body)
    elif case == "from the future":
        header = stripe_header(STRIPE_SECRET, now + 301, body)
    elif case == "no header":
        header = None
    else:
        header = ",".join(i for i in str(header).split(",") if not i.startswith("t="))
    headers = {} if header is None else {"Stripe-Signature": header}
    receiver = stripe_receiver(inbox, STRIPE_SECRET)
    with pytest.raises(SignatureInvalid) as refused:
        receiver.verify(headers, body)
    assert refused.value.reason == reason
    assert receiver.handle(headers, body).status == 401
    assert recorded_ids(app_db) == set()


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"type": "x"}', b'{"id": 42}', b'{"id": "evt.1"}', b'{"id": "e v"}'],
)
def test_a_stripe_body_without_a_usable_event_id_gets_400(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path, body: bytes
) -> None:
    receiver = stripe_receiver(inbox, STRIPE_SECRET)
    headers = {"Stripe-Signature": stripe_header(STRIPE_SECRET, clock.time(), body)}
    with pytest.raises(InvalidMessageId):
        receiver.verify(headers, body)
    assert receiver.handle(headers, body).status == 400
    assert recorded_ids(app_db) == set()


def test_a_forged_stripe_body_is_refused_before_its_id_is_read(
    inbox: SQLiteInbox, clock: ManualClock
) -> None:
    # Unsigned garbage is "forged" (401), not "a bad id" (400): nothing unauthenticated
    # is parsed.
    header = f"t={int(clock.time())},v1={'0' * 64}"
    response = stripe_receiver(inbox, STRIPE_SECRET).handle({"Stripe-Signature": header}, b"{")
    assert response.status == 401


def test_our_stripe_signature_is_accepted_by_stripe_python(clock: ManualClock) -> None:
    header = StripeSignature([STRIPE_SECRET, "whsec_rolled_0123456789abcdef"]).signature(
        timestamp=int(clock.time()), body=STRIPE_BODY
    )
    assert header.count("v1=") == 2
    assert stripe.WebhookSignature.verify_header(STRIPE_BODY, header, STRIPE_SECRET, 300)
    event = stripe.Webhook.construct_event(STRIPE_BODY, header, STRIPE_SECRET, api_key="sk_test")
    assert event.id == "evt_1PqStripe"
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(STRIPE_BODY + b" ", header, STRIPE_SECRET, 300)


def test_a_stripe_rolled_secret_is_accepted_with_either(
    inbox: SQLiteInbox, clock: ManualClock
) -> None:
    rolled = "whsec_rolled_0123456789abcdef"
    receiver = stripe_receiver(inbox, STRIPE_SECRET, rolled)
    for secret in (STRIPE_SECRET, rolled):
        headers = {"Stripe-Signature": stripe_header(secret, clock.time(), STRIPE_BODY)}
        assert receiver.verify(headers, STRIPE_BODY).message_id == "evt_1PqStripe"


# -- the deprecated spelling -------------------------------------------------------------


def test_secrets_alone_is_deprecated_and_accepts_both_header_sets(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    legacy_secret = "an-old-raw-secret-0123456789"  # not a Standard Webhooks secret
    with pytest.warns(DeprecationWarning, match="scheme=StandardWebhooks"):
        receiver = WebhookReceiver(
            inbox, sender=SENDER, secrets=[SECRET, legacy_secret], handler=record_effect
        )
    standard = their_headers(SECRET, "msg_1", clock.time(), BODY)
    with pytest.warns(DeprecationWarning, match="LegacySignature"):
        signer = LegacySignature([legacy_secret])
    legacy = signer.headers(message_id="msg_2", timestamp=int(clock.time()), body=BODY)
    assert receiver.handle(standard, BODY).outcome == "processed"
    assert receiver.handle(legacy, BODY).outcome == "processed"
    assert receiver.handle({**standard, "webhook-id": "msg_3"}, BODY).status == 401
    assert effects(app_db) == {"msg_1": 1, "msg_2": 1}
