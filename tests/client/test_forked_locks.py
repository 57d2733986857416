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

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

BOUND = 60  # a bound on a test gone wrong, never a wait the test relies on

#: The parent pays, a thread takes `{held}` (a lock) and keeps it, the parent forks;
#: the child pays with `{child_client}` (the parent's `client`, or one of its own) and
#: prints what it was told, and how it names a lease's owner.
FORKED = textwrap.dedent(
    """
    import os, signal, sys, threading
    from idemclient import Client
    from idemclient.store import MemoryStore, new_owner, owner_is_dead, release_owner
    from idemclient.testing import ReferenceServer
    from idemclient._seam import settings_of
    from idemclient._store import _owners

    server = ReferenceServer()
    PAYMENT = {{"amount": 1999, "currency": "EUR"}}

    def client_of(store):
        return Client(
            base_url="http://psp.test",
            transport=server.transport,
            store=store,
            headers={{"Authorization": "Bearer sk_test_secret"}},
        )

    def pay(client, operation):
        return client.post(
            "/v1/payments", json={{**PAYMENT, "reference": operation}}, operation_id=operation
        ).state.value

    client = client_of(MemoryStore())
    print("parent", pay(client, "order-1"), flush=True)
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
            print("child", pay(paying, "order-2"), len(server.ledger()), flush=True)
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
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=BOUND * 2,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


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


def test_a_child_forked_while_a_thread_noted_the_servers_time_pays(tmp_path: Path) -> None:
    # A thread of the parent was noting the server's `Date` (every answer is noted) as
    # the process forked: in the child, the parent's client pays.
    lines = forked(
        tmp_path,
        held="settings_of(client.http).server_times._lock",
        child_client="client",
    )
    assert lines == PAID_IN_THE_CHILD, lines


def test_a_child_is_a_lease_owner_of_its_own(tmp_path: Path) -> None:
    # Nothing held: the child names itself afresh (pid, token, start time), so it never
    # presents its parent's identity, and its parent's live call is not taken for dead.
    lines = forked(tmp_path, held="threading.Lock()", child_client="client")
    assert lines == PAID_IN_THE_CHILD, lines
