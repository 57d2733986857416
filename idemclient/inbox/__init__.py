"""The consumer side: process each at-least-once webhook exactly once.

inbox = SQLiteInbox("app.db")
receiver = WebhookReceiver(
    inbox, sender="psp", scheme=StandardWebhooks([SECRET]), handler=on_event
)
app = receiver.asgi_app()  # or receiver.wsgi_app(), or receiver.handle(headers, body)

`on_event(event, tx)` writes its effect through `tx`; the message id is recorded in the
same transaction, so a duplicate is dropped and a crash before the commit means the
redelivery is processed as new. On PostgreSQL, use `idemclient.postgres.PostgresInbox`
in place of `SQLiteInbox`. `StripeSignature(secret)` receives Stripe's webhooks;
`inbox.advance(tx, sender, resource, version)` ignores events older than the state
applied. See docs/inbox.md.
"""

from .._errors import InvalidMessageId, SignatureInvalid
from ._asgi import ASGIApp
from ._inbox import DEFAULT_RETENTION, Delivery, Inbox, Receipt, SQLiteInbox, validate_message_id
from ._schemes import (
    LegacySignature,
    SignatureScheme,
    Signed,
    StandardWebhooks,
    StripeSignature,
)
from ._signature import (
    DEFAULT_TOLERANCE,
    MESSAGE_ID_HEADER,
    SIGNATURE_HEADER,
    ParsedSignature,
    parse_signature,
    sign,
    verify_signature,
)
from ._storage import InboxStorage, SQLiteInboxStorage
from ._webhook import WebhookEvent, WebhookReceiver, WebhookResponse
from ._wsgi import WSGIApp

__all__ = [
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
