"""`WebhookReceiver`: verify a delivery, drop it if seen, else run the handler once.

Framework-neutral: `handle(headers, body)` takes what any web framework gives a view
and returns a `WebhookResponse` to send back. The status tells the sender what to do:

| what happened | status | the sender |
|---|---|---|
| processed now, or a duplicate dropped | 200 | stops: acknowledged |
| no or invalid message id | 400 | (a bug on its side) |
| signature missing, malformed, wrong, stale | 401 | its retries are refused the same way |
| body over `max_body` | 413 | |
| the handler raised (nothing was recorded) | 500 | retries later: processed as new |
| the inbox's database is unavailable | 503 | retries later |

`asgi_app()` and `wsgi_app()` wrap it as whole applications (see `_asgi`, `_wsgi`).
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._errors import InvalidMessageId, SignatureInvalid, StoreError
from ..clock import Clock
from ._answers import WebhookResponse, refuse, refuse_too_large, reply
from ._asgi import ASGIApp, asgi_app
from ._inbox import Inbox, Receipt, validate_message_id
from ._schemes import Headers, SignatureScheme, _EitherOfTwo, header_value
from ._signature import DEFAULT_TOLERANCE
from ._wsgi import WSGIApp, wsgi_app

__all__ = [
    "DEFAULT_MAX_BODY",
    "Headers",
    "WebhookEvent",
    "WebhookReceiver",
    "WebhookResponse",
    "header_value",
]

logger = logging.getLogger("idemclient.inbox")

Tx = TypeVar("Tx")

#: A delivery larger than this is refused unread (413): events are small.
DEFAULT_MAX_BODY = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A delivery whose signature was verified. `body` is exactly the bytes signed."""

    sender: str
    message_id: str
    #: the signed timestamp (seconds since the epoch)
    timestamp: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class WebhookReceiver(Generic[Tx]):
    """Verifies, deduplicates and dispatches one sender's webhook deliveries.

    `scheme`: how the sender signs, with the secrets it may sign with (several during a
    rotation): `StandardWebhooks([...])` for a Standard Webhooks sender (the reference
    server is one), `StripeSignature(...)` for Stripe. `handler(event, tx)` writes the
    effect through `tx`, the inbox's transaction, and runs at most once per message id.
    `tolerance`: how far the signed timestamp may be from `clock` (default: the inbox's
    clock); both schemes' specifications say 5 minutes.

    `secrets=[...]` in place of `scheme` is the earlier spelling, deprecated: it accepts
    Standard Webhooks deliveries and idemclient's earlier headers, under those secrets.
    """

    def __init__(
        self,
        inbox: Inbox[Tx],
        *,
        sender: str,
        handler: Callable[[WebhookEvent, Tx], object],
        scheme: SignatureScheme | None = None,
        secrets: Sequence[str | bytes] | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        clock: Clock | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        if scheme is not None and secrets is not None:
            raise TypeError("give the receiver a scheme, or (deprecated) secrets, not both")
        if scheme is None:
            if secrets is None:
                raise TypeError(
                    "a webhook receiver needs scheme=, how its sender signs: for example"
                    " StandardWebhooks([secret]) or StripeSignature(secret)"
                )
            if isinstance(secrets, str | bytes):
                raise TypeError("secrets is a list of secrets, not one secret")
            if not list(secrets):
                raise ValueError("a webhook receiver needs at least one secret")
            warnings.warn(
                "WebhookReceiver(secrets=[...]) is deprecated: pass scheme=StandardWebhooks"
                "([...]) (or StripeSignature(...) for Stripe's webhooks)",
                DeprecationWarning,
                stacklevel=2,
            )
            scheme = _EitherOfTwo(list(secrets))
        if not callable(getattr(scheme, "verify", None)):
            raise TypeError(f"{scheme!r} is not a signature scheme (it has no verify method)")
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"the tolerance must be positive seconds, not {tolerance!r}")
        if max_body < 1:
            raise ValueError(f"max_body must be at least 1 byte, not {max_body!r}")
        if inbox.retention <= 2 * tolerance:
            # A signature verifies from `tolerance` before its timestamp to `tolerance`
            # after: an id forgotten sooner than that after it arrived can be replayed
            # from captured bytes and applied again.
            raise ValueError(
                f"the inbox's retention ({inbox.retention:.0f} s) must be longer than twice"
                f" the signature tolerance ({2 * tolerance:.0f} s): a delivery replayed"
                " after its id was forgotten, while its signature still verifies, would be"
                " applied again"
            )
        self.inbox = inbox
        self.scheme: SignatureScheme = scheme
        self.sender = validate_message_id(sender, what="sender")
        self.handler = handler
        self.tolerance = float(tolerance)
        self.clock: Clock = clock if clock is not None else inbox.clock
        self.max_body = max_body

    def __repr__(self) -> str:
        return f"WebhookReceiver(sender={self.sender!r}, inbox={self.inbox!r})"

    def verify(self, headers: Headers, body: bytes) -> WebhookEvent:
        """The verified event, or `InvalidMessageId` / `SignatureInvalid`. Records nothing."""
        signed = self.scheme.verify(headers, body, now=self.clock.time(), tolerance=self.tolerance)
        return WebhookEvent(self.sender, signed.message_id, signed.timestamp, body)

    def receive(self, headers: Headers, body: bytes) -> Receipt[object]:
        """Verify, then process once. Raises what `verify` and the handler raise."""
        event = self.verify(headers, body)
        return self.inbox.process(
            event.sender, event.message_id, lambda tx: self.handler(event, tx)
        )

    def handle(self, headers: Headers, body: bytes) -> WebhookResponse:
        """`receive`, with every outcome turned into the answer for the sender."""
        if len(body) > self.max_body:
            return refuse_too_large(self.sender, self.max_body)
        try:
            event = self.verify(headers, body)
        except InvalidMessageId as exc:
            return refuse(self.sender, exc, reply(400, "invalid", None, detail=str(exc)))
        except SignatureInvalid as exc:
            answer = reply(401, "refused", exc.message_id, reason=exc.reason)
            return refuse(self.sender, exc, answer)
        try:
            receipt = self.inbox.process(
                event.sender, event.message_id, lambda tx: self.handler(event, tx)
            )
        except StoreError:
            logger.exception("the inbox could not record %s", event.message_id)
            return reply(503, "unavailable", event.message_id)
        except Exception:
            # The sender learns only that it should retry; the details are ours.
            logger.exception("the webhook handler failed on %s; nothing recorded", event.message_id)
            return reply(500, "failed", event.message_id)
        return reply(200, "duplicate" if receipt.duplicate else "processed", event.message_id)

    def asgi_app(self) -> ASGIApp:
        """This receiver as an ASGI 3 application (any path, POST only)."""
        return asgi_app(self)

    def wsgi_app(self) -> WSGIApp:
        """This receiver as a WSGI application (any path, POST only)."""
        return wsgi_app(self)
