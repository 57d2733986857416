"""The outbox: an operation recorded in the application's own transaction, with the
business row that caused it, sent after the commit or by `resume()` on any host."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from idemclient import AsyncClient, Client, ManualClock, State
from idemclient.errors import OperationMismatch, RequestNotReplayable, StoreUnavailable
from idemclient.postgres import PostgresStore, asend_pending, record_pending, send_pending
from tests.support.pgcluster import Cluster

from ..client.fakes import FakePSP
from ..client.ledger_psp import FileLedgerPSP

PAYMENT = {"amount": 1999, "currency": "EUR", "order": 42}
CHILD = Path(__file__).with_name("outbox_child.py")


@pytest.fixture
def shop(pg_url: str) -> str:
    """An application database: its own `orders` table, and the idemclient store."""
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, amount int NOT NULL)")
    return pg_url


@pytest.fixture
def psp() -> FakePSP:
    return FakePSP()


@pytest.fixture
def client(shop: str, psp: FakePSP) -> Iterator[Client]:
    with Client(
        store=shop,
        clock=ManualClock(),
        transport=psp.transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
    ) as opened:
        yield opened


def orders(url: str) -> list[tuple[int, int]]:
    with psycopg.connect(url) as conn:
        return [(i, a) for i, a in conn.execute("SELECT id, amount FROM orders ORDER BY id")]


def record(conn: psycopg.Connection, client: Client, **changes: object) -> str:
    options: dict[str, object] = {"json": PAYMENT, "operation_id": "order-42", **changes}
    return record_pending(conn, client, "POST", "/v1/payments", **options)


def test_the_order_and_its_payment_commit_together_then_it_is_sent(
    shop: str, client: Client, psp: FakePSP
) -> None:
    with psycopg.connect(shop) as conn:  # not autocommit: a transaction begins by itself
        conn.execute("INSERT INTO orders (id, amount) VALUES (42, 1999)")
        operation = record(conn, client, reference="order-42")
        assert client.operation(operation) is None  # not visible before the commit
        assert orders(shop) == []
        conn.commit()
    assert operation == "order-42"
    assert orders(shop) == [(42, 1999)]
    pending = client.store.get(operation)
    assert pending is not None
    assert (pending.state, pending.attempts, pending.reference) == (State.PENDING, 0, "order-42")
    assert "authorization" not in {name.lower() for name, _ in pending.headers}
    outcome = send_pending(client, operation)
    assert outcome.state is State.SUCCEEDED
    assert outcome.key == pending.key
    assert dict(psp.effects) == {pending.key: 1}
    sent = psp.requests[0]
    assert sent.headers["authorization"] == "Bearer sk_test_secret"  # the live client's
    assert sent.headers["idempotency-key"] == pending.key
    assert sent.url == "http://psp.test/v1/payments"
    assert sent.read() == httpx.Request("POST", "/", json=PAYMENT).read()


def place_order(conn: psycopg.Connection, client: Client, order: int, **changes: object) -> None:
    """The application's unit of work: the order row and its payment, one transaction."""
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, amount) VALUES (%s, 1999)", (order,))
        record(conn, client, **changes)
        if order == 13:
            raise RuntimeError("out of stock")


def test_a_rollback_leaves_neither_the_order_nor_the_payment(shop: str, client: Client) -> None:
    with psycopg.connect(shop) as conn, pytest.raises(RuntimeError, match="out of stock"):
        place_order(conn, client, 13)
    assert orders(shop) == []
    assert client.store.operations() == []
    with pytest.raises(KeyError, match="after the transaction that recorded it has committed"):
        send_pending(client, "order-42")


def test_a_retried_transaction_records_the_same_operation_again(
    shop: str, client: Client, psp: FakePSP
) -> None:
    with psycopg.connect(shop) as conn:
        for _ in range(2):
            with conn.transaction():
                assert record(conn, client) == "order-42"
    assert len(client.store.operations()) == 1
    send_pending(client, "order-42")
    assert sum(psp.effects.values()) == 1


def test_another_request_under_the_same_operation_is_refused_with_its_order(
    shop: str, client: Client
) -> None:
    with psycopg.connect(shop) as conn:
        with conn.transaction():
            record(conn, client)
        with pytest.raises(OperationMismatch, match="differs in its body"):
            place_order(conn, client, 43, json={**PAYMENT, "amount": 5})
    assert orders(shop) == []  # the order of the refused payment rolled back with it
    record_kept = client.store.get("order-42")
    assert record_kept is not None
    assert b"1999" in record_kept.body


def test_posting_the_same_request_later_sends_the_recorded_operation(
    shop: str, client: Client, psp: FakePSP
) -> None:
    with psycopg.connect(shop) as conn, conn.transaction():
        record(conn, client, identity=("order-42", "charge"), operation_id=None)
    recorded = client.store.operations()[0]
    # The same arguments through the ordinary call: the fingerprints agree, so it is
    # the recorded operation, sent with its key, not a second one.
    outcome = client.post("/v1/payments", json=PAYMENT, identity=("order-42", "charge"))
    assert (outcome.operation_id, outcome.key) == (recorded.operation_id, recorded.key)
    assert outcome.state is State.SUCCEEDED
    assert len(client.store.operations()) == 1
    assert dict(psp.effects) == {recorded.key: 1}


def test_send_pending_after_another_host_finished_it_makes_no_request(
    shop: str, client: Client, psp: FakePSP
) -> None:
    with psycopg.connect(shop) as conn, conn.transaction():
        record(conn, client)
    assert [o.state for o in client.resume()] == [State.SUCCEEDED]  # "another host"
    again = send_pending(client, "order-42")
    assert again.from_store
    assert len(psp.requests) == 1


