"""A final success is the truth about the money: it wins over a refusal stored first.

The history (found by the checker, ietf, seed 982998114): caller A sends, the server
pays, and A is paused past its lease before its answer is stored; caller B takes the
operation over and is refused in front of the server (a 400 from something that keeps
no refusal under the key), and B stores the refusal. Then A's own answer, a 2xx,
arrives. A is told its own success, the store keeps `succeeded`, and every later read
(`operation`, `resume`, `idemclient ops`) says so; the server's ledger holds one payment.
B was told "failed" at the time: that is history, and nothing can take it back.

Through the public clients, against the reference server in-process (its ledger
counted), with a transport in front of it that holds A's answer and refuses B's
request; the clock is a `ManualClock`, and every wait on a gate is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient.cli import main
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on
PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR", "reference": "order-7"}
TOKEN = {"Authorization": "Bearer sk_test_secret"}
#: a server that keeps no refusal under a key: a 400 in front of it is a final answer
PROFILE = "ietf"


class InFront(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """In front of the reference server: the first payment request is held until the
    test opens the gate, after the server paid it (its answer held), or, `late`, before
    it reaches the server (it pays once the gate opens, and its answer is then lost: a
    read timeout); the second one is refused here with a 400, never reaching the
    server; any later one goes through."""

    def __init__(self, server: ReferenceServer, *, late: bool = False) -> None:
        self.inner = server.transport
        self.late = late
        self.arrived = threading.Event()
        self.gate = threading.Event()
        self.posts = 0

    def _turn(self, request: httpx.Request) -> int:
        if request.method != "POST":
            return 0
        self.posts += 1
        return self.posts

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        if turn == 2:
            return httpx.Response(400, json={"error": "bad request"})
        if turn == 1 and self.late:
            self._hold()
        response = self.inner.handle_request(request)
        response.read()
        if turn == 1:
            self._held(request)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        if turn == 2:
            return httpx.Response(400, json={"error": "bad request"})
        if turn == 1 and self.late:
            await asyncio.to_thread(self._hold)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if turn == 1:
            await asyncio.to_thread(self._held, request)
        return response

    def _hold(self) -> None:
        self.arrived.set()
        assert self.gate.wait(BOUND), "the test never opened the gate"

    def _held(self, request: httpx.Request) -> None:
        if self.late:
            raise httpx.ReadTimeout("timed out", request=request)
        self._hold()


class Background:
    """Run one call in a thread; keep what it returned or raised."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "the background call never finished"


def past_the_lease(clock: ManualClock) -> None:
    policy = RetryPolicy()
    clock.advance(policy.deadline + policy.attempt_timeout + 11)


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


def async_client(transport: InFront, store: Path, clock: ManualClock) -> AsyncClient:
    return AsyncClient(
        store=store,
        clock=clock,
        transport=transport,
        base_url="http://psp.test",
        headers=TOKEN,
        server_clock=False,
        profile=PROFILE,
    )


def pay(client: Client) -> Any:
    return client.post("/v1/payments", json=PAYMENT, operation_id="op")


def refused_then_late(
    tmp_path: Path, first: Callable[[InFront, Path, ManualClock], object], *, late: bool = False
) -> Any:
    """A (run by `first`) pays and is held past its lease (`late`: before its request
    reaches the server); B takes over and is refused; then A goes on. What each was
    told (A: what it returned, or raised), what the store keeps, and the server."""
    server = ReferenceServer(profile=PROFILE)
    front = InFront(server, late=late)
    clock = ManualClock()
    store = tmp_path / "s.db"
    owner_a = Background(lambda: first(front, store, clock))
    assert front.arrived.wait(BOUND)
    past_the_lease(clock)  # A is paused (a GC pause, SIGSTOP) past its lease
    with sync_client(front, store, clock) as b:
        told_b = pay(b)
    front.gate.set()
    owner_a.join()
    if not late:
        assert owner_a.error is None, owner_a.error
    return owner_a.result or owner_a.error, told_b, SQLiteStore(store), server, clock


