"""A client process that kills itself with SIGKILL at a chosen point of an operation.

Run by test_crash.py: ``python crash_child.py STORE LEDGER POINT``. The PSP is a
`FileLedgerPSP` so that effects outlive this process.
"""

from __future__ import annotations

import os
import signal
import sys

import httpx

from idemclient import Client
from idemclient.hooks import Hooks

sys.path.insert(0, os.path.dirname(__file__))
from ledger_psp import FileLedgerPSP


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(store: str, ledger: str, point: str) -> None:
    psp = FileLedgerPSP(ledger)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the time probe before the payment: answered
            return httpx.Response(200)
        if point == "during-send":
            die()  # the request is on its way; the server never answers
        response = psp.handle(request)
        if point == "after-apply":
            die()  # applied on the server, the answer never reaches the store
        return response

    hooks = Hooks(on_attempt=lambda event: die() if point == "after-intent" else None)
    with Client(store=store, transport=httpx.MockTransport(handler), hooks=hooks) as client:
        client.post(
            "http://psp.test/v1/payments",
            json={"amount": 100, "currency": "EUR"},
            operation_id="order-1",
        )
        if point == "after-outcome":
            die()


if __name__ == "__main__":
    main(*sys.argv[1:4])
