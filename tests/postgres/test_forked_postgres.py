"""A PostgreSQL store opened before a fork: its connections are its parent's (one
socket, one session on the server), and a child that spoke on them would mix its
statements into the parent's session. The child's calls are refused, saying why; the
parent's connections go on working, the child never closes them.

A real `os.fork()` in a process of its own, bounded by the subprocess's timeout."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.support.processes import python_lines

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

BOUND = 60  # a bound on a test gone wrong, never a wait the test relies on

FORKED = textwrap.dedent(
    """
    import os, sys
    from idemclient.errors import StoreUnavailable
    from idemclient.postgres import PostgresStore

    store = PostgresStore(sys.argv[1], max_connections=1)
    store.get("nothing")
    child = os.fork()
    if child == 0:
        try:
            store.get("nothing")
            print("child read through its parent's connection", flush=True)
        except StoreUnavailable as error:
            print("child refused:", "fork" in str(error), flush=True)
        store.close()  # never closes the parent's connections
        os._exit(0)
    _, status = os.waitpid(child, 0)
    print("exit", os.waitstatus_to_exitcode(status), flush=True)
    store.get("nothing")
    print("parent reads", flush=True)
    store.close()
    """
)


def test_a_forked_child_does_not_speak_on_its_parents_postgres_connections(pg_url: str) -> None:
    lines = python_lines(FORKED, pg_url, timeout=BOUND * 2)
    assert lines == ["child refused: True", "exit 0", "parent reads"]
