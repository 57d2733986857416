"""More attacks on the async client's final answer written behind the answer: other
clients of the same store file (another event loop, a closed loop's queue), a failed
queued write followed by resume, many tasks queueing at once.

Through `AsyncClient` and `Client`, against the reference server in-process (or a
scripted transport where two answers must differ), with the requests and the ledger
counted. A store whose write of the answer is held until released stands for a slow
disk; a few real waits give a caller that does not wait the time to do harm, each
said where it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, State
from idemclient.errors import StoreError
from idemclient.hooks import Hooks
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

from ..test_write_behind import BOUND, PAYMENT, Counted, HeldStore, client_of, pay
from ..two_callers import past_the_lease


def test_an_async_client_in_another_event_loop_waits_for_the_queued_answer(
    tmp_path: Path,
) -> None:
    # Two event loops (two threads, each its own asyncio.run) with a client each on one
    # store file: the second loop's queue does not order the first's write; the lease,
    # held until the write lands, must make it wait rather than send again.
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldStore(tmp_path / "s.db")
    results: dict[str, Any] = {}

    def other_loop() -> None:
        async def main() -> Any:
            async with client_of(server, tmp_path / "s.db", counted) as other:
                return await pay(other, "o-1")

        try:
            results["other"] = asyncio.run(main())
        except BaseException as error:  # told to the test
            results["error"] = error

    async def main() -> None:
        async with client_of(server, store, counted) as client:
            store.hold = True
            first = await asyncio.wait_for(pay(client, "o-1"), BOUND)
            assert await asyncio.to_thread(store.held.wait, BOUND)
            thread = threading.Thread(target=other_loop)
            thread.start()
            # A real wait: the time a client that does not wait would need to take the
            # operation over and send it again.
            await asyncio.sleep(0.3)
            assert thread.is_alive()
            store.release.set()
            await asyncio.to_thread(thread.join, BOUND)
            assert "error" not in results, results.get("error")
            second = results["other"]
            assert second.from_store
            assert second.key == first.key

    asyncio.run(main())
    assert len(server.ledger()) == 1
    assert counted.sent == 1


def test_a_failed_queued_write_then_resume_is_told_once_and_settles_under_its_key(
    tmp_path: Path,
) -> None:
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        async with client_of(server, store, counted) as client:
            store.fail = 1
            first = await pay(client, "o-1")
            assert first.state is State.SUCCEEDED
            with pytest.raises(StoreError, match=r"'o-1'"):
                await client.resume()
            resumed = await client.resume()
            assert [(o.operation_id, o.state) for o in resumed] == [("o-1", State.SUCCEEDED)]
            assert resumed[0].key == first.key
            stored = await client.aoperation("o-1")
            assert stored is not None
            assert stored.state is State.SUCCEEDED

    asyncio.run(main())
    assert len(server.ledger()) == 1


def test_a_new_event_loop_after_one_ended_without_aclose_sees_its_answer(
    tmp_path: Path,
) -> None:
    # asyncio.run ends with the answer's write still queued (no aclose); the next
    # asyncio.run, with a new client on the same file, pays the same operation again.
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldStore(tmp_path / "s.db")

    async def first_run() -> Any:
        client = client_of(server, store, counted)
        store.hold = True
        return await pay(client, "o-1")

    first = asyncio.run(first_run())
    assert store.held.wait(BOUND)
    released = threading.Timer(0.3, store.release.set)
    released.start()

    async def second_run() -> Any:
        async with client_of(server, tmp_path / "s.db", counted) as client:
            return await pay(client, "o-1")

    try:
        second = asyncio.run(second_run())
    finally:
        released.join()
    assert second.key == first.key
    assert second.state is State.SUCCEEDED
    assert len(server.ledger()) == 1
    assert counted.sent == 1


def test_many_tasks_queueing_answers_each_written_once(tmp_path: Path) -> None:
    server = ReferenceServer()
    counted = Counted(server)
    n = 300

    async def main() -> None:
        async with client_of(server, SQLiteStore(tmp_path / "s.db"), counted) as client:
            outcomes = await asyncio.gather(*(pay(client, f"o-{i}") for i in range(n)))
            assert {o.state for o in outcomes} == {State.SUCCEEDED}
            again = await asyncio.gather(*(pay(client, f"o-{i}") for i in range(n)))
            assert all(o.from_store for o in again)

    asyncio.run(main())
    assert len(server.ledger()) == n
    assert counted.sent == n
    stored = SQLiteStore(tmp_path / "s.db")
    assert all(stored.get(f"o-{i}").state is State.SUCCEEDED for i in range(n))  # type: ignore[union-attr]


@pytest.mark.parametrize("fault", ["none", "503", "drop", "delay"])
def test_the_record_written_behind_is_the_record_an_awaited_write_leaves(
    tmp_path: Path, fault: str
) -> None:
    # Differential: the same operation by an async client whose final write goes behind
    # the answer, and by one with an `on_store` hook (every write awaited): the stored
    # records agree field by field (but the key and the times), and so do the outcomes.
    def run(name: str, on_store: Any) -> tuple[Any, Any]:
        server = ReferenceServer()
        if fault == "503":
            server.answer(503, retry_after=1)
        elif fault == "drop":
            server.drop()
        elif fault == "delay":
            server.delay(60)

        async def main() -> Any:
            async with AsyncClient(
                store=tmp_path / f"{name}.db",
                base_url="http://psp.test",
                transport=server.transport,
                headers={"Authorization": "Bearer sk_test_secret"},
                server_clock=False,
                clock=ManualClock(),
                hooks=Hooks(on_store=on_store),
            ) as client:
                return await client.post(
                    "/v1/payments", json={**PAYMENT, "reference": "o-1"}, operation_id="o-1"
                )

        told = asyncio.run(main())
        record = SQLiteStore(tmp_path / f"{name}.db").get("o-1")
        assert len(server.ledger()) == 1
        return told, record

    behind, behind_record = run("behind", None)
    awaited, awaited_record = run("awaited", lambda *_: None)
    skip = {
        "key",
        "created_at",
        "updated_at",
        "finished_at",
        "sent_at",
        "lease_owner",
        "lease_expires",
        "server_sent_at",
        "intent_at",
        "fingerprint",
        "request_hash",
        "response",
    }  # the payment's id differs between the two servers
    mine = {f: v for f, v in vars_of(behind_record).items() if f not in skip}
    theirs = {f: v for f, v in vars_of(awaited_record).items() if f not in skip}
    assert mine == theirs
    assert behind_record.response.status_code == awaited_record.response.status_code
    told = ("state", "attempts", "maybe_applied", "evidence", "replayed", "status_code")
    assert [getattr(behind, f) for f in told] == [getattr(awaited, f) for f in told]


def vars_of(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


#: a sync client in another process pays operation o-1 on the same store file; what it
#: sends is counted (it must send nothing: the answer is being written in the parent)
SYNC_CHILD = """
import sys, httpx
from idemclient import Client
sent = []
def handler(request):
    sent.append(request)
    return httpx.Response(201, json={"id": "pay_child", "status": "succeeded"})
