"""Attacks on the async client's final answer written behind the answer: a process that
ends normally must not leave behind, in flight, an operation whose caller was told it
succeeded.

A `multiprocessing` child started by fork ends with `os._exit` once its target
returns: the interpreter's exit handlers (`atexit`) never run there, so a write still
queued in a store thread is cut off with the process, unless the child's own exit
(multiprocessing's finalizers) waits for it. Against the reference server in the child,
on a store file both processes read.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from idemclient import AsyncClient, State
from idemclient._worker import Workers
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

BOUND = 60.0  # a bound on a test gone wrong, never a wait the test relies on
#: How long the store takes to write a final answer (a slow disk's fsync): far longer
#: than a child needs to end once its target returns, far shorter than the 30 s the
#: exit waits for queued writes. The one real wait here: a write that takes time is
#: the case under test, and only a process that waits for it sees it land.
SLOW_WRITE = 1.0


class SlowDisk(SQLiteStore):
    """A SQLite store whose write of a final answer takes `SLOW_WRITE` seconds."""

    def finish(self, operation_id: str, **kwargs: Any) -> Any:
        if kwargs["state"].finished:
            threading.Event().wait(SLOW_WRITE)
        return super().finish(operation_id, **kwargs)


def _pay_in_a_child(path: str) -> None:
    server = ReferenceServer()

    async def pay() -> State:
        client = AsyncClient(
            store=SlowDisk(path),
            base_url="http://psp.test",
            transport=server.transport,
            headers={"Authorization": "Bearer sk_test_secret"},
            server_clock=False,
        )
        outcome = await client.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": "order-1"},
            operation_id="order-1",
        )
        return outcome.state

    told = asyncio.run(pay())
    # The caller was told this; the process then ends as multiprocessing ends it.
    os.write(1, f"told {told.value}\n".encode())
    if told is not State.SUCCEEDED:
        raise SystemExit(3)


def test_a_multiprocessing_child_that_paid_leaves_its_answer_written(tmp_path: Path) -> None:
    # The child's caller was told the payment succeeded, and the child ended normally:
    # the store must say so too, not "in flight" (maybe applied) for ever, to be
    # resumed or looked up as if the process had crashed.
    path = str(tmp_path / "s.db")
    SQLiteStore(path).close()  # the schema, before the child opens it
    child = multiprocessing.get_context("fork").Process(target=_pay_in_a_child, args=(path,))
    child.start()
    child.join(BOUND)
    assert child.exitcode == 0
    store = SQLiteStore(path)
    record = store.get("order-1")
    store.close()
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)


def test_a_client_closed_in_another_event_loop_waits_for_its_answers_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One AsyncClient, two event loops (asyncio.run twice: a script's steps, a test
    # suite's fixtures): it pays in the first, and is closed in the second while the
    # answer's write, queued in the first loop's store threads, is still running.
    # aclose() waits for the queued writes: all of them, or it closes the store under
    # the write, which then fails, and the operation stays in flight (maybe applied)
    # though its caller was told it succeeded.
    def slow_finish(store: SQLiteStore, operation_id: str, **kwargs: Any) -> Any:
        if kwargs["state"].finished:
            threading.Event().wait(SLOW_WRITE)
        return written(store, operation_id, **kwargs)

    written = SQLiteStore.finish
    monkeypatch.setattr(SQLiteStore, "finish", slow_finish)
    server = ReferenceServer()
    client = AsyncClient(
        store=tmp_path / "s.db",
        base_url="http://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer sk_test_secret"},
        server_clock=False,
    )

    async def pay() -> State:
        outcome = await client.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": "order-1"},
            operation_id="order-1",
        )
        return outcome.state

    assert asyncio.run(pay()) is State.SUCCEEDED
    asyncio.run(client.aclose())
    monkeypatch.undo()
    store = SQLiteStore(tmp_path / "s.db")
    record = store.get("order-1")
    store.close()
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)
    assert len(server.ledger()) == 1


def test_waiting_for_the_queued_writes_is_not_held_up_by_writes_queued_since() -> None:
    # aclose() in one loop waits for the answers' writes another loop queued; that loop
    # may go on paying (a server's loop, busy). The wait is for the writes queued when
    # it began, not until the queue is empty, which under load it never is.
    bound = 10.0  # a bound on a test gone wrong, never a wait it relies on
    workers = Workers(max_threads=2)
    first, later = threading.Event(), threading.Event()
    lost: list[BaseException] = []
    workers.later(lambda: first.wait(bound), lost.append)
    waited: list[bool] = []
    waiting = threading.Thread(target=lambda: waited.append(workers.wait_written(bound)))
    waiting.start()
    while not workers._waiters:  # the wait has begun: what it waits for is known
        threading.Event().wait(0.001)
    workers.later(lambda: later.wait(bound), lost.append)  # queued since
    first.set()
    waiting.join(bound)
    done = not waiting.is_alive()
    later.set()
    assert done  # not held up by the write queued since
    assert waited == [True]
    assert lost == []
