"""The outbox: an order and its payment committed together, sent after the commit.

    IDEMCLIENT_DATABASE_URL=postgresql://user@host:5432/db python examples/outbox.py

Needs a PostgreSQL database (it creates an `orders` table and the `idemclient`
schema) and the `postgres` extra. The PSP is the in-process reference server. Two
orders: the first is sent right after its commit; for the second the process "dies"
between the commit and the send, and `resume()`, which any host may run, sends it.
"""

import os

import psycopg

import idemclient
from idemclient.postgres import record_pending, send_pending
from idemclient.testing import ReferenceServer

url = os.environ["IDEMCLIENT_DATABASE_URL"]
server = ReferenceServer()
options = {
    "base_url": "https://psp.test",
    "transport": server.transport,
    "headers": {"Authorization": "Bearer sk_test_merchant"},
    "store": url,  # the application's own database
}


def place_order(conn: psycopg.Connection, psp: idemclient.Client, order_id: int) -> str:
    """The order row and its payment operation, in one transaction."""
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, amount) VALUES (%s, %s)", (order_id, 1999))
        return record_pending(
            conn,
            psp,
            "POST",
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": f"order-{order_id}"},
            operation_id=f"order-{order_id}",
            reference=f"order-{order_id}",
        )


with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, amount int)")

with idemclient.Client(**options) as psp, psycopg.connect(url) as conn:
    first = place_order(conn, psp, 1)
    print(first, "->", send_pending(psp, first).state, "(sent after the commit)")
    second = place_order(conn, psp, 2)
    left = psp.operation(second)
    print(second, "->", left.state if left else None, "(the process died here)")

# ... on any host ...
with idemclient.Client(**options) as psp:
    for outcome in psp.resume():
        print(outcome.operation_id, "->", outcome.state, "(resumed)")

print("payments on the server:", len(server.ledger()))
