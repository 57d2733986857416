"""A merchant's webhook receiver: each PSP event applied exactly once.

The PSP (the reference server, in this process) charges five orders and sends one
webhook per payment to the receiver, a WSGI application served by the standard
library on 127.0.0.1. The PSP is told to misbehave the way real ones do: send some
events twice, lose an acknowledgement so an event comes again later, and deliver out
of order. The receiver verifies each signature, records the message id in the same
SQLite transaction that marks the order paid, and drops what it has seen.
"""

import sqlite3
import threading
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookEvent, WebhookReceiver
from idemclient.testing import ReferenceServer

SECRET = StandardWebhooks.generate_secret()  # in production: from your secret store

# -- the merchant application ---------------------------------------------------------

for leftover in ("shop.db", "shop.db-wal", "shop.db-shm"):
    Path(leftover).unlink(missing_ok=True)  # a fresh shop for each run of this demo

with sqlite3.connect("shop.db") as setup:
    setup.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, paid INTEGER)")
    setup.execute("CREATE TABLE IF NOT EXISTS ledger (order_id TEXT, event_id TEXT)")
    for n in range(5):
        setup.execute("INSERT OR IGNORE INTO orders VALUES (?, 0)", (f"order-{n}",))


def on_event(event: WebhookEvent, tx: sqlite3.Connection) -> None:
    """Runs once per event, inside the transaction that records its id."""
    data = event.json()
    if data["type"] == "payment.succeeded":
        order = data["data"]["object"]["reference"]
        tx.execute("UPDATE orders SET paid = paid + 1 WHERE id = ?", (order,))
        tx.execute("INSERT INTO ledger VALUES (?, ?)", (order, event.message_id))


clock = ManualClock()  # shared with the PSP below, so retries come due without waiting
inbox = SQLiteInbox("shop.db", clock=clock)  # the application's own database file
receiver = WebhookReceiver(inbox, sender="psp", scheme=StandardWebhooks([SECRET]), handler=on_event)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


httpd = make_server("127.0.0.1", 0, receiver.wsgi_app(), handler_class=QuietHandler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{httpd.server_port}/webhooks/psp"

# -- the PSP: pays the orders and delivers its webhooks, badly ------------------------

psp = ReferenceServer(clock=clock)
psp.set_webhook_endpoint(url, secrets=[SECRET])
psp.webhook_fault("duplicate", times=2)
psp.webhook_fault("lose_ack")
psp.webhook_fault("reorder")

with httpx.Client(transport=psp.transport, base_url="https://psp.test") as client:
    for n in range(5):
        client.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": f"order-{n}"},
            headers={"Authorization": "Bearer shop", "Idempotency-Key": f"order-{n}"},
        ).raise_for_status()

while any(event.state == "pending" for event in psp.webhook_events()):
    psp.deliver_webhooks()
    clock.advance(60)  # what the PSP's retry timer would wait

events = psp.webhook_events()
print(f"webhook deliveries: {sum(e.posts for e in events)} for {len(events)} events")
with sqlite3.connect("shop.db") as shop:
    paid = shop.execute("SELECT count(*) FROM orders WHERE paid = 1").fetchone()[0]
    twice = shop.execute("SELECT count(*) FROM orders WHERE paid > 1").fetchone()[0]
    entries = shop.execute("SELECT count(*) FROM ledger").fetchone()[0]
print(f"orders paid: {paid} of 5; paid more than once: {twice}; ledger entries: {entries}")
if paid == entries == 5 and twice == 0:
    print("EVERY EVENT APPLIED EXACTLY ONCE")

httpd.shutdown()
psp.close()
inbox.close()
