"""What a sender (or an attacker) may put in front of the receiver, answered alike by
`handle`, the ASGI app and the WSGI app, and logged.

- Svix-based senders sign as Standard Webhooks do, under `svix-id`, `svix-timestamp`
  and `svix-signature` (svix's own verifier accepts both spellings): received as if
  they were `webhook-*`, and one event under either spelling is one event.
- A `webhook-id` sent twice: an ASGI server hands the app two lines, a WSGI server one
  line with the values joined by a comma. Both are the same refusal.
- Every refusal of a delivery (400, 401, 411, 413) is logged, with why.
- A declared `Content-Length` over `max_body` is answered 413 by the ASGI app before a
  byte of the body is read, as the WSGI app does.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import standardwebhooks

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookReceiver

from .conftest import (
    SECRET,
    SENDER,
    asgi_server,
    effects,
    record_effect,
    recorded_ids,
    signed,
    wsgi_server,
)

BODY = json.dumps({"id": "evt_1", "type": "payment.succeeded"}).encode()


def svix_headers(message_id: str, timestamp: float, body: bytes) -> dict[str, str]:
    """A delivery as a Svix-based sender signs it: Standard Webhooks' signature (made
    here by the specification's own library) under the `svix-` names."""
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    return {
        "svix-id": message_id,
        "svix-timestamp": str(int(timestamp)),
        "svix-signature": standardwebhooks.Webhook(SECRET).sign(message_id, when, body.decode()),
        "content-type": "application/json",
    }


# -- svix-* headers ----------------------------------------------------------------------


def test_a_svix_signed_delivery_is_processed_and_is_the_same_event_as_webhook_star(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    first = receiver.handle(svix_headers("msg_1", clock.time(), BODY), BODY)
    assert (first.status, first.outcome) == (200, "processed")
    # The same event again, under the other spelling (a sender moved to white-labelled
    # headers meanwhile): a duplicate, not a second effect.
    again = receiver.handle(signed(BODY, "msg_1", timestamp=clock.time()), BODY)
    assert (again.status, again.outcome) == (200, "duplicate")
    assert effects(app_db) == {"msg_1": 1}


@pytest.mark.parametrize(
    "mixed",
    [
        # both spellings, agreeing: one header said twice in two ways, accepted
        {"webhook-id": "msg_1"},
        {"webhook-id": "msg_1", "webhook-timestamp": "SAME", "webhook-signature": "SAME"},
    ],
)
def test_both_spellings_that_agree_are_one_delivery(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    mixed: dict[str, str],
) -> None:
    headers = svix_headers("msg_1", clock.time(), BODY)
    for name, value in mixed.items():
        headers[name] = headers[name.replace("webhook-", "svix-")] if value == "SAME" else value
    assert receiver.handle(headers, BODY).outcome == "processed"
    assert effects(app_db) == {"msg_1": 1}


@pytest.mark.parametrize(
    "name", ["webhook-id", "webhook-timestamp", "webhook-signature"], ids=lambda n: n[8:]
)
def test_both_spellings_that_disagree_are_refused_and_record_nothing(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path, name: str
) -> None:
    # Each set verifies on its own; which one is the delivery cannot be told.
    ours = signed(BODY, "msg_2", timestamp=clock.time() - 1)
    headers = {**svix_headers("msg_1", clock.time(), BODY), name: ours[name]}
    response = receiver.handle(headers, BODY)
    assert (response.status, json.loads(response.body)["reason"]) == (401, "malformed")
    assert recorded_ids(app_db) == set()


def test_svix_headers_through_both_apps_are_applied_once(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    headers = svix_headers("msg_1", clock.time(), BODY)
    with asgi_server(receiver.asgi_app()) as asgi_url, wsgi_server(receiver.wsgi_app()) as wsgi_url:
        answers = [httpx.post(url, content=BODY, headers=headers) for url in (asgi_url, wsgi_url)]
    assert [(a.status_code, a.json()["status"]) for a in answers] == [
        (200, "processed"),
        (200, "duplicate"),
    ]
    assert effects(app_db) == {"msg_1": 1}


# -- a webhook-id sent twice: the same answer from either app ---------------------------


@pytest.mark.parametrize("second_id", ["evt_2", "evt_1"], ids=["other-id", "same-id"])
def test_a_message_id_sent_twice_gets_the_same_answer_from_asgi_and_wsgi(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    caplog: pytest.LogCaptureFixture,
    second_id: str,
) -> None:
    good = signed(BODY, "evt_1", timestamp=clock.time())
    headers = [*good.items(), (StandardWebhooks.ID_HEADER, second_id)]
    with (
        caplog.at_level(logging.WARNING, logger="idemclient.inbox"),
        asgi_server(receiver.asgi_app()) as asgi_url,
        wsgi_server(receiver.wsgi_app()) as wsgi_url,
    ):
        answers = [httpx.post(url, content=BODY, headers=headers) for url in (asgi_url, wsgi_url)]
    # Under ASGI two header lines, under WSGI one joined by a comma: one refusal.
    assert [(a.status_code, a.content) for a in answers] == [
        (401, b'{"reason":"malformed","status":"refused"}')
    ] * 2
    refusals = [r.getMessage() for r in caplog.records if r.name == "idemclient.inbox"]
    assert len(refusals) == 2
    assert refusals[0] == refusals[1]
    assert "webhook-id" in refusals[0]
    assert recorded_ids(app_db) == set()


# -- every refusal is logged -------------------------------------------------------------


def _refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "idemclient.inbox"]


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"webhook-id": None}, 400, "no webhook-id"),  # no id: the sender's bug, logged
        ({"webhook-id": "evt.1"}, 400, "evt.1"),  # an id that could be regrouped
        ({"webhook-id": "x" * 300}, 400, "255"),
        ({"webhook-signature": None}, 401, "missing"),
    ],
    ids=["no-id", "dotted-id", "long-id", "no-signature"],
)
def test_every_refused_delivery_is_logged_with_why(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    change: dict[str, str | None],
    status: int,
    words: str,
) -> None:
    headers: dict[str, str] = {}
    for name, value in {**signed(BODY, "evt_1", timestamp=clock.time()), **change}.items():
        if value is not None:
            headers[name] = value
    with caplog.at_level(logging.WARNING, logger="idemclient.inbox"):
        response = receiver.handle(headers, BODY)
    assert response.status == status
    [record] = _refusals(caplog)
    assert record.levelno == logging.WARNING
    assert SENDER in record.getMessage()
    assert words in record.getMessage()


