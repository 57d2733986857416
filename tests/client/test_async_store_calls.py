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
    ("durability", "on_the_loop"),
    [
        (Durability.INTENT, True),  # the outcome's commit is not flushed: no waiting
        (Durability.BUFFERED, True),
        (Durability.FULL, False),  # flushed: it waits for the disk, in a worker thread
    ],
)
async def test_the_outcome_is_written_on_the_loop_only_when_nothing_waits(
    tmp_path: Path, durability: Durability, on_the_loop: bool
) -> None:
    loop_thread = threading.get_ident()
    with Recording(tmp_path / "ops.db", durability=durability) as store:
        async with make(store, Answering()) as client:
            outcome = await client.post("/v1/payments", json=PAYMENT)
        assert outcome.state is State.SUCCEEDED
        assert store.get(outcome.operation_id).state is State.SUCCEEDED  # type: ignore[union-attr]
        # The intent always waits for its fsync, or for the group commit: never here.
        assert store.threads["begin"]
        assert loop_thread not in store.threads["begin"]
        assert (store.threads["finish"] == [loop_thread]) is on_the_loop
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
