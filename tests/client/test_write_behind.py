"""The async client writes a final answer behind it: the caller has its outcome without
waiting for a store thread, and nothing that follows is told less than if it had waited.

Through `AsyncClient`, against the reference server in-process, with the ledger counted:

- the caller gets its outcome while the answer's write is still held in its thread;
- the next operation under the same id in this process, and a read of it, wait for that
  write (they never see the operation in flight and send it again);
- a write that fails is logged at once and raised by the next operation of the client
  (before it records or sends anything), naming the operation; never by `aclose`;
- `aclose` waits for the queued writes; so does the interpreter's exit when the loop
  ended without `aclose`;
- a process killed before the write ran leaves the operation in flight, and resuming it
  pays once (the server replays it under its key).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, State
from idemclient.errors import StoreError
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on
PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR"}
TOKEN = {"Authorization": "Bearer sk_test_secret"}


class HeldStore(SQLiteStore):
    """A SQLite store whose write of a final answer (armed) waits in its thread until
    released, or fails; every other call made meanwhile is noted."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = False
        self.fail = 0  # how many final answers' writes fail, from the next
        self.held = threading.Event()
        self.release = threading.Event()
        self.during: list[str] = []  # calls that ran while the answer's write was held

    def finish(self, operation_id: str, **kwargs: Any) -> Any:
        if kwargs["state"].finished:
            if self.fail:
                self.fail -= 1
                raise StoreError(self.path, "disk I/O error")
            if self.hold:
                self.held.set()
                assert self.release.wait(BOUND)
                self.held.clear()
        return super().finish(operation_id, **kwargs)

    def _noted(self, name: str) -> None:
        if self.held.is_set():
            self.during.append(name)

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        self._noted("begin")
        return super().begin(*args, **kwargs)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self._noted("claim")
        return super().claim(*args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._noted("get")
        return super().get(*args, **kwargs)


class Counted(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The reference server's transport, counting the requests it is handed."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return await self.inner.handle_async_request(request)


def client_of(server: ReferenceServer, store: Any, transport: Any = None) -> AsyncClient:
    return AsyncClient(
        store=store,
        base_url="http://psp.test",
        transport=transport or server.transport,
        headers=TOKEN,
        server_clock=False,
    )


def pay(client: AsyncClient, operation: str) -> Any:
    return client.post(
        "/v1/payments", json={**PAYMENT, "reference": operation}, operation_id=operation
    )


def test_the_caller_has_its_outcome_while_the_answer_is_still_being_written(
    tmp_path: Path,
) -> None:
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        async with client_of(server, store) as client:
            store.hold = True
            # Awaited, the write would hold the caller until the test releases it.
            outcome = await asyncio.wait_for(pay(client, "o-1"), BOUND)
            assert outcome.state is State.SUCCEEDED
            assert await asyncio.to_thread(store.held.wait, BOUND)  # still held
            store.release.set()

    asyncio.run(main())
    record = SQLiteStore(tmp_path / "s.db").get("o-1")
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)
    assert len(server.ledger()) == 1


def test_the_next_call_under_the_same_operation_sees_the_answer_written(
    tmp_path: Path,
) -> None:
    # The same operation issued again (a user's double click, a retried web request)
    # as its first answer is being written: it must get the stored answer, never find
    # the operation in flight under a call that has ended and send it again.
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        async with client_of(server, store) as client:
            store.hold = True
            first = await asyncio.wait_for(pay(client, "o-1"), BOUND)
            assert await asyncio.to_thread(store.held.wait, BOUND)
            again = asyncio.ensure_future(pay(client, "o-1"))
            read = asyncio.ensure_future(client.aoperation("o-1"))
            # A real wait, the one way to give a call that does not wait for the write
            # the time to reach the store (in a thread of its own) while it is held.
            await asyncio.sleep(0.2)
            assert not again.done()
            assert not read.done()
            store.release.set()
            second = await asyncio.wait_for(again, BOUND)
            stored = await asyncio.wait_for(read, BOUND)
            assert store.during == []
            assert second.from_store
            assert second.key == first.key
            assert stored is not None
            assert stored.state is State.SUCCEEDED

    asyncio.run(main())
    assert len(server.ledger()) == 1


def test_a_sync_client_of_the_same_process_waits_for_the_queued_answer(tmp_path: Path) -> None:
    # The call whose answer is being written has ended, but its lease is still its own:
    # a sync client of the same process (another store object on the same file, which
    # the loop's queue does not order) must wait for the write, not take the operation
    # over as left behind by an ended call and send it again.
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldStore(tmp_path / "s.db")

    def pay_in_sync() -> Any:
        with Client(
            store=tmp_path / "s.db",
            base_url="http://psp.test",
            transport=counted,
            headers=TOKEN,
            server_clock=False,
        ) as client:
            return client.post(
                "/v1/payments", json={**PAYMENT, "reference": "o-1"}, operation_id="o-1"
            )

    async def main() -> None:
        async with client_of(server, store, counted) as client:
            store.hold = True
            first = await asyncio.wait_for(pay(client, "o-1"), BOUND)
            assert await asyncio.to_thread(store.held.wait, BOUND)
            paying = asyncio.ensure_future(asyncio.to_thread(pay_in_sync))
            # A real wait: the time a sync client that does not wait would need to take
            # the operation over and send it again.
            await asyncio.sleep(0.3)
            assert not paying.done()
            store.release.set()
            second = await asyncio.wait_for(paying, BOUND)
            assert second.from_store
            assert second.key == first.key

    asyncio.run(main())
    assert len(server.ledger()) == 1
    assert counted.sent == 1  # and no second request, even one the server replays


def test_a_write_that_failed_is_raised_by_the_next_operation_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        async with client_of(server, store) as client:
            store.fail = 1
            outcome = await pay(client, "o-1")
            assert outcome.state is State.SUCCEEDED  # the server's answer, told
            with pytest.raises(StoreError, match=r"'o-1' \(succeeded, HTTP 201\).*disk I/O"):
                await pay(client, "o-2")
            assert len(server.ledger()) == 1  # o-2: nothing recorded, nothing sent
            assert await client.aoperation("o-2") is None
            paid = await pay(client, "o-2")  # told once: the client goes on
            assert paid.state is State.SUCCEEDED

    with caplog.at_level(logging.ERROR, logger="idemclient"):
        asyncio.run(main())
    assert any(
        "'o-1'" in r.getMessage() and "not written" in r.getMessage() for r in caplog.records
    )
    record = SQLiteStore(tmp_path / "s.db").get("o-1")
    assert record is not None
    assert record.state is State.IN_FLIGHT
    assert len(server.ledger()) == 2


def test_aclose_waits_for_the_queued_writes_and_never_raises_for_one_that_failed(
    tmp_path: Path,
) -> None:
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        client = client_of(server, store)
        store.hold = True
        assert (await pay(client, "o-1")).state is State.SUCCEEDED
        assert await asyncio.to_thread(store.held.wait, BOUND)
        closing = asyncio.ensure_future(client.aclose())
        await asyncio.sleep(0.05)  # real: aclose must still be waiting for the write
        assert not closing.done()
        store.release.set()
        await asyncio.wait_for(closing, BOUND)
        stored = SQLiteStore(tmp_path / "s.db").get("o-1")
        assert stored is not None
        assert stored.state is State.SUCCEEDED

        # A failed one is logged, never raised there: in `async with`, the error would
        # stand for the outcome of the operation, as if it had not been sent.
        failing_store = HeldStore(tmp_path / "t.db")
        failing_store.fail = 1
        async with client_of(server, failing_store) as failing:
            paid = await pay(failing, "o-2")
        assert paid.state is State.SUCCEEDED

    asyncio.run(main())


#: pays with a store whose answer's write takes a while, and ends the loop without
#: `aclose`; `sys.argv[2]` == "kill": dies at once instead, the write never run
UNCLOSED = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from idemclient import AsyncClient
    from idemclient.store import SQLiteStore
    from idemclient.testing import ReferenceServer

    folder, how = sys.argv[1], sys.argv[2]

    class Slow(SQLiteStore):
        def finish(self, operation_id, **kwargs):
            if kwargs["state"].finished:
                # a real wait: the interpreter's exit must not cut it short
                time.sleep(0.5 if how == "exit" else 60)
            return super().finish(operation_id, **kwargs)

    server = ReferenceServer(db=folder + "/server.db")

    async def main():
        client = AsyncClient(
            store=Slow(folder + "/s.db"),
            base_url="http://psp.test",
            transport=server.transport,
            headers={"Authorization": "Bearer sk_test_secret"},
            server_clock=False,
        )
        outcome = await client.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": "o-1"},
            operation_id="o-1",
        )
        print(outcome.state.value, flush=True)

    asyncio.run(main())
    if how == "kill":
        os._exit(0)  # no exit handlers: the queued write never runs
    """
)


def _run(tmp_path: Path, how: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", UNCLOSED, str(tmp_path), how],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_interpreter_exit_writes_what_a_loop_ended_without_aclose_queued(
    tmp_path: Path,
) -> None:
    assert _run(tmp_path, "exit") == "succeeded"
    record = SQLiteStore(tmp_path / "s.db").get("o-1")
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)


def test_a_process_killed_before_its_queued_write_leaves_it_in_flight_and_pays_once(
    tmp_path: Path,
) -> None:
    assert _run(tmp_path, "kill") == "succeeded"
    record = SQLiteStore(tmp_path / "s.db").get("o-1")
    assert record is not None
    assert record.state is State.IN_FLIGHT  # maybe applied: never sent under a new key
    server = ReferenceServer(db=tmp_path / "server.db")

    async def main() -> None:
        async with client_of(server, tmp_path / "s.db") as client:
            resumed = await client.resume()
            assert [o.state for o in resumed] == [State.SUCCEEDED]
            assert resumed[0].key == record.key
            assert resumed[0].replayed

    asyncio.run(main())
    assert len(server.ledger()) == 1


def test_an_async_owner_paused_past_its_lease_is_told_what_another_finished(
    tmp_path: Path,
) -> None:
    # Its own final answer (a refusal in front of the server) comes after another
    # caller's success: queued behind it, the answer told would be the refusal while the
    # store keeps the success. Past its lease, the write is awaited, and the stored
    # success is the answer.
    from .test_ownership import GatedPSP, Step, client
    from .two_callers import Background, past_the_lease

    clock = ManualClock()
    late = Step(apply=False, status=403, gate=threading.Event())
    psp = GatedPSP(late, Step(apply=True, status=201))

    async def pay_a() -> Any:
        async with AsyncClient(
            store=tmp_path / "c.db",
            clock=clock,
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
        ) as a:
            return await a.post("/v1/payments", json=PAYMENT, operation_id="op")

    owner_a = Background(lambda: asyncio.run(pay_a()))
    assert late.arrived.wait(BOUND)
    past_the_lease(clock)
    with client(psp, tmp_path / "c.db", clock) as b:
        finished = b.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert late.gate is not None
    late.gate.set()
    owner_a.join()
    assert finished.state is State.SUCCEEDED
    assert owner_a.error is None, owner_a.error
    told = owner_a.result
    assert getattr(told, "state", None) is State.SUCCEEDED
    assert getattr(told, "from_store", None) is True
    assert getattr(told, "status_code", None) == 201
    assert sum(psp.effects.values()) == 1
