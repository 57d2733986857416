"""Reordering, not only duplication: the reference server announces a payment's life
(`payment.created`, then `payment.succeeded`), can deliver it newest first, and a
receiver with the ordering guard ends in the right state, each event applied once.

The guard's own cases on both backends are in tests/postgres/test_inbox_ordering.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookEvent, WebhookReceiver
from idemclient.inbox._storage import INBOX_TABLE, MIGRATIONS, SCHEMA_TABLE
from idemclient.testing import ReferenceServer, SandboxClient, serve

from .conftest import SECRET, SENDER, recorded_ids, wsgi_server


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as server:
        yield server


def pay(base_url: str, count: int, *, transport: httpx.BaseTransport | None = None) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, transport=transport) as client:
        for n in range(count):
            response = client.post(
                "/v1/payments",
                json={"amount": 100 + n, "currency": "EUR", "reference": f"order-{n}"},
                headers={"Authorization": "Bearer shop", "Idempotency-Key": f"k-{n}"},
            )
            assert response.status_code == 201
            ids.append(response.json()["id"])
    return ids


class Merchant:
    """A merchant keeping each payment's status, applied through the ordering guard."""

    def __init__(self, path: Path, inbox: SQLiteInbox) -> None:
        self.path = path
        self.inbox = inbox
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE payments (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
            conn.execute("CREATE TABLE applied (message_id TEXT NOT NULL, type TEXT NOT NULL)")

    def on_event(self, event: WebhookEvent, tx: sqlite3.Connection) -> None:
        data = event.json()
        payment = data["data"]["object"]
        # The event's own place in the payment's life, not when it was delivered.
        if not self.inbox.advance(tx, event.sender, f"payment/{payment['id']}", data["sequence"]):
            return  # a later state is applied already
        status = "created" if data["type"].endswith(".created") else payment["status"]
        tx.execute(
            "INSERT INTO payments (id, status) VALUES (?, ?)"
            " ON CONFLICT (id) DO UPDATE SET status = excluded.status",
            (payment["id"], status),
        )
        tx.execute("INSERT INTO applied VALUES (?, ?)", (event.message_id, data["type"]))

    def statuses(self) -> dict[str, str]:
        with sqlite3.connect(self.path) as conn:
            return dict(conn.execute("SELECT id, status FROM payments").fetchall())

    def applied(self) -> list[tuple[str, str]]:
        with sqlite3.connect(self.path) as conn:
            return conn.execute("SELECT message_id, type FROM applied ORDER BY rowid").fetchall()


@pytest.fixture
def merchant(app_db: Path, inbox: SQLiteInbox) -> Merchant:
    return Merchant(app_db, inbox)


def receiver_for(merchant: Merchant) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(
        merchant.inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=merchant.on_event
    )


# -- the reference server's side ---------------------------------------------------------


def test_the_lifecycle_queues_created_then_the_final_status(server: ReferenceServer) -> None:
    server.set_webhook_endpoint("https://m.test/h", secrets=[SECRET], lifecycle=True)
    [payment] = pay("http://psp.test", 1, transport=server.transport)
    created, final = server.webhook_events()
    assert (created.type, final.type) == ("payment.created", "payment.succeeded")
    assert created.resource_id == final.resource_id == payment
    bodies = [json.loads(e.body) for e in (created, final)]
    assert [b["sequence"] for b in bodies] == [1, 2]
    assert bodies[0]["data"]["object"]["status"] == "pending"
    assert bodies[1]["data"]["object"]["status"] == "succeeded"


def test_without_the_lifecycle_only_the_final_status_is_queued(server: ReferenceServer) -> None:
    server.set_webhook_endpoint("https://m.test/h", secrets=[SECRET])
    pay("http://psp.test", 1, transport=server.transport)
    assert [e.type for e in server.webhook_events()] == ["payment.succeeded"]


def test_reverse_delivers_a_pass_newest_first(server: ReferenceServer) -> None:
    received: list[str] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        received.append(json.loads(request.content)["type"])
        return httpx.Response(200)

    server.set_webhook_endpoint(
        "https://m.test/h",
        secrets=[SECRET],
        lifecycle=True,
        transport=httpx.MockTransport(endpoint),
    )
    server.webhook_fault("reverse")
    pay("http://psp.test", 2, transport=server.transport)
    server.deliver_webhooks()
    assert received == ["payment.succeeded", "payment.created"] * 2
    received.clear()
    pay("http://psp.test", 3, transport=server.transport)  # k-0, k-1 replayed; k-2 new
    server.deliver_webhooks()  # the fault was used up: in order again
    assert received == ["payment.created", "payment.succeeded"]


# -- a receiver with the guard, over loopback sockets -----------------------------------


def test_a_lifecycle_delivered_out_of_order_and_twice_ends_right_once_each(
    merchant: Merchant, server: ReferenceServer, app_db: Path
) -> None:
    """The live reference server (over its socket) takes the payments; its deliverer
    POSTs each payment's `succeeded` before its `created`, some twice, to the receiver
    on another socket. The guard leaves every payment succeeded, each event recorded
    once and each state applied at most once."""
    with serve(server) as live, wsgi_server(receiver_for(merchant).wsgi_app()) as url:
        with SandboxClient(live.url) as sandbox:
            sandbox.set_webhook_endpoint(url, secrets=[SECRET], lifecycle=True)
            sandbox.webhook_fault("reverse")
            sandbox.webhook_fault("duplicate", times=3)
        ids = pay(live.url, 4)
        report = server.deliver_webhooks()
    assert (report.delivered, report.posts) == (8, 8 + 3)
    events = server.webhook_events()
    assert all(e.state == "delivered" for e in events)
    assert merchant.statuses() == dict.fromkeys(ids, "succeeded")
    # Each final status applied once; each `created`, arriving after it, ignored.
    finals = {e.id for e in events if e.type == "payment.succeeded"}
    assert sorted(merchant.applied()) == sorted((i, "payment.succeeded") for i in finals)
    assert recorded_ids(app_db) == {(SENDER, e.id) for e in events}


def test_in_order_the_lifecycle_applies_both_states(
    merchant: Merchant, server: ReferenceServer, app_db: Path
) -> None:
    with wsgi_server(receiver_for(merchant).wsgi_app()) as url:
        server.set_webhook_endpoint(url, secrets=[SECRET], lifecycle=True)
        ids = pay("http://psp.test", 2, transport=server.transport)
        server.deliver_webhooks()
    assert merchant.statuses() == dict.fromkeys(ids, "succeeded")
    assert [t for _, t in merchant.applied()] == ["payment.created", "payment.succeeded"] * 2


# -- the guard's table comes with an upgrade ----------------------------------------------


def test_an_inbox_of_schema_version_1_is_upgraded_keeping_its_ids(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # what idemclient wrote before the guard existed
        MIGRATIONS[0](conn)
        conn.execute(f"CREATE TABLE {SCHEMA_TABLE} (component TEXT PRIMARY KEY, version INTEGER)")
        conn.execute(f"INSERT INTO {SCHEMA_TABLE} VALUES ('inbox', 1)")
        conn.execute(f"INSERT INTO {INBOX_TABLE} VALUES ('psp', 'evt_old', ?)", (clock.time(),))
    with SQLiteInbox(path, clock=clock) as inbox:
        assert inbox.seen("psp", "evt_old")
        receipt = inbox.process("psp", "evt_new", lambda tx: inbox.advance(tx, "psp", "p/1", 1))
        assert receipt.result is True
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT version FROM {SCHEMA_TABLE}").fetchone() == (2,)
