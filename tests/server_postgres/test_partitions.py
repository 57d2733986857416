"""Partitions by day: created when needed and ahead, dropped whole by the reaper, and
never with a started key in them. Time is the server's injected clock throughout.

The server's `ManualClock` starts at 2027-01-15 08:00 UTC; `D15` below is that day.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from idemclient import ManualClock
from idemclient.testing import ReferenceServer
from idemclient.testing._storage.postgres import DAY, SCHEMA, PostgresStorage

from ..server.server_helpers import Env

HOUR = 3600.0


def _day(n: int) -> str:
    return f"idempotency_keys_202701{n:02d}"


def _held(first: int, end: int) -> str:
    return f"idempotency_keys_held_202701{first:02d}_202701{end:02d}"


@pytest.fixture
def server(pg_db: str) -> Iterator[ReferenceServer]:
    with ReferenceServer(db=pg_db) as opened:
        yield opened


@pytest.fixture
def env(server: ReferenceServer) -> Iterator[Env]:
    env = Env("in-process", server, server, "http://psp.test", server.transport)
    with env.stack:
        yield env


def _storage(server: ReferenceServer) -> PostgresStorage:
    storage = server._storage  # white-box: the partitions are what these tests are about
    assert isinstance(storage, PostgresStorage)
    return storage


def _names(server: ReferenceServer) -> list[str]:
    return [name for name, _, _ in _storage(server).partitions()]


def _table_oid(url: str, name: str) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)::oid", (f"{SCHEMA}.{name}",)).fetchone()
    return None if row is None else row[0]


def _crash(env: Env, key: str) -> None:
    """Leave `key` started at EXT1_SENT, its lease held, as a dead worker would."""
    env.server.crash("EXT1_SENT", key=key)
    with pytest.raises(httpx.RemoteProtocolError):
        env.post(key)


def test_a_day_gets_its_partition_with_its_first_key_and_the_reaper_makes_the_next(
    server: ReferenceServer, env: Env
) -> None:
    assert _names(server) == []
    assert env.post("k-1").status_code == 201
    assert _names(server) == [_day(15)]
    assert server.reap() == 0
    assert _names(server) == [_day(15), _day(16)]  # tomorrow's, ahead of need
    server.advance(10 * DAY)  # no reaper ran in between: the first key makes it
    assert env.post("k-2").status_code == 201
    assert _names(server) == [_day(15), _day(16), _day(25)]


def test_the_reaper_drops_a_day_only_once_all_of_it_is_older_than_the_ttl(
    server: ReferenceServer, env: Env, pg_db: str
) -> None:
    assert env.post("k-morning").status_code == 201  # D15 08:00
    server.advance(15 * HOUR)
    assert env.post("k-night").status_code == 201  # D15 23:00
    server.advance(13 * HOUR)  # D16 12:00: k-morning is past its TTL, D15 is not
    assert server.reap() == 0
    assert server.key_record("alice", "k-morning") is not None  # kept: TTL is a minimum
    server.advance(12 * HOUR + 1)  # D17 00:00:01: the whole of D15 is past its TTL
    assert server.reap() == 2
    assert server.key_record("alice", "k-morning") is None
    assert server.key_record("alice", "k-night") is None
    assert _table_oid(pg_db, _day(15)) is None  # dropped, not emptied row by row
    assert _names(server) == [_day(16), _day(17), _day(18)]
    # Payments are business data: the reaper never touches them.
    assert [(e.idempotency_key, e.key_state) for e in server.ledger()] == [
        ("k-morning", None),
        ("k-night", None),
    ]


def test_a_started_key_outlives_its_day_in_a_holdover_and_is_finished_exactly_once(
    server: ReferenceServer, env: Env, pg_db: str
) -> None:
    assert env.post("k-done-1").status_code == 201
    _crash(env, "k-stuck-1")
    created = server.key_record("alice", "k-stuck-1")
    assert created is not None
    server.advance(2 * DAY)  # D17 08:00: D15 is wholly past its TTL
    assert server.reap() == 1  # k-done-1; k-stuck-1 moved, not dropped
    assert _names(server) == [_held(15, 16), _day(17), _day(18)]
    moved = server.key_record("alice", "k-stuck-1")
    assert moved == created  # every column kept, created_at included
    holdover = _table_oid(pg_db, _held(15, 16))
    assert server.reap() == 0  # only started keys in it: nothing to rebuild
    assert _table_oid(pg_db, _held(15, 16)) == holdover

    assert env.post("k-done-2").status_code == 201  # D17
    _crash(env, "k-stuck-2")
    server.advance(2 * DAY)  # D19 08:00: D17 and the holdover are past their TTL
    assert server.reap() == 1  # k-done-2
    # Expired ranges merge into one holdover: stuck keys never pin a day each.
    assert _names(server) == [_held(15, 18), _day(18), _day(19), _day(20)]
    assert _table_oid(pg_db, _held(15, 16)) is None

    report = server.recover()  # the sweep finds them where they are
    assert (report.resumed, report.finished) == (2, 2)
    assert server.reap() == 2  # now finished, and long past their TTL
    assert _names(server) == [_day(18), _day(19), _day(20)]
    ledger = {e.idempotency_key: e for e in server.ledger()}
    assert sorted(ledger) == ["k-done-1", "k-done-2", "k-stuck-1", "k-stuck-2"]
    for entry in ledger.values():
        assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
        assert entry.journal == ("H1", "H2", "H3")


def test_a_key_presented_after_its_day_was_dropped_is_a_new_payment(
    server: ReferenceServer, env: Env
) -> None:
    first = env.post("k-forgotten")
    server.advance(2 * DAY)
    assert server.reap() == 1
    second = env.post("k-forgotten")
    assert second.status_code == 201
    assert "idempotent-replayed" not in second.headers
    assert second.json()["id"] != first.json()["id"]


def test_servers_reaping_at_once_drop_each_day_once_while_payments_go_on(pg_db: str) -> None:
    clock = ManualClock()
    with ReferenceServer(db=pg_db, clock=clock) as a, ReferenceServer(db=pg_db, clock=clock) as b:
        env = Env("in-process", a, a, "http://psp.test", a.transport)
        with env.stack:
            for n in range(10):
                assert env.post(f"k-old-{n}").status_code == 201
            clock.advance(2 * DAY)
            reaped: list[int] = []
            answers: list[int] = []
            barrier = threading.Barrier(4)

            def reap(server: ReferenceServer) -> None:
                barrier.wait(timeout=10)
                reaped.append(server.reap())

            def pay(key: str) -> None:
                barrier.wait(timeout=10)
                answers.append(env.post(key).status_code)

            threads = [
                threading.Thread(target=reap, args=(a,)),
                threading.Thread(target=reap, args=(b,)),
                threading.Thread(target=pay, args=("k-new-1",)),
                threading.Thread(target=pay, args=("k-new-2",)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        assert sorted(reaped) == [0, 10]
        assert answers == [201, 201]
        assert _names(a) == [_day(17), _day(18)]
        assert {e.idempotency_key: e.key_state for e in b.ledger()}["k-new-1"] == "finished"
