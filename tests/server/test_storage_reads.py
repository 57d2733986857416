"""Reads beside the writer: a replay is one plain read on a pooled read-only
connection, which WAL lets run while a write transaction holds the file; writes, and
a database in memory, keep the one write connection and its lock."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from idemclient.testing import ReferenceServer
from idemclient.testing._protocol.rules import Phase
from idemclient.testing._storage.sqlite import KeyRow, Storage

from .server_helpers import Env


def _hold_the_write_lock(db: Path) -> sqlite3.Connection:
    """Another process's writer, frozen mid-transaction: it holds the file's write lock."""
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_replay_is_answered_while_another_writer_holds_the_database(tmp_path: Path) -> None:
    # A finished key is answered from one plain read: WAL lets it read beside a writer,
    # so replays go on while another server process (or this one) is mid-transaction.
    db = tmp_path / "psp.sqlite3"
    with ReferenceServer(db=db) as server:
        # White-box: a short wait for the write lock, so that a replay which still
        # needed it would fail here at once rather than after the default 10 s.
        server._storage._conn.execute("PRAGMA busy_timeout = 100")
        env = Env("in-process", server, server, "http://psp.test", server.transport)
        with env.stack:
            original = env.post("k-held")
            other = _hold_the_write_lock(db)
            try:
                replay = env.post("k-held")
            finally:
                other.execute("ROLLBACK")
                other.close()
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == original.content


def test_a_new_key_still_waits_for_the_write_lock(tmp_path: Path) -> None:
    # Only reads skip the lock: admitting a key is a write, and waits its turn.
    db = tmp_path / "psp.sqlite3"
    storage = Storage(db, busy_timeout=0.05)
    other = _hold_the_write_lock(db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            storage.admit(
                client="alice",
                key="k-new",
                request_hash=b"h",
                endpoint="/v1/payments",
                request_body=b"{}",
                owner="o",
                now=1.0,
            )
    finally:
        other.execute("ROLLBACK")
        other.close()
        storage.close()


def test_pooled_readers_are_read_only_and_closed_with_the_storage(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "psp.sqlite3")
    assert storage.key_row("alice", "k-none") is None
    [reader] = storage._readers  # white-box: the idle reader the look-up returned
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("DELETE FROM idempotency_keys")
    storage.close()
    with pytest.raises(sqlite3.ProgrammingError):
        reader.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError):
        storage.key_row("alice", "k-none")


def test_a_database_in_memory_reads_through_its_one_connection() -> None:
    # Another connection to ":memory:" would be another, empty, database.
    storage = Storage()
    assert storage.key_row("alice", "k-none") is None
    assert storage._readers == []
    storage.close()


def test_single_statement_phases_leave_no_transaction_open(tmp_path: Path) -> None:
    # EXTn_SENT and an external system's book are one statement each, committed on
    # their own: visible at once to another connection, and nothing left open.
    db = tmp_path / "psp.sqlite3"
    storage = Storage(db)
    owned, _ = storage.admit(
        client="alice",
        key="k-1",
        request_hash=b"h",
        endpoint="/v1/payments",
        request_body=b"{}",
        owner="o",
        now=1.0,
    )
    assert owned
    assert storage.mark_sent(client="alice", key="k-1", owner="o", now=2.0, point=Phase.EXT1_SENT)
    assert not storage.mark_sent(
        client="alice", key="k-1", owner="someone-else", now=2.0, point=Phase.EXT2_SENT
    )
    record, applied = storage.external_apply(
        system=1,
        key="d-1",
        resource_id="pay_1",
        outcome="approved",
        reference="r",
        amount=5,
        now=3.0,
    )
    assert applied
    assert record.calls == 1
    assert not storage._conn.in_transaction  # white-box
    with sqlite3.connect(db) as other:
        point, attempts = other.execute(
            "SELECT recovery_point, attempts FROM idempotency_keys WHERE key = 'k-1'"
        ).fetchone()
        calls = other.execute("SELECT calls FROM external_effects WHERE key = 'd-1'").fetchone()
    other.close()
    storage.close()
    assert (point, attempts, calls) == ("EXT1_SENT", 1, (1,))


class _BlindReads(Storage):
    """A storage whose plain reads see an empty database: as if another arrival
    inserted the key between the read and the insert."""

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        blind = sqlite3.connect(":memory:")
        try:
            yield _EmptyRows(blind)
        finally:
            blind.close()


class _EmptyRows:
    """A connection that finds nothing, whatever it is asked."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, statement: str, params: object = ()) -> sqlite3.Cursor:
        return self._conn.execute("SELECT 1 WHERE 0")


def test_an_arrival_that_raced_the_read_finds_the_row_that_won(tmp_path: Path) -> None:
    storage = _BlindReads(tmp_path / "psp.sqlite3")

    def arrive(owner: str) -> tuple[bool, KeyRow]:
        return storage.admit(
            client="alice",
            key="k-race",
            request_hash=b"h",
            endpoint="/v1/payments",
            request_body=b"{}",
            owner=owner,
            now=1.0,
        )

    try:
        first_owned, first = arrive("first")
        second_owned, second = arrive("second")
    finally:
        storage.close()
    assert first_owned
    assert not second_owned
    assert second == first
    assert second.lease_owner == "first"
