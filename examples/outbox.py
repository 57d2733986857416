"""The outbox: an order and its payment committed together, sent after the commit.

    python examples/outbox.py postgresql://user@host:5432/db

Uses a stand-in PSP inside this process, so it needs only a database. It places two
orders: the first is sent right after its commit; for the second the process "dies"
between the commit and the send, and `resume()` (which any host may run) sends it.
"""

from __future__ import annotations

import json
import sys

import httpx
import psycopg

import idemclient
from idemclient.postgres import record_pending, send_pending

applied: set[str] = set()


def psp(request: httpx.Request) -> httpx.Response:
    """A PSP that applies each idempotency key once and replays it after, as a real
    one does."""
    key = request.headers["Idempotency-Key"]
    headers = {"Idempotent-Replayed": "true"} if key in applied else {}
    applied.add(key)
    body = {"id": f"pay_{key[:8]}", **json.loads(request.content)}
    return httpx.Response(201, json=body, headers=headers)


def place_order(conn: psycopg.Connection, client: idemclient.Client, order_id: int) -> str:
    """The order row and its payment operation, in one transaction."""
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, amount) VALUES (%s, %s)", (order_id, 1999))
        return record_pending(
            conn,
            client,
            "POST",
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": f"order-{order_id}"},
            operation_id=f"order-{order_id}",
            reference=f"order-{order_id}",
        )


def main(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, amount int)")
    with (
        idemclient.Client(
            store=url, transport=httpx.MockTransport(psp), base_url="https://psp.example"
        ) as client,
        psycopg.connect(url) as conn,
    ):
        first = place_order(conn, client, 1)
        outcome = send_pending(client, first)
        print(f"{first}: {outcome.state.value} (sent after the commit)")
        second = place_order(conn, client, 2)
        left = client.operation(second)
        print(f"{second}: {left.state.value if left else '?'} (the process died here)")
    # Another process, on any host:
    with idemclient.Client(
        store=url, transport=httpx.MockTransport(psp), base_url="https://psp.example"
    ) as client:
        for resumed in client.resume():
            print(f"{resumed.operation_id}: {resumed.state.value} (resumed)")
    print(f"payments applied: {len(applied)}")


if __name__ == "__main__":
    main(sys.argv[1])
