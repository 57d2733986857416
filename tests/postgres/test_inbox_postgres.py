"""What only the PostgreSQL inbox has: the application's pool or connection, misuse of a
connection refused before anything is written, its own schema refused when foreign,
and commits that stay durable when the database runs with asynchronous commits."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

from idemclient._db.pg_schema import open_schema
from idemclient._db.postgres import display
from idemclient.errors import ForeignStore, StoreTooNew, StoreUnavailable
from idemclient.postgres import PostgresInbox, PostgresInboxStorage
from idemclient.postgres._inbox import INBOX
from tests.support.pgcluster import Cluster

from .conftest import MerchantDatabase, add_effect


@pytest.fixture
def merchant(pg_url: str) -> Iterator[MerchantDatabase]:
    database = MerchantDatabase("postgres", pg_url)
    yield database
    database.close()


def tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        return {name for (name,) in rows}


# -- the application's own pool and connection ------------------------------------------


def test_the_applications_pool_is_borrowed_and_left_open(merchant: MerchantDatabase) -> None:
    # The pool's connections are not autocommit (psycopg's default): the inbox's
    # transaction still commits the id and the effect together.
    with psycopg_pool.ConnectionPool(merchant.target, min_size=1, max_size=2) as pool:
        with PostgresInbox(pool) as inbox:
            assert not inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate
            assert inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate
            assert inbox.seen("psp", "evt_1")
            assert inbox.storage.name == display(merchant.target)
        with pool.connection() as conn:  # still the application's, still open
            assert conn.execute("SELECT count(*) FROM effects").fetchone() == (1,)


def test_the_applications_connection_is_used_and_left_open(merchant: MerchantDatabase) -> None:
    with psycopg.connect(merchant.target) as conn:
        inbox = PostgresInbox(conn)
        assert not inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate
        assert inbox.reap() == 0
        inbox.close()
        assert not conn.closed
    assert merchant.effects() == {"evt_1": 1}


def test_record_in_a_transaction_that_is_about_to_begin(merchant: MerchantDatabase) -> None:
    """Not autocommit, nothing run yet: the insert begins the transaction, and the
    application's commit takes the id and the effect together."""
    inbox = merchant.open_inbox()
    with psycopg.connect(merchant.target) as conn:
        assert inbox.record(conn, "psp", "evt_1")
        add_effect(conn, "evt_1")
        conn.rollback()  # both go
        assert inbox.record(conn, "psp", "evt_1")
        add_effect(conn, "evt_1")
        conn.commit()
    assert merchant.effects() == {"evt_1": 1}
    assert merchant.recorded() == {("psp", "evt_1")}


# -- misuse, refused before anything is written -----------------------------------------


