"""The key table as the seed lays it out, its indexes, and the maintenance jobs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from idemclient.testing import ReferenceServer
from idemclient.testing._storage.sqlite import _STALE, SCHEMA_VERSION, Storage

from .server_helpers import Env


def test_the_key_table_has_the_seeds_columns_and_primary_key(tmp_path: Path) -> None:
    db = tmp_path / "keys.sqlite3"
    Storage(db).close()
    with sqlite3.connect(db) as conn:
        columns = {row[1]: row for row in conn.execute("PRAGMA table_info(idempotency_keys)")}
        journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    for name in (
        "client",
        "key",
        "request_hash",
        "endpoint",
        "state",
        "recovery_point",
        "response_code",
        "response_body",
        "locked_at",
        "created_at",
    ):
        assert name in columns, name
    primary_key = sorted((row[5], name) for name, row in columns.items() if row[5])
    assert [name for _, name in primary_key] == ["client", "key"]
    assert journal_mode == "wal"
    conn.close()


def test_the_recovery_sweep_uses_the_partial_index_on_unfinished_keys() -> None:
    storage = Storage()
    conn = storage._conn  # white-box: the plan is the point of this test
    [sql] = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'idempotency_keys_unfinished'"
    ).fetchone()
    assert "WHERE state = 'started'" in sql
    plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {_STALE}", (0.0, 10)))
    assert "USING INDEX idempotency_keys_unfinished" in plan
    storage.close()


def test_a_database_from_a_newer_server_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "future.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(ValueError, match="schema version"):
        Storage(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    conn.close()


def test_state_survives_a_restart_on_a_database_file(tmp_path: Path) -> None:
    db = tmp_path / "psp.sqlite3"
    with ReferenceServer(db=db) as first:
        env = Env("in-process", first, first, "http://psp.test", first.transport)
        with env.stack:
            original = env.post("k-durable")
    with ReferenceServer(db=db) as second:
        env = Env("in-process", second, second, "http://psp.test", second.transport)
        with env.stack:
            replay = env.post("k-durable")
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == original.content


def test_the_reaper_drops_finished_keys_past_their_ttl_and_keeps_started_ones(
    inproc: Env,
) -> None:
    server = inproc.server
    assert inproc.post("k-old").status_code == 201
    server.crash("EXT1_SENT")
    with pytest.raises(Exception, match="disconnected"):
        inproc.post("k-stuck")
    server.advance(server.key_ttl - 1)
    assert inproc.post("k-young").status_code == 201
    assert server.reap() == 0  # nothing is old enough yet
    server.advance(2)
    assert server.reap() == 1
    assert server.key_record("alice", "k-old") is None
    # A started row is the instruction to resume: it outlives the TTL.
    assert server.key_record("alice", "k-stuck").state == "started"
    assert server.key_record("alice", "k-young").state == "finished"
    # The payment itself is business data: the reaper never touches it.
    assert {e.idempotency_key: e.key_state for e in server.ledger()} == {
        "k-old": None,
        "k-stuck": "started",
        "k-young": "finished",
    }


def test_a_key_presented_after_it_was_reaped_is_a_new_payment(inproc: Env) -> None:
    # The hazard a client must know about: past the TTL, a re-send can apply twice.
    first = inproc.post("k-forgotten")
    inproc.server.advance(inproc.server.key_ttl + 1)
    assert inproc.server.reap() == 1
    second = inproc.post("k-forgotten")
    assert second.status_code == 201
    assert "idempotent-replayed" not in second.headers
    assert second.json()["id"] != first.json()["id"]
    assert len(inproc.server.ledger()) == 2


def test_reaping_works_over_the_sandbox_too(env: Env) -> None:
    assert env.post("k-reap").status_code == 201
    env.control.advance(env.server.key_ttl + 1)
    assert env.control.reap() == 1
    assert env.control.key_record("alice", "k-reap") is None


@pytest.mark.parametrize(("lease", "ttl"), [(0, 10), (-1, 10), (10, 0)])
def test_leases_and_ttls_must_be_positive(lease: float, ttl: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ReferenceServer(lease=lease, key_ttl=ttl)


def test_a_custom_lease_decides_when_a_takeover_is_allowed() -> None:
    with ReferenceServer(lease=5) as server:
        env = Env("in-process", server, server, "http://psp.test", server.transport)
        with env.stack:
            server.crash("H1_DONE")
            with pytest.raises(Exception, match="disconnected"):
                env.post("k-lease")
            server.advance(5)
            assert env.post("k-lease").status_code == 409  # exactly at the edge: still held
            server.advance(0.01)
            assert env.post("k-lease").status_code == 201
