"""A SQLite store across a fork: SQLite keeps, per process, a record of the locks each
of its connections holds on a file, and a forked child gets a copy of its parent's. A
child that wrote through that copy would believe it holds locks it does not: a write
the parent had open as it forked would hold the file in the child for ever, and the
parent, closing its store, would take itself for the file's last user and remove the
log the child is writing to (the child's records lost).

Each case is a real `os.fork()` in a process of its own, against the reference server
in process; the child is bounded by an alarm, the whole by the subprocess's timeout;
pipes say when each side may go on, and nothing waits on time otherwise.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.support.processes import python_lines

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

BOUND = 60  # a bound on a test gone wrong, never a wait the test relies on

#: The parent pays through a SQLite file, then forks; `{before}` runs before the fork,
#: `{child}` in the child (told `go` by the parent), `{parent}` in the parent before it
#: tells the child to go on, and a fresh connection then reads what the file holds.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sqlite3, sys, threading
    from idemclient import Client
    from idemclient.store import SQLiteStore
    from idemclient.testing import ReferenceServer
    from idemclient.testing.store_contract import make_intent

    path = sys.argv[1] + "/s.db"
    server = ReferenceServer()
    store = SQLiteStore(path, busy_timeout=5.0)
    client = Client(
        base_url="http://psp.test",
        transport=server.transport,
        store=store,
        headers={{"Authorization": "Bearer sk_test_secret"}},
    )

    def pay(operation):
        options = dict(
            json={{"amount": 1999, "currency": "EUR", "reference": operation}},
            operation_id=operation,
        )
        return client.post("/v1/payments", **options).state.value

    print("parent", pay("order-1"), flush=True)
    {{before}}
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        signal.alarm({bound} // 2)  # a deadlock ends here, by SIGALRM
        try:
    {{child}}
        except BaseException as error:
            print("child", type(error).__name__, error, flush=True)
        os._exit(0)
    {{parent}}
    _, status = os.waitpid(child, 0)
    print("exit", os.waitstatus_to_exitcode(status), flush=True)
    with sqlite3.connect(path) as conn:
        rows = [row[0] for row in conn.execute("SELECT id FROM operations ORDER BY id")]
    print("kept", *rows, flush=True)
    """
)


def run(tmp_path: Path, *, before: str, child: str, parent: str) -> list[str]:
    script = SCRIPT.format(bound=BOUND)
    parts = (("before", before, ""), ("child", child, " " * 8), ("parent", parent, ""))
    for name, code, indent in parts:
        code = textwrap.indent(textwrap.dedent(code).strip(), indent)
        script = script.replace("{" + name + "}", code)
    return python_lines(script, str(tmp_path), timeout=BOUND * 2)


#: A thread of the parent registers rows from a stream (a batch reading its file): the
#: write transaction is open, the stream waiting for `go_on`, as the process forks.
REGISTERING = f"""
inside, go_on = threading.Event(), threading.Event()

def rows():
    yield make_intent("row-1", "key-row-1")
    inside.set()  # the write transaction is open: the stream waits
    assert go_on.wait({BOUND})
    yield make_intent("row-2", "key-row-2")

registering = threading.Thread(
    target=lambda: print("registered", store.register(rows(), now=0.0), flush=True)
)
registering.start()
assert inside.wait({BOUND})
"""


def test_a_child_forked_while_its_parent_s_store_was_inside_a_write_pays(tmp_path: Path) -> None:
    # The stream goes on as the fork begins (a handler of the test's own, run before
    # the library's): the fork waits for the write to end, and the child pays.
    lines = run(
        tmp_path,
        before=REGISTERING + "os.register_at_fork(before=go_on.set)",
        child="""
        os.read(go_r, 1)  # the parent's write is over
        print("child", pay("order-2"), len(server.ledger()), flush=True)
        """,
        parent=f"""
        registering.join({BOUND})
        os.write(go_w, b"x")
        """,
    )
    assert lines == [
        "parent succeeded",
        "registered 2",
        "child succeeded 2",
        "exit 0",
        "kept order-1 order-2 row-1 row-2",
    ], lines


