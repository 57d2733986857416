"""The public surface of idemclient.inbox and the webhook records of the testing package."""

from __future__ import annotations

import dataclasses
import json

import pytest

import idemclient
import idemclient.inbox as inbox
from idemclient.errors import InvalidKey
from idemclient.testing import WebhookEventRecord, WebhookReport


def test_the_inbox_surface_is_pinned() -> None:
    assert inbox.__all__ == [
        "DEFAULT_RETENTION",
        "DEFAULT_TOLERANCE",
        "MESSAGE_ID_HEADER",
        "SIGNATURE_HEADER",
        "ASGIApp",
        "Delivery",
        "Inbox",
        "InboxStorage",
        "InvalidMessageId",
        "LegacySignature",
        "ParsedSignature",
        "Receipt",
        "SQLiteInbox",
        "SQLiteInboxStorage",
        "SignatureInvalid",
        "SignatureScheme",
        "Signed",
        "StandardWebhooks",
        "StripeSignature",
        "WSGIApp",
        "WebhookEvent",
        "WebhookReceiver",
        "WebhookResponse",
        "parse_signature",
        "sign",
        "validate_message_id",
        "verify_signature",
    ]
    for name in inbox.__all__:
        assert hasattr(inbox, name), name


def test_the_inbox_errors_are_the_ones_in_the_single_tree() -> None:
    assert inbox.SignatureInvalid is idemclient._errors.SignatureInvalid
    assert inbox.InvalidMessageId is idemclient._errors.InvalidMessageId
    assert issubclass(inbox.SignatureInvalid, idemclient.IdemError)
    assert issubclass(inbox.InvalidMessageId, InvalidKey)
    assert not issubclass(inbox.SignatureInvalid, ValueError)  # refused input, not a bug
    tree = idemclient._errors.__doc__ or ""
    assert "SignatureInvalid" in tree
    assert "InvalidMessageId" in tree


def test_the_header_names_are_the_documented_ones() -> None:
    assert inbox.StandardWebhooks.ID_HEADER == "webhook-id"
    assert inbox.StandardWebhooks.TIMESTAMP_HEADER == "webhook-timestamp"
    assert inbox.StandardWebhooks.SIGNATURE_HEADER == "webhook-signature"
    assert inbox.StripeSignature.HEADER == "Stripe-Signature"
    # idemclient's earlier headers (LegacySignature, deprecated):
    assert inbox.SIGNATURE_HEADER == "Idemclient-Signature"
    assert inbox.MESSAGE_ID_HEADER == "Idemclient-Message-Id"
    assert inbox.DEFAULT_TOLERANCE == 300


@pytest.mark.parametrize(
    "record",
    [
        WebhookReport(due=3, delivered=1, failed=1, abandoned=0, postponed=1, waiting=0, posts=2),
        WebhookEventRecord(
            id="evt_1",
            type="payment.succeeded",
            client="alice",
            resource_id="pay_1",
            state="pending",
            attempts=1,
            posts=2,
            created_at=1.5,
            next_attempt_at=3.5,
            delivered_at=None,
            last_status=500,
            last_error=None,
            body='{"id":"evt_1"}',
        ),
    ],
)
def test_webhook_records_round_trip_through_json(record: object) -> None:
    data = json.loads(json.dumps(record.to_json()))  # type: ignore[attr-defined]
    assert type(record).from_json(data) == record  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.posts = 0  # type: ignore[attr-defined,misc]
