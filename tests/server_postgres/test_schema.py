"""The seed's key table in PostgreSQL: partitioned by day, keyed per day by (client, key),
with a partial index on unfinished keys that the recovery sweep really uses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from idemclient.cli import main
from idemclient.testing import ReferenceServer
from idemclient.testing._storage.postgres import DAY, SCHEMA, SCHEMA_VERSION, STALE, PostgresStorage

NOW = 1_800_000_000.0  # a ManualClock's default start: 2027-01-15 08:00 UTC
TODAY = int(NOW // DAY)


def _connect(url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f"SET search_path = {SCHEMA}")
    return conn


@pytest.fixture
def storage(pg_db: str) -> Iterator[PostgresStorage]:
    opened = PostgresStorage(pg_db)
    yield opened
    opened.close()


def test_the_key_table_is_partitioned_by_range_of_created_at(
    storage: PostgresStorage, pg_db: str
) -> None:
    with _connect(pg_db) as conn:
        strategy, key_columns = conn.execute(
            "SELECT p.partstrat, array(SELECT attname FROM pg_attribute"
            "  WHERE attrelid = p.partrelid AND attnum = ANY(p.partattrs))"
            " FROM pg_partitioned_table p WHERE p.partrelid = 'idempotency_keys'::regclass"
        ).fetchone()
        columns = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = 'idempotency_keys'::regclass AND attnum > 0"
            ).fetchall()
        )
    assert (strategy, key_columns) == ("r", ["created_at"])
    assert (
        columns
        | {
            "client": "text",
            "key": "text",
            "request_hash": "bytea",
            "endpoint": "text",
            "state": "text",
            "recovery_point": "text",
            "response_code": "integer",
            # bytes, not the seed's jsonb: jsonb re-serialises, and a replay is byte-identical
            "response_body": "bytea",
            "locked_at": "timestamp with time zone",
            "created_at": "timestamp with time zone",
        }
        == columns
    )


def test_each_days_partition_has_primary_key_client_key_and_covers_one_utc_day(
    storage: PostgresStorage, pg_db: str
) -> None:
    assert storage.partitions() == []
    owned, _ = storage.admit(
        client="alice",
        key="k",
        request_hash=b"h",
        endpoint="/v1/payments",
        request_body=b"{}",
        owner="a",
        now=NOW,
    )
    assert owned
    [(name, starts, ends)] = storage.partitions()
    assert name == "idempotency_keys_20270115"
    assert (starts, ends) == (TODAY * DAY, (TODAY + 1) * DAY)
    with _connect(pg_db) as conn:
        primary_key = conn.execute(
            "SELECT array(SELECT attname FROM pg_attribute WHERE attrelid = c.conrelid"
            "  AND attnum = ANY(c.conkey)) FROM pg_constraint c"
            " WHERE c.conrelid = %s::regclass AND c.contype = 'p'",
            (name,),
        ).fetchone()
    assert primary_key is not None
    assert sorted(primary_key[0]) == ["client", "key"]


def test_the_recovery_sweep_uses_the_partial_index_on_unfinished_keys(
    storage: PostgresStorage, pg_db: str
) -> None:
    storage.ensure_partitions(TODAY - 1, TODAY)
    with _connect(pg_db) as conn:
        [(predicate,)] = conn.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index"
            " WHERE indexrelid = 'idempotency_keys_unfinished'::regclass"
        ).fetchall()
        assert predicate == "(state = 'started'::text)"
        # Two days (yesterday 08:00 to today 06:13) of mostly finished keys, one in
        # 2,000 still started: the shape of a busy key table, where scanning it for
        # the sweep would be the mistake.
        conn.execute(
            "INSERT INTO idempotency_keys (client, key, request_hash, endpoint, request_body,"
            " state, locked_at, created_at) SELECT 'c', 'k-' || g, '\\x00', '/v1/payments',"
            " '{}', CASE WHEN g %% 2000 = 0 THEN 'started' ELSE 'finished' END,"
            " CASE WHEN g %% 2000 = 0 THEN to_timestamp(%s) END,"
            " to_timestamp(%s + g * 2.0) FROM generate_series(1, 40000) AS g",
            (NOW - 3600, NOW - DAY),
        )
        conn.execute("ANALYZE idempotency_keys")
        [(plan,)] = (
            psycopg.ClientCursor(conn)
            .execute(f"EXPLAIN (FORMAT JSON) {STALE}", (NOW - 30, 100))
            .fetchall()
        )
        children = {
            name
            for (name,) in conn.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits"
                " WHERE inhparent = 'idempotency_keys_unfinished'::regclass"
            )
        }
    scans = [node for node in _nodes(plan[0]["Plan"]) if "Relation Name" in node]
    assert {node["Relation Name"] for node in scans} == {
        "idempotency_keys_20270114",
        "idempotency_keys_20270115",
    }
    for node in scans:
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node
        assert node["Index Name"] in children, node
    assert len(storage.stale_keys(stale_before=NOW - 30, limit=100)) == 20


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def test_a_database_from_a_newer_server_is_refused_and_left_alone(pg_db: str) -> None:
    PostgresStorage(pg_db).close()
    with _connect(pg_db) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(ValueError, match=f"schema version {SCHEMA_VERSION + 1}"):
        PostgresStorage(pg_db)
    with _connect(pg_db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (
            SCHEMA_VERSION + 1,
        )


def test_a_key_table_the_server_did_not_create_is_refused_and_left_alone(pg_db: str) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.idempotency_keys (id int)")
    with pytest.raises(ValueError, match="did not create"):
        PostgresStorage(pg_db)
    with _connect(pg_db) as conn:
        assert conn.execute("SELECT to_regclass('schema_version')").fetchone() == (None,)


def test_servers_starting_together_create_the_schema_once(pg_db: str) -> None:
    opened: list[PostgresStorage] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait(timeout=10)
        try:
            opened.append(PostgresStorage(pg_db, max_connections=1))
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for storage in opened:
        storage.close()
    assert failures == []
    assert len(opened) == 4
    with _connect(pg_db) as conn:
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)


def test_the_server_is_chosen_by_url_and_never_shows_the_password(pg_db: str) -> None:
    # The test cluster trusts loopback, so the password is accepted and ignored.
    with_password = pg_db.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    with ReferenceServer(db=with_password) as server:
        assert isinstance(server._storage, PostgresStorage)
        assert "hunter2" not in repr(server)
        assert "postgresql://postgres@127.0.0.1:" in repr(server)


def test_an_unreachable_database_is_a_clear_error_that_hides_the_password(pg_db: str) -> None:
    unreachable = "postgresql://app:hunter2@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(ConnectionError, match="cannot be used") as raised:
        ReferenceServer(db=unreachable)
    assert "hunter2" not in str(raised.value)
    result = CliRunner().invoke(main, ["server", "--port", "0", "--db", unreachable])
    assert result.exit_code != 0
    assert "cannot open the database: postgresql://app@127.0.0.1:1/nowhere" in result.output
    assert "hunter2" not in result.output
