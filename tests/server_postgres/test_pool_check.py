"""The reference server's pool hands out a connection without a round trip while its
socket is quiet, and never one the database has given up."""

from __future__ import annotations

import select

import httpx
import psycopg
import psycopg_pool
import pytest

from idemclient import ManualClock
from idemclient._db.postgres import check_quiet
from idemclient.testing import ReferenceServer
from idemclient.testing._storage import postgres

HEADERS = {"Authorization": "Bearer shop-1", "Idempotency-Key": "cut-1"}
PAYMENT = {"amount": 100, "currency": "EUR", "reference": "r-cut"}


def _cut_every_connection_of(pg_db: str) -> int:
    """Terminate the database's other backends, waiting until each has gone."""
    with psycopg.connect(pg_db, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE pid != pg_backend_pid() AND datname = current_database()"
            " AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    cut: int = row[0]
    return cut


def test_a_replay_after_the_database_cut_every_connection_is_answered(pg_db: str) -> None:
    with (
        ReferenceServer(db=pg_db, clock=ManualClock()) as server,
        httpx.Client(transport=server.transport, base_url="http://psp.test") as client,
    ):
        first = client.post("/v1/payments", json=PAYMENT, headers=HEADERS)
        assert first.status_code == 201
        assert _cut_every_connection_of(pg_db) >= 1
        # Each request takes a connection from the pool: every one of them was cut.
        replays = [client.post("/v1/payments", json=PAYMENT, headers=HEADERS) for _ in range(3)]
    for replay in replays:
        assert replay.status_code == 201
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.content == first.content


def test_a_quiet_connection_is_handed_out_without_a_query(
    pg_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queried: list[object] = []
    monkeypatch.setattr(
        psycopg_pool.ConnectionPool, "check_connection", staticmethod(queried.append)
    )
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("SELECT 1")
        check_quiet(conn)
        assert queried == []
        # A message waiting on the socket (here a notification) is no reason to refuse
        # the connection, but it is read by the full check.
        conn.execute("LISTEN ping")
        with psycopg.connect(pg_db, autocommit=True) as other:
            other.execute("NOTIFY ping")
        _wait_readable(conn)
        check_quiet(conn)
        assert queried == [conn]


def _wait_readable(conn: psycopg.Connection[object]) -> None:
    readable, _, _ = select.select([conn.fileno()], [], [], 5.0)
    assert readable, "the notification never arrived"


def test_a_connection_the_database_gave_up_fails_the_check(pg_db: str) -> None:
    conn = psycopg.connect(pg_db, autocommit=True)
    try:
        conn.execute("SELECT 1")
        assert _cut_every_connection_of(pg_db) >= 1
        with pytest.raises(psycopg.OperationalError):
            check_quiet(conn)
    finally:
        conn.close()


def test_the_server_pool_uses_the_quiet_check(pg_db: str) -> None:
    with ReferenceServer(db=pg_db, clock=ManualClock()) as server:
        storage = server._storage
        assert isinstance(storage, postgres.PostgresStorage)
        assert storage._pool._check is check_quiet  # white-box: which check, not how
