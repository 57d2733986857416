"""Where an async client's store calls run: the outcome's write on the event loop when
nothing can make it wait, and in a worker thread whenever something could (the store's
lock, another connection holding the file, a flushed commit). The event loop is never
blocked by the store."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from idemclient import AsyncClient, ManualClock, State
from idemclient._fingerprint import fingerprint
from idemclient._store import Intent, WouldWait
from idemclient.store import Durability, SQLiteStore

pytestmark = pytest.mark.anyio
PAYMENT = {"amount": 1999, "currency": "EUR"}
#: how many turns of the event loop a ticker waits before it lets the store go
TICKS = 20


class Recording(SQLiteStore):
    """A SQLite store that notes in which thread each write was made."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads: dict[str, list[int]] = {"begin": [], "finish": []}

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        self.threads["begin"].append(threading.get_ident())
        return super().begin(*args, **kwargs)

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        self.threads["finish"].append(threading.get_ident())
        return super().finish(*args, **kwargs)


class Answering(httpx.AsyncBaseTransport):
    """Answers 200; `during` runs while the request is on the wire (on the loop)."""

    def __init__(self, during: Callable[[], None] = lambda: None) -> None:
        self.during = during

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.during()
        return httpx.Response(200, json={"id": "pay_1"})


def make(store: SQLiteStore, transport: httpx.AsyncBaseTransport) -> AsyncClient:
    return AsyncClient(
        store=store, clock=ManualClock(), transport=transport, base_url="http://psp.test"
    )


@pytest.mark.parametrize(
    ("durability", "intent_on_the_loop", "outcome_on_the_loop"),
    [
        # The intent's commit is flushed: it waits for the disk (or for the group
        # commit), in a worker thread; the outcome's is not.
        (Durability.INTENT, False, True),
        (Durability.BUFFERED, True, True),  # nothing flushed: no waiting
        (Durability.FULL, False, False),  # everything flushed
    ],
)
async def test_writes_are_made_on_the_loop_only_when_nothing_waits(
    tmp_path: Path, durability: Durability, intent_on_the_loop: bool, outcome_on_the_loop: bool
) -> None:
    loop_thread = threading.get_ident()
    with Recording(tmp_path / "ops.db", durability=durability) as store:
        async with make(store, Answering()) as client:
            outcome = await client.post("/v1/payments", json=PAYMENT)
        assert outcome.state is State.SUCCEEDED
        assert store.get(outcome.operation_id).state is State.SUCCEEDED  # type: ignore[union-attr]
        for write, on_the_loop in (("begin", intent_on_the_loop), ("finish", outcome_on_the_loop)):
            # Made once: on the loop, or in a worker thread without being tried here.
            made_in = store.threads[write]
            assert made_in == [loop_thread] if on_the_loop else loop_thread not in made_in
        # What the store is told not to do while on the loop is undone after.
        conn = store._conn
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000


async def test_a_store_busy_in_another_thread_does_not_hold_the_loop(tmp_path: Path) -> None:
    # While the request is on the wire, another thread takes the store's lock (as a
    # thread waiting on an fsync holds it) and keeps it until the loop has turned
    # TICKS times: the outcome's write must wait in a worker thread, not on the loop.
    held, release = threading.Event(), threading.Event()
    released_by_ticker = False

    def hold(store: SQLiteStore) -> None:
        with store._lock:
            held.set()
            release.wait(timeout=3)

    with Recording(tmp_path / "ops.db") as store:
        taken = anyio.Event()

        def take_the_lock() -> None:
            threading.Thread(target=hold, args=(store,), daemon=True).start()
            held.wait(timeout=10)
            taken.set()

        async def ticker() -> None:
            nonlocal released_by_ticker
            await taken.wait()
            for _ in range(TICKS):
                await anyio.sleep(0)
            released_by_ticker = not release.is_set()
            release.set()

        async with (
            make(store, Answering(take_the_lock)) as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(ticker)
            outcome = await client.post("/v1/payments", json=PAYMENT)
        assert released_by_ticker
        assert outcome.state is State.SUCCEEDED
        assert threading.get_ident() not in store.threads["finish"]


async def test_another_process_holding_the_file_does_not_hold_the_loop(
    tmp_path: Path,
) -> None:
    # Another connection (as another process would) holds the file's write lock while
    # the answer arrives. SQLite is told not to wait on the loop: the write waits in a
    # worker thread, and is made once the other lets go.
    path = tmp_path / "ops.db"
    other = sqlite3.connect(path, isolation_level=None)
    finished_before_release = False
    stalled = 0.0
    locked = anyio.Event()

    locked_at: list[float] = []

    def lock_the_file() -> None:
        other.execute("BEGIN IMMEDIATE")
        locked_at.append(time.monotonic())
        locked.set()

    with Recording(path, busy_timeout=5.0) as store:

        async def ticker(done: anyio.Event) -> None:
            nonlocal finished_before_release, stalled
            await locked.wait()
            for _ in range(TICKS):
                await anyio.sleep(0)
            # A loop held by SQLite's wait for the file would turn again only after
            # the busy timeout (5 s); a free one turns TICKS times in milliseconds.
            stalled = time.monotonic() - locked_at[0]
            finished_before_release = done.is_set()
            other.execute("ROLLBACK")

        async with make(store, Answering(lock_the_file)) as client:
            done = anyio.Event()
            async with anyio.create_task_group() as group:
                group.start_soon(ticker, done)
                outcome = await client.post("/v1/payments", json=PAYMENT)
                done.set()
        other.close()
        assert stalled < 2.5
        assert not finished_before_release
        assert outcome.state is State.SUCCEEDED
        assert store.get(outcome.operation_id).state is State.SUCCEEDED  # type: ignore[union-attr]
        assert threading.get_ident() not in store.threads["finish"][-1:]
        assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5_000


def test_a_flushed_write_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # Whichever write asks for it: a commit that would be flushed waits for the disk.
    with SQLiteStore(tmp_path / "ops.db", durability=Durability.INTENT) as store:
        intent = Intent(
            operation_id="op-1",
            key="key-1",
            key_given=True,
            method="POST",
            url="http://psp.test/v1/payments",
            headers=(),
            body=b"{}",
            fingerprint=fingerprint("POST", httpx.URL("http://psp.test/v1/payments"), b"{}"),
        )
        store.register([intent], now=1.0)
        with pytest.raises(WouldWait):
            store.call_without_waiting(store.reopen, intent=intent, evidence="moved", now=2.0)
        assert store.get("op-1").evidence == ""  # type: ignore[union-attr]
        assert not store._lock._is_owned()  # type: ignore[attr-defined]


async def test_an_operation_found_again_on_the_loop_is_answered_from_the_store(
    tmp_path: Path,
) -> None:
    # `BUFFERED`: the intent's write is made on the loop, and so is finding the
    # operation again (a transaction of its own): the stored answer, nothing sent.
    sent: list[httpx.Request] = []
    loop_thread = threading.get_ident()
    with Recording(tmp_path / "ops.db", durability=Durability.BUFFERED) as store:
        async with make(
            store, Answering(lambda: sent.append(httpx.Request("POST", "/")))
        ) as client:
            first = await client.post("/v1/payments", json=PAYMENT, operation_id="order-7")
            again = await client.post("/v1/payments", json=PAYMENT, operation_id="order-7")
        assert len(sent) == 1
        assert again.from_store
        assert (again.key, again.state) == (first.key, State.SUCCEEDED)
        assert store.threads["begin"] == [loop_thread, loop_thread]
