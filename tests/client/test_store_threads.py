"""The async client's store calls under asyncio run in threads of the client's own
(`idemclient._worker`): attacked from outside, through the public client, against the
reference server, with its ledger counted.

- a process forked after its parent used an `AsyncClient` (a worker pool of a web
  server that preloads the app, `multiprocessing` with fork) pays as the parent does:
  the parent's store threads do not exist in the child, and a call handed to one of
  them would wait forever (its intent never written, its payment never sent);
- a call cancelled twice, the second time while the write that leaves its record true
  waits for a thread, still makes that write.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from idemclient import AsyncClient, State
from idemclient.hooks import Hooks, StoreEvent
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 60.0  # a bound on a test gone wrong, never a wait the test relies on
#: the store threads of one event loop of the async client (`idemclient._worker`)
THREADS = 40
PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR"}

#: the parent pays, forks, and the child pays under its own key (each bounded)
FORKED = textwrap.dedent(
    """
    import asyncio, os, sys
    from idemclient import AsyncClient, State
    from idemclient.testing import ReferenceServer

    server = ReferenceServer()
    PAYMENT = {"amount": 1999, "currency": "EUR"}

    async def pay(store, operation):
        async with AsyncClient(
            base_url="http://psp.test",
            transport=server.transport,
            store=store,
            headers={"Authorization": "Bearer sk_test_secret"},
        ) as client:
            outcome = await asyncio.wait_for(
                client.post(
                    "/v1/payments",
                    json={**PAYMENT, "reference": operation},
                    operation_id=operation,
                ),
                10,
            )
        return outcome.state

    folder = sys.argv[1]
    assert asyncio.run(pay(folder + "/parent.db", "order-1")) is State.SUCCEEDED
    child = os.fork()
    if child == 0:
        try:
            state = asyncio.run(pay(folder + "/child.db", "order-2"))
            paid = len(server.ledger())
            print("child", state.value, paid, flush=True)
        except BaseException as error:
            print("child", type(error).__name__, error, flush=True)
        os._exit(0)
    os.waitpid(child, 0)
    print("parent", len(server.ledger()), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")
def test_a_process_forked_after_its_parent_paid_pays_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the child paid once (its ledger: the parent's payment and its own); the parent's
    # ledger holds its own only
    assert lines == ["child succeeded 2", "parent 1"], (lines, done.stderr)


class _Held(SQLiteStore):
    """A SQLite store whose `begin` (armed) waits, after its commit, until released: a
    store call that is running when the test wants it to."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed = False
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        begun = super().begin(*args, **kwargs)
        if self.armed:
            self.entered.release()
            assert self.release.wait(BOUND)
        return begun


def test_a_call_cancelled_again_while_it_cleans_up_still_gives_its_lease_back(
    tmp_path: Path,
) -> None:
    # A call is cancelled as its intent commits (nothing sent), and cancelled once more
    # while the write that gives its lease back waits for a thread (every store thread
    # busy with other calls): a second cancellation (a timeout inside a task group, a
    # server shutting down) must not drop that write. Dropped, the operation stayed in
    # flight under a lease nobody holds, taken over later as "maybe applied": a
    # payment never sent, held back or sent to reconciliation.
    server = ReferenceServer()
    options: dict[str, Any] = {
        "base_url": "http://psp.test",
        "transport": server.transport,
        "headers": {"Authorization": "Bearer sk_test_secret"},
        "server_clock": False,
    }
    paying = _Held(tmp_path / "paying.db")
    busy = _Held(tmp_path / "busy.db")
    task: asyncio.Task[Any] | None = None
    cancelled_again: list[str] = []

    def on_store(event: StoreEvent) -> None:
        # Told on the event loop as the cancelled begin returns, just before the write
        # that gives the lease back is handed to a thread: cancelled again there.
        if event.call == "begin" and task is not None and not cancelled_again:
            cancelled_again.append(event.call)
            task.cancel()

    async def main() -> None:
        nonlocal task
        async with (
            AsyncClient(store=paying, hooks=Hooks(on_store=on_store), **options) as client,
            AsyncClient(store=busy, **options) as other,
        ):
            paying.armed = True
            task = asyncio.ensure_future(
                client.post(
                    "/v1/payments", json={**PAYMENT, "reference": "r-1"}, operation_id="o-1"
                )
            )
            assert await asyncio.to_thread(paying.entered.acquire, True, BOUND)
            busy.armed = True
            # more calls than threads: every thread busy, the rest waiting for one
            others = [
                asyncio.ensure_future(
                    other.post(
                        "/v1/payments",
                        json={**PAYMENT, "reference": f"b-{n}"},
                        operation_id=f"b-{n}",
                    )
                )
                for n in range(THREADS + 2)
            ]
            for _ in range(THREADS - 1):  # the ones that got a thread, beside the begin
                assert await asyncio.to_thread(busy.entered.acquire, True, BOUND)
            for _ in range(20):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.sleep(0)
            paying.release.set()
            for _ in range(int(BOUND / 0.001)):  # until cancelled again, the write queued
                if cancelled_again:
                    break
                await asyncio.sleep(0.001)
            for _ in range(20):  # the second cancellation reaches the waiting call
                await asyncio.sleep(0)
            busy.release.set()  # threads free again: the write may run now
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), BOUND)
            await asyncio.wait_for(asyncio.gather(*others), BOUND)

    asyncio.run(main())
    assert cancelled_again == ["begin"]
    record = SQLiteStore(tmp_path / "paying.db").get("o-1")
    assert record is not None
    assert (record.state, record.maybe_applied, record.lease_owner) == (State.NOT_SENT, False, None)
    assert len(server.ledger()) == THREADS + 2  # the others' payments; none of o-1
