"""A refusal judged without knowing that the operation may have been applied settles
nothing.

The history (found by the deep checker, ietf, seed 4062494472): caller A takes the
operation and is paused (a GC pause, SIGSTOP) before its request leaves, past its
lease. Caller B takes the operation over; B's request reaches the server, which pays,
and its answer is lost on the way back; nothing of B's later attempts reaches the
server, and B stops, maybe applied. Then A goes on: its request, under the same key,
is refused in front of the server (a 403 from its edge: the server never saw it). A
read the row before B's attempt was noted, so it judged the 403 as the first answer to
a fresh operation, a final refusal, and wrote it over B's "maybe applied": the caller
was told "failed" and the store kept `failed` for a payment the server made.

A refusal written over an operation that may have been applied, by a caller that did
not know that, does not land: the caller judges it again as any refusal after an
attempt that may have been applied (an edge's 403 is never the server's stored
answer), and is told `Indeterminate`. The store keeps the operation indeterminate, and
a resume under its key settles it as the one payment made.

Through the public clients, against the reference server in-process (its ledger
counted), with a transport in front of it that holds A's request, loses B's answer and
refuses A's; the clock is a `ManualClock`, and every wait on a gate is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on
PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR", "reference": "order-9"}
TOKEN = {"Authorization": "Bearer sk_test_secret"}
PROFILE = "ietf"


class InFront(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """In front of the reference server: the first payment request (A's) is held until
    the test opens the gate, then refused here with a 403 (the edge's, for a key the
    server holds); the second (B's) reaches the server, which pays, and its answer is
    lost (a read timeout); the others fail to connect while the gate is shut, and go
    through once it is open."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.arrived = threading.Event()
        self.gate = threading.Event()
        self.posts = 0
        self.lock = threading.Lock()

    def _turn(self, request: httpx.Request) -> int:
        if request.method != "POST":
            return 0
        with self.lock:
            self.posts += 1
            return self.posts

    def _hold(self) -> httpx.Response:
        self.arrived.set()
        assert self.gate.wait(BOUND), "the test never opened the gate"
        return httpx.Response(403, json={"title": "Forbidden", "detail": "refused at the edge"})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        if turn == 1:
            return self._hold()
        if turn > 2 and not self.gate.is_set():
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        response = self.inner.handle_request(request)
        response.read()
        if turn == 2:
            raise httpx.ReadTimeout("timed out", request=request)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        if turn == 1:
            return await asyncio.to_thread(self._hold)
        if turn > 2 and not self.gate.is_set():
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if turn == 2:
            raise httpx.ReadTimeout("timed out", request=request)
        return response


def sync_client(transport: httpx.BaseTransport, store: Path, clock: ManualClock) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=transport,
        base_url="http://psp.test",
        headers=TOKEN,
        server_clock=False,
        profile=PROFILE,
    )


def pay_sync(front: InFront, store: Path, clock: ManualClock) -> object:
    with sync_client(front, store, clock) as a:
        return a.post("/v1/payments", json=PAYMENT, operation_id="op")


def pay_async(front: InFront, store: Path, clock: ManualClock) -> object:
    async def run() -> object:
        async with AsyncClient(
            store=store,
            clock=clock,
            transport=front,
            base_url="http://psp.test",
            headers=TOKEN,
            server_clock=False,
            profile=PROFILE,
        ) as a:
            return await a.post("/v1/payments", json=PAYMENT, operation_id="op")

    return asyncio.run(run())


def told(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as exc:
        return exc


class Background:
    """Run one call in a thread; keep what it returned or raised."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.result: object = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        self.result = told(fn)

    def join(self) -> object:
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "the background call never finished"
        return self.result


@pytest.mark.parametrize("first", [pay_sync, pay_async], ids=["sync", "async"])
def test_an_edge_refusal_after_a_takeover_s_maybe_applied_attempt_is_never_told_failed(
    tmp_path: Path, first: Callable[[InFront, Path, ManualClock], object]
) -> None:
    server = ReferenceServer(profile=PROFILE)
    front = InFront(server)
    clock = ManualClock()
    store = tmp_path / "s.db"
    owner_a = Background(lambda: first(front, store, clock))
    assert front.arrived.wait(BOUND)
    policy = RetryPolicy()
    clock.advance(policy.deadline + policy.attempt_timeout + 11)  # A paused past its lease
    with sync_client(front, store, clock) as b:
        told_b = told(lambda: b.post("/v1/payments", json=PAYMENT, operation_id="op"))
    # B's request paid, its answer lost, nothing after it reached the server.
    assert isinstance(told_b, Indeterminate), told_b
    assert [e.status for e in server.ledger()] == ["succeeded"]
    front.gate.set()
    told_a = owner_a.join()
    # A's 403 came from the edge after B's attempt, which may have been applied: not
    # the operation's refusal. A is told so, never "failed".
    assert isinstance(told_a, Indeterminate), told_a
    assert told_a.outcome.maybe_applied
    assert "403" in told_a.outcome.evidence
    record = SQLiteStore(store).get("op")
    assert record is not None
    assert (record.state, record.maybe_applied, record.finished_at) == (
        State.INDETERMINATE,
        True,
        None,
    )
    # Resumed under its key: the server replays the payment it made, once.
    with sync_client(server.transport, store, clock) as c:
        (resumed,) = c.resume()
    assert (resumed.state, resumed.status_code) == (State.SUCCEEDED, 201)
    assert len(server.ledger()) == 1
    assert server.ledger()[0].idempotency_key == record.key
