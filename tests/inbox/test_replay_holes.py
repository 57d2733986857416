"""Two ways captured bytes could be applied a second time, closed.

1. A message id with a `.` in it: the legacy signed text is ``t.id.body``, so a
   delivery with id ``evt.2024.0001`` verifies again as id ``evt.2024`` with body
   ``0001.{...}``, a fresh id under the same signature; Standard Webhooks' ``id.t.body``
   has the same gap for an id ending in ``.`` and a timestamp. Dotted ids are refused,
   when signing and when receiving, whatever the scheme, so the parts of the signed
   text cannot be regrouped.
2. Retention no longer than the replay window: a signature is accepted from
   `tolerance` before to `tolerance` after its timestamp, so an id forgotten sooner than
   twice the tolerance after it was received can be replayed and applied again. Such a
   configuration is refused when the receiver is built.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sqlite3
from pathlib import Path

import pytest

from idemclient import ManualClock
from idemclient.inbox import (
    MESSAGE_ID_HEADER,
    SIGNATURE_HEADER,
    InvalidMessageId,
    LegacySignature,
    SQLiteInbox,
    StandardWebhooks,
    WebhookReceiver,
    sign,
)

from .conftest import SECRET, SENDER, effects, record_effect, recorded_ids, signed

BODY = json.dumps({"id": "evt.2024.0001", "type": "payment.succeeded"}).encode()


@pytest.fixture
def legacy_receiver(inbox: SQLiteInbox) -> WebhookReceiver[sqlite3.Connection]:
    """A receiver of idemclient's earlier headers (deprecated, still served)."""
    with pytest.warns(DeprecationWarning, match="LegacySignature"):
        scheme = LegacySignature([SECRET])
    return WebhookReceiver(inbox, sender=SENDER, scheme=scheme, handler=record_effect)


