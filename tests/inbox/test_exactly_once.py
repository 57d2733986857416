"""Exactly one effect per event, however often and in whatever order events arrive.

The merchant's handler inserts one row per processing into a table with no unique
constraint, so any second processing would show up as a second row.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookReceiver
from idemclient.testing import ReferenceServer, WebhookEventRecord

from .conftest import SECRET, SENDER, effects, record_effect, signed


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as server:
        yield server


_numbers = itertools.count()


def make_resources(server: ReferenceServer, count: int, rng: random.Random) -> None:
    """Payments and payouts for two clients, some declined: every kind of event."""
    with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
        for _ in range(count):
            n = next(_numbers)
            if rng.random() < 0.25:
                server.external_fault(rng.choice([1, 2]), "decline")
            response = client.post(
                rng.choice(["/v1/payments", "/v1/payouts"]),
                json={"amount": 100 + n, "currency": "EUR", "reference": f"ref-{n}"},
                headers={
                    "Authorization": f"Bearer {rng.choice(['alice', 'bob'])}",
                    "Idempotency-Key": f"key-{n}",
                },
            )
            assert response.status_code in (201, 402)


def effect_types(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT message_id, type FROM effects").fetchall())


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_each_event_delivered_one_to_three_times_shuffled_has_one_effect(
    server: ReferenceServer, inbox: SQLiteInbox, clock: ManualClock, app_db: Path, seed: int
) -> None:
    rng = random.Random(seed)
    make_resources(server, 20, rng)
    events = server.webhook_events()
    assert len(events) == 20
    assert {e.type for e in events} >= {"payment.succeeded", "payout.succeeded"}
    deliveries: list[WebhookEventRecord] = [e for e in events for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect
    )
    outcomes: Counter[str] = Counter()
    with httpx.Client(transport=httpx.WSGITransport(app=receiver.wsgi_app())) as http:
        for event in deliveries:
            clock.advance(rng.uniform(0, 30))  # redeliveries come later, signed anew
            body = event.body.encode()
            response = http.post(
                "http://merchant.test/webhooks",
                content=body,
                headers=signed(body, event.id, timestamp=clock.time()),
            )
            assert response.status_code == 200
            outcomes[response.json()["status"]] += 1
    assert effects(app_db) == {e.id: 1 for e in events}
    assert effect_types(app_db) == {e.id: e.type for e in events}
    assert outcomes == {"processed": 20, "duplicate": len(deliveries) - 20}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_servers_delivery_loop_under_random_faults_gives_one_effect_per_event(
    server: ReferenceServer, inbox: SQLiteInbox, clock: ManualClock, app_db: Path, seed: int
) -> None:
    rng = random.Random(seed)
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect
    )
    server.set_webhook_endpoint(
        "http://merchant.test/webhooks",
        secrets=[SECRET],
        transport=httpx.WSGITransport(app=receiver.wsgi_app()),
    )
    posts = 0
    for _ in range(6):  # resources keep finishing while earlier events are in flight
        make_resources(server, 4, rng)
        server.webhook_fault("duplicate", times=rng.randint(1, 3))
        server.webhook_fault("lose_ack", times=rng.randint(1, 2))
        server.webhook_fault("delay", times=rng.randint(1, 2), seconds=rng.uniform(1, 20))
        server.webhook_fault("reorder")
        posts += server.deliver_webhooks().posts
        clock.advance(rng.uniform(0, 5))
    for _ in range(30):  # drain: bounded by count, each pass moves the clock past retries
        clock.advance(60)
        posts += server.deliver_webhooks().posts
    events = server.webhook_events()
    assert len(events) == 24
    assert {e.state for e in events} == {"delivered"}
    assert posts == sum(e.posts for e in events) > len(events)  # duplicates really happened
    assert effects(app_db) == {e.id: 1 for e in events}
