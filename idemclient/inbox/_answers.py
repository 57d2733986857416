"""What a receiver answers a sender, and what the ASGI and WSGI applications need of
a receiver (`Receiving`): the ground both the receiver and its applications stand on,
so that neither imports the other's module to answer."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Receiving", "WebhookResponse", "refuse", "refuse_too_large", "reply"]

logger = logging.getLogger("idemclient.inbox")


class Receiving(Protocol):
    """A receiver, as its ASGI and WSGI applications use it (`WebhookReceiver` is one)."""

    @property
    def sender(self) -> str: ...
    @property
    def max_body(self) -> int: ...
    def handle(self, headers: Sequence[tuple[str, str]], body: bytes) -> WebhookResponse: ...


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


def reply(status: int, outcome: str, message_id: str | None, **extra: str) -> WebhookResponse:
    fields: dict[str, str] = {"status": outcome, **extra}
    if message_id is not None:
        fields["message_id"] = message_id
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return WebhookResponse(status, outcome, body)


def refuse(sender: str, why: object, answer: WebhookResponse) -> WebhookResponse:
    """`answer`, a refusal of a delivery (400, 401, 411, 413), logged with `why`: a
    sender refused for ever (a bug on its side, a wrong secret, a body too large) shows
    up in the log, whatever the status it was told."""
    logger.warning("refused a webhook from %s (%d): %s", sender, answer.status, why)
    return answer


def refuse_too_large(sender: str, max_body: int) -> WebhookResponse:
    detail = f"at most {max_body} bytes"
    return refuse(
        sender, f"the body is over {max_body} bytes", reply(413, "too_large", None, detail=detail)
    )
