"""What only the PostgreSQL store has: a URL, a schema of its own that it refuses to
share with foreign tables, migrations under a lock, and commit levels per durability."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest

from idemclient import Client, State
from idemclient._db.pg_schema import open_schema
from idemclient._store import new_owner
from idemclient._store._pg_schema import MIGRATIONS, SCHEMA_VERSION, STORE
from idemclient._transport import make_settings
from idemclient.errors import ForeignStore, StoreTooNew, StoreUnavailable
from idemclient.postgres import PostgresStore
from idemclient.store import Durability
from idemclient.testing.store_contract import progress, succeed
from tests.support.pgcluster import Cluster

from ..store.conftest import NOW, make_intent


def snapshot(url: str, schema: str) -> list[tuple[Any, ...]]:
    """Every table of `schema` with its columns and rows: to prove nothing changed."""
    with psycopg.connect(url) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
            )
        ]
        found: list[tuple[Any, ...]] = []
        for table in tables:
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (schema, table),
            ).fetchall()
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1').fetchall()
            found.append((table, columns, rows))
        return found


def _store_at_version(url: str, version: int, row: str, params: tuple[Any, ...] = ()) -> None:
    """A store as an earlier version left it: migrated to `version` only, with one row
    written by that version's columns (`row`, an INSERT), as on SQLite."""
    with psycopg.connect(url, autocommit=True) as conn:
        open_schema(conn, "idemclient", where="test", layout=STORE, migrations=MIGRATIONS[:version])
        conn.execute(row, params)


def _schema_version(url: str) -> int:
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT version FROM idemclient.store_version").fetchone()
    assert found is not None
    version: int = found[0]
    return version


# -- choosing it -----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_selects_the_postgresql_store(pg_url: str, scheme: str) -> None:
    url = pg_url.replace("postgresql://", f"{scheme}://", 1)
    settings = make_settings(url)
    try:
        assert isinstance(settings.store, PostgresStore)
        assert settings.store.schema == "idemclient"
    finally:
        settings.store.close()
    with Client(store=url) as client:
        assert isinstance(client.store, PostgresStore)
        assert client.store.counts()[State.PENDING] == 0


