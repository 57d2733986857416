"""Histories found by attacking the client's cost cut (issue 17): writes made on the
event loop left BUFFERED's write-ahead log unbounded and flushed a restarted log on the
loop under INTENT (taken out: every async store call runs in a worker thread); and
`finish` answering a record built by hand instead of the row."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, ManualClock, State
from idemclient._store import Progress, new_owner
from idemclient.store import Durability, SQLiteStore

from ..store.conftest import NOW, make_intent

PAYMENT = {"amount": 1999, "currency": "EUR"}


class Answering(httpx.AsyncBaseTransport):
    """Answers every request 200, at once."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "pay_1"})


def wal_pages(path: Path) -> int:
    return os.path.getsize(f"{path}-wal") // 4096


# -- the write-ahead log is never checkpointed under BUFFERED ----------------------------


#: a checkpoint threshold small enough to cross in a few dozen operations
THRESHOLD = 40
#: operations made: about four WAL pages each, several thresholds' worth
OPERATIONS = 120


@pytest.mark.anyio
async def test_buffered_async_writes_keep_the_wal_bounded(tmp_path: Path) -> None:
    # History: an async client under BUFFERED, nothing contending. Both the intent and
    # the outcome are written on the loop, each with the autocheckpoint switched off;
    # the next write "in a worker thread" that would run the checkpoint never comes.
    # The same run through a worker thread (or under INTENT, whose intent is flushed
    # in one) keeps the WAL near the threshold.
    path = tmp_path / "ops.db"
    with SQLiteStore(path, durability=Durability.BUFFERED) as store:
        # The threshold the store restores after each call made on the loop.
        store._conn.execute(f"PRAGMA wal_autocheckpoint = {THRESHOLD}")
        store._autocheckpoint = THRESHOLD
        async with AsyncClient(
            store=store, clock=ManualClock(), transport=Answering(), base_url="http://psp.test"
        ) as client:
            for _ in range(OPERATIONS):
                outcome = await client.post("/v1/payments", json=PAYMENT)
                assert outcome.state is State.SUCCEEDED
        pages = wal_pages(path)
    # A checkpoint runs once the log passes the threshold: it never gets much past it.
    assert pages <= 2 * THRESHOLD, f"the WAL holds {pages} pages"


def test_the_same_writes_in_a_worker_thread_keep_the_wal_bounded(tmp_path: Path) -> None:
    # The control: the writes of the test above, made as a worker thread makes them
    # (plain calls), stay near the threshold, so the test above fails for the loop's
    # writes and not for the pages an operation takes.
    path = tmp_path / "ops.db"
    with SQLiteStore(path, durability=Durability.BUFFERED) as store:
        store._conn.execute(f"PRAGMA wal_autocheckpoint = {THRESHOLD}")
        for n in range(OPERATIONS):
            intent = make_intent(f"op-{n}", f"key-{n}")
            owner = new_owner()
            begun = store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
            store.finish(
                intent.operation_id,
                owner=owner,
                state=State.SUCCEEDED,
                progress=Progress(1, False, "HTTP 200", None, NOW + 1),
                known=begun.record,
            )
        assert wal_pages(path) <= 2 * THRESHOLD


# -- a write on the loop flushes the WAL's header ----------------------------------------


class Watching(SQLiteStore):
    """Notes, for each outcome written on the event loop's thread, whether that write
    started the write-ahead log afresh (its header's checkpoint sequence and salt
    changed): SQLite writes a new header and flushes it (fdatasync) before the
    commit's frames, whatever `synchronous` says, so that write waited for the disk."""

    loop_thread: int | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.restarts_on_the_loop = 0
        self.writes_on_the_loop = 0

    def _header(self) -> bytes:
        try:
            with open(f"{self.path}-wal", "rb") as wal:
                return wal.read(24)[12:24]
        except FileNotFoundError:
            return b""

    def finish(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        if threading.get_ident() != self.loop_thread:
            return super().finish(*args, **kwargs)  # type: ignore[arg-type]
        before = self._header()
        result = super().finish(*args, **kwargs)  # type: ignore[arg-type]
        self.writes_on_the_loop += 1
        self.restarts_on_the_loop += self._header() != before
        return result


@pytest.mark.anyio
async def test_an_outcome_written_on_the_loop_never_waits_for_the_disk(tmp_path: Path) -> None:
    # History: an async client under INTENT (the default), nothing contending. Every
    # intent is written, flushed, in a worker thread, whose commit runs SQLite's
    # automatic checkpoint once the log passes its threshold; every outcome is written
    # on the loop. After a checkpoint has copied the whole log back, the next writer
    # rewinds the log and flushes its header: that is the loop's outcome write.
    # Measured with strace on 40 operations (threshold 20): 13 fdatasync calls on the
    # WAL from the loop's thread.
    path = tmp_path / "ops.db"
    with Watching(path, durability=Durability.INTENT) as store:
        store.loop_thread = threading.get_ident()
        store._conn.execute(f"PRAGMA wal_autocheckpoint = {THRESHOLD}")
        store._autocheckpoint = THRESHOLD
        async with AsyncClient(
            store=store, clock=ManualClock(), transport=Answering(), base_url="http://psp.test"
        ) as client:
            for _ in range(OPERATIONS):
                outcome = await client.post("/v1/payments", json=PAYMENT)
                assert outcome.state is State.SUCCEEDED
    # Every store call of an async client runs in a worker thread: none on the loop.
    assert store.writes_on_the_loop == 0
    assert store.restarts_on_the_loop == 0
