"""The webhook inbox, pushed: one event fifty times at once, and payments' lives
delivered out of order, twice, late and with lost acknowledgements.

Everything goes over loopback sockets, signed as Standard Webhooks define. "Exactly
once" means: one row in the merchant's `effects` table per event (the table has no
unique constraint), every event's id recorded once, and, with the ordering guard,
every payment at its final status. The figures are counted under "inbox".
"""

from __future__ import annotations

import json
import random
import socketserver
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

import httpx
import pytest

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookEvent, WebhookReceiver
from idemclient.testing import ReferenceServer, serve

from ..inbox.conftest import (
    SECRET,
    SENDER,
    _QuietHandler,
    asgi_server,
    create_effects_table,
    effects,
    record_effect,
    recorded_ids,
)
from ..inbox.test_kill import receiver_process
from .conftest import Figures

COPIES = 50
BODY = json.dumps({"id": "evt_storm", "type": "payment.succeeded"}).encode()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128  # fifty connections at once fit the listen backlog


@contextmanager
def threaded_wsgi_server(app: Any) -> Iterator[str]:
    """`app` under wsgiref with a thread per request, on 127.0.0.1; yields the URL."""
    httpd = make_server(
        "127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/webhooks"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
        httpd.server_close()


def storm(urls: list[str], headers: dict[str, str]) -> Counter[str]:
    """POST the same delivery `COPIES` times at once, spread over `urls`: the answers."""
    barrier = threading.Barrier(COPIES)
    answers: list[str] = []
    failures: list[BaseException] = []

    def post(n: int) -> None:
        try:
            with httpx.Client(timeout=60) as client:
                barrier.wait(timeout=30)
                response = client.post(urls[n % len(urls)], content=BODY, headers=headers)
            answers.append(f"{response.status_code} {response.json()['status']}")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(COPIES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    return Counter(answers)


@pytest.fixture
def app_db(tmp_path: Path) -> Path:
    path = tmp_path / "merchant.db"
    with sqlite3.connect(path) as conn:
        create_effects_table(conn)
    return path


def signed_now() -> dict[str, str]:
    return StandardWebhooks([SECRET]).headers(
        message_id="evt_storm", timestamp=int(time.time()), body=BODY
    )


@pytest.mark.parametrize("server_kind", ["asgi-uvicorn", "wsgi-threaded", "two-processes"])
def test_one_event_fifty_times_at_once_is_applied_once(
    app_db: Path, server_kind: str, figures: Figures
) -> None:
    headers = signed_now()
    if server_kind == "two-processes":
        # Two receiving processes on one database file, as two workers of one app.
        with (
            receiver_process(app_db, "normal") as (first, _),
            receiver_process(app_db, "normal") as (second, _),
        ):
            answers = storm([first, second], headers)
    else:
        clock = ManualClock(start=float(int(time.time())))
        with SQLiteInbox(app_db, clock=clock) as inbox:
            receiver = WebhookReceiver(
                inbox, sender="psp", scheme=StandardWebhooks([SECRET]), handler=record_effect
            )
            if server_kind == "asgi-uvicorn":
                with asgi_server(receiver.asgi_app()) as url:
                    answers = storm([url], headers)
            else:
                with threaded_wsgi_server(receiver.wsgi_app()) as url:
                    answers = storm([url], headers)
    assert answers == Counter({"200 processed": 1, "200 duplicate": COPIES - 1})
    assert effects(app_db) == {"evt_storm": 1}
    assert recorded_ids(app_db) == {("psp", "evt_storm")}
    figures.count(
        "inbox",
        **{f"{server_kind}_copies": COPIES, f"{server_kind}_effects": 1},
    )


class Merchant:
    """Each payment's status, changed only through the ordering guard."""

    def __init__(self, path: Path, inbox: SQLiteInbox) -> None:
        self.path, self.inbox = path, inbox
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE payments (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
        self.ignored = 0

    def on_event(self, event: WebhookEvent, tx: sqlite3.Connection) -> None:
        record_effect(event, tx)  # one row per event processed: never twice
        data = event.json()
        payment = data["data"]["object"]
        if not self.inbox.advance(tx, event.sender, f"payment/{payment['id']}", data["sequence"]):
            self.ignored += 1
            return
        status = "created" if data["type"].endswith(".created") else payment["status"]
        tx.execute(
            "INSERT INTO payments (id, status) VALUES (?, ?)"
            " ON CONFLICT (id) DO UPDATE SET status = excluded.status",
            (payment["id"], status),
        )

    def statuses(self) -> dict[str, str]:
        with sqlite3.connect(self.path) as conn:
            return dict(conn.execute("SELECT id, status FROM payments").fetchall())


def test_payments_lives_out_of_order_end_at_their_final_status_once_each(
    tmp_path: Path, seed: int, figures: Figures
) -> None:
    """Forty payments, each announced as created then succeeded, delivered by the live
    server's deliverer over loopback to the receiver under uvicorn, through a random
    script of faults: passes reversed or shuffled, events sent twice, acknowledgements
    lost, events held back. Every payment ends succeeded, every event is applied once."""
    rng = random.Random(seed)
    db = tmp_path / "merchant.db"
    with sqlite3.connect(db) as conn:
        create_effects_table(conn)
    clock = ManualClock()
    payments = 40
    with (
        SQLiteInbox(db, clock=clock) as inbox,
        ReferenceServer(clock=clock) as server,
        serve(server) as live,
    ):
        merchant = Merchant(db, inbox)
        receiver = WebhookReceiver(
            inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=merchant.on_event
        )
        with asgi_server(receiver.asgi_app()) as url:
            server.set_webhook_endpoint(url, secrets=[SECRET], lifecycle=True)
            faults = Counter[str]()
            passes = 0
            with httpx.Client(base_url=live.url) as client:
                for n in range(payments):
                    response = client.post(
                        "/v1/payments",
                        json={"amount": 100 + n, "currency": "EUR", "reference": f"o-{n}"},
                        headers={"Authorization": "Bearer shop", "Idempotency-Key": f"k-{n}"},
                    )
                    assert response.status_code == 201
                    if n % 8 == 7:  # a pass now and then, while payments keep coming
                        passes += _faulty_pass(server, rng, faults)
            for _ in range(200):  # bounded: retries come due as the clock moves
                if all(e.state == "delivered" for e in server.webhook_events()):
                    break
                passes += _faulty_pass(server, rng, faults)
                clock.advance(3600)
        events = server.webhook_events()
    assert len(events) == 2 * payments
    assert all(e.state == "delivered" for e in events)
    assert set(merchant.statuses().values()) == {"succeeded"}
    assert len(merchant.statuses()) == payments
    assert effects(db) == {e.id: 1 for e in events}
    assert len(recorded_ids(db)) == 2 * payments
    figures.count(
        "inbox",
        lifecycle_payments=payments,
        lifecycle_events=len(events),
        lifecycle_posts=sum(e.posts for e in events),
        lifecycle_passes=passes,
        lifecycle_created_ignored_as_late=merchant.ignored,
        lifecycle_effects_per_event=1,
        **{f"lifecycle_fault_{name}": count for name, count in sorted(faults.items())},
    )


def _faulty_pass(server: ReferenceServer, rng: random.Random, faults: Counter[str]) -> int:
    for fault, chance in (("reverse", 0.5), ("reorder", 0.3)):
        if rng.random() < chance:
            server.webhook_fault(fault)
            faults[fault] += 1
    for fault, chance in (("duplicate", 0.6), ("lose_ack", 0.3)):
        if rng.random() < chance:
            times = rng.randint(1, 3)
            server.webhook_fault(fault, times=times)
            faults[fault] += times
    if rng.random() < 0.2:
        server.webhook_fault("delay", seconds=rng.choice([1.0, 30.0, 600.0]))
        faults["delay"] += 1
    server.deliver_webhooks()
    return 1
