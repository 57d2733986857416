"""The client end to end on a PostgreSQL store: retries, restarts, several hosts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient.batch import Batch, ExitCode, submit
from idemclient.errors import StoreUnavailable
from idemclient.postgres import PostgresStore
from idemclient.testing import ReferenceServer

from ..client.fakes import FakePSP, error, status
from ..client.ledger_psp import FileLedgerPSP
from ..client.storms import storm_of_threads

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


def make_client(url: str, psp: FakePSP, **options: Any) -> Client:
    return Client(
        store=url,
        clock=ManualClock(),
        transport=psp.transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        **options,
    )


def test_a_retried_payment_has_one_effect_and_its_record_in_postgresql(pg_url: str) -> None:
    psp = FakePSP(status(503, retry_after="1"), error(httpx.ReadTimeout, apply=True))
    with make_client(pg_url, psp) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        assert isinstance(client.store, PostgresStore)
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 3
    assert outcome.replayed  # the timed-out attempt had been applied
    assert len(set(psp.keys)) == 1
    assert sum(psp.effects.values()) == 1
    with PostgresStore(pg_url) as store:
        record = store.get("order-1042")
    assert record is not None
    assert (record.state, record.attempts, record.key) == (State.SUCCEEDED, 3, outcome.key)
    assert "authorization" not in {name.lower() for name, _ in record.headers}
    assert record.response is not None
    assert record.response.status_code == 201


def test_another_host_answers_a_finished_operation_from_the_store(pg_url: str) -> None:
    psp = FakePSP()
    with make_client(pg_url, psp) as first_host:
        first = first_host.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    with make_client(pg_url, psp) as second_host:
        again = second_host.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    assert again.from_store
    assert again.key == first.key
    assert first.response is not None
    assert again.response is not None
    assert again.response.json() == first.response.json()
    assert len(psp.requests) == 1


def test_an_indeterminate_payment_is_resumed_by_another_host_once(pg_url: str) -> None:
    policy = RetryPolicy(max_attempts=2)
    down = FakePSP(error(httpx.ReadTimeout, apply=True), error(httpx.ReadTimeout))
    with make_client(pg_url, down, policy=policy) as first_host:
        with pytest.raises(Indeterminate) as caught:
            first_host.post("/v1/payments", json=PAYMENT, operation_id="order-7")
        key = caught.value.key
    up = FakePSP()
    up.effects, up.answers = down.effects, down.answers  # the same PSP, answering again
    with make_client(pg_url, up) as second_host:
        outcomes = second_host.resume()
    assert [(o.operation_id, o.state, o.key) for o in outcomes] == [
        ("order-7", State.SUCCEEDED, key)
    ]
    assert up.keys == [key]
    assert dict(up.effects) == {key: 1}


@pytest.mark.anyio
async def test_the_async_client_uses_a_postgresql_store(pg_url: str) -> None:
    psp = FakePSP(status(429, retry_after_ms="10"))
    async with AsyncClient(
        store=pg_url,
        clock=ManualClock(),
        transport=psp.async_transport(),
        base_url="http://psp.test",
    ) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT, operation_id="a-1")
        assert await client.aoperation("a-1") is not None
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 2
    assert sum(psp.effects.values()) == 1


def test_a_batch_registers_and_pays_every_row_once(pg_url: str) -> None:
    batch = Batch.from_records(
        [
            {"ref": f"E{i:03d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(40)
        ],
        reference="payroll-pg",
    )
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:  # it answers the batch's look-ups

        def client() -> Client:
            return Client(
                store=pg_url,
                clock=clock,
                transport=server.transport,
                base_url="http://psp.test",
                headers={"Authorization": "Bearer sk_test_secret"},
            )

        with client() as first:
            report = submit(batch, first, concurrency=8)
        with client() as second:
            again = submit(batch, second, concurrency=8)  # the same file, run again
            assert second.store.get("batch/payout/payroll-pg/E007") is not None
        ledger = server.ledger()
    assert report.exit_code is ExitCode.OK
    assert again.exit_code is ExitCode.OK
    assert all(row.already_done for row in again.rows)  # answered from the store
    assert len(ledger) == 40
    assert all((e.ext1_applied, e.ext2_applied) == (1, 1) for e in ledger)


HOST = """
import sys, httpx
sys.path.insert(0, {here!r})
from ledger_psp import FileLedgerPSP
from idemclient import Client
psp = FileLedgerPSP({ledger!r})
with Client(store={url!r}, transport=httpx.MockTransport(psp.handle)) as client:
    for n in range(20):
        client.post("http://psp.test/v1/payments", json={{"n": n}}, operation_id=f"op-{{n}}")
