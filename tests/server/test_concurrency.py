"""The seed's first test: fire the same request 100 times concurrently, get one effect.

Every caller loops on 409 with the same key (bounded), the way a client honouring
"in flight, come back" would, and must end with the very same final body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient.testing import Gate, LiveServer, ReferenceServer

from .server_helpers import BODY

CALLERS = 100
#: Per caller; the owner needs a few milliseconds, so this bound is never reached.
MAX_ATTEMPTS = 5_000


def _hammer(
    make_post: Callable[[], Callable[[], httpx.Response]],
    *,
    callers: int = CALLERS,
    gate: Gate | None = None,
) -> tuple[list[httpx.Response], int]:
    """Run `callers` threads posting until they get a non-409; (final answers, 409s seen)."""
    barrier = threading.Barrier(callers)
    finals: list[httpx.Response] = []
    conflicts: list[int] = []
    waiting = threading.Semaphore(0)
    lock = threading.Lock()

    def caller() -> None:
        post = make_post()
        barrier.wait(timeout=30)
        seen = 0
        for _ in range(MAX_ATTEMPTS):
            response = post()
            if response.status_code != 409:
                break
            if seen == 0:
                waiting.release()
            seen += 1
        with lock:
            finals.append(response)
            conflicts.append(seen)

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    if gate is not None:
        # Hold the owner at external system 1 until every other caller has been told
        # 409 at least once: the in-flight path is then certainly exercised.
        assert gate.wait_until_reached(timeout=30)
        for _ in range(callers - 1):
            assert waiting.acquire(timeout=30)
        gate.release()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    return finals, sum(conflicts)


def _assert_one_effect(server: ReferenceServer, finals: list[httpx.Response]) -> None:
    assert len(finals) == CALLERS
    assert {r.status_code for r in finals} == {201}
    assert len({r.content for r in finals}) == 1  # every caller holds the same body
    assert sum("idempotent-replayed" not in r.headers for r in finals) == 1
    [entry] = server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
    assert entry.journal == ("H1", "H2", "H3")


@pytest.mark.parametrize("hold", [False, True], ids=["race", "held-in-flight"])
def test_100_concurrent_same_key_posts_over_a_socket_make_one_payment(
    live_reference_server: LiveServer, hold: bool
) -> None:
    server = live_reference_server.server
    gate = server.hold_external(1) if hold else None
    with httpx.Client(
        base_url=live_reference_server.url,
        headers={"Authorization": "Bearer alice", "Idempotency-Key": "same"},
        limits=httpx.Limits(max_connections=CALLERS, max_keepalive_connections=CALLERS),
        timeout=30,
        verify=False,  # plain HTTP on loopback
    ) as client:
        finals, conflicts = _hammer(
            lambda: lambda: client.post("/v1/payments", json=BODY), gate=gate
        )
    _assert_one_effect(server, finals)
    if hold:
        assert conflicts >= CALLERS - 1


def test_100_concurrent_same_key_posts_in_process_make_one_payment(
    reference_server: ReferenceServer,
) -> None:
    gate = reference_server.hold_external(1)
    with httpx.Client(
        transport=reference_server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer alice", "Idempotency-Key": "same"},
    ) as client:
        finals, conflicts = _hammer(
            lambda: lambda: client.post("/v1/payments", json=BODY), gate=gate
        )
    _assert_one_effect(reference_server, finals)
    assert conflicts >= CALLERS - 1


def test_two_server_instances_on_one_database_file_admit_a_key_once(tmp_path: Path) -> None:
    # Diagram 2's setting: instances A and B share the database, which arbitrates.
    db = tmp_path / "psp.sqlite3"
    with ReferenceServer(db=db) as a, ReferenceServer(db=db) as b:
        clients = [
            httpx.Client(
                transport=server.transport,
                base_url="http://psp.test",
                headers={"Authorization": "Bearer alice", "Idempotency-Key": "shared"},
            )
            for server in (a, b)
        ]
        turn = iter(range(CALLERS))
        with clients[0], clients[1]:

            def make_post() -> Callable[[], httpx.Response]:
                client = clients[next(turn) % 2]  # half the callers on each instance
                return lambda: client.post("/v1/payments", json=BODY)

            finals, _ = _hammer(make_post)
        _assert_one_effect(a, finals)
        assert b.ledger() == a.ledger()


def test_many_keys_at_once_each_make_exactly_one_payment(
    live_reference_server: LiveServer,
) -> None:
    keys = [f"key-{n}" for n in range(25)]
    with httpx.Client(
        base_url=live_reference_server.url,
        headers={"Authorization": "Bearer alice"},
        limits=httpx.Limits(max_connections=CALLERS),
        timeout=30,
        verify=False,
    ) as client:
        turn = iter(range(CALLERS))

        def make_post() -> Callable[[], httpx.Response]:
            key = keys[next(turn) % len(keys)]  # four callers per key
            return lambda: client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})

        finals, _ = _hammer(make_post)
    assert {r.status_code for r in finals} == {201}
    ledger = live_reference_server.server.ledger()
    assert sorted(e.idempotency_key for e in ledger) == sorted(keys)
    assert all((e.ext1_applied, e.ext2_applied) == (1, 1) for e in ledger)
