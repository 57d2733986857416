"""Databases in the session's PostgreSQL (`pg_cluster`, tests/conftest.py), and stores
of both kinds for the contract tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from idemclient import SQLiteStore, Store
from idemclient.postgres import PostgresStore
from idemclient.testing._pgcluster import Cluster


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
