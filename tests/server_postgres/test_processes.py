"""Several server processes on one PostgreSQL database, standing in for several hosts.

Each server is `idemclient server --db postgresql://...` in a process of its own
(`spawn`), with its own clock, fault scripts and connection pool; only the database is
shared. The seed's tests then hold across processes: a hundred concurrent POSTs with
one key spread over the servers make one payment, and a server killed (SIGKILL) after
any phase leaves work that another server finishes with exactly one effect at each
external system.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import httpx
import pytest

from idemclient.testing import Phase, SandboxClient, SpawnedServer, spawn

from ..server.server_helpers import BODY, WebhookCatcher

CALLERS = 100
#: Per caller; the owner needs a few milliseconds, so this bound is never reached.
MAX_ATTEMPTS = 5_000
CRASH_POINTS = [phase for phase in Phase if phase is not Phase.FINISHED]
LEASE = 30.0


def _client(url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url,
        headers={"Authorization": "Bearer alice"},
        limits=httpx.Limits(max_connections=CALLERS, max_keepalive_connections=CALLERS),
        timeout=30,
        verify=False,  # plain HTTP on loopback
    )


@pytest.fixture
def start(pg_db: str) -> Iterator[Callable[[int], list[SpawnedServer]]]:
    """Starts n servers on one database, with no background recovery (tests run it)."""
    with ExitStack() as stack:
        yield lambda n: [
            stack.enter_context(spawn(db=pg_db, lease=LEASE, recovery_interval=0)) for _ in range(n)
        ]


def test_100_concurrent_same_key_posts_across_three_server_processes_make_one_payment(
    start: Callable[[int], list[SpawnedServer]],
) -> None:
    servers = start(3)
    with ExitStack() as stack:
        clients = [stack.enter_context(_client(server.url)) for server in servers]
        barrier = threading.Barrier(CALLERS)
        finals: list[httpx.Response] = []
        lock = threading.Lock()

        def caller(n: int) -> None:
            client = clients[n % len(clients)]  # a third of the callers on each server
            barrier.wait(timeout=30)
            for _ in range(MAX_ATTEMPTS):
                response = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "k"})
                if response.status_code != 409:
                    break
            with lock:
                finals.append(response)

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
            assert not thread.is_alive()
    assert len(finals) == CALLERS
    assert {r.status_code for r in finals} == {201}
    assert len({r.content for r in finals}) == 1  # every caller holds the same body
    assert sum("idempotent-replayed" not in r.headers for r in finals) == 1
    for server in servers:  # each process reads the same books from the database
        with SandboxClient(server.url) as sandbox:
            [entry] = sandbox.ledger()
            assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
            assert entry.journal == ("H1", "H2", "H3")


def test_a_server_killed_after_each_phase_leaves_work_another_finishes_exactly_once(
    start: Callable[[int], list[SpawnedServer]],
) -> None:
    doomed, heir = start(2)
    keys = {phase: f"k-{phase.value}" for phase in CRASH_POINTS}
    with SandboxClient(doomed.url) as sandbox, _client(doomed.url) as client:
        for phase, key in keys.items():
            sandbox.crash(phase, key=key)
            with pytest.raises(httpx.RemoteProtocolError):
                client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})
    doomed.process.kill()  # the whole process dies, SIGKILL: no shutdown, leases held
    doomed.process.communicate(timeout=20)

    with SandboxClient(heir.url) as sandbox, _client(heir.url) as client:
        for key in keys.values():
            record = sandbox.key_record("alice", key)
            assert record is not None
            assert record.state == "started"
            assert record.locked_at is not None  # still leased to the dead process
        retried = list(keys.values())[::2]  # every other one by a client retry...
        for key in retried:
            response = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})
            assert response.status_code == 409  # ...which first respects the lease
        sandbox.advance(LEASE + 1)  # this server's clock: the dead one's leases expire
        for key in retried:
            response = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})
            assert response.status_code == 201
            assert "idempotent-replayed" not in response.headers  # this retry resumed it
        report = sandbox.recover()  # ...and the rest by the recovery worker
        assert (report.resumed, report.finished) == (len(keys) - len(retried),) * 2
        ledger = {entry.idempotency_key: entry for entry in sandbox.ledger()}
        assert sorted(ledger) == sorted(keys.values())
        for entry in ledger.values():
            assert (entry.status, entry.key_state) == ("succeeded", "finished"), entry
            # One effect at each external system, one delivery each: a resumer at
            # EXTn_SENT probed first and found what the dead process had sent.
            assert (entry.ext1_applied, entry.ext2_applied) == (1, 1), entry
            assert (entry.ext1_calls, entry.ext2_calls) == (1, 1), entry
            assert entry.journal == ("H1", "H2", "H3"), entry
        for key in keys.values():
            replay = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})
            assert replay.headers["idempotent-replayed"] == "true"


def test_the_background_worker_of_a_new_server_finishes_a_killed_servers_request(
    pg_db: str,
) -> None:
    with spawn(db=pg_db, recovery_interval=0) as doomed:
        with SandboxClient(doomed.url) as sandbox:
            sandbox.crash("EXT2_CALLED")  # E2 applied it; the outcome is not recorded
        with pytest.raises(httpx.RemoteProtocolError), _client(doomed.url) as client:
            client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "k-killed"})
        doomed.process.kill()
        doomed.process.communicate(timeout=20)
    with (
        WebhookCatcher() as webhooks,
        spawn(db=pg_db, lease=0.2, recovery_interval=0.05) as heir,
        SandboxClient(heir.url) as sandbox,
    ):
        # The heir's own background loop must take the row over once the lease (0.2 s
        # of real time, on its clock) has expired: real time in another process.
        # Finishing the payment queues its webhook event, which the heir's delivery loop
        # sends here: wait for that, bounded, rather than polling the ledger.
        sandbox.set_webhook_endpoint(webhooks.url)
        assert webhooks.arrived.wait(timeout=20), "the heir did not finish the payment"
        [entry] = sandbox.ledger()
        assert entry.key_state == "finished"
        assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
        assert (entry.ext2_calls, entry.journal) == (1, ("H1", "H2", "H3"))
