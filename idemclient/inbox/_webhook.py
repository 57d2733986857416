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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._clock import Clock
from .._errors import InvalidMessageId, SignatureInvalid, StoreError
from ._inbox import Inbox, Receipt, validate_message_id
from ._signature import (
    DEFAULT_TOLERANCE,
    MESSAGE_ID_HEADER,
    SIGNATURE_HEADER,
    check_undotted,
    secret_bytes,
    verify_signature,
)

if TYPE_CHECKING:
    from ._asgi import ASGIApp
    from ._wsgi import WSGIApp

__all__ = ["DEFAULT_MAX_BODY", "Headers", "WebhookEvent", "WebhookReceiver", "WebhookResponse"]

logger = logging.getLogger("idemclient.inbox")

Tx = TypeVar("Tx")

#: A delivery larger than this is refused unread (413): events are small.
DEFAULT_MAX_BODY = 1024 * 1024

#: Headers as a framework hands them over: a mapping (case-insensitive or not), or
#: (name, value) pairs, which let a repeated header be seen and refused.
Headers = Mapping[str, str] | Iterable[tuple[str, str]]


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


@dataclass(frozen=True, slots=True)
class WebhookResponse:
    """What to answer the sender."""

    status: int
    #: "processed", "duplicate", "refused", "invalid", "too_large", "failed", "unavailable"
    outcome: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)

    @property
    def acknowledged(self) -> bool:
        """The sender may stop redelivering (processed now or before)."""
        return 200 <= self.status < 300


def _answer(status: int, outcome: str, message_id: str | None, **extra: str) -> WebhookResponse:
    fields: dict[str, str] = {"status": outcome, **extra}
    if message_id is not None:
        fields["message_id"] = message_id
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return WebhookResponse(status, outcome, body)


def header_value(headers: Headers, name: str) -> str | None:
    """The one value of header `name` (any case), None if absent.

    A header sent twice is refused (`ValueError`): of two message ids or two
    signature headers, neither can be trusted over the other.
    """
    wanted = name.lower()
    # Every pair is looked at, even in a mapping: a case-insensitive one (Starlette's)
    # lists a repeated header twice, and a plain dict may hold two spellings of it.
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = [value for key, value in pairs if key.lower() == wanted]
    if len(found) > 1:
        raise ValueError(f"the {name} header was sent {len(found)} times")
    return found[0] if found else None


class WebhookReceiver(Generic[Tx]):
    """Verifies, deduplicates and dispatches one sender's webhook deliveries.

    `secrets`: every secret the sender may sign with (several during a rotation; a
    delivery matching any is accepted). `handler(event, tx)` writes the effect through
    `tx`, the inbox's transaction, and runs at most once per message id. `tolerance`:
    how far the signed timestamp may be from `clock` (default: the inbox's clock).
    """

    def __init__(
        self,
        inbox: Inbox[Tx],
        *,
        sender: str,
        secrets: Sequence[str | bytes],
        handler: Callable[[WebhookEvent, Tx], object],
        tolerance: float = DEFAULT_TOLERANCE,
        clock: Clock | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        if isinstance(secrets, str | bytes):
            raise TypeError("secrets is a list of secrets, not one secret")
        self._secrets = tuple(secret_bytes(s) for s in secrets)
        if not self._secrets:
            raise ValueError("a webhook receiver needs at least one secret")
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
        self.sender = validate_message_id(sender, what="sender")
        self.handler = handler
        self.tolerance = float(tolerance)
        self.clock: Clock = clock if clock is not None else inbox.clock
        self.max_body = max_body

    def __repr__(self) -> str:
        return f"WebhookReceiver(sender={self.sender!r}, inbox={self.inbox!r})"

    def verify(self, headers: Headers, body: bytes) -> WebhookEvent:
        """The verified event, or `InvalidMessageId` / `SignatureInvalid`. Records nothing."""
        try:
            raw_id = header_value(headers, MESSAGE_ID_HEADER)
            signature = header_value(headers, SIGNATURE_HEADER)
        except ValueError as exc:
            raise SignatureInvalid("malformed", str(exc)) from None
        if raw_id is None:
            raise InvalidMessageId(None, f"no {MESSAGE_ID_HEADER} header")
        message_id = validate_message_id(raw_id)
        try:
            check_undotted(message_id)
        except ValueError as exc:
            raise InvalidMessageId(message_id, str(exc)) from None
        timestamp = verify_signature(
            signature,
            secrets=self._secrets,
            message_id=message_id,
            body=body,
            now=self.clock.time(),
            tolerance=self.tolerance,
        )
        return WebhookEvent(self.sender, message_id, timestamp, body)

    def receive(self, headers: Headers, body: bytes) -> Receipt[object]:
        """Verify, then process once. Raises what `verify` and the handler raise."""
        event = self.verify(headers, body)
        return self.inbox.process(
            event.sender, event.message_id, lambda tx: self.handler(event, tx)
        )

    def handle(self, headers: Headers, body: bytes) -> WebhookResponse:
        """`receive`, with every outcome turned into the answer for the sender."""
        if len(body) > self.max_body:
            return _answer(413, "too_large", None, detail=f"at most {self.max_body} bytes")
        try:
            event = self.verify(headers, body)
        except InvalidMessageId as exc:
            return _answer(400, "invalid", None, detail=str(exc))
        except SignatureInvalid as exc:
            logger.warning("refused a webhook from %s: %s", self.sender, exc)
            return _answer(401, "refused", exc.message_id, reason=exc.reason)
        try:
            receipt = self.inbox.process(
                event.sender, event.message_id, lambda tx: self.handler(event, tx)
            )
        except StoreError:
            logger.exception("the inbox could not record %s", event.message_id)
            return _answer(503, "unavailable", event.message_id)
        except Exception:
            # The sender learns only that it should retry; the details are ours.
            logger.exception("the webhook handler failed on %s; nothing recorded", event.message_id)
            return _answer(500, "failed", event.message_id)
        return _answer(200, "duplicate" if receipt.duplicate else "processed", event.message_id)

    def asgi_app(self) -> ASGIApp:
        """This receiver as an ASGI 3 application (any path, POST only)."""
        from ._asgi import asgi_app

        return asgi_app(self)

    def wsgi_app(self) -> WSGIApp:
        """This receiver as a WSGI application (any path, POST only)."""
        from ._wsgi import wsgi_app

        return wsgi_app(self)
