"""A process forked while another thread held one of the client's locks (a web server
forking its workers from an app that has paid, `multiprocessing` with fork) pays in the
child: the thread that held it does not exist there, and nothing would ever release
it. And the child is a lease owner of its own, never its parent.

Each case is a real `os.fork()` in a process of its own, against the reference server
in process: the parent pays, a thread of it takes the lock and keeps it, the parent
forks, and the child pays. The child is bounded by an alarm (a deadlock kills it,
which the parent reports), the whole by the subprocess's timeout; nothing waits on
time otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from tests.support.processes import python_lines

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

BOUND = 60  # a bound on a test gone wrong, never a wait the test relies on

#: The parent pays, a thread takes `{held}` (a lock) and keeps it, the parent forks;
#: the child pays with `{child_client}` (the parent's `client`, or one of its own) and
#: prints what it was told, and how it names a lease's owner.
FORKED = textwrap.dedent(
    """
    import asyncio, os, signal, sys, threading
    from idemclient import AsyncClient, Client
    from idemclient.store import MemoryStore, new_owner, owner_is_dead, release_owner
    from idemclient.testing import ReferenceServer
    from idemclient._seam import settings_of
    from idemclient._store import _owners

    server = ReferenceServer()
    PAYMENT = {{"amount": 1999, "currency": "EUR"}}

    def client_of(store, kind=Client):
        return kind(
            base_url="http://psp.test",
            transport=server.transport,
            store=store,
            headers={{"Authorization": "Bearer sk_test_secret"}},
        )

    def pay(client, operation, url="/v1/payments"):
        options = dict(json={{**PAYMENT, "reference": operation}}, operation_id=operation)
        if isinstance(client, AsyncClient):
            return asyncio.run(client.post(url, **options)).state.value
        return client.post(url, **options).state.value

    client = client_of(MemoryStore())
    print("parent", pay(client, "order-1"), flush=True)
    # An async client opens its store at its first call, in a thread of its own.
    unopened = client_of(sys.argv[1] + "/later.db", AsyncClient)
    parents = new_owner()  # a call of the parent, live as it forks

    held, done = threading.Event(), threading.Event()

    def hold():
        with {held}:
            held.set()
            done.wait()

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait({bound})
    child = os.fork()
    if child == 0:
        signal.alarm({bound} // 2)  # a deadlock ends here, by SIGALRM
        try:
            paying = {child_client}
            paid = pay(paying, "order-2", "http://psp-2.test/v1/payments")
            print("child", paid, len(server.ledger()), flush=True)
            ours = new_owner()
            same = ours.split(":")[:3] == parents.split(":")[:3]
            print("owner", "same" if same else "own", owner_is_dead(parents), flush=True)
            release_owner(ours)
        except BaseException as error:
            print("child", type(error).__name__, error, flush=True)
        os._exit(0)
    done.set()
    _, status = os.waitpid(child, 0)
    print("exit", os.waitstatus_to_exitcode(status), len(server.ledger()), flush=True)
    """
)


def forked(tmp_path: Path, *, held: str, child_client: str) -> list[str]:
    script = FORKED.format(held=held, child_client=child_client, bound=BOUND)
    return python_lines(script, str(tmp_path), timeout=BOUND * 2)


#: the parent's payment, the child's (the ledger in the child: both), the child's
#: owner its own, the parent's call not dead to it; the child exited by itself
PAID_IN_THE_CHILD = [
    "parent succeeded",
    "child succeeded 2",
    "owner own False",
    "exit 0 1",
]


def test_a_child_forked_while_a_thread_named_a_lease_owner_pays(tmp_path: Path) -> None:
    # A thread of the parent was naming a lease's owner (every call does, as it
    # begins) as the process forked: in the child, a client of its own pays.
    lines = forked(
        tmp_path,
        held="_owners._state_lock",
        child_client="client_of(MemoryStore())",
    )
    assert lines == PAID_IN_THE_CHILD, lines


@pytest.mark.parametrize(
    "held",
    [
        # noting the server's `Date` (every answer is noted)
        "settings_of(client.http).server_times._lock",
        # watching this host's clock for a step back (every call does, as it begins)
        "settings_of(client.http).watch._lock",
        # the retry budget (every success gives a token back)
        "settings_of(client.http).budget._lock",
        # finding the profile of a host not seen yet (the child pays at another)
        "settings_of(client.http).hosts._lock",
        # opening an async client's store at its first call (the child opens its own)
        "settings_of(unopened.http).store._lock",
        # inside its store (a MemoryStore: its rows are the child's own copy)
        "settings_of(client.http).store._lock",
    ],
    ids=[
        "server time",
        "clock watch",
        "retry budget",
        "profile by host",
        "store opening",
        "store",
    ],
)
def test_a_child_forked_while_a_thread_held_a_lock_of_its_parents_client_pays(
    tmp_path: Path, held: str
) -> None:
    # A thread of the parent was inside one of its client's locks as the process
    # forked: in the child, the parent's client pays.
    paying = held.partition(".http")[0].removeprefix("settings_of(")
    lines = forked(tmp_path, held=held, child_client=paying)
    assert lines == PAID_IN_THE_CHILD, lines


def test_a_child_is_a_lease_owner_of_its_own(tmp_path: Path) -> None:
    # Nothing held: the child names itself afresh (pid, token, start time), so it never
    # presents its parent's identity, and its parent's live call is not taken for dead.
    lines = forked(tmp_path, held="threading.Lock()", child_client="client")
    assert lines == PAID_IN_THE_CHILD, lines


#: a client of the parent's with OpenTelemetry hooks (kept in the script's globals, so
#: that the child pays with it), and the lock its telemetry takes as it counts an outcome
TRACED = (
    'globals().setdefault("traced", Client(base_url="http://psp.test",'
    " transport=server.transport, store=MemoryStore(),"
    ' headers={"Authorization": "Bearer sk_test_secret"},'
    ' hooks=__import__("idemclient.otel", fromlist=["otel_hooks"]).otel_hooks()))'
)
TELEMETRY_LOCK = (
    f"[{TRACED}, next(o for o in __import__('gc').get_objects()"
    " if type(o).__name__ == '_Telemetry')][1]._lock"
)


def test_a_child_forked_while_a_thread_counted_an_outcome_for_opentelemetry_pays(
    tmp_path: Path,
) -> None:
    # A thread of the parent was counting an outcome for OpenTelemetry (every call of a
    # client with `otel_hooks()` does, as it ends) as the process forked: in the child,
    # that client's next call must not wait for ever at its end.
    lines = forked(tmp_path, held=TELEMETRY_LOCK, child_client='globals()["traced"]')
    assert lines == PAID_IN_THE_CHILD, lines


#: a client of the parent's on a SQLite file that has paid (kept in the script's
#: globals, so that the child pays with it), and its store's lock
FILED = (
    '[globals().setdefault("filed", client_of(sys.argv[1] + "/filed.db")),'
    ' pay(globals()["filed"], "order-0"),'
    ' settings_of(globals()["filed"].http).store._lock][2]'
)


def test_a_child_forked_from_a_parent_whose_sqlite_store_was_in_use_pays_on_a_connection_of_its_own(
    tmp_path: Path,
) -> None:
    # The parent paid through a SQLite file, and a thread of it held the store's lock as
    # it forked: in the child, the parent's client pays (its store's connections were
    # the parent's: SQLite's file locks and its log are per process, so the child opens
    # its own), and the parent's store still works, with both payments in it.
    lines = forked(tmp_path, held=FILED, child_client='globals()["filed"]')
    assert lines == ["parent succeeded", "child succeeded 3", "owner own False", "exit 0 2"], lines
    from idemclient.store import SQLiteStore

    store = SQLiteStore(tmp_path / "filed.db")
    try:
        assert store.get("order-0").state.value == "succeeded"
        assert store.get("order-2").state.value == "succeeded"
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "filed.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


#: A parent opens a SQLite store, uses it, and forks: the child's calls must not use the
#: parent's connections (SQLite's locks and its log are per process), nor close them
#: (the parent's would lose what they hold); the parent's go on working.
CONNECTIONS = textwrap.dedent(
    """
    import os, sys
    from idemclient.store import SQLiteStore
    store = SQLiteStore(sys.argv[1] + "/s.db")
    store.get("nothing")
    parents = store._conn
    child = os.fork()
    if child == 0:
        store.get("nothing")
        print("child", "own" if store._conn is not parents else "parent's", flush=True)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    store.get("nothing")
    print("parent", "own" if store._conn is parents else "lost", flush=True)
    store.close()
    """
)


def test_a_forked_child_opens_its_own_sqlite_connections(tmp_path: Path) -> None:
    lines = python_lines(CONNECTIONS, str(tmp_path), timeout=BOUND * 2)
    assert lines == ["child own", "parent own"]
