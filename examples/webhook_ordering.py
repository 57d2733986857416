"""Events out of order: a payment's `succeeded` arrives before its `created`.

The inbox applies each event once but promises no order. Here the PSP (the reference
server, in this process) announces each payment's life, `payment.created` then
`payment.succeeded`, and is told to deliver them newest first, some twice. The
merchant's handler asks the ordering guard, `inbox.advance(...)`, before it changes a
payment: with the event's own sequence (its place in the payment's life, not when it
was delivered), in the same transaction as the change. A late `created` is recorded
as received and ignored, so no payment goes back from succeeded to created.
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

for leftover in ("orders.db", "orders.db-wal", "orders.db-shm"):
    Path(leftover).unlink(missing_ok=True)  # a fresh database for each run of this demo

with sqlite3.connect("orders.db") as setup:
    setup.execute("CREATE TABLE payments (id TEXT PRIMARY KEY, status TEXT NOT NULL)")

clock = ManualClock()  # shared with the PSP below
inbox = SQLiteInbox("orders.db", clock=clock)
ignored = []


def on_event(event: WebhookEvent, tx: sqlite3.Connection) -> None:
    """Runs once per event, inside the transaction that records its id."""
    data = event.json()
    payment = data["data"]["object"]
    if not inbox.advance(tx, event.sender, f"payment/{payment['id']}", data["sequence"]):
        ignored.append(data["type"])  # older than the state we hold: leave it
        return
    status = "created" if data["type"] == "payment.created" else payment["status"]
    tx.execute(
        "INSERT INTO payments (id, status) VALUES (?, ?)"
        " ON CONFLICT (id) DO UPDATE SET status = excluded.status",
        (payment["id"], status),
    )


receiver = WebhookReceiver(inbox, sender="psp", scheme=StandardWebhooks([SECRET]), handler=on_event)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


httpd = make_server("127.0.0.1", 0, receiver.wsgi_app(), handler_class=QuietHandler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{httpd.server_port}/webhooks/psp"

psp = ReferenceServer(clock=clock)
psp.set_webhook_endpoint(url, secrets=[SECRET], lifecycle=True)
psp.webhook_fault("reverse")  # each payment's final status before its creation
psp.webhook_fault("duplicate", times=2)

with httpx.Client(transport=psp.transport, base_url="https://psp.test") as client:
    for n in range(3):
        client.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": f"order-{n}"},
            headers={"Authorization": "Bearer shop", "Idempotency-Key": f"order-{n}"},
        ).raise_for_status()

report = psp.deliver_webhooks()
print(f"delivered {report.delivered} events in {report.posts} posts, newest first")
print(f"ignored as older than the state applied: {', '.join(ignored)}")
with sqlite3.connect("orders.db") as db:
    statuses = [status for (status,) in db.execute("SELECT status FROM payments")]
print(f"payment statuses: {', '.join(statuses)}")
if statuses == ["succeeded"] * 3:
    print("EVERY PAYMENT ENDS SUCCEEDED")

httpd.shutdown()
psp.close()
inbox.close()