@pytest.mark.anyio
async def test_an_async_client_sends_what_was_recorded(shop: str, psp: FakePSP) -> None:
    async with AsyncClient(
        store=shop, clock=ManualClock(), transport=psp.async_transport(), base_url="http://psp.test"
    ) as client:
        with psycopg.connect(shop) as conn, conn.transaction():
            operation = record_pending(
                conn, client, "POST", "/v1/payments", json=PAYMENT, key="my-key-1"
            )
        assert operation == "my-key-1"  # no operation id: the key names it
        outcome = await asend_pending(client, operation)
    assert outcome.state is State.SUCCEEDED
    assert dict(psp.effects) == {"my-key-1": 1}


# -- misuse is loud ----------------------------------------------------------------------


def test_posting_inside_the_recording_transaction_fails_instead_of_hanging(
    shop: str, psp: FakePSP
) -> None:
    with (
        PostgresStore(shop, lock_timeout=0.2) as store,
        Client(store=store, transport=psp.transport(), base_url="http://psp.test") as client,
        psycopg.connect(shop) as conn,
        conn.transaction(),
    ):
        record(conn, client)
        # Not committed yet: the client's own connection waits for this one's row.
        with pytest.raises(StoreUnavailable, match="lock timeout"):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert psp.requests == []


def test_an_autocommit_connection_outside_a_transaction_is_refused(
    shop: str, client: Client
) -> None:
    with (
        psycopg.connect(shop, autocommit=True) as conn,
        pytest.raises(ValueError, match="autocommit mode with no transaction open"),
    ):
        record(conn, client)
    assert client.store.operations() == []
    with psycopg.connect(shop, autocommit=True) as conn, conn.transaction():
        record(conn, client)  # inside an explicit transaction it is fine
    assert len(client.store.operations()) == 1


def test_a_failed_transaction_is_refused(shop: str, client: Client) -> None:
    with psycopg.connect(shop) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("INSERT INTO no_such_table VALUES (1)")
        with pytest.raises(ValueError, match="has failed already"):
            record(conn, client)


@pytest.mark.parametrize("other_store", [False, True])
def test_a_connection_to_another_database_is_refused(
    pg_cluster: Cluster, client: Client, other_store: bool
) -> None:
    name = f"elsewhere_{int(other_store)}"
    url = pg_cluster.create_database(name)
    if other_store:
        Client(store=url).close()  # that database has an idemclient store of its own
    expected = "another idemclient store" if other_store else "no idemclient store"
    with (
        psycopg.connect(url) as conn,
        pytest.raises(ValueError, match=f"database '{name}', where schema .* holds {expected}"),
    ):
        record(conn, client)


def test_a_client_without_a_postgresql_store_is_refused(shop: str, tmp_path: Path) -> None:
    with (
        Client(store=tmp_path / "local.db") as local,
        psycopg.connect(shop) as conn,
        pytest.raises(TypeError, match="whose store is a PostgresStore"),
    ):
        record(conn, local)


def test_a_connection_that_is_not_psycopg_3_is_refused(client: Client) -> None:
    with (
        sqlite3.connect(":memory:") as conn,
        pytest.raises(TypeError, match="psycopg \\(3\\) Connection of your transaction"),
    ):
        record(conn, client)  # type: ignore[arg-type]  # the misuse under test


def test_a_safe_method_is_refused(shop: str, client: Client) -> None:
    with psycopg.connect(shop) as conn, pytest.raises(ValueError, match="GET is not sent"):
        record_pending(conn, client, "GET", "/v1/payments")


def test_a_streamed_body_is_refused(shop: str, client: Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"{}"

    with (
        psycopg.connect(shop) as conn,
        pytest.raises(RequestNotReplayable, match="streamed request body"),
    ):
        record(conn, client, json=None, content=chunks())


# -- a crash between commit and send ----------------------------------------------------


@pytest.mark.parametrize(
    ("point", "applied_before_resume", "state_left"),
    [
        ("after-commit", 0, State.PENDING),  # recorded and committed, never sent
        ("after-apply", 1, State.IN_FLIGHT),  # sent and applied, the answer lost
    ],
)
def test_a_crash_after_the_commit_is_finished_by_resume_elsewhere_once(
    shop: str, tmp_path: Path, point: str, applied_before_resume: int, state_left: State
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    Client(store=shop).close()  # the store exists before the application starts
    child = subprocess.run(
        [sys.executable, str(CHILD), shop, str(ledger), point],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    assert orders(shop) == [(42, 1999)]
    psp = FileLedgerPSP(ledger)
    assert sum(psp.effects().values()) == applied_before_resume
    with Client(store=shop, transport=httpx.MockTransport(psp.handle)) as other_host:
        left = other_host.store.get("order-42")
        assert left is not None
        assert left.state is state_left
        outcomes = other_host.resume()
    assert [(o.operation_id, o.state, o.key) for o in outcomes] == [
        ("order-42", State.SUCCEEDED, left.key)
    ]
    assert psp.effects() == {left.key: 1}


EXAMPLE = Path(__file__).parents[2] / "examples" / "outbox.py"


def test_the_outbox_example_runs(pg_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env={**os.environ, "IDEMCLIENT_DATABASE_URL": pg_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "order-1 -> succeeded (sent after the commit)",
        "order-2 -> pending (the process died here)",
        "order-2 -> succeeded (resumed)",
        "payments on the server: 2",
    ]
