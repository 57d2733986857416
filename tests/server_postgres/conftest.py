"""The reference server on PostgreSQL: databases, servers, and the fixtures of
tests/server, backed by PostgreSQL, so that its test bodies can run here unchanged.

tests/server's tests take `env` (in-process and over a socket), `inproc`,
`reference_server` and `live_reference_server`. This folder defines the same names
with the server's state in the session's PostgreSQL (`pg_cluster`), and the
`test_*_postgres.py` modules collect tests/server's test functions again (see
`reused.py`): one body, pinning the same behaviour on both backends.

The in-process and the live server are each made once per session and reset before
every test (a TRUNCATE): creating one is cheap, but a session's worth adds up. Their
clocks only move forward, and the reused tests only use offsets from now.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import psycopg
import pytest

from idemclient.testing import LiveServer, ReferenceServer, SandboxClient, serve
from idemclient.testing._storage.postgres import SCHEMA
from tests.support.pgcluster import Cluster

from ..server.server_helpers import Env


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def _inproc_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("server_inproc")


@pytest.fixture(scope="session")
def _live_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("server_live")


@pytest.fixture(scope="session")
def _shared_inproc(_inproc_db: str) -> Iterator[ReferenceServer]:
    with ReferenceServer(db=_inproc_db) as server:
        yield server


@pytest.fixture(scope="session")
def _shared_live(_live_db: str) -> Iterator[LiveServer]:
    with ReferenceServer(db=_live_db) as server, serve(server) as live:
        yield live


@pytest.fixture
def reference_server(_shared_inproc: ReferenceServer) -> Iterator[ReferenceServer]:
    """The plugin's fixture of this name, on PostgreSQL: in-process, a manual clock."""
    _shared_inproc.reset()
    yield _shared_inproc
    _shared_inproc.reset()  # releases any gate a failed test left held


@pytest.fixture
def live_reference_server(_shared_live: LiveServer) -> Iterator[LiveServer]:
    """The plugin's fixture of this name, on PostgreSQL: a real loopback socket."""
    _shared_live.server.reset()
    yield _shared_live
    _shared_live.server.reset()


@pytest.fixture(params=["in-process", "live"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    """tests/server's `env`, on PostgreSQL."""
    with ExitStack() as stack:
        if request.param == "live":
            live: LiveServer = request.getfixturevalue("live_reference_server")
            http = stack.enter_context(httpx.Client(verify=False))
            control = stack.enter_context(SandboxClient(live.url, client=http))
            result = Env("live", live.server, control, live.url, None)
        else:
            server: ReferenceServer = request.getfixturevalue("reference_server")
            result = Env("in-process", server, server, "http://psp.test", server.transport)
        with result.stack:
            yield result


@pytest.fixture
def inproc(reference_server: ReferenceServer) -> Iterator[Env]:
    """tests/server's `inproc`, on PostgreSQL."""
    env = Env(
        "in-process",
        reference_server,
        reference_server,
        "http://psp.test",
        reference_server.transport,
    )
    with env.stack:
        yield env


@pytest.fixture(scope="session")
def _empty_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("server_empty")


@pytest.fixture
def pg_db(_empty_db: str) -> str:
    """A database without the server's schema: each test here creates its own."""
    with psycopg.connect(_empty_db, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    return _empty_db