with Client(store=sys.argv[1], base_url="http://psp.test",
            transport=httpx.MockTransport(handler), server_clock=False,
            headers={"Authorization": "Bearer sk_test_secret"}) as client:
    print("ready", flush=True)
    outcome = client.post("/v1/payments", json={"amount": 1999, "currency": "EUR",
                          "reference": "o-1"}, operation_id="o-1")
print(len(sent), outcome.state.value, outcome.from_store, outcome.key, flush=True)
"""


def test_a_sync_client_in_another_process_waits_for_the_queued_answer(tmp_path: Path) -> None:
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")

    async def main() -> tuple[Any, str]:
        async with client_of(server, store) as client:
            store.hold = True
            first = await asyncio.wait_for(pay(client, "o-1"), BOUND)
            assert await asyncio.to_thread(store.held.wait, BOUND)
            child = subprocess.Popen(
                [sys.executable, "-c", SYNC_CHILD, str(tmp_path / "s.db")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            assert child.stdout is not None
            ready = await asyncio.to_thread(child.stdout.readline)
            assert ready.strip() == "ready", await asyncio.to_thread(child.communicate)
            # A real wait: the time a child that does not wait would need to take the
            # operation over and send it again, while the answer is held.
            await asyncio.sleep(0.5)
            assert child.poll() is None
            store.release.set()
            out, err = await asyncio.to_thread(child.communicate, timeout=60)
            assert child.returncode == 0, err
            return first, out.strip()

    first, out = asyncio.run(main())
    sent, state, from_store, key = out.split()
    assert (sent, state, from_store, key) == ("0", "succeeded", "True", first.key)
    assert len(server.ledger()) == 1


def test_a_queued_answer_the_store_did_not_keep_is_not_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The answer's write waits in its thread (a slow disk, another process holding the
    # file's write lock) past the lease: another caller takes the operation over, as it
    # may once a lease has lapsed, sends it under its key and finishes it with another
    # answer. The queued write then finds that answer there first and writes nothing:
    # the caller told the refusal must hear that the store kept another answer (as an
    # awaited write's caller is told the stored one), never silently.
    clock = ManualClock()
    answers = iter([403, 201])
    sent: list[str | None] = []

    def psp(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("idempotency-key"))
        code = next(answers, 201)
        return httpx.Response(
            code, json={"id": "pay_1", "status": "succeeded" if code == 201 else "refused"}
        )

    store = HeldStore(tmp_path / "s.db")

    async def main() -> None:
        async with AsyncClient(
            store=store,
            base_url="http://psp.test",
            transport=httpx.MockTransport(psp),
            server_clock=False,
            clock=clock,
        ) as client:
            store.hold = True
            told = await asyncio.wait_for(
                client.post("/v1/payments", json=PAYMENT, operation_id="o-1"), BOUND
            )
            assert told.status_code == 403
            assert await asyncio.to_thread(store.held.wait, BOUND)
            past_the_lease(clock)  # the write held so long

            def other() -> Any:
                with Client(
                    store=tmp_path / "s.db",
                    base_url="http://psp.test",
                    transport=httpx.MockTransport(psp),
                    server_clock=False,
                    clock=clock,
                ) as b:
                    return b.post("/v1/payments", json=PAYMENT, operation_id="o-1")

            took_over = await asyncio.to_thread(other)
            assert took_over.status_code == 201
            store.release.set()
            with pytest.raises(
                StoreError, match=r"'o-1' \(told failed, HTTP 403; kept succeeded, HTTP 201\)"
            ):
                await client.post("/v1/payments", json=PAYMENT, operation_id="o-2")
            assert len(sent) == 2  # o-2: nothing sent
            paid = await client.post("/v1/payments", json=PAYMENT, operation_id="o-2")
            assert paid.status_code == 201  # told once: the client goes on

    with caplog.at_level(logging.ERROR, logger="idemclient"):
        asyncio.run(main())
    stored = SQLiteStore(tmp_path / "s.db").get("o-1")
    assert stored is not None
    assert stored.response is not None
    assert stored.response.status_code == 201
    assert sent[0] == sent[1]  # o-1 sent again under its key only
    assert any(
        "'o-1'" in r.getMessage() and "kept another caller's" in r.getMessage()
        for r in caplog.records
    )


def test_a_read_in_the_next_event_loop_sees_the_answer_the_last_one_queued(
    tmp_path: Path,
) -> None:
    # One client, two asyncio.run: the first pays and ends with the answer's write still
    # held (no aclose); the same client's read in the next loop (another set of store
    # threads) must see the answer its caller was told, not the operation in flight.
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")
    client = client_of(server, store)

    async def paid() -> Any:
        store.hold = True
        return await pay(client, "o-1")

    told = asyncio.run(paid())
    assert told.state is State.SUCCEEDED
    assert store.held.wait(BOUND)
    # A real wait: the read must still be waiting for the write when it is released.
    released = threading.Timer(0.3, store.release.set)
    released.start()

    async def read() -> Any:
        try:
            return await client.aoperation("o-1")
        finally:
            await client.aclose()

    try:
        stored = asyncio.run(read())
    finally:
        released.join()
    assert stored is not None
    assert stored.state is State.SUCCEEDED


def test_the_deprecated_sync_read_outside_any_loop_sees_the_queued_answer(
    tmp_path: Path,
) -> None:
    server = ReferenceServer()
    store = HeldStore(tmp_path / "s.db")
    client = client_of(server, store)

    async def paid() -> Any:
        store.hold = True
        return await pay(client, "o-1")

    assert asyncio.run(paid()).state is State.SUCCEEDED
    assert store.held.wait(BOUND)
    released = threading.Timer(0.3, store.release.set)  # real, as above
    released.start()
    try:
        with pytest.warns(DeprecationWarning, match="aoperation"):
            stored = client.operation("o-1")
    finally:
        released.join()
    assert stored is not None
    assert stored.state is State.SUCCEEDED
    asyncio.run(client.aclose())


def test_a_reconcile_in_the_next_event_loop_settles_from_the_answer_the_last_one_queued(
    tmp_path: Path,
) -> None:
    # As above, with reconcile: the operation its own client was told succeeded, still
    # being written, must not be judged "being sent by another caller right now" and
    # left Indeterminate, to settle by hand.
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldStore(tmp_path / "s.db")
    client = client_of(server, store, counted)

    async def paid() -> Any:
        store.hold = True
        return await pay(client, "o-1")

    assert asyncio.run(paid()).state is State.SUCCEEDED
    assert store.held.wait(BOUND)
    released = threading.Timer(0.3, store.release.set)  # real, as above
    released.start()

    async def settle() -> Any:
        try:
            return await client.reconcile("o-1", lookup="/v1/payments?reference=o-1")
        finally:
            await client.aclose()

    try:
        settled = asyncio.run(settle())
    finally:
        released.join()
    assert settled.state is State.SUCCEEDED
    assert counted.sent == 1  # no look-up needed: the stored answer
    assert len(server.ledger()) == 1
