"""The reference server on PostgreSQL is honest under a database crash and a frozen
peer: commits it acts on are durable, and no row is waited on for long."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest

from idemclient import ManualClock
from idemclient.testing import ReferenceServer
from idemclient.testing._storage import postgres

HEADERS = {"Authorization": "Bearer shop-1", "Idempotency-Key": "held-1"}
PAYMENT = {"amount": 100, "currency": "EUR", "reference": "r-held"}


@pytest.fixture
def short_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read as each pooled connection is set up: a short wait keeps the tests quick.
    monkeypatch.setattr(postgres, "LOCK_TIMEOUT", 200)


@pytest.fixture
def server(pg_db: str, short_locks: None) -> Iterator[ReferenceServer]:
    with ReferenceServer(db=pg_db, clock=ManualClock(), lease=2.0) as running:
        yield running


def _settings(server: ReferenceServer) -> tuple[str, str, str]:
    storage = server._storage
    assert isinstance(storage, postgres.PostgresStorage)
    with storage._pool.connection() as conn:
        row = conn.execute(
            "SELECT current_setting('synchronous_commit'), current_setting('lock_timeout'),"
            " current_setting('idle_in_transaction_session_timeout')"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_commits_are_durable_and_waits_are_bounded(server: ReferenceServer) -> None:
    synchronous, lock, idle = _settings(server)
    assert synchronous == "on"
    assert lock == "200ms"
    assert idle == "10s"


def _hold(pg_db: str, key: str) -> psycopg.Connection:
    """Another session holding the key's row inside an open transaction (a frozen peer)."""
    conn = psycopg.connect(pg_db)
    conn.execute(
        f"SELECT 1 FROM {postgres.SCHEMA}.idempotency_keys WHERE key = %s FOR UPDATE", (key,)
    )
    return conn


def _let_go(holder: psycopg.Connection) -> None:
    """End the holder's transaction and wait for it: its locks are gone on return."""
    holder.rollback()
    holder.close()


def test_a_held_row_is_answered_409_with_retry_after(server: ReferenceServer, pg_db: str) -> None:
    server.crash("H1_DONE")  # the key stays started, its lease held
    with httpx.Client(transport=server.transport, base_url="https://psp.test") as http:
        with pytest.raises(httpx.TransportError):
            http.post("/v1/payments", json=PAYMENT, headers=HEADERS)
        server.advance(5.0)  # the lease has lapsed: a retry would take the request over
        holder = _hold(pg_db, "held-1")
        try:
            answer = http.post("/v1/payments", json=PAYMENT, headers=HEADERS)
        finally:
            _let_go(holder)
        assert answer.status_code == 409
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["type"].endswith("row-held")
        # Once the holder is gone, the retry takes the request over and finishes it.
        again = http.post("/v1/payments", json=PAYMENT, headers=HEADERS)
        assert again.status_code == 201
    assert len(server.ledger()) == 1


def test_the_recovery_sweep_skips_a_held_key(server: ReferenceServer, pg_db: str) -> None:
    with httpx.Client(transport=server.transport, base_url="https://psp.test") as http:
        for key in ("held-1", "free-1"):
            server.crash("EXT1_DONE")
            body = {**PAYMENT, "reference": f"r-{key}"}
            headers = {**HEADERS, "Idempotency-Key": key}
            with pytest.raises(httpx.TransportError):
                http.post("/v1/payments", json=body, headers=headers)
    server.advance(5.0)
    holder = _hold(pg_db, "held-1")
    try:
        report = server.recover()
    finally:
        _let_go(holder)
    assert (report.examined, report.finished) == (1, 1)  # the free key; the held one skipped
    assert server.recover().finished == 1  # the held key, once free
    assert {e.status for e in server.ledger()} == {"succeeded"}


def test_external_systems_forget_past_their_retention_on_postgresql(pg_db: str) -> None:
    day = 24 * 3600.0
    headers = {"Authorization": "Bearer shop-1", "Idempotency-Key": "k-forget"}
    with (
        ReferenceServer(
            db=pg_db, clock=ManualClock(), key_ttl=day, external_retention=2 * day
        ) as server,
        httpx.Client(transport=server.transport, base_url="https://psp.test") as http,
    ):
        assert http.post("/v1/payments", json=PAYMENT, headers=headers).status_code == 201
        server.advance(4 * day)
        server.reap()
        assert http.post("/v1/payments", json=PAYMENT, headers=headers).status_code == 201
        effects = [(e.ext1_applied, e.ext2_applied) for e in server.ledger()]
        assert effects == [(1, 1), (1, 1)]  # the second send moved money again, visibly
