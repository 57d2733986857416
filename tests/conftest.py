"""Fixtures shared by several test folders.

`pg_cluster`: one real PostgreSQL 15 for the whole session, for the client's store
(tests/postgres) and the reference server's storage (tests/server_postgres) alike.
It starts only when a test asks for it (about a second and a half) and is stopped at
the end even when tests fail. When PostgreSQL is not installed the tests that need it
fail with a message saying how to install it: a missing database is a broken test
machine, not a reason to skip.

The cluster's helper (tests/support/pgcluster.py) needs psycopg, so it is imported only
when a test asks for the fixture: the rest of the suite runs without the postgres extra.

`IDEMCLIENT_TEST_JITTER` (low, high, seed:N; tests/support/jitter.py) pins the jitter of
every client built without its own `rng`: a way to find the tests whose result depends on
the draw, instead of meeting them one CI run in eight. `IDEMCLIENT_TEST_ORDER` (reverse,
shuffle:N) runs the collected tests in another order, to find a test that passes only
after (or before) another one.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.support import jitter

if TYPE_CHECKING:
    from tests.support.pgcluster import Cluster


# No per-example time limit (hypothesis's default is 200 ms): these properties are about
# answers, not speed, and on a loaded machine one slow example (a pause, a busy core)
# fails the test as "unreliable timings" though every answer was right.
settings.register_profile("idemclient", deadline=None)
settings.load_profile("idemclient")


def pytest_configure(config: pytest.Config) -> None:
    mode = os.environ.get(jitter.ENV)
    if mode:
        jitter.install(mode)
        where = Path(tempfile.mkdtemp(prefix="idemclient-jitter-"))
        config.add_cleanup(functools.partial(shutil.rmtree, where, ignore_errors=True))
        jitter.install_in_children(where)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"{name}={os.environ[name]}" for name in (jitter.ENV, ORDER) if os.environ.get(name)]


ORDER = "IDEMCLIENT_TEST_ORDER"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = os.environ.get(ORDER)
    if not order:
        return
    if order == "reverse":
        items.reverse()
    elif order.startswith("shuffle:"):
        random.Random(int(order.removeprefix("shuffle:"))).shuffle(items)
    else:
        raise pytest.UsageError(f"{ORDER}={order!r}: expected reverse or shuffle:N")


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