def test_a_dotted_id_cannot_be_regrouped_into_a_fresh_one(
    legacy_receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    receiver = legacy_receiver
    now = int(clock.time())
    # A delivery signed by a sender that allowed dots in ids, captured by an attacker:
    text = b"%d.evt.2024.0001." % now + BODY
    captured = f"t={now},v1={hmac.new(SECRET.encode(), text, hashlib.sha256).hexdigest()}"
    delivered = receiver.handle(
        {MESSAGE_ID_HEADER: "evt.2024.0001", SIGNATURE_HEADER: captured}, BODY
    )
    # The same bytes regrouped: a fresh id, the rest moved into the body.
    replayed = receiver.handle(
        {MESSAGE_ID_HEADER: "evt.2024", SIGNATURE_HEADER: captured}, b"0001." + BODY
    )
    assert (delivered.status, replayed.status) == (400, 400)
    assert recorded_ids(app_db) == set()


def test_a_standard_webhooks_id_ending_in_a_timestamp_is_refused_and_never_signed(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    now = int(clock.time())
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    # Signed by a sender that allowed dots: id "evt.<now>", timestamp now, BODY. Its
    # text regroups as id "evt", timestamp now, body "<now>.BODY" (the limit that
    # docs/inbox.md states for such senders); idemclient's sender refuses to sign it.
    text = b"evt.%d.%d." % (now, now) + BODY
    captured = "v1," + base64.b64encode(hmac.new(key, text, hashlib.sha256).digest()).decode()
    delivered = receiver.handle(
        {"webhook-id": f"evt.{now}", "webhook-timestamp": str(now), "webhook-signature": captured},
        BODY,
    )
    assert (delivered.status, delivered.outcome) == (400, "invalid")
    assert recorded_ids(app_db) == set()
    with pytest.raises(ValueError, match=r"'\.'"):
        StandardWebhooks([SECRET]).signature(message_id=f"evt.{now}", timestamp=now, body=BODY)


@pytest.mark.parametrize("message_id", ["evt.2024", "evt.2024.0001", ".evt", "evt."])
def test_a_message_id_with_a_dot_is_refused_unrecorded(
    legacy_receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    message_id: str,
) -> None:
    receiver = legacy_receiver
    signature = sign([SECRET], timestamp=int(clock.time()), message_id="evt_1", body=BODY)
    headers = {MESSAGE_ID_HEADER: message_id, SIGNATURE_HEADER: signature}
    response = receiver.handle(headers, BODY)
    assert (response.status, response.outcome) == (400, "invalid")
    assert "." in response.body.decode()
    with pytest.raises(InvalidMessageId, match=r"'\.'"):
        receiver.verify(headers, BODY)
    assert recorded_ids(app_db) == set()


@pytest.mark.parametrize("message_id", ["evt.2024", "evt.2024.0001", ".evt", "evt."])
def test_a_dotted_standard_webhooks_id_is_refused_unrecorded(
    receiver: WebhookReceiver[sqlite3.Connection],
    clock: ManualClock,
    app_db: Path,
    message_id: str,
) -> None:
    headers = {
        **signed(BODY, "evt_1", timestamp=clock.time()),
        StandardWebhooks.ID_HEADER: message_id,
    }
    response = receiver.handle(headers, BODY)
    assert (response.status, response.outcome) == (400, "invalid")
    with pytest.raises(InvalidMessageId, match=r"'\.'"):
        receiver.verify(headers, BODY)
    assert recorded_ids(app_db) == set()


def test_a_sender_never_signs_a_dotted_id() -> None:
    with pytest.raises(ValueError, match=r"'\.'"):
        sign([SECRET], timestamp=1_700_000_000, message_id="evt.2024.0001", body=BODY)
    with pytest.raises(ValueError, match=r"'\.'"):
        StandardWebhooks([SECRET]).headers(
            message_id="evt.2024.0001", timestamp=1_700_000_000, body=BODY
        )


def test_ids_without_dots_still_verify(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    for message_id in ("evt_1", "evt:2024:0001", "evt-2024~1"):
        response = receiver.handle(signed(BODY, message_id, timestamp=clock.time()), BODY)
        assert response.status == 200
    assert set(effects(app_db)) == {"evt_1", "evt:2024:0001", "evt-2024~1"}


@pytest.mark.parametrize(("retention", "tolerance"), [(600, 300), (599, 300), (60, 300), (20, 10)])
def test_retention_within_the_replay_window_is_refused(
    app_db: Path, clock: ManualClock, retention: float, tolerance: float
) -> None:
    with (
        SQLiteInbox(app_db, clock=clock, retention=retention) as inbox,
        pytest.raises(ValueError, match="retention") as raised,
    ):
        WebhookReceiver(
            inbox,
            sender=SENDER,
            scheme=StandardWebhooks([SECRET]),
            handler=record_effect,
            tolerance=tolerance,
        )
    assert f"{2 * tolerance:.0f}" in str(raised.value)


def test_a_replay_after_the_shortest_retention_allowed_is_still_refused_or_a_duplicate(
    app_db: Path, clock: ManualClock
) -> None:
    # The shortest retention a receiver accepts keeps every id for as long as a
    # signature of it can verify: a replay of the captured bytes is never applied again.
    with SQLiteInbox(app_db, clock=clock, retention=601) as inbox:
        receiver = WebhookReceiver(
            inbox,
            sender=SENDER,
            scheme=StandardWebhooks([SECRET]),
            handler=record_effect,
            tolerance=300,
        )
        body = BODY.replace(b".", b"_")
        # Signed 300 s ahead of the receiver's clock, the most the tolerance allows: its
        # signature verifies until 600 s from now.
        headers = signed(body, "evt_1", timestamp=clock.time() + 300)
        assert receiver.handle(headers, body).status == 200
        for _ in range(13):  # then a replay every 50 s, through the whole window and past
            clock.advance(50)
            inbox.reap()
            assert receiver.handle(headers, body).outcome in ("duplicate", "refused")
    assert effects(app_db) == {"evt_1": 1}
