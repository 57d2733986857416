"""A client process stopped by Ctrl-C (a real SIGINT from its parent) just after its
operation's intent has been committed, before anything is sent.

Run by test_interrupted_calls.py: ``python ctrl_c_child.py STORE PROFILE PATH``. It
prints ``committed`` once the intent is in the store, then waits for the signal; the
request is never handed to its transport (which would fail the parent's test).
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import httpx

from idemclient import Client
from idemclient.store import SQLiteStore


class Committing(SQLiteStore):
    def begin(self, *args: Any, **kwargs: Any) -> Any:
        begun = super().begin(*args, **kwargs)
        print("committed", flush=True)
        # A real wait is needed: this is a child process that the test interrupts with a
        # real SIGINT here, the commit made, its answer not yet back (killed, never waited out).
        time.sleep(60)
        return begun


def main(store: str, profile: str, path: str) -> None:
    # Ctrl-C as at a terminal, even if this test run was started in the background
    # (whose children inherit SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the time probe before the payment: answered
            return httpx.Response(200)
        print("sent", flush=True)
        return httpx.Response(500)

    with Client(
        store=Committing(store),
        transport=httpx.MockTransport(handler),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer alice"},
        profile=profile,
    ) as client:
        client.post(
            path,
            json={"amount": 1250, "currency": "EUR", "reference": "inv-1"},
            operation_id="order-1042",
        )


if __name__ == "__main__":
    main(*sys.argv[1:4])
