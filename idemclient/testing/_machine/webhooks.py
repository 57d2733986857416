"""Webhook delivery from the outbox: at least once, signed, retried with backoff.

Events are queued by Handler3 in the transaction that finishes a resource (see
`StorageBackend.finish`): its final status, preceded by `<kind>.created` when the
endpoint asked for the lifecycle; each body carries the event's `sequence` in its
resource's life (1 created, 2 final), the order a receiver's guard compares.
`Deliverer.deliver_once` is one pass of the delivery loop: it reads the due events,
claims each with a conditional update, POSTs it to the client's endpoint signed as
Standard Webhooks define (or, deprecated, idemclient's earlier headers), and records
the result. A 2xx is an
acknowledgement; anything else (another status, a refused connection, a timeout) is
retried after `retry_delay(attempts)`, until `max_attempts`, then the event is
abandoned. The payment path never waits on any of this.

Faults, for the next `times` events (or rounds) they apply to:

- `duplicate`: the event is POSTed twice in a row (same id and body, fresh signature).
- `lose_ack`: the receiver's answer is thrown away, as if the connection died after
  the receiver committed; the event stays pending and comes again after the backoff.
- `delay`: the event is held back `seconds` (no attempt counted), so later events
  overtake it.
- `reorder`: the next round sends its batch in a shuffled order.
- `reverse`: the next round sends its batch newest first (a resource's final status
  before its creation).
"""

from __future__ import annotations

import enum
import logging
import random
import secrets
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from ...inbox import LegacySignature, StandardWebhooks
from .._protocol.messages import json_bytes
from .._storage.backend import StorageBackend
from .._storage.rows import EventRow, ResourceRow
from .clock import ServerClock
from .records import WebhookReport

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "LEGACY",
    "STANDARD_WEBHOOKS",
    "Deliverer",
    "WebhookEndpoint",
    "WebhookFault",
    "event_for",
    "events_for",
    "retry_delay",
]

logger = logging.getLogger("idemclient.testing")

#: First retry after this many seconds; each later one waits twice as long ...
FIRST_RETRY = 2.0
#: ... up to this.
MAX_RETRY_DELAY = 3600.0
#: Attempts before an event is abandoned: about nine hours of retrying with the above.
DEFAULT_MAX_ATTEMPTS = 20
#: How long a claimed event is held for its deliverer; if that one dies, the event is
#: due again afterwards.
CLAIM_TIMEOUT = 60.0
USER_AGENT = "idemclient-reference-server"
#: How deliveries are signed: the Standard Webhooks headers (the default) ...
STANDARD_WEBHOOKS = "standard-webhooks"
#: ... or idemclient's earlier ones (deprecated).
LEGACY = "idemclient-v1"
SCHEMES = (STANDARD_WEBHOOKS, LEGACY)