"""


def test_hosts_sharing_a_postgresql_store_send_each_operation_once(
    pg_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    here = str(Path(__file__).parent.parent / "client")
    code = HOST.format(here=here, ledger=str(ledger), url=pg_url)
    hosts = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [host.wait(timeout=60) for host in hosts] == [0, 0, 0, 0]
    effects = FileLedgerPSP(ledger).effects()
    assert len(effects) == 20
    assert set(effects.values()) == {1}
    with PostgresStore(pg_url) as store:
        assert store.counts()[State.SUCCEEDED] == 20
        assert {r.key for r in store.operations()} == set(effects)


def test_a_storm_of_threads_on_one_operation_makes_one_effect(pg_url: str) -> None:
    storm_of_threads(pg_url, callers=50)


CRASH_CHILD = Path(__file__).parents[1] / "client" / "crash_child.py"


@pytest.mark.parametrize(
    ("point", "applied_before_resume", "state_left"),
    [
        ("after-intent", 0, State.IN_FLIGHT),  # key durable, nothing sent
        ("during-send", 0, State.IN_FLIGHT),  # request on its way, no answer
        ("after-apply", 1, State.IN_FLIGHT),  # applied; the answer died with the client
        ("after-outcome", 1, State.SUCCEEDED),  # all done before the kill
    ],
)
def test_a_killed_host_is_resumed_by_another_with_one_effect(
    pg_url: str, tmp_path: Path, point: str, applied_before_resume: int, state_left: State
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    Client(store=pg_url).close()  # the store exists before the application starts
    child = subprocess.run(
        [sys.executable, str(CRASH_CHILD), pg_url, str(ledger), point],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    psp = FileLedgerPSP(ledger)
    assert sum(psp.effects().values()) == applied_before_resume
    with Client(store=pg_url, transport=httpx.MockTransport(psp.handle)) as other_host:
        left = other_host.store.get("order-1")
        assert left is not None
        assert left.state is state_left
        other_host.resume()  # the dead owner's lease is taken over at once
        final = other_host.operation("order-1")
    assert final is not None
    assert final.state is State.SUCCEEDED
    assert psp.effects() == {left.key: 1}


def test_postgresql_failing_at_the_outcome_commit_is_indeterminate_and_holds_nothing_back(
    pg_url: str,
) -> None:
    """The answer arrives, but the store cannot take it (here a row lock held past the
    store's lock timeout): the payment may be applied, so never "nothing changed"."""
    effects: dict[str, int] = {}
    held: list[psycopg.Connection[Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        key = request.headers["idempotency-key"]
        replayed = key in effects
        effects[key] = 1
        if not held:  # block the outcome commit of the first attempt
            locker = psycopg.connect(pg_url)
            locker.execute("SELECT 1 FROM idemclient.operations WHERE key = %s FOR UPDATE", (key,))
            held.append(locker)
        return httpx.Response(
            201, headers={"Idempotent-Replayed": "true"} if replayed else {}, json={"id": "p1"}
        )

    clock = ManualClock()
    with PostgresStore(pg_url, lock_timeout=0.2) as store:
        client = Client(store=store, clock=clock, transport=httpx.MockTransport(handler))
        with client:
            with pytest.raises(Indeterminate) as raised:
                client.post("http://psp.test/v1/payments", json=PAYMENT, operation_id="op")
            assert raised.value.outcome.last_status == 201
            assert isinstance(raised.value.__cause__, StoreUnavailable)
            held[0].close()  # the database is back
            again = client.post("http://psp.test/v1/payments", json=PAYMENT, operation_id="op")
        assert (again.state, again.replayed) == (State.SUCCEEDED, True)
        assert clock.sleeps == []  # its own dead call's lease held nothing back
        record = store.get("op")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.SUCCEEDED, True)
    assert sum(effects.values()) == 1
