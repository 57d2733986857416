"""Fixtures shared by several test folders.

`pg_cluster`: one real PostgreSQL 15 for the whole session, for the client's store
(tests/postgres) and the reference server's storage (tests/server_postgres) alike.
It starts only when a test asks for it (about a second and a half) and is stopped at
the end even when tests fail. When PostgreSQL is not installed the tests that need it
fail with a message saying how to install it: a missing database is a broken test
machine, not a reason to skip.

The cluster's helper (tests/support/pgcluster.py) needs psycopg, so it is imported only
when a test asks for the fixture: the rest of the suite runs without the postgres extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.pgcluster import Cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    from tests.support.pgcluster import Cluster, ClusterError

    try:
        cluster = Cluster()
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        cluster.start()
        yield cluster
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        cluster.stop()