def check(told_a: Any, told_b: Any, store: SQLiteStore, server: ReferenceServer) -> None:
    # B stored the refusal first: it was told so, and that cannot be taken back.
    assert (told_b.state, told_b.status_code) == (State.FAILED, 400)
    # A is told its own success: its own answer, not B's refusal from the store.
    assert (told_a.state, told_a.status_code) == (State.SUCCEEDED, 201)
    assert not told_a.from_store
    # The store keeps the success, with A's answer; nothing holds the lease.
    record = store.get("op")
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)
    assert record.response is not None
    assert record.response.status_code == 201
    # The refusal stays in the record's evidence: another caller was told it.
    assert "another caller stored first, and was told: HTTP 400" in record.evidence
    assert len(server.ledger()) == 1  # paid once


def test_a_paused_caller_s_own_late_success_wins_over_a_refusal_stored_meanwhile(
    tmp_path: Path,
) -> None:
    def first(front: InFront, store: Path, clock: ManualClock) -> object:
        with sync_client(front, store, clock) as a:
            return pay(a)

    told_a, told_b, store, server, _clock = refused_then_late(tmp_path, first)
    check(told_a, told_b, store, server)
    # Every later read says succeeded: the client's, a resume's, and the operator's.
    with sync_client(server.transport, tmp_path / "s.db", ManualClock()) as c:
        seen = c.operation("op")
        assert seen is not None
        assert seen.state is State.SUCCEEDED
        again = pay(c)  # issued again: answered from the store, nothing sent
        assert (again.state, again.status_code, again.from_store) == (State.SUCCEEDED, 201, True)
    shown = CliRunner().invoke(main, ["ops", "show", "op", "--store", str(tmp_path / "s.db")])
    assert shown.exit_code == 0, shown.output
    assert "succeeded" in shown.output
    assert "failed" not in shown.output
    listed = CliRunner().invoke(main, ["ops", "list", "--store", str(tmp_path / "s.db")])
    assert listed.exit_code == 0, listed.output
    assert "succeeded" in listed.output
    assert len(server.ledger()) == 1


def test_an_async_paused_caller_s_own_late_success_wins_over_a_refusal_stored_meanwhile(
    tmp_path: Path,
) -> None:
    # The async client's final write may go behind the answer (`_behind`): past its
    # lease it is awaited, and it is this caller's success that lands.
    def first(front: InFront, store: Path, clock: ManualClock) -> object:
        async def run() -> object:
            async with async_client(front, store, clock) as a:
                return await a.post("/v1/payments", json=PAYMENT, operation_id="op")

        return asyncio.run(run())

    told_a, told_b, store, server, _clock = refused_then_late(tmp_path, first)
    check(told_a, told_b, store, server)


def pay_sync(front: InFront, store: Path, clock: ManualClock) -> object:
    with sync_client(front, store, clock) as a:
        return pay(a)


def pay_async(front: InFront, store: Path, clock: ManualClock) -> object:
    async def run() -> object:
        async with async_client(front, store, clock) as a:
            return await a.post("/v1/payments", json=PAYMENT, operation_id="op")

    return asyncio.run(run())


@pytest.mark.parametrize("first", [pay_sync, pay_async], ids=["sync", "async"])
def test_a_paused_caller_s_own_late_attempt_unsettles_a_refusal_stored_meanwhile(
    tmp_path: Path, first: Callable[[InFront, Path, ManualClock], object]
) -> None:
    # A is paused before its request leaves; B takes over and stores a refusal; then
    # A's request reaches the server, which pays, and its answer is lost. A's attempt
    # may have been applied after the refusal was stored: A is told so (indeterminate,
    # never "failed"), the store no longer keeps the refusal as the operation's answer,
    # and a resume under the key settles it as the payment the server made, once.
    told_a, told_b, store, server, clock = refused_then_late(tmp_path, first, late=True)
    assert (told_b.state, told_b.status_code) == (State.FAILED, 400)
    assert isinstance(told_a, Indeterminate), told_a
    record = store.get("op")
    assert record is not None
    assert (record.state, record.maybe_applied, record.finished_at) == (
        State.INDETERMINATE,
        True,
        None,
    )
    assert "no longer settled" in record.evidence
    assert len(server.ledger()) == 1
    with sync_client(server.transport, tmp_path / "s.db", clock) as c:
        (resumed,) = c.resume()
    assert (resumed.state, resumed.status_code) == (State.SUCCEEDED, 201)
    assert len(server.ledger()) == 1  # the server replayed its payment: paid once
