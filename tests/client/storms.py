"""One operation called by many threads at once, on any store: the one storm both the
SQLite and the PostgreSQL suites run."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from idemclient import Client
from idemclient.store import SQLiteStore, Store

from .fakes import FakePSP

PAYMENT = {"amount": 700, "currency": "EUR"}


def storm_of_threads(store: str | Path | SQLiteStore | Store, callers: int) -> None:
    """`callers` threads post one operation together: one request, one effect, one
    stored operation, and every caller gets the same body."""
    psp = FakePSP()
    release = threading.Event()

    def slow_handler(request: httpx.Request) -> httpx.Response:
        release.wait(timeout=10)  # hold the first sender until every thread is in
        return psp.handler(request)

    with Client(
        store=store, transport=httpx.MockTransport(slow_handler), base_url="http://psp.test"
    ) as client:
        barrier = threading.Barrier(callers)

        def call() -> bytes:
            barrier.wait(timeout=10)
            outcome = client.post("/v1/payments", json=PAYMENT, operation_id="same")
            assert outcome.response is not None
            return outcome.response.content

        with ThreadPoolExecutor(max_workers=callers) as pool:
            futures = [pool.submit(call) for _ in range(callers)]
            release.set()
            bodies = {f.result(timeout=60) for f in futures}
        assert len(client.store.operations()) == 1
    assert len(bodies) == 1
    assert sum(psp.effects.values()) == 1
    assert len(psp.requests) == 1
