"""Databases in the session's PostgreSQL (`pg_cluster`, tests/conftest.py), stores of
both kinds for the contract tests, and a merchant's database of both kinds for the
inbox's."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from idemclient.inbox import Inbox, SQLiteInbox
from idemclient.postgres import PostgresInbox, PostgresStore
from idemclient.store import SQLiteStore, Store
from tests.support.pgcluster import Cluster


@pytest.fixture(scope="session")
def pg_shared_url(pg_cluster: Cluster) -> str:
    """One database for the tests that each take a schema of their own."""
    return pg_cluster.create_database("shared")


@pytest.fixture(scope="session")
def _pg_fresh_database(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("fresh")


@pytest.fixture
def pg_url(_pg_fresh_database: str) -> str:
    """An empty database: for tests of the default schema and of whole clients.

    One database emptied before each test: creating one per test costs a quarter of a
    second each.
    """
    with psycopg.connect(_pg_fresh_database, autocommit=True) as conn:
        schemas = [
            name
            for (name,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
                " AND nspname != 'information_schema'"
            )
        ]
        for name in schemas:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')
        conn.execute("CREATE SCHEMA public")
    return _pg_fresh_database


@pytest.fixture
def pg_schema(pg_shared_url: str) -> Iterator[str]:
    """A schema name nobody uses yet, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_shared_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


StoreFactory = Callable[..., Store]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreFactory]:
    """Opens stores of the parametrized backend with the options given; closes them."""
    opened: list[Store] = []
    target: dict[str, str] = {}
    if backend == "postgres":
        target["url"] = request.getfixturevalue("pg_shared_url")
        target["schema"] = request.getfixturevalue("pg_schema")

    def make(**options: Any) -> Store:
        store: Store
        if backend == "sqlite":
            store = SQLiteStore(tmp_path / "ops.db", **options)
        else:
            store = PostgresStore(target["url"], schema=target["schema"], **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


def raw_dump(store: Store) -> bytes:
    """Everything the store has written, as bytes, to search for things never written."""
    if isinstance(store, SQLiteStore):
        folder = Path(store.path).parent
        return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("ops.db"))
    assert isinstance(store, PostgresStore)
    with store._use() as conn:
        rows = conn.execute(
            f'SELECT row_to_json(o)::text FROM "{store.schema}".operations o'
        ).fetchall()
    return "\n".join(text for (text,) in rows).encode()


# -- the inbox: a merchant's database on either backend ---------------------------------


class MerchantDatabase:
    """A merchant's database holding its own `effects` table (no unique constraint: a
    message processed twice leaves two rows), and the inboxes opened on it.

    `target` is a SQLite file or a PostgreSQL URL; the inbox's tables go beside the
    merchant's, in the same database, as an application would have them.
    """

    def __init__(self, backend: str, target: str) -> None:
        self.backend = backend
        self.target = target
        self.opened: list[Inbox[Any]] = []
        with self.connect() as conn:
            conn.execute(
                "CREATE TABLE effects (message_id text NOT NULL, note text)"
            )  # the same DDL on both
            conn.commit()

    def close(self) -> None:
        for inbox in self.opened:
            inbox.close()

    def open_inbox(self, **options: Any) -> Inbox[Any]:
        inbox: Inbox[Any]
        if self.backend == "sqlite":
            inbox = SQLiteInbox(self.target, **options)
        else:
            inbox = PostgresInbox(self.target, **options)
        self.opened.append(inbox)
        return inbox

    def connect(self) -> Any:
        """The merchant's own connection, outside the inbox (Python's default modes)."""
        if self.backend == "sqlite":
            return contextlib.closing(sqlite3.connect(self.target))
        return psycopg.connect(self.target)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """The merchant's own transaction on its own connection, committed on exit."""
        if self.backend == "sqlite":
            with contextlib.closing(sqlite3.connect(self.target, isolation_level=None)) as conn:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
        else:
            with psycopg.connect(self.target, autocommit=True) as conn, conn.transaction():
                yield conn

    def effects(self) -> dict[str, int]:
        """message id -> how many times its effect was applied (committed rows)."""
        with self.connect() as conn:
            rows = conn.execute("SELECT message_id, count(*) FROM effects GROUP BY message_id")
            return {message_id: int(n) for message_id, n in rows.fetchall()}

    def recorded(self) -> set[tuple[str, str]]:
        table = "idemclient_inbox" if self.backend == "sqlite" else "idemclient_inbox.inbox"
        with self.connect() as conn:
            return {(s, m) for s, m in conn.execute(f"SELECT sender, message_id FROM {table}")}


def add_effect(tx: Any, message_id: str, note: str | None = None) -> None:
    """The merchant's effect, written through the transaction the inbox hands over."""
    mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
    sql = f"INSERT INTO effects (message_id, note) VALUES ({mark}, {mark})"
    tx.execute(sql, (message_id, note))


@pytest.fixture(params=["sqlite", "postgres"])
def merchant(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MerchantDatabase]:
    if request.param == "sqlite":
        database = MerchantDatabase("sqlite", str(tmp_path / "merchant.db"))
    else:
        database = MerchantDatabase("postgres", request.getfixturevalue("pg_url"))
    yield database
    database.close()
