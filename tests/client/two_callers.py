"""Two callers of one operation: the scaffold of the tests in which one caller is paused
(a GC pause, a SIGSTOP) past its lease while another takes the operation over.

Both callers use one store and one `ManualClock`, and reach the server through one
scripted transport. The first caller's call runs in a thread (`Background`) until the
server's script holds it at a gate; the clock then moves past its lease
(`paused_past_its_lease`), the other caller takes over, and the test opens the gate.
`GatedFront` is that script in front of the reference server, `SharedOperation` the
operation both callers make, each through a client of its own.

Every wait on a gate or a thread is bounded by `BOUND`: a bound on a test gone wrong,
never a wait the test relies on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from idemclient import AsyncClient, Client, ManualClock, RetryPolicy, State
from idemclient.store import OperationRecord, SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on
TOKEN = {"Authorization": "Bearer sk_test_secret"}


def told(fn: Callable[[], object]) -> object:
    """What a caller was told: what `fn` returned, or the error it raised."""
    try:
        return fn()
    except BaseException as exc:
        return exc


class Background:
    """Run one call in a thread; keep what it returned (`result`) or raised (`error`)."""

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

    def join(self) -> object:
        """Wait (bounded) for the call to end; what it was told: its result, or error."""
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "the background call never finished"
        return self.result if self.error is None else self.error


def past_the_lease(clock: ManualClock) -> None:
    """Move `clock` past the lease a caller took under the default policy."""
    policy = RetryPolicy()
    clock.advance(policy.deadline + policy.attempt_timeout + 11)


def paused_past_its_lease(
    call: Callable[[], object], arrived: threading.Event, clock: ManualClock
) -> Background:
    """Start `call` (the first caller) in a thread; once its request has `arrived` at
    the gate that holds it, move the clock past its lease: when it goes on, its lease
    has lapsed, and another caller may have taken the operation over."""
    caller = Background(call)
    assert arrived.wait(BOUND), "the caller's request never arrived at the gate"
    past_the_lease(clock)
    return caller


class GatedFront(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """A script in front of the reference server: it numbers the payment requests
    (POSTs: 1, 2, ...; any other request is turn 0) and asks `before` what a request
    meets on its way in (an answer of its own, or None to reach the server) and
    `after` what its caller gets instead of the server's answer (the answer itself, by
    default). Either may hold the caller at `gate` (`hold`) until the test opens it,
    having seen `arrived`; the async client's requests are held in a worker thread,
    never on the event loop."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.arrived = threading.Event()
        self.gate = threading.Event()
        self.posts = 0
        self.lock = threading.Lock()

    def before(self, turn: int, request: httpx.Request) -> httpx.Response | None:
        return None

    def after(self, turn: int, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        return response

    def hold(self) -> None:
        self.arrived.set()
        assert self.gate.wait(BOUND), "the test never opened the gate"

    def _turn(self, request: httpx.Request) -> int:
        if request.method != "POST":
            return 0
        with self.lock:
            self.posts += 1
            return self.posts

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        answer = self.before(turn, request)
        if answer is not None:
            return answer
        response = self.inner.handle_request(request)
        response.read()
        return self.after(turn, request, response)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        turn = self._turn(request)
        answer = await asyncio.to_thread(self.before, turn, request)
        if answer is not None:
            return answer
        response = await self.inner.handle_async_request(request)
        await response.aread()
        return await asyncio.to_thread(self.after, turn, request, response)


@dataclass(frozen=True)
class SharedOperation:
    """The one operation both callers make: the same payment under one operation id,
    each caller through a client of its own on one store file and one clock, under one
    profile, with the server's time not learnt (the clock is the test's alone)."""

    store: Path
    payment: Mapping[str, Any]
    profile: str = "ietf"
    clock: ManualClock = field(default_factory=ManualClock)
    operation_id: str = "op"

    def _options(self, transport: object, overrides: dict[str, Any]) -> dict[str, Any]:
        options: dict[str, Any] = {
            "store": self.store,
            "clock": self.clock,
            "transport": transport,
            "base_url": "http://psp.test",
            "headers": TOKEN,
            "server_clock": False,
            "profile": self.profile,
        }
        return {**options, **overrides}

    def client(self, transport: httpx.BaseTransport, **overrides: Any) -> Client:
        return Client(**self._options(transport, overrides))

    def async_client(self, transport: httpx.AsyncBaseTransport, **overrides: Any) -> AsyncClient:
        return AsyncClient(**self._options(transport, overrides))

    def pay(self, client: Client) -> Any:
        return client.post("/v1/payments", json=dict(self.payment), operation_id=self.operation_id)

    async def pay_async(self, client: AsyncClient) -> Any:
        return await client.post(
            "/v1/payments", json=dict(self.payment), operation_id=self.operation_id
        )

    def paid_by_a_client(self, front: GatedFront) -> object:
        """The payment made by a `Client` of its own through `front`: what it was told."""
        with self.client(front) as client:
            return self.pay(client)

    def paid_by_an_async_client(self, front: GatedFront) -> object:
        """The payment made by an `AsyncClient` of its own, on a loop of its own."""

        async def run() -> object:
            async with self.async_client(front) as client:
                return await self.pay_async(client)

        return asyncio.run(run())

    def record(self) -> OperationRecord | None:
        """The operation as the store keeps it now."""
        store = SQLiteStore(self.store)
        try:
            return store.get(self.operation_id)
        finally:
            store.close()

    def left_unsettled(self) -> OperationRecord:
        """The operation as the store keeps it, which must be unsettled and maybe
        applied: indeterminate, and not finished."""
        record = self.record()
        assert record is not None
        assert (record.state, record.maybe_applied, record.finished_at) == (
            State.INDETERMINATE,
            True,
            None,
        )
        return record

    def resumed_as_one_payment(self, server: ReferenceServer) -> None:
        """Resumed under its key, the operation is settled as the payment the server
        made, which the server replays: its ledger holds one payment."""
        with self.client(server.transport) as client:
            (resumed,) = client.resume()
        assert (resumed.state, resumed.status_code) == (State.SUCCEEDED, 201)
        assert len(server.ledger()) == 1


#: the first caller's call: `SharedOperation.paid_by_a_client`, or `paid_by_an_async_client`
FirstCall = Callable[[SharedOperation, GatedFront], object]
