"""Histories found by attacking the reference server's cost cut (issue 17): the
PostgreSQL pool's check by socket judged every connection broken once descriptors
passed FD_SETSIZE (select); it asks poll now."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import psycopg
import pytest

from idemclient._db.postgres import check_quiet
from idemclient.testing._storage import postgres
from tests.support.pgcluster import Cluster

#: the first descriptor `select.select` cannot watch (FD_SETSIZE)
FD_SETSIZE = 1024


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    """Every descriptor below FD_SETSIZE taken: what opens next (a database connection)
    gets one above it, as in a server process holding a thousand client sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room above FD_SETSIZE, where the process may have it (a server is often given more).
    wanted = 4 * FD_SETSIZE if hard == resource.RLIM_INFINITY else min(hard, 4 * FD_SETSIZE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < FD_SETSIZE:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# Session-wide: a database of this name exists once per cluster; a module fixture is set
# up again when the module's tests do not run together (another order), and would
# create it twice.
@pytest.fixture(scope="session")
def fd_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("perf_attack_descriptors")


def test_a_quiet_connection_above_fd_setsize_passes_the_check(
    fd_db: str, high_descriptors: None
) -> None:
    with psycopg.connect(fd_db, autocommit=True) as conn:
        conn.execute("SELECT 1")
        assert conn.fileno() >= FD_SETSIZE
        check_quiet(conn)  # healthy and idle: handed out


def test_the_server_is_answered_by_its_pool_in_a_process_with_many_sockets(
    fd_db: str, high_descriptors: None
) -> None:
    # History: the reference server on PostgreSQL, in a process that already holds a
    # thousand descriptors (client sockets under load, a test session's files). Every
    # connection its pool opens has a descriptor above 1024; the check made on handing
    # one out raises for each, so every phase and every replay waits out the pool's
    # timeout and fails. Before the cost cut the check was a query, which works.
    storage = postgres.PostgresStorage(fd_db, connect_timeout=1.0)
    try:
        assert storage.key_row(client="shop-1", key="k-1") is None
    finally:
        storage.close()