def retry_delay(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed attempt: 2, 4, 8, ... capped at 1 h.

    Deterministic (no jitter): a test reads the schedule off the event and advances
    the clock exactly that far.
    """
    if attempts < 1:
        raise ValueError(f"attempts counts from 1, not {attempts!r}")
    # The exponent is capped first so that a huge attempt count cannot overflow.
    return min(MAX_RETRY_DELAY, FIRST_RETRY * 2.0 ** min(attempts - 1, 32))


def events_for(
    resource: ResourceRow,
    resource_json: dict[str, Any],
    now: float,
    *,
    created: dict[str, Any] | None = None,
) -> list[EventRow]:
    """The events to queue for a finished `resource`, in order: `<kind>.created`
    (`created` is the resource as it was made; None: no such event), then its final
    status."""
    events = []
    if created is not None:
        events.append(event_for(resource, created, now, event_type=f"{resource.kind}.created"))
    events.append(event_for(resource, resource_json, now))
    return events


def event_for(
    resource: ResourceRow,
    resource_json: dict[str, Any],
    now: float,
    *,
    event_type: str | None = None,
) -> EventRow:
    """The event announcing `resource`'s final status (or `event_type`), ready to queue.

    Its `sequence` is its place in the resource's life: 1 for `.created`, 2 for the
    final status (`created`, whole seconds, may be equal for both).
    """
    event_id = f"evt_{secrets.token_hex(12)}"
    event_type = event_type or f"{resource.kind}.{resource.status}"
    body = json_bytes(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": int(now),
            "sequence": 1 if event_type.endswith(".created") else 2,
            "data": {"object": resource_json},
        }
    )
    return EventRow(
        id=event_id,
        client=resource.client,
        type=event_type,
        resource_id=resource.id,
        body=body,
        created_at=now,
        state="pending",
        attempts=0,
        posts=0,
        next_attempt_at=now,
        delivered_at=None,
        last_status=None,
        last_error=None,
    )


class WebhookFault(enum.StrEnum):
    DUPLICATE = "duplicate"
    LOSE_ACK = "lose_ack"
    DELAY = "delay"
    REORDER = "reorder"
    REVERSE = "reverse"


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where one client's events go, and the secrets they are signed with."""

    url: str
    secrets: tuple[str, ...]
    #: an httpx transport to deliver through (in-process receivers); None: the network
    transport: httpx.BaseTransport | None = None
    #: STANDARD_WEBHOOKS or LEGACY
    scheme: str = STANDARD_WEBHOOKS
    #: `<kind>.created` is sent before each final status
    lifecycle: bool = False

    def signer(self) -> StandardWebhooks | LegacySignature:
        if self.scheme == LEGACY:
            return LegacySignature(self.secrets, _warn=False)
        return StandardWebhooks(self.secrets)


@dataclass(slots=True)
class _Scripted:
    fault: WebhookFault
    remaining: int
    seconds: float


class Deliverer:
    """The delivery loop over one server's outbox. Thread-safe; one pass at a time."""

    def __init__(
        self,
        storage: StorageBackend,
        clock: ServerClock,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float = 10.0,
        seed: int = 0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts!r}")
        self._storage = storage
        self._clock = clock
        self.max_attempts = max_attempts
        self._timeout = timeout
        self._random = random.Random(seed)
        self._endpoints: dict[str | None, WebhookEndpoint] = {}
        self._clients: dict[str | None, httpx.Client] = {}
        self._faults: list[_Scripted] = []
        self._lock = threading.Lock()  # endpoints and faults
        self._round = threading.Lock()  # one delivery pass at a time

    # -- configuration -------------------------------------------------------------------

    def set_endpoint(
        self,
        url: str | None,
        *,
        secrets_: tuple[str, ...] | None,
        client: str | None,
        transport: httpx.BaseTransport | None,
        scheme: str = STANDARD_WEBHOOKS,
        lifecycle: bool = False,
    ) -> tuple[str, ...]:
        """Point `client`'s events (every client's, for None) at `url`; None removes it."""
        if scheme not in SCHEMES:
            raise ValueError(f"a webhook scheme is one of {', '.join(SCHEMES)}, not {scheme!r}")
        with self._lock:
            old = self._clients.pop(client, None)
            if url is None:
                self._endpoints.pop(client, None)
                chosen: tuple[str, ...] = ()
            else:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(f"a webhook URL is http:// or https://, not {url!r}")
                if secrets_ is not None and not secrets_:
                    raise ValueError("an endpoint needs at least one secret (None: generate one)")
                if secrets_:
                    chosen = secrets_
                elif scheme == LEGACY:
                    chosen = (f"whsec_{secrets.token_hex(24)}",)
                else:
                    chosen = (StandardWebhooks.generate_secret(),)
                endpoint = WebhookEndpoint(url, tuple(chosen), transport, scheme, lifecycle)
                endpoint.signer()  # refuse an unusable secret now, not at delivery
                self._endpoints[client] = endpoint
        if old is not None:
            old.close()
        return chosen

    def endpoint(self, client: str) -> WebhookEndpoint | None:
        with self._lock:
            return self._endpoints.get(client, self._endpoints.get(None))

    def lifecycle(self, client: str) -> bool:
        """Whether `client`'s endpoint asked for each resource's lifecycle."""
        endpoint = self.endpoint(client)
        return endpoint is not None and endpoint.lifecycle

    def add_fault(self, fault: WebhookFault | str, *, times: int, seconds: float) -> None:
        fault = WebhookFault(fault)
        if times < 1:
            raise ValueError(f"times must be at least 1, not {times!r}")
        if fault is WebhookFault.DELAY and not 0 < seconds < float("inf"):
            raise ValueError(f"a delay is a positive number of seconds, not {seconds!r}")
        with self._lock:
            self._faults.append(_Scripted(fault, times, seconds))

    def _take(self, fault: WebhookFault) -> _Scripted | None:
        with self._lock:
            for index, scripted in enumerate(self._faults):
                if scripted.fault is fault:
                    scripted.remaining -= 1
                    if scripted.remaining == 0:
                        del self._faults[index]
                    return scripted
        return None

    def pending_faults(self) -> int:
        with self._lock:
            return sum(s.remaining for s in self._faults)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()

    # -- delivering ----------------------------------------------------------------------

    def deliver_once(self, *, limit: int = 100) -> WebhookReport:
        """One pass: every due event (up to `limit`) gets one delivery attempt."""
        with self._round:
            now = self._clock.time()
            due = self._storage.due_events(now=now, limit=limit)
            if due and self._take(WebhookFault.REORDER) is not None:
                self._random.shuffle(due)
            if due and self._take(WebhookFault.REVERSE) is not None:
                due.reverse()
            delivered = failed = postponed = abandoned = posts = waiting = 0
            for event in due:
                endpoint = self.endpoint(event.client)
                if endpoint is None:
                    waiting += 1  # kept, due, until an endpoint is configured
                    continue
                delay = self._take(WebhookFault.DELAY)
                if delay is not None:
                    self._storage.postpone_event(event.id, until=now + delay.seconds)
                    postponed += 1
                    continue
                if not self._storage.claim_event(event, until=now + CLAIM_TIMEOUT):
                    continue  # another deliverer has it
                state, sent = self._attempt(event, endpoint)
                posts += sent
                if state == "delivered":
                    delivered += 1
                else:
                    failed += 1
                    abandoned += state == "abandoned"
            return WebhookReport(
                due=len(due),
                delivered=delivered,
                failed=failed,
                abandoned=abandoned,
                postponed=postponed,
                waiting=waiting,
                posts=posts,
            )

    def _attempt(self, event: EventRow, endpoint: WebhookEndpoint) -> tuple[str, int]:
        copies = 2 if self._take(WebhookFault.DUPLICATE) is not None else 1
        status: int | None = None
        error: str | None = None
        acknowledged = False
        for _ in range(copies):
            status, error = self._post(event, endpoint)
            acknowledged = acknowledged or (status is not None and 200 <= status < 300)
        if acknowledged and self._take(WebhookFault.LOSE_ACK) is not None:
            acknowledged, error = False, "injected: the acknowledgement was lost"
        now = self._clock.time()
        attempts = event.attempts + 1
        if acknowledged:
            state, next_at, delivered_at = "delivered", event.next_attempt_at, now
        elif attempts >= self.max_attempts:
            state, next_at, delivered_at = "abandoned", event.next_attempt_at, None
        else:
            state, next_at, delivered_at = "pending", now + retry_delay(attempts), None
        self._storage.event_result(
            event.id,
            state=state,
            posts=copies,
            next_attempt_at=next_at,
            delivered_at=delivered_at,
            status=status,
            error=error,
        )
        return state, copies

    def _post(self, event: EventRow, endpoint: WebhookEndpoint) -> tuple[int | None, str | None]:
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            **endpoint.signer().headers(
                message_id=event.id, timestamp=int(self._clock.time()), body=event.body
            ),
        }
        try:
            response = self._client_for(event.client, endpoint).post(
                endpoint.url, content=event.body, headers=headers
            )
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            # An in-process receiver (a transport) that blows up must not stop the pass.
            logger.exception("webhook delivery of %s failed", event.id)
            return None, f"{type(exc).__name__}: {exc}"
        return response.status_code, None

    def _client_for(self, client: str, endpoint: WebhookEndpoint) -> httpx.Client:
        with self._lock:
            scope = client if client in self._endpoints else None
            http = self._clients.get(scope)
            if http is None:
                http = httpx.Client(
                    transport=endpoint.transport,
                    timeout=self._timeout,
                    follow_redirects=False,  # an acknowledgement comes from the URL given
                )
                self._clients[scope] = http
            return http