def test_the_path_shown_never_carries_the_password(
    pg_cluster: Cluster, pg_shared_url: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE ROLE shown LOGIN SUPERUSER PASSWORD 'pw_secret_123'")
    url = pg_shared_url.replace("postgres@", "shown:pw_secret_123@")
    with PostgresStore(url, schema=pg_schema) as store:
        assert "pw_secret_123" not in store.path
        assert "pw_secret_123" not in repr(store)
        assert store.path == f"postgresql://shown@127.0.0.1:{pg_cluster.port}/shared"


def test_an_unreachable_database_is_a_clear_store_error(pg_cluster: Cluster) -> None:
    closed_port = pg_cluster.port + 1 if pg_cluster.port < 65535 else 1024
    url = f"postgresql://postgres@127.0.0.1:{closed_port}/nothing"
    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{closed_port}/nothing"):
        PostgresStore(url, connect_timeout=2)


def test_a_missing_database_is_a_clear_store_error(pg_cluster: Cluster) -> None:
    with pytest.raises(StoreUnavailable, match="does not exist"):
        PostgresStore(pg_cluster.url("no_such_database"))


IMPORT_WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # as if it were not installed
import idemclient
try:
    idemclient.Client(store="postgresql://nobody@127.0.0.1:1/none")
except ImportError as exc:
    print("client:", exc)
try:
    import idemclient.postgres
except ImportError as exc:
    print("module:", exc)
"""


def test_without_psycopg_idemclient_imports_and_says_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_PSYCOPG],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["client", "module"]
    for line in lines:
        assert "pip install 'idemclient[postgres]'" in line


# -- what is not ours --------------------------------------------------------------------


def test_a_foreign_operations_table_is_refused_and_left_alone(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE SCHEMA idemclient")
        conn.execute("CREATE TABLE idemclient.operations (id int PRIMARY KEY, what text)")
        conn.execute("INSERT INTO idemclient.operations VALUES (1, 'theirs')")
    before = snapshot(pg_url, "idemclient")
    with pytest.raises(
        ForeignStore, match=r'"idemclient"\.operations was not created by'
    ) as caught:
        PostgresStore(pg_url)
    assert caught.value.path.endswith("/fresh")  # the database is named
    assert snapshot(pg_url, "idemclient") == before


def test_the_applications_own_operations_table_is_refused_in_its_schema(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE public.operations (id serial PRIMARY KEY, amount int)")
        conn.execute("INSERT INTO public.operations (amount) VALUES (10), (20)")
    before = snapshot(pg_url, "public")
    with pytest.raises(ForeignStore, match=r"\"public\"\.operations was not created"):
        PostgresStore(pg_url, schema="public")
    assert snapshot(pg_url, "public") == before
    # Its own schema, the default, lives beside the application's table.
    with PostgresStore(pg_url) as store:
        assert store.unfinished() == []


def test_a_foreign_version_table_is_refused(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE SCHEMA idemclient")
        conn.execute("CREATE TABLE idemclient.store_version (version int)")
    before = snapshot(pg_url, "idemclient")
    with pytest.raises(ForeignStore, match="store_version was not created by idemclient"):
        PostgresStore(pg_url)
    assert snapshot(pg_url, "idemclient") == before


def test_a_store_from_a_newer_idemclient_is_refused_and_left_alone(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE idemclient.store_version SET version = %s", (SCHEMA_VERSION + 1,))
    before = snapshot(pg_url, "idemclient")
    with pytest.raises(StoreTooNew, match=f"schema version {SCHEMA_VERSION + 1}"):
        PostgresStore(pg_url)
    assert snapshot(pg_url, "idemclient") == before


# -- migrations --------------------------------------------------------------------------


def test_migrations_run_in_order_once(pg_url: str) -> None:
    PostgresStore(pg_url).close()  # at the current version
    applied: list[int] = []

    def add_column(conn: psycopg.Connection[Any], schema: str) -> None:
        applied.append(2)
        conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN note text")

    steps = (*MIGRATIONS, add_column)
    for _ in range(2):
        with psycopg.connect(pg_url, autocommit=True) as conn:
            identity = open_schema(conn, "idemclient", where="test", layout=STORE, migrations=steps)
    assert applied == [2]
    assert identity.version == len(steps)
    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SELECT version FROM idemclient.store_version").fetchone()
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'idemclient' AND table_name = 'operations'"
        ).fetchall()
    assert version == (len(steps),)
    assert ("note",) in columns


def test_a_failed_migration_changes_nothing(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.register([make_intent()], now=NOW)
        store_id = store.identity.store_id
    before = snapshot(pg_url, "idemclient")

    def broken(conn: psycopg.Connection[Any], schema: str) -> None:
        conn.execute(f"ALTER TABLE {schema}.operations ADD COLUMN half_done text")
        raise RuntimeError("migration bug")

    steps = (*MIGRATIONS, broken)
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        pytest.raises(RuntimeError, match="migration bug"),
    ):
        open_schema(conn, "idemclient", where="test", layout=STORE, migrations=steps)
    assert snapshot(pg_url, "idemclient") == before
    with PostgresStore(pg_url) as store:
        assert store.identity.store_id == store_id
        assert store.get("op-1") is not None


OPEN = """
import sys
from idemclient.postgres import PostgresStore
PostgresStore(sys.argv[1]).close()
"""


def test_processes_creating_one_store_at_once_all_succeed(pg_url: str) -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", OPEN, pg_url], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    results = [(c.communicate(timeout=60)[1], c.returncode) for c in children]
    assert [err for err, code in results if code != 0] == []
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM idemclient.store_version").fetchall()
    assert rows == [(SCHEMA_VERSION,)]


# -- durability and connections ----------------------------------------------------------


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement run through psycopg cursors (connections run theirs through one)."""
    seen: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return seen


def commit_levels(seen: list[str]) -> list[str]:
    """For each write statement, the synchronous_commit it ran under ('default' if unset)."""
    levels = []
    current = "default"
    for statement in seen:
        if statement.startswith("SET LOCAL synchronous_commit"):
            current = statement.rsplit(" ", 1)[-1]
        elif statement.split(" ", 1)[0] in ("INSERT", "UPDATE"):
            levels.append(current)
            current = "default"
    return levels


@pytest.mark.parametrize(
    ("durability", "intent_level", "outcome_level"),
    [
        (Durability.FULL, "default", "default"),
        (Durability.INTENT, "default", "off"),  # the default
        (Durability.BUFFERED, "off", "off"),
    ],
)
def test_durability_levels_decide_which_commits_wait_for_the_flush(
    pg_shared_url: str,
    pg_schema: str,
    statements: list[str],
    durability: Durability,
    intent_level: str,
    outcome_level: str,
) -> None:
    with PostgresStore(pg_shared_url, schema=pg_schema, durability=durability) as store:
        owner = new_owner()
        statements.clear()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.register([make_intent("op-2", "key-2")], now=NOW)
        assert commit_levels(statements) == [intent_level, intent_level]
        statements.clear()
        store.record_attempt("op-1", owner=owner, progress=progress(), lease_until=NOW + 60)
        succeed(store, "op-1", owner)
        assert commit_levels(statements) == [outcome_level, outcome_level]


def test_a_database_running_without_synchronous_commit_still_flushes_intents(
    pg_shared_url: str, pg_schema: str, statements: list[str]
) -> None:
    url = f"{pg_shared_url}?options=-csynchronous_commit%3Doff"
    with PostgresStore(url, schema=pg_schema) as store:
        owner = new_owner()
        statements.clear()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        succeed(store, "op-1", owner)
        assert commit_levels(statements) == ["on", "off"]


def test_the_store_recovers_when_its_connections_are_cut(
    pg_shared_url: str, pg_schema: str
) -> None:
    with PostgresStore(pg_shared_url, schema=pg_schema, max_connections=2) as store:
        store.register([make_intent()], now=NOW)
        with psycopg.connect(pg_shared_url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = '' AND pid != pg_backend_pid()"
                " AND datname = current_database() AND backend_type = 'client backend'"
            ).fetchone()
        assert cut is not None
        assert cut[0] >= 1
        record = store.get("op-1")  # a checked connection, not a dead one
        assert record is not None
        assert record.state is State.PENDING


def test_upgrading_a_store_takes_out_the_secrets_earlier_versions_wrote(pg_url: str) -> None:
    """As on SQLite: withheld header names, a redacted URL fingerprinted again, and no
    secret answer header, for operations this version keeps until they are purged."""
    import json

    import httpx

    from idemclient._fingerprint import bytes_fingerprint

    secret = "xat_SECRET_VALUE_7741"
    body = b'{"amount":1}'
    url = f"https://psp.test/v1/payouts?access_token={secret}&page=1"
    _store_at_version(
        pg_url,
        1,
        "INSERT INTO idemclient.operations (id, key, method, url, headers, body,"
        " fingerprint, reference, state, attempts, maybe_applied, evidence, created_at,"
        " updated_at, finished_at, status_code, response_headers, response_body,"
        " response_sha256, response_size) VALUES ('op', 'k', 'POST', %s, %s::jsonb, %s,"
        " %s, 'E1', 'succeeded', 1, true, 'HTTP 201', 1, 1, 1, 201, %s::jsonb, %s, '', 2)",
        (
            url,
            json.dumps([["content-type", "application/json"], ["x-auth-token", secret]]),
            body,
            bytes_fingerprint("POST", httpx.URL(url), body),
            json.dumps([["set-session", secret]]),
            b"{}",
        ),
    )
    with PostgresStore(pg_url) as store:
        record = store.get("op")
    assert record is not None
    assert record.url == "https://psp.test/v1/payouts?access_token=&page=1"
    assert (record.headers, record.withheld_headers) == (
        (("content-type", "application/json"),),
        ("x-auth-token",),
    )
    assert record.fingerprint == bytes_fingerprint("POST", httpx.URL(record.url), body)
    assert record.response is not None
    assert record.response.headers == ()
    with psycopg.connect(pg_url) as conn:
        dumped = conn.execute("SELECT operations::text FROM idemclient.operations").fetchall()
    assert secret not in str(dumped)


def test_a_version_5_store_gains_the_look_up_mark_and_its_leases_stay_sends(pg_url: str) -> None:
    """As on SQLite (version 7): a lease an earlier version wrote, which leased look-ups
    in flight too, counts as a send's when it is taken over."""
    _store_at_version(
        pg_url,
        5,
        "INSERT INTO idemclient.operations (id, key, method, url, headers, body,"
        " fingerprint, reference, state, attempts, maybe_applied, evidence, lease_owner,"
        " lease_expires, created_at, updated_at) VALUES ('old', 'old-key', 'POST',"
        " 'http://x/', '[]'::jsonb, '', 'f', 'r', 'in_flight', 1, false, '',"
        " 'elsewhere:1:t:1', 50, 1, 2)",
    )
    with PostgresStore(pg_url) as store:
        [before] = store.unfinished()
        taken = store.claim("old", owner=new_owner(), now=NOW, lease_until=NOW + 60)
    assert before.lease_look_up is False
    record = taken.record
    assert (taken.taken_over, record.maybe_applied, record.sent_at) == (True, True, 50.0)
    assert _schema_version(pg_url) == SCHEMA_VERSION


def test_a_version_6_store_gains_replay_unexplained_false_for_its_old_rows(pg_url: str) -> None:
    _store_at_version(
        pg_url,
        6,
        "INSERT INTO idemclient.operations (id, key, method, url, headers, body,"
        " fingerprint, reference, state, attempts, maybe_applied, evidence, created_at,"
        " updated_at, sent_at) VALUES ('old', 'old-key', 'POST', 'http://x/', '[]'::jsonb,"
        " '', 'f', 'r', 'indeterminate', 1, true, 'ReadTimeout', 1, 2, 1.5)",
    )
    with PostgresStore(pg_url) as store:
        record = store.get("old")
    assert record is not None
    assert (record.replay_unexplained, record.sent_at) == (False, 1.5)
    assert _schema_version(pg_url) == SCHEMA_VERSION
