"""What each provider does, written down from the providers' facts (docs/profiles.md,
shared PSP notes), never computed from the `Profile` values: a wrong profile fails here.

`Speaker` sends a request the way a merchant's code talks to that provider: the key
where the provider reads it (a header by its name, the IETF draft's quoted string, or a
JSON body field) and a provider-like path.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx

from idemclient.profiles import Profile
from idemclient.testing import ReferenceServer

BODY: dict[str, Any] = {"amount": 1250, "currency": "EUR", "reference": "inv-1"}
AUTH = {"Authorization": "Bearer alice"}

ALL = (
    "reference",
    "generic",
    "ietf",
    "stripe",
    "adyen",
    "paypal",
    "square",
    "gocardless",
    "checkout",
    "wise",
    "mollie",
    "razorpay",
    "django-idempotency-key",
    "drf-idempotency-key",
)

#: where each provider reads the key: ("header", name), ("quoted", name), ("field", name)
KEY_AT: dict[str, tuple[str, str]] = {
    "reference": ("header", "Idempotency-Key"),
    "generic": ("header", "Idempotency-Key"),
    "ietf": ("quoted", "Idempotency-Key"),
    "stripe": ("header", "Idempotency-Key"),
    "adyen": ("header", "Idempotency-Key"),
    "paypal": ("header", "PayPal-Request-Id"),
    "square": ("field", "idempotency_key"),
    "gocardless": ("header", "Idempotency-Key"),
    "checkout": ("header", "Cko-Idempotency-Key"),
    "wise": ("field", "customerTransactionId"),
    "mollie": ("header", "Idempotency-Key"),
    "razorpay": ("header", "X-Payout-Idempotency"),
    "django-idempotency-key": ("header", "Idempotency-Key"),
    "drf-idempotency-key": ("header", "Idempotency-Key"),
}

#: a provider-like path the payment resource is served under
PATH: dict[str, str] = {
    "reference": "/v1/payments",
    "generic": "/v1/payments",
    "ietf": "/v1/payments",
    "stripe": "/v1/payment_intents",
    "adyen": "/v71/payments",
    "paypal": "/v2/checkout/orders",
    "square": "/v2/payments",
    "gocardless": "/v1/payments",
    "checkout": "/payments",
    "wise": "/v1/transfers",
    "mollie": "/v2/payments",
    "razorpay": "/v1/payouts",
    "django-idempotency-key": "/v1/payments",
    "drf-idempotency-key": "/v1/payments",
}

PROBLEM = "application/problem+json"
JSON = "application/json"


def uuid_key(n: int) -> str:
    """A key every profile takes: a UUID (Wise, drf), 36 characters (Razorpay's most)."""
    return f"123e4567-e89b-42d3-a456-{n:012d}"


def replay_status(name: str) -> int:
    """The status of a replay: django-idempotency-key answers 409 with the stored body,
    GoCardless 409 naming the resource; the others the stored status."""
    return 409 if name in ("gocardless", "django-idempotency-key") else 201


def gocardless_conflict(resource_id: str) -> dict[str, Any]:
    message = "A resource has already been created with this idempotency key"
    return {
        "error": {
            "type": "invalid_state",
            "code": 409,
            "message": message,
            "errors": [
                {
                    "reason": "idempotent_creation_conflict",
                    "message": message,
                    "links": {"conflicting_resource_id": resource_id},
                }
            ],
        }
    }


@dataclass
class Speaker:
    """One server speaking `name`, and an httpx client talking to it."""

    name: str
    server: ReferenceServer
    client: httpx.Client
    stack: ExitStack = field(default_factory=ExitStack)

    def post(
        self,
        key: str | None,
        body: dict[str, Any] | None = None,
        *,
        path: str | None = None,
        headers: dict[str, str] | None = None,
        at: tuple[str, str] | None = None,
    ) -> httpx.Response:
        """POST `body` with `key` where this provider reads it (or `at`)."""
        payload = dict(BODY if body is None else body)
        sent = dict(headers or {})
        where, name = at or KEY_AT[self.name]
        if key is not None:
            if where == "field":
                payload[name] = key
            elif where == "quoted":
                sent[name] = f'"{key}"'
            else:
                sent[name] = key
        return self.client.post(path or PATH[self.name], json=payload, headers=sent)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def __enter__(self) -> Speaker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def in_process(name: str, *, profile: Profile | None = None, db: str = ":memory:") -> Speaker:
    """A server speaking `name` (or `profile`, sent to like `name`), in process."""
    server = ReferenceServer(profile=profile or name, db=db)
    client = httpx.Client(base_url="http://psp.test", transport=server.transport, headers=AUTH)
    speaker = Speaker(name, server, client)
    speaker.stack.callback(server.close)
    speaker.stack.callback(client.close)
    return speaker
