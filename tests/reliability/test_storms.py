"""A hundred concurrent calls of one operation: from threads, from asyncio tasks, and from
four OS processes sharing one store, against the reference server on a real socket.

The first caller's request is held at external system 1 (a gate) while the others
pile up, and its answer is lost on the way back (apply-then-drop) after a throttle, so
the owner must retry while everyone else waits. Exactly one effect in the ledger, one
sender (every attempt made by the same call), every caller ends with the same final
body (the server's stored one), and the store holds one operation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio.to_thread
import pytest

from idemclient import AsyncClient, Client, State
from idemclient.hooks import AttemptEvent, Hooks
from idemclient.store import SQLiteStore
from idemclient.testing import Gate, LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, ChildLines, exactly_once, payment

CALLERS = 100
TOKEN = "storm-merchant"
OPERATION = "storm-order-1"
BODY = payment("storm-1")
CHILD = Path(__file__).with_name("storm_child.py")


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with ReferenceServer() as server, serve(server) as running:
        yield running


def script_the_storm(server: ReferenceServer) -> Gate:
    """Hold the first request mid-flight; then throttle it and drop its answer."""
    gate = server.hold_external(1)
    server.drop(path=PATH)  # the first request is applied, its answer lost
    server.answer(429, path=PATH, retry_after_ms=50)  # the retry is throttled once
    return gate


def check_the_server(server: ReferenceServer, key: str) -> str:
    """One effect; returns the sha256 of the server's stored final body."""
    [entry] = server.ledger()
    assert exactly_once(entry), entry
    assert (entry.ext1_calls, entry.ext2_calls) == (1, 1)
    assert entry.idempotency_key == key
    record = server.key_record(TOKEN, key)
    assert record is not None
    assert record.response_body is not None
    assert server.pending_faults() == 0
    return hashlib.sha256(record.response_body.encode()).hexdigest()


def check_the_store(path: Path, key: str) -> None:
    with SQLiteStore(path) as store:
        [operation] = store.operations()
    assert (operation.operation_id, operation.key) == (OPERATION, key)
    assert operation.state is State.SUCCEEDED
    assert operation.attempts == 3  # dropped, throttled, replayed: one sender's attempts


def test_a_storm_of_100_threads_makes_one_effect(
    live: LiveServer, tmp_path: Path, figures: Figures
) -> None:
    gate = script_the_storm(live.server)
    attempts: list[AttemptEvent] = []
    hooks = Hooks(on_attempt=attempts.append)
    store = tmp_path / "shared.db"
    # Four clients (four connections to the store) in one process, 25 threads each.
    clients = [
        Client(
            store=store,
            base_url=live.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            hooks=hooks,
        )
        for _ in range(4)
    ]
    barrier = threading.Barrier(CALLERS + 1)

    def call(n: int) -> tuple[str, bool, bytes]:
        barrier.wait(timeout=30)
        outcome = clients[n % 4].post(PATH, json=BODY, operation_id=OPERATION)
        assert outcome.state is State.SUCCEEDED
        assert outcome.response is not None
        return outcome.key, outcome.from_store, outcome.response.content

    try:
        with ThreadPoolExecutor(max_workers=CALLERS) as pool:
            futures = [pool.submit(call, n) for n in range(CALLERS)]
            barrier.wait(timeout=30)
            assert gate.wait_until_reached(timeout=30)
            gate.release()
            results = [future.result(timeout=120) for future in futures]
    finally:
        for client in clients:
            client.close()

    keys = {key for key, _, _ in results}
    assert len(keys) == 1
    [key] = keys
    stored = check_the_server(live.server, key)
    assert {hashlib.sha256(body).hexdigest() for _, _, body in results} == {stored}
    assert sum(from_store for _, from_store, _ in results) == CALLERS - 1  # one sent
    assert {event.key for event in attempts} == {key}
    assert len(attempts) == 3
    check_the_store(store, key)
    figures.count("storms", thread_callers=CALLERS, thread_effects=1)


@pytest.mark.anyio
async def test_a_storm_of_100_asyncio_tasks_makes_one_effect(
    live: LiveServer, tmp_path: Path, figures: Figures
) -> None:
    gate = script_the_storm(live.server)
    attempts: list[AttemptEvent] = []
    store = tmp_path / "shared.db"
    results: list[tuple[str, bool, bytes]] = []
    async with (
        AsyncClient(
            store=store,
            base_url=live.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            hooks=Hooks(on_attempt=attempts.append),
        ) as one,
        AsyncClient(
            store=store,
            base_url=live.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            hooks=Hooks(on_attempt=attempts.append),
        ) as two,
    ):
        start = asyncio.Event()

        async def call(n: int) -> None:
            await start.wait()
            client = one if n % 2 else two
            outcome = await client.post(PATH, json=BODY, operation_id=OPERATION)
            assert outcome.state is State.SUCCEEDED
            assert outcome.response is not None
            results.append((outcome.key, outcome.from_store, outcome.response.content))

        async with anyio.create_task_group() as tasks:
            for n in range(CALLERS):
                tasks.start_soon(call, n)
            start.set()
            assert await anyio.to_thread.run_sync(gate.wait_until_reached, 30)
            gate.release()

    assert len(results) == CALLERS
    keys = {key for key, _, _ in results}
    assert len(keys) == 1
    [key] = keys
    stored = check_the_server(live.server, key)
    assert {hashlib.sha256(body).hexdigest() for _, _, body in results} == {stored}
    assert sum(from_store for _, from_store, _ in results) == CALLERS - 1
    assert {event.key for event in attempts} == {key}
    assert len(attempts) == 3
    check_the_store(store, key)
    figures.count("storms", task_callers=CALLERS, task_effects=1)


def test_a_storm_from_4_processes_sharing_one_store_makes_one_effect(
    live: LiveServer, tmp_path: Path, figures: Figures
) -> None:
    gate = script_the_storm(live.server)
    store = tmp_path / "shared.db"
    per_process = CALLERS // 4
    errors = [(tmp_path / f"child-{n}.err").open("wb") for n in range(4)]
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), live.url, str(store), OPERATION, str(per_process)],
            stdout=subprocess.PIPE,
            stderr=errors[n],
        )
        for n in range(4)
    ]
    for error in errors:
        error.close()  # the children hold their own copies
    outputs = [ChildLines(child) for child in children]
    try:
        for n, lines in enumerate(outputs):
            assert lines.next(timeout=60) == "ready", (tmp_path / f"child-{n}.err").read_text()
        # Every process has its callers lined up; one request is held at the gate.
        assert gate.wait_until_reached(timeout=60)
        gate.release()
        results = []
        attempts: list[str] = []
        for lines in outputs:
            for _ in range(per_process):
                results.append(json.loads(lines.next(timeout=120)))
            attempts += json.loads(lines.next(timeout=120))["attempts"]
        assert [child.wait(timeout=60) for child in children] == [0, 0, 0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=60)
            assert child.stdout is not None
            child.stdout.close()

    assert len(results) == CALLERS
    keys = {result["key"] for result in results}
    assert len(keys) == 1
    [key] = keys
    stored = check_the_server(live.server, key)
    assert {result["body"] for result in results} == {stored}
    assert {result["state"] for result in results} == {"succeeded"}
    assert sum(result["from_store"] for result in results) == CALLERS - 1
    assert attempts == [key] * 3  # all in one process, by one call
    check_the_store(store, key)
    figures.count("storms", process_callers=CALLERS, processes=4, process_effects=1)