def test_record_on_an_autocommit_connection_is_refused(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()
    with (
        psycopg.connect(merchant.target, autocommit=True) as conn,
        pytest.raises(ValueError, match="autocommit mode with no transaction open"),
    ):
        inbox.record(conn, "psp", "evt_1")
    assert merchant.recorded() == set()


def test_record_in_a_failed_transaction_is_refused(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()
    with psycopg.connect(merchant.target) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        with pytest.raises(ValueError, match="has failed already; roll it back"):
            inbox.record(conn, "psp", "evt_1")
        conn.rollback()
    assert merchant.recorded() == set()


def test_record_through_something_else_than_psycopg_is_refused(
    merchant: MerchantDatabase,
) -> None:
    inbox = merchant.open_inbox()
    with pytest.raises(
        TypeError, match=r"psycopg \(3\) Connection of your transaction, not sqlite3"
    ):
        inbox.record(sqlite3.connect(":memory:"), "psp", "evt_1")  # type: ignore[arg-type]


@pytest.mark.parametrize("other_inbox", [False, True])
def test_record_through_a_connection_to_another_database_is_refused(
    pg_cluster: Cluster, merchant: MerchantDatabase, other_inbox: bool
) -> None:
    inbox = merchant.open_inbox()
    name = f"inbox_elsewhere_{int(other_inbox)}"
    url = pg_cluster.create_database(name)
    if other_inbox:
        PostgresInbox(url).close()
    expected = "another idemclient inbox" if other_inbox else "no idemclient inbox"
    with psycopg.connect(url) as conn:
        with pytest.raises(
            ValueError, match=f"database '{name}', where schema .* holds {expected}"
        ):
            inbox.record(conn, "psp", "evt_1")
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INTRANS  # usable


def test_a_handler_that_swallows_a_database_error_is_refused(merchant: MerchantDatabase) -> None:
    """PostgreSQL would commit nothing, silently; answering 'processed' would lose it."""
    inbox = merchant.open_inbox()

    def swallows(tx: Any) -> None:
        add_effect(tx, "evt_1")
        with contextlib.suppress(psycopg.Error):  # the transaction is aborted all the same
            tx.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(ValueError, match="aborted the transaction"):
        inbox.process("psp", "evt_1", swallows)
    assert (merchant.effects(), merchant.recorded()) == ({}, set())
    assert not inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate


def test_a_handler_error_reaches_the_application_unchanged(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()
    with pytest.raises(psycopg.errors.UndefinedTable):
        inbox.process("psp", "evt_1", lambda tx: tx.execute("SELECT * FROM no_such_table"))
    assert merchant.recorded() == set()


def test_a_handler_that_commits_on_its_own_is_refused(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()

    def commits(tx: Any) -> None:
        add_effect(tx, "evt_1")
        tx.execute("COMMIT")

    with pytest.raises(ValueError, match="ended inside the handler"):
        inbox.process("psp", "evt_1", commits)


def test_a_connection_in_a_transaction_is_refused_or_pointed_to_record(
    merchant: MerchantDatabase,
) -> None:
    with psycopg.connect(merchant.target) as conn:
        conn.execute("SELECT 1")  # a transaction is open now
        with pytest.raises(ValueError, match="outside a transaction"):
            PostgresInbox(conn)
        conn.rollback()
        inbox = PostgresInbox(conn)
        conn.execute("SELECT 1")
        with pytest.raises(ValueError, match=r"inbox\.record"):
            inbox.process("psp", "evt_1", lambda tx: None)
        with pytest.raises(ValueError, match="in a transaction"):
            inbox.reap()
        conn.rollback()


def test_a_closed_inbox_says_so(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()
    inbox.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        inbox.process("psp", "evt_1", lambda tx: None)


def test_neither_a_url_pool_nor_connection_is_refused() -> None:
    with pytest.raises(TypeError, match=r"PostgreSQL URL, a psycopg_pool\.ConnectionPool"):
        PostgresInboxStorage(sqlite3.connect(":memory:"))  # type: ignore[arg-type]


# -- its own schema -----------------------------------------------------------------------


def test_its_tables_live_in_a_schema_of_their_own(merchant: MerchantDatabase) -> None:
    merchant.open_inbox()
    assert tables(merchant.target, "idemclient_inbox") == {
        "inbox",
        "inbox_version",
        "resource_versions",  # the ordering guard's, from schema version 2
    }
    assert tables(merchant.target, "public") == {"effects"}


def test_a_foreign_inbox_table_is_refused_and_left_alone(merchant: MerchantDatabase) -> None:
    with psycopg.connect(merchant.target) as conn:
        conn.execute("CREATE SCHEMA idemclient_inbox")
        conn.execute("CREATE TABLE idemclient_inbox.inbox (whatever text)")
        conn.execute("INSERT INTO idemclient_inbox.inbox VALUES ('mine')")
    with pytest.raises(ForeignStore, match=r'"idemclient_inbox"\.inbox was not created by') as e:
        merchant.open_inbox()
    assert "PostgresInbox(..., schema=...)" in str(e.value)
    assert tables(merchant.target, "idemclient_inbox") == {"inbox"}
    with psycopg.connect(merchant.target) as conn:
        assert conn.execute("SELECT * FROM idemclient_inbox.inbox").fetchall() == [("mine",)]
    merchant.open_inbox(schema="elsewhere").close()  # another schema is fine


def test_an_inbox_of_schema_version_1_is_upgraded_keeping_its_ids(
    merchant: MerchantDatabase,
) -> None:
    with psycopg.connect(merchant.target, autocommit=True) as conn:  # what version 1 wrote
        open_schema(
            conn, "idemclient_inbox", where="test", layout=INBOX, migrations=INBOX.migrations[:1]
        )
        conn.execute("INSERT INTO idemclient_inbox.inbox VALUES ('psp', 'evt_old', 1)")
    assert tables(merchant.target, "idemclient_inbox") == {"inbox", "inbox_version"}
    inbox = merchant.open_inbox()
    assert inbox.seen("psp", "evt_old")
    assert inbox.process("psp", "evt_new", lambda tx: inbox.advance(tx, "psp", "p/1", 1)).result
    with psycopg.connect(merchant.target) as conn:
        version = conn.execute("SELECT version FROM idemclient_inbox.inbox_version").fetchone()
    assert version == (2,)


def test_a_foreign_version_table_is_refused(merchant: MerchantDatabase) -> None:
    with psycopg.connect(merchant.target) as conn:
        conn.execute("CREATE SCHEMA idemclient_inbox")
        conn.execute("CREATE TABLE idemclient_inbox.inbox_version (v int)")
    with pytest.raises(ForeignStore, match="inbox_version was not created by idemclient"):
        merchant.open_inbox()


def test_a_newer_inbox_schema_is_refused(merchant: MerchantDatabase) -> None:
    merchant.open_inbox().close()
    with psycopg.connect(merchant.target) as conn:
        conn.execute("UPDATE idemclient_inbox.inbox_version SET version = 99")
    with pytest.raises(StoreTooNew, match="says schema version 99"):
        merchant.open_inbox()


def test_inboxes_opened_at_once_create_the_tables_once(merchant: MerchantDatabase) -> None:
    barrier = threading.Barrier(4)
    opened: list[PostgresInbox] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        try:
            barrier.wait(timeout=10)
            opened.append(PostgresInbox(merchant.target))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for inbox in opened:
        inbox.close()
    assert failures == []
    identities = {inbox.storage.identity for inbox in opened}  # type: ignore[attr-defined]
    assert len(identities) == 1


def test_errors_name_the_database_without_its_password(pg_cluster: Cluster) -> None:
    url = f"postgresql://someone:hunter2secret@127.0.0.1:{pg_cluster.port}/no_such_db"
    with pytest.raises(StoreUnavailable) as caught:
        PostgresInbox(url, connect_timeout=2)
    assert f"postgresql://someone@127.0.0.1:{pg_cluster.port}/no_such_db" in str(caught.value)
    assert "hunter2secret" not in str(caught.value)


# -- durability ---------------------------------------------------------------------------


@pytest.mark.parametrize("database_setting", ["on", "off"])
def test_the_inbox_commits_durably_even_when_the_database_does_not(
    pg_cluster: Cluster, database_setting: str
) -> None:
    """The 2xx goes back after the commit: a commit lost to a power cut would mean a
    message acknowledged and never applied."""
    name = f"inbox_commit_{database_setting}"
    url = pg_cluster.create_database(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = {database_setting}")
    level = "SELECT current_setting('synchronous_commit')"
    with PostgresInbox(url) as inbox:
        assert inbox.process("psp", "evt_1", lambda tx: tx.execute(level).fetchone()).result == (
            "on",
        )
    # The application's own pool: its settings are its own, as with SQLite connections.
    with psycopg_pool.ConnectionPool(url, min_size=1) as pool, PostgresInbox(pool) as inbox:
        receipt = inbox.process("psp", "evt_2", lambda tx: tx.execute(level).fetchone())
        assert receipt.result == (database_setting,)
