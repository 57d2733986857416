"""Admission and takeover on PostgreSQL: one owner per (client, key), across days too.

A partition's primary key keeps a key unique within its day only; the advisory lock on
(client, key) and the look-up across every day make it unique across days. These tests
pin both halves: what the primary key alone lets through, and that admission does not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest

from idemclient.testing import Phase
from idemclient.testing._storage.postgres import (
    _ADMISSION_CLASS,
    DAY,
    SCHEMA,
    PostgresStorage,
    admission_lock,
    day_of,
)
from idemclient.testing._storage.sqlite import KeyRow

T = TypeVar("T")

MIDNIGHT = (1_800_000_000 // DAY + 1) * DAY  # 2027-01-16 00:00 UTC
JUST_BEFORE = MIDNIGHT - 0.1
JUST_AFTER = MIDNIGHT + 0.1


@pytest.fixture
def storage(pg_db: str) -> Iterator[PostgresStorage]:
    opened = PostgresStorage(pg_db, max_connections=20)
    yield opened
    opened.close()


def _admit(storage: PostgresStorage, now: float, *, key: str = "k", owner: str = "a") -> Any:
    return storage.admit(
        client="alice",
        key=key,
        request_hash=b"h",
        endpoint="/v1/payments",
        request_body=b"{}",
        owner=owner,
        now=now,
    )


def _rows(url: str, key: str = "k") -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            f"SELECT count(*) FROM {SCHEMA}.idempotency_keys WHERE client = 'alice' AND key = %s",
            (key,),
        ).fetchone()
    assert found is not None
    return int(found[0])


def _in_threads(count: int, work: Callable[[int], T]) -> list[T]:
    """Run `work(i)` in `count` threads released together; their results, in order."""
    barrier = threading.Barrier(count)
    results: dict[int, T] = {}
    failures: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = work(i)
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    return [results[i] for i in range(count)]


def test_a_key_from_yesterday_is_found_not_admitted_again(
    storage: PostgresStorage, pg_db: str
) -> None:
    owned, first = _admit(storage, JUST_BEFORE)
    assert owned
    owned, found = _admit(storage, JUST_AFTER, owner="b")
    assert not owned
    assert (found.created_at, found.lease_owner) == (first.created_at, "a")
    assert _rows(pg_db) == 1
    # The second admission inserted nothing: its day did not even need a partition.
    assert [name for name, _, _ in storage.partitions()] == ["idempotency_keys_20270115"]


def test_a_days_primary_key_alone_would_let_the_same_key_in_on_another_day(
    storage: PostgresStorage, pg_db: str
) -> None:
    # Why admission takes a lock and looks in every day: PostgreSQL enforces a
    # partition's primary key inside that partition only.
    _admit(storage, JUST_BEFORE)
    storage.ensure_partitions(day_of(JUST_AFTER), day_of(JUST_AFTER))
    with psycopg.connect(pg_db, autocommit=True) as conn:
        inserted = conn.execute(
            f"INSERT INTO {SCHEMA}.idempotency_keys (client, key, request_hash, endpoint,"
            " request_body, state, created_at) VALUES ('alice', 'k', '\\x00', '/v1/payments',"
            " '{}', 'started', to_timestamp(%s)) ON CONFLICT DO NOTHING RETURNING key",
            (JUST_AFTER,),
        ).fetchall()
        same_day = conn.execute(
            f"INSERT INTO {SCHEMA}.idempotency_keys (client, key, request_hash, endpoint,"
            " request_body, state, created_at) VALUES ('alice', 'k', '\\x00', '/v1/payments',"
            " '{}', 'started', to_timestamp(%s)) ON CONFLICT DO NOTHING RETURNING key",
            (JUST_BEFORE - 60,),
        ).fetchall()
    assert inserted == [("k",)]  # another day: nothing in the database objects
    assert same_day == []  # the same day: the primary key is the arbiter
    assert _rows(pg_db) == 2


def test_an_arrival_after_midnight_waits_for_one_before_it_and_finds_its_row(
    storage: PostgresStorage, pg_db: str
) -> None:
    # The race the lock closes, made deterministic: A (23:59:59.9) holds the lock and
    # has inserted but not committed when B (00:00:00.1) arrives. Without the lock B
    # would look, find nothing yet, and insert into the next day's partition.
    storage.ensure_partitions(day_of(JUST_BEFORE), day_of(JUST_AFTER))
    lock = admission_lock("alice", "k")
    with psycopg.connect(pg_db, autocommit=True) as a:
        with a.transaction():
            a.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", (_ADMISSION_CLASS, lock))
            a.execute(
                f"INSERT INTO {SCHEMA}.idempotency_keys (client, key, request_hash, endpoint,"
                " request_body, state, locked_at, lease_owner, created_at) VALUES ('alice',"
                " 'k', 'h', '/v1/payments', '{}', 'started', to_timestamp(%s), 'a',"
                " to_timestamp(%s))",
                (JUST_BEFORE, JUST_BEFORE),
            )
            outcome: list[tuple[bool, KeyRow]] = []
            b = threading.Thread(
                target=lambda: outcome.append(_admit(storage, JUST_AFTER, owner="b"))
            )
            b.start()
            # B is in another thread and talks to PostgreSQL: poll the lock table until
            # it waits on A's lock, bounded by a deadline (each query is the wait).
            deadline = time.monotonic() + 20
            while not outcome and not _waiting_for(a, lock) and time.monotonic() < deadline:
                pass
            assert outcome == [], "B went ahead without waiting for A's admission"
            assert _waiting_for(a, lock)
        b.join(timeout=20)
    [(owned, row)] = outcome
    assert not owned
    assert (row.lease_owner, row.created_at) == ("a", JUST_BEFORE)
    assert _rows(pg_db) == 1


def _waiting_for(conn: psycopg.Connection[Any], lock: int) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND classid = %s AND objid = %s::int4::oid",
        (_ADMISSION_CLASS, lock),
    ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize(
    "moments",
    [
        (JUST_AFTER,),  # all on one day: the day's primary key and the lock
        (JUST_BEFORE, JUST_AFTER),  # straddling midnight: the lock and the look-up
    ],
    ids=["one-day", "midnight"],
)
def test_of_many_concurrent_admissions_of_one_key_exactly_one_owns_it(
    storage: PostgresStorage, pg_db: str, moments: tuple[float, ...]
) -> None:
    storage.ensure_partitions(day_of(JUST_BEFORE), day_of(JUST_AFTER))
    results = _in_threads(
        40, lambda i: _admit(storage, moments[i % len(moments)], owner=f"owner-{i}")
    )
    owners = [row.lease_owner for owned, row in results if owned]
    assert len(owners) == 1
    assert {row.lease_owner for _, row in results} == set(owners)  # everyone saw the winner
    assert _rows(pg_db) == 1


def test_of_racing_takeovers_of_one_stale_row_exactly_one_wins(storage: PostgresStorage) -> None:
    _admit(storage, JUST_BEFORE, owner="dead")
    now = JUST_BEFORE + 100
    results = _in_threads(
        20,
        lambda i: storage.take_over(
            client="alice", key="k", owner=f"heir-{i}", now=now, stale_before=now - 30
        ),
    )
    winners = [row for row in results if row is not None]
    assert len(winners) == 1
    assert storage.key_row("alice", "k") == winners[0]
    # A fresh lease is not taken over.
    assert (
        storage.take_over(client="alice", key="k", owner="late", now=now, stale_before=now - 30)
        is None
    )


def test_phase_writes_are_fenced_by_the_lease_owner(storage: PostgresStorage) -> None:
    _admit(storage, JUST_BEFORE, owner="a")
    assert storage.take_over(
        client="alice", key="k", owner="b", now=JUST_AFTER + 60, stale_before=JUST_AFTER
    )
    common = {"client": "alice", "key": "k", "now": JUST_AFTER + 61}
    assert not storage.mark_sent(**common, owner="a", point=Phase.EXT1_SENT)
    assert not storage.release(**common, owner="a")
    assert storage.mark_sent(**common, owner="b", point=Phase.EXT1_SENT)
    row = storage.key_row("alice", "k")
    assert row is not None
    assert (row.recovery_point, row.attempts, row.lease_owner) == ("EXT1_SENT", 1, "b")
