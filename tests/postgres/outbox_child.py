"""An application process that records an order and its payment in one transaction,
then is killed (SIGKILL) before or while sending it.

Run by test_outbox.py: ``python outbox_child.py URL LEDGER POINT``.
"""

from __future__ import annotations

import os
import signal
import sys

import httpx
import psycopg

from idemclient import Client
from idemclient.postgres import record_pending, send_pending

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "client"))
from ledger_psp import FileLedgerPSP


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(url: str, ledger: str, point: str) -> None:
    psp = FileLedgerPSP(ledger)

    def handler(request: httpx.Request) -> httpx.Response:
        response = psp.handle(request)
        if point == "after-apply" and request.method != "HEAD":  # not the time probe
            die()  # the PSP applied it; the answer dies with this process
        return response

    with (
        Client(store=url, transport=httpx.MockTransport(handler)) as client,
        psycopg.connect(url) as conn,
    ):
        with conn.transaction():
            conn.execute("INSERT INTO orders (id, amount) VALUES (42, 1999)")
            operation = record_pending(
                conn,
                client,
                "POST",
                "http://psp.test/v1/payments",
                json={"amount": 1999, "currency": "EUR", "order": 42},
                operation_id="order-42",
            )
        if point == "after-commit":
            die()  # committed, never sent
        send_pending(client, operation)


if __name__ == "__main__":
    main(*sys.argv[1:4])
