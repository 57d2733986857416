"""`WebhookReceiver`: verify, dedupe, dispatch; and the answer the sender gets for each.

The WSGI application is called directly here (an environ in, a status out); the
socket tests are in test_live.py.
"""

from __future__ import annotations

import base64
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from idemclient import ManualClock
from idemclient.inbox import (
    InvalidMessageId,
    SignatureInvalid,
    SQLiteInbox,
    StandardWebhooks,
    WebhookEvent,
    WebhookReceiver,
)

from .conftest import (
    OTHER_SECRET,
    SECRET,
    SENDER,
    effects,
    record_effect,
    recorded_ids,
    signed,
)

SIGNATURE_HEADER = StandardWebhooks.SIGNATURE_HEADER
ID_HEADER = StandardWebhooks.ID_HEADER
FORGED = "v1," + base64.b64encode(bytes(32)).decode()  # well formed, signed by nobody
BODY = json.dumps({"id": "evt_1", "type": "payment.succeeded"}).encode()
ABSENT = object()


def test_a_signed_delivery_is_processed_once_and_its_duplicate_acknowledged(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    first = receiver.handle(headers, BODY)
    second = receiver.handle(headers, BODY)
    assert (first.status, first.outcome) == (200, "processed")
    assert (second.status, second.outcome) == (200, "duplicate")
    assert json.loads(second.body) == {"message_id": "evt_1", "status": "duplicate"}
    assert first.acknowledged
    assert second.acknowledged
    assert effects(app_db) == {"evt_1": 1}


def _refusals(now: float) -> list[tuple[str, dict[str, str], bytes]]:
    good = signed(BODY, "evt_1", timestamp=now)
    return [
        ("forged", {**good, SIGNATURE_HEADER: FORGED}, BODY),
        ("tampered body", good, BODY.replace(b"succeeded", b"declined!")),
        ("replayed under another id", {**good, ID_HEADER: "evt_2"}, BODY),
        ("stale", signed(BODY, "evt_1", timestamp=now - 301), BODY),
        ("from the future", signed(BODY, "evt_1", timestamp=now + 301), BODY),
        ("unknown secret", signed(BODY, "evt_1", timestamp=now, secrets=(OTHER_SECRET,)), BODY),
        ("unsigned", {ID_HEADER: "evt_1", StandardWebhooks.TIMESTAMP_HEADER: str(int(now))}, BODY),
        ("garbage", {**good, SIGNATURE_HEADER: "hello"}, BODY),
    ]


@pytest.mark.parametrize("case", range(8), ids=[c[0] for c in _refusals(0)])
def test_refused_signatures_get_401_and_record_nothing(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path, case: int
) -> None:
    _, headers, body = _refusals(clock.time())[case]
    response = receiver.handle(headers, body)
    assert (response.status, response.outcome) == (401, "refused")
    assert not response.acknowledged
    assert effects(app_db) == {}
    assert recorded_ids(app_db) == set()
    with pytest.raises(SignatureInvalid):
        receiver.receive(headers, body)


def test_a_refusal_names_its_reason(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock
) -> None:
    response = receiver.handle(signed(BODY, "evt_1", timestamp=clock.time() - 600), BODY)
    assert json.loads(response.body) == {
        "message_id": "evt_1",
        "reason": "stale",
        "status": "refused",
    }


def test_a_sender_rotating_its_secret_is_accepted_throughout(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    # The receiver holds old and new; the sender moves from old, to both, to new.
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET, OTHER_SECRET]), handler=record_effect
    )
    for n, secrets in enumerate([(SECRET,), (SECRET, OTHER_SECRET), (OTHER_SECRET,)]):
        body = json.dumps({"n": n}).encode()
        headers = signed(body, f"evt_{n}", timestamp=clock.time(), secrets=secrets)
        assert receiver.handle(headers, body).outcome == "processed"
    assert effects(app_db) == {"evt_0": 1, "evt_1": 1, "evt_2": 1}


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no message id at all
        {ID_HEADER: "evt 1"},
        {ID_HEADER: "x" * 256},
    ],
)
def test_a_missing_or_invalid_message_id_gets_400(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    headers: dict[str, str],
) -> None:
    signature = signed(BODY, "evt_1", timestamp=clock.time())[SIGNATURE_HEADER]
    response = receiver.handle({**headers, SIGNATURE_HEADER: signature}, BODY)
    assert (response.status, response.outcome) == (400, "invalid")
    assert recorded_ids(app_db) == set()
    with pytest.raises(InvalidMessageId):
        receiver.verify({**headers, SIGNATURE_HEADER: signature}, BODY)