def test_a_child_s_records_outlive_its_parent_closing_the_store(tmp_path: Path) -> None:
    # A pre-forking server's parent (or a `multiprocessing` parent) that paid, forked,
    # and then closed its client: the child's intent and answer, written after that,
    # are in the file, as every later reader and a restart after a crash must see them.
    lines = run(
        tmp_path,
        before="",
        child="""
        print("child", pay("order-2"), flush=True)
        os.write(done_w, b"x")
        os.read(go_r, 1)  # the parent has closed its store
        print("child", pay("order-3"), flush=True)
        """,
        parent="""
        os.read(done_r, 1)
        client.close()
        store.close()
        os.write(go_w, b"x")
        """,
    )
    assert lines == [
        "parent succeeded",
        "child succeeded",
        "child succeeded",
        "exit 0",
        "kept order-1 order-2 order-3",
    ], lines


def test_a_child_forked_inside_a_write_that_outlasts_the_wait_is_refused_at_once(
    tmp_path: Path,
) -> None:
    # The stream waits past the fork's wait for it (it goes on only once forked): the
    # parent's write ends, and keeps its rows; the child's copy of it would hold the file
    # there for ever, so its store refuses at once, saying why, rather than waiting out
    # its busy timeout to say "database is locked".
    lines = run(
        tmp_path,
        before=REGISTERING,
        child="""
        os.read(go_r, 1)  # the parent's write is over
        print("child", pay("order-2"), flush=True)
        """,
        parent=f"""
        go_on.set()
        registering.join({BOUND})
        os.write(go_w, b"x")
        """,
    )
    assert lines[:2] == ["parent succeeded", "registered 2"], lines
    assert lines[2].startswith("child StoreUnavailable"), lines
    assert "was inside a write as this process was forked" in lines[2], lines
    assert lines[3:] == ["exit 0", "kept order-1 row-1 row-2"], lines


#: Two threads fork at once: the first's fork holds the store (its writes waited out)
#: until the second's has waited for it in vain and gone on (to the `logging` module's
#: own lock, which the first holds too: seen in the second thread's frames, a bounded
#: poll); then both fork, and the parent pays.
TWO_FORKS = textwrap.dedent(
    """
    import os, signal, sys, threading, time

    def waits_for_logging(thread):
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            if frame.f_code.co_name == "_acquireLock":
                return True
            frame = frame.f_back
        return False

    def blocking_before():  # registered first: runs after the library's own
        if threading.current_thread().name == "first":
            for _ in range({bound} * 200):
                started = [t for t in threading.enumerate() if t.name == "second"]
                if started and waits_for_logging(started[0]):
                    break
                # A real, bounded wait: another thread's progress to a lock, which no
                # clock of ours moves (the loop gives up after {bound} seconds).
                time.sleep(0.005)
            else:
                raise AssertionError("the second fork never went on")

    os.register_at_fork(before=blocking_before)

    from idemclient import Client
    from idemclient.testing import ReferenceServer

    server = ReferenceServer()
    client = Client(
        base_url="http://psp.test",
        transport=server.transport,
        store=sys.argv[1] + "/s.db",
        headers={{"Authorization": "Bearer sk_test_secret"}},
    )

    def pay(operation):
        options = dict(
            json={{"amount": 1999, "currency": "EUR", "reference": operation}},
            operation_id=operation,
        )
        return client.post("/v1/payments", **options).state.value

    print("parent", pay("order-1"), flush=True)
    children = []

    def fork():
        child = os.fork()
        if child == 0:
            os._exit(0)
        children.append(child)

    threads = [threading.Thread(target=fork, name=name) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join({bound})
    for child in children:
        os.waitpid(child, 0)
    signal.alarm({bound} // 2)  # a store held for ever ends here, by SIGALRM
    print("parent", pay("order-2"), flush=True)
    """
)


def test_two_threads_forking_at_once_each_let_go_of_what_its_fork_held(tmp_path: Path) -> None:
    script = TWO_FORKS.format(bound=BOUND)
    lines = python_lines(script, str(tmp_path), timeout=BOUND * 2)
    assert lines == ["parent succeeded", "parent succeeded"], lines
