"""No store I/O on the event loop: every store call the async paths make (opening the
store, starting it, sending, resuming, a batch, closing) runs in a worker thread.

The store here is the real SQLite store behind a wrapper that records the thread of
every call and fails any call made from a thread running an event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import idemclient._transport
from idemclient import AsyncClient, ManualClock, State, aresume, wrap
from idemclient._store._open import open_store
from idemclient.batch import Batch, asubmit
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

from .fakes import OK, FakePSP, error

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


def _on_an_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Calls:
    """Every store call (and store opening) with its thread; those made on a loop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []
        self.on_loop: list[str] = []

    def check(self, name: str) -> None:
        with self.lock:
            self.seen.append((name, threading.get_ident()))
            if _on_an_event_loop():
                self.on_loop.append(name)
        if _on_an_event_loop():
            raise AssertionError(f"store.{name}() called on the event loop's thread")


class ThreadCheckingStore:
    """A store whose every method call is checked by `calls` first."""

    def __init__(self, inner: Any, calls: Calls) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.check(name)
            return attribute(*args, **kwargs)

        return call


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    calls = Calls()

    def checked_open(spec: Any, **options: Any) -> Any:
        calls.check("open")
        return ThreadCheckingStore(open_store(spec, **options), calls)

    monkeypatch.setattr(idemclient._transport, "open_store", checked_open)
    yield calls
    assert calls.on_loop == []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _names(calls: Calls) -> set[str]:
    return {name for name, _ in calls.seen}


@pytest.mark.anyio
async def test_an_async_client_never_calls_its_store_on_the_loop(
    calls: Calls, tmp_path: Path
) -> None:
    psp = FakePSP()
    psp.script = [error(httpx.ConnectError), OK]
    client = AsyncClient(
        store=tmp_path / "s.db",
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    )
    assert calls.seen == []  # built on the loop: nothing opened yet
    async with client:
        assert {"open", "advance_clock", "reap"} <= _names(calls)
        outcome = await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert outcome.state is State.SUCCEEDED
        stored = await client.aoperation("op")
        assert stored is not None
        assert stored.state is State.SUCCEEDED
        assert await client.resume() == []
    assert "close" in _names(calls)
    assert {"begin", "finish", "get", "unfinished"} <= _names(calls)


def test_an_async_client_built_before_the_loop_opens_its_store_at_first_use(
    calls: Calls, tmp_path: Path
) -> None:
    psp = FakePSP()
    psp.script = [OK]
    client = AsyncClient(
        store=tmp_path / "s.db",
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    )
    assert calls.seen == []

    async def pay() -> State:
        outcome = await client.post("/v1/payments", json=PAYMENT)
        await client.aclose()
        return outcome.state

    assert asyncio.run(pay()) is State.SUCCEEDED
    assert {"open", "reap", "begin", "close"} <= _names(calls)


@pytest.mark.anyio
async def test_a_wrapped_httpx_async_client_and_aresume_stay_off_the_loop(
    calls: Calls, tmp_path: Path
) -> None:
    psp = FakePSP()
    psp.script = [error(httpx.ConnectError), OK]
    http = wrap(
        httpx.AsyncClient(transport=psp.async_transport(), base_url="http://psp.test"),
        store=tmp_path / "s.db",
        clock=ManualClock(),
    )
    assert calls.seen == []
    async with http:
        response = await http.post("/v1/payments", json=PAYMENT)
        assert response.status_code == 201
        assert await aresume(http) == []
    assert {"open", "begin", "unfinished", "close"} <= _names(calls)


@pytest.mark.anyio
async def test_the_async_batch_stays_off_the_loop(calls: Calls, tmp_path: Path) -> None:
    clock = ManualClock()
    batch = Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(6)
        ]
    )
    with ReferenceServer(clock=clock) as server:
        async with AsyncClient(
            store=tmp_path / "s.db",
            clock=clock,
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": "Bearer payroll-ops"},
        ) as client:
            report = await asubmit(batch, client, concurrency=3)
    assert [row.state for row in report.rows] == ["succeeded"] * 6
    assert {"find", "register", "begin", "finish"} <= _names(calls)


@pytest.mark.anyio
async def test_the_synchronous_operation_of_an_async_client_still_answers_and_warns(
    tmp_path: Path,
) -> None:
    # Code written before `aoperation` keeps working: the stored outcome, or None for an
    # operation the store never saw, with a warning that names the replacement.
    psp = FakePSP()
    psp.script = [OK]
    async with AsyncClient(
        store=tmp_path / "s.db",
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    ) as client:
        await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        with pytest.warns(DeprecationWarning, match="aoperation"):
            stored = client.operation("op")
        with pytest.warns(DeprecationWarning, match="aoperation"):
            unknown = client.operation("never-issued")
    assert stored is not None
    assert stored.state is State.SUCCEEDED
    assert unknown is None


class WatchedLock:
    """A store's lock that notes the threads that take it, and fails if one of them is
    running an event loop."""

    def __init__(self, inner: Any, calls: Calls, name: str) -> None:
        self._inner = inner
        self._calls = calls
        self._name = name

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        self._calls.check(self._name)
        return bool(self._inner.acquire(*args, **kwargs))

    def release(self) -> None:
        self._inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class LockWatchedStore(SQLiteStore):
    """The SQLite store, whose every connection is used, and every commit (and fsync)
    made, under `_lock`; intents queue for their group commit under `_queue_lock`."""

    def __init__(self, path: Path, calls: Calls) -> None:
        super().__init__(path)
        self._lock = WatchedLock(self._lock, calls, "lock")  # type: ignore[assignment]
        self._queue_lock = WatchedLock(self._queue_lock, calls, "queue lock")  # type: ignore[assignment]


@pytest.mark.anyio
async def test_no_store_lock_is_taken_and_no_commit_made_on_the_loop(tmp_path: Path) -> None:
    # A lock taken on the loop's thread blocks every task of the loop while a commit (and
    # its fsync) runs in a store thread. Every path: the intent, an attempt, the final
    # answer's write (queued behind the answer), a stored answer given back while that
    # write may still be queued, a read, resume, the next operation, the close.
    calls = Calls()
    psp = FakePSP()
    psp.script = [error(httpx.ConnectError), OK, OK]
    store = LockWatchedStore(tmp_path / "s.db", calls)
    client = AsyncClient(
        store=store,
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    )
    async with client:
        first = await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        again = await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert again.from_store
        assert again.key == first.key
        stored = await client.aoperation("op")
        assert stored is not None
        assert stored.state is State.SUCCEEDED
        assert await client.resume() == []
        await client.post("/v1/payments", json={**PAYMENT, "reference": "order-2"})
    names = _names(calls)
    # The queue lock is taken only by intents that meet at the connection (a group
    # commit): one caller at a time admits its intent under the store's lock alone.
    assert "lock" in names
    assert calls.on_loop == []
    assert len(psp.requests) == 3