def test_a_body_over_the_limit_is_logged(
    inbox: SQLiteInbox, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect, max_body=10
    )
    with caplog.at_level(logging.WARNING, logger="idemclient.inbox"):
        response = receiver.handle(signed(BODY, "evt_1", timestamp=clock.time()), BODY)
    assert response.status == 413
    [record] = _refusals(caplog)
    assert "10 bytes" in record.getMessage()


# -- a declared Content-Length over max_body: 413 before the body ----------------------


@pytest.fixture
def small_receiver(inbox: SQLiteInbox) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect, max_body=64
    )


@pytest.mark.anyio
async def test_the_asgi_app_answers_413_for_a_declared_length_without_reading_the_body(
    small_receiver: WebhookReceiver[sqlite3.Connection], caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read: a 413 is known from the headers")

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/webhooks",
        "headers": [(b"content-length", b"1000000000"), (b"content-type", b"application/json")],
    }
    with anyio.fail_after(5), caplog.at_level(logging.WARNING, logger="idemclient.inbox"):
        await small_receiver.asgi_app()(scope, receive, send)
    start, body = sent
    assert (start["type"], start["status"]) == ("http.response.start", 413)
    assert json.loads(body["body"]) == {"detail": "at most 64 bytes", "status": "too_large"}
    assert len(_refusals(caplog)) == 1


def test_under_uvicorn_a_declared_length_over_the_limit_is_answered_before_the_body(
    small_receiver: WebhookReceiver[sqlite3.Connection],
) -> None:
    with asgi_server(small_receiver.asgi_app()) as url:
        host, port = url.removeprefix("http://").split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            # The headers only, a gigabyte promised: the answer must come without it.
            conn.sendall(
                b"POST /webhooks HTTP/1.1\r\nHost: merchant.test\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
            )
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = conn.recv(4096)  # bounded by the socket's 5 s timeout
                assert chunk, f"the connection closed without an answer: {received!r}"
                received += chunk
    assert received.startswith(b"HTTP/1.1 413 ")


def test_both_apps_refuse_a_declared_length_over_the_limit_alike(
    small_receiver: WebhookReceiver[sqlite3.Connection],
) -> None:
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": "1000000000",
        "wsgi.input": io.BytesIO(b""),
    }
    started: list[str] = []
    wsgi_body = b"".join(small_receiver.wsgi_app()(environ, lambda s, h: started.append(s)))
    with asgi_server(small_receiver.asgi_app()) as url:
        # httpx sends the body; the answer may come before it is all sent
        asgi = httpx.post(url, content=b"x" * 1000)
    assert (started[0], wsgi_body) == ("413 Content Too Large", asgi.content)
    assert asgi.status_code == 413