def test_a_header_sent_twice_is_refused(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    good = signed(BODY, "evt_1", timestamp=clock.time())
    pairs = [*good.items(), (ID_HEADER, "evt_2")]
    response = receiver.handle(pairs, BODY)
    assert (response.status, response.outcome) == (401, "refused")
    assert recorded_ids(app_db) == set()


def test_two_spellings_of_a_header_in_a_dict_are_refused(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    good = signed(BODY, "evt_1", timestamp=clock.time())
    response = receiver.handle({**good, ID_HEADER.upper(): "evt_2"}, BODY)
    assert (response.status, response.outcome) == (401, "refused")
    assert recorded_ids(app_db) == set()


def test_header_names_match_in_any_case(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock
) -> None:
    headers = {k.upper(): v for k, v in signed(BODY, "evt_1", timestamp=clock.time()).items()}
    assert receiver.handle(headers, BODY).outcome == "processed"
    assert receiver.handle(list(headers.items()), BODY).outcome == "duplicate"


def test_a_failing_handler_gets_500_and_the_retry_is_processed(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failures = [RuntimeError("downstream down")]

    def flaky(event: WebhookEvent, tx: sqlite3.Connection) -> None:
        record_effect(event, tx)  # written, then rolled back with the id
        if failures:
            raise failures.pop()

    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=flaky
    )
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    failed = receiver.handle(headers, BODY)
    assert (failed.status, failed.outcome) == (500, "failed")
    assert b"downstream" not in failed.body  # the sender learns nothing of our insides
    assert "downstream down" in caplog.text
    assert effects(app_db) == {}
    assert receiver.handle(headers, BODY).outcome == "processed"
    assert effects(app_db) == {"evt_1": 1}


def test_a_handler_committing_on_its_own_gets_500_and_the_retry_applies_it_whole(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Today's failure mode: the id committed with the first half, a 500, and the
    # redelivery dropped as a duplicate, so the second half never ran.
    commits = [True]

    def in_two_halves(event: WebhookEvent, tx: sqlite3.Connection) -> None:
        record_effect(event, tx)
        if commits:
            commits.pop()
            with tx:  # the application's habit: "commit what I wrote"
                pass
        tx.execute("INSERT INTO effects (message_id, type) VALUES (?, 'second')", ("evt_1",))

    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=in_two_halves
    )
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    failed = receiver.handle(headers, BODY)
    assert (failed.status, failed.outcome) == (500, "failed")
    assert "ran COMMIT inside the inbox's transaction" in caplog.text
    assert effects(app_db) == {}
    assert recorded_ids(app_db) == set()
    assert receiver.handle(headers, BODY).outcome == "processed"
    assert receiver.handle(headers, BODY).outcome == "duplicate"
    assert effects(app_db) == {"evt_1": 2}  # both halves, once each


def test_an_unavailable_database_gets_503(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock
) -> None:
    receiver.inbox.close()
    response = receiver.handle(signed(BODY, "evt_1", timestamp=clock.time()), BODY)
    assert (response.status, response.outcome) == (503, "unavailable")


def test_a_body_over_the_limit_gets_413_unread(inbox: SQLiteInbox, clock: ManualClock) -> None:
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect, max_body=10
    )
    response = receiver.handle(signed(BODY, "evt_1", timestamp=clock.time()), BODY)
    assert (response.status, response.outcome) == (413, "too_large")


def test_the_handler_sees_the_verified_event(inbox: SQLiteInbox, clock: ManualClock) -> None:
    seen: list[WebhookEvent] = []
    receiver = WebhookReceiver(
        inbox,
        sender=SENDER,
        scheme=StandardWebhooks([SECRET]),
        handler=lambda event, tx: seen.append(event),
    )
    receiver.handle(signed(BODY, "evt_1", timestamp=clock.time()), BODY)
    [event] = seen
    assert (event.sender, event.message_id, event.timestamp) == (SENDER, "evt_1", clock.time())
    assert event.json()["type"] == "payment.succeeded"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scheme": None}, "needs scheme="),
        ({"scheme": object()}, "not a signature scheme"),
        ({"secrets": [SECRET]}, "not both"),
        ({"tolerance": 0}, "tolerance"),
        ({"max_body": 0}, "max_body"),
        ({"sender": "p s p"}, "invalid sender"),
    ],
)
def test_a_misconfigured_receiver_fails_at_construction(
    inbox: SQLiteInbox, options: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {
        "sender": SENDER,
        "scheme": StandardWebhooks([SECRET]),
        "handler": record_effect,
    }
    with pytest.raises((ValueError, TypeError), match=message):
        WebhookReceiver(inbox, **{**arguments, **options})


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ([], "at least one secret"),
        (["whsec_" + base64.b64encode(b"short").decode()], "at least 16 bytes"),
        ([bytes(15)], "at least 16 bytes"),
        (["test-secret-0123456789abcdef"], "'whsec_' followed by the key in base64"),
        (["whsec_not base64 at all!"], "not valid base64"),
        (42, "a secret or a list of secrets"),
    ],
)
def test_an_unusable_standard_webhooks_secret_is_refused(secrets: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        StandardWebhooks(secrets)


# -- the WSGI application, called directly ---------------------------------------------


def call_wsgi(
    receiver: WebhookReceiver[sqlite3.Connection],
    headers: dict[str, str],
    body: bytes,
    *,
    method: str = "POST",
    content_length: str | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[str, dict[str, str], bytes]:
    """`extra` is merged into the environ; a key set to `ABSENT` is left out."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/webhooks/psp",
        "CONTENT_LENGTH": str(len(body)) if content_length is None else content_length,
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
    }
    environ.update(extra or {})
    environ = {key: value for key, value in environ.items() if value is not ABSENT}
    for name, value in headers.items():
        if name.lower() != "content-type":
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    started: list[tuple[str, list[tuple[str, str]]]] = []
    chunks = receiver.wsgi_app()(environ, lambda status, hdrs: started.append((status, hdrs)))
    [(status, response_headers)] = started
    return status, dict(response_headers), b"".join(chunks)


def test_the_wsgi_app_verifies_dedupes_and_answers(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    status, response_headers, body = call_wsgi(receiver, headers, BODY)
    assert status == "200 OK"
    assert json.loads(body)["status"] == "processed"
    assert response_headers["content-length"] == str(len(body))
    assert call_wsgi(receiver, headers, BODY)[0] == "200 OK"
    forged = {**headers, SIGNATURE_HEADER: FORGED}
    assert call_wsgi(receiver, forged, BODY)[0] == "401 Unauthorized"
    assert effects(app_db) == {"evt_1": 1}


@pytest.mark.parametrize(
    ("method", "content_length", "status"),
    [
        ("GET", None, "405 Method Not Allowed"),
        ("POST", "nonsense", "411 Length Required"),
        ("POST", "99999999", "413 Content Too Large"),
    ],
)
def test_the_wsgi_app_refuses_what_is_not_a_delivery(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    method: str,
    content_length: str | None,
    status: str,
) -> None:
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    assert call_wsgi(receiver, headers, BODY, method=method, content_length=content_length)[0] == (
        status
    )


# -- bodies without a Content-Length (chunked) ------------------------------------------


class Trickle(io.RawIOBase):
    """A server's input stream that hands out at most `step` bytes per read, then EOF."""

    def __init__(self, data: bytes, step: int = 7) -> None:
        self._data = data
        self._step = step
        self.reads = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        take = self._step if size < 0 else min(size, self._step)
        piece, self._data = self._data[:take], self._data[take:]
        return piece


@pytest.mark.parametrize(
    "content_length",
    [pytest.param(ABSENT, id="no Content-Length"), pytest.param("", id="an empty one")],
)
def test_a_terminated_input_without_length_is_read_to_its_end(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    content_length: object,
) -> None:
    # A chunked delivery under gunicorn or mod_wsgi: no Content-Length, and the server
    # says the input ends where the body does (wsgi.input_terminated). It used to be
    # read as empty and refused as a forgery, on every redelivery.
    headers = {**signed(BODY, "evt_1", timestamp=clock.time()), "transfer-encoding": "chunked"}
    stream = Trickle(BODY)
    extra = {"CONTENT_LENGTH": content_length, "wsgi.input_terminated": True, "wsgi.input": stream}
    status, _, answer = call_wsgi(receiver, headers, BODY, extra=extra)
    assert status == "200 OK"
    assert json.loads(answer)["status"] == "processed"
    assert stream.reads > len(BODY) // 7  # every piece was asked for, to the end
    again = call_wsgi(receiver, headers, BODY, extra={**extra, "wsgi.input": Trickle(BODY)})
    assert json.loads(again[2])["status"] == "duplicate"
    assert effects(app_db) == {"evt_1": 1}


def test_a_terminated_input_over_the_limit_gets_413(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    receiver = WebhookReceiver(
        inbox,
        sender=SENDER,
        scheme=StandardWebhooks([SECRET]),
        handler=record_effect,
        max_body=len(BODY) - 1,
    )
    stream = Trickle(BODY * 1000, step=4096)
    extra = {"CONTENT_LENGTH": ABSENT, "wsgi.input_terminated": True, "wsgi.input": stream}
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    assert call_wsgi(receiver, headers, BODY, extra=extra)[0] == "413 Content Too Large"
    assert stream.reads <= 2  # stopped once over the limit, not read to the end
    # At exactly the limit, it is read and processed.
    receiver = WebhookReceiver(
        inbox,
        sender=SENDER,
        scheme=StandardWebhooks([SECRET]),
        handler=record_effect,
        max_body=len(BODY),
    )
    extra["wsgi.input"] = Trickle(BODY)
    assert call_wsgi(receiver, headers, BODY, extra=extra)[0] == "200 OK"
    assert effects(app_db) == {"evt_1": 1}


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"HTTP_TRANSFER_ENCODING": "chunked"}, id="chunked"),
        pytest.param({}, id="no length at all"),
        pytest.param({"wsgi.input_terminated": False}, id="input not terminated"),
    ],
)
def test_without_length_or_a_terminated_input_the_answer_is_411(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    extra: dict[str, Any],
) -> None:
    # The body's end is unknown: reading would block on a kept-alive connection, and
    # reading nothing would refuse a genuine delivery as forged. 411 tells the sender
    # what is missing.
    headers = signed(BODY, "evt_1", timestamp=clock.time())
    status, _, answer = call_wsgi(
        receiver, headers, BODY, extra={"CONTENT_LENGTH": ABSENT, **extra}
    )
    assert status == "411 Length Required"
    assert json.loads(answer)["status"] == "invalid"
    assert effects(app_db) == {}
