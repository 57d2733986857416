"""The SQLite store cut short by Ctrl-C where a signal can land between two of its own
steps: nothing half done is left for a later write to complete.

- an intent queued for the group commit whose caller is interrupted while it waits for
  the connection is never admitted afterwards by another thread (its caller has gone,
  and would never give its lease back);
- a transaction interrupted right after its BEGIN is rolled back, not left open on the
  connection for the next writes to join and never commit.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient._db.sqlite import immediate
from idemclient._intent import intent_for
from idemclient.store import SQLiteStore

BOUND = 10.0  # a bound on a test that went wrong, never a wait the test relies on


def _intent(key: str) -> Any:
    request = httpx.Request(
        "POST", "https://psp.test/v1/payments", json={"amount": 1}, headers={"Idempotency-Key": key}
    )
    return intent_for(request, request.read())


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals")
def test_an_intent_given_up_while_waiting_for_the_connection_is_never_admitted(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    main = threading.get_ident()
    holding = threading.Event()
    release = threading.Event()

    def hold_the_connection() -> None:
        with store._use():  # another thread's write in progress
            holding.set()
            assert release.wait(BOUND)
            # ...then that thread admits what is queued: a group commit.
            store._admit_queued(store._conn)

    def interrupt_once_queued() -> None:
        for _ in range(int(BOUND / 0.001)):
            if store._queue:
                break
            threading.Event().wait(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    holder = threading.Thread(target=hold_the_connection)
    holder.start()
    assert holding.wait(BOUND)
    interrupter = threading.Thread(target=interrupt_once_queued)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # Waits for the connection the other thread holds; Ctrl-C meanwhile.
            store.begin(_intent("k-gone"), owner="gone:1", now=1.0, lease_until=100.0)
    finally:
        interrupter.join(BOUND)
        release.set()
        holder.join(BOUND)
    assert store.get_by_key("k-gone") is None
    store.close()


class _StoppedAfterBegin:
    """A connection whose BEGIN runs, and then a Ctrl-C lands before anything else."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self.conn.execute(sql, *args)
        if sql == "BEGIN IMMEDIATE":
            raise KeyboardInterrupt
        return cursor

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction


def test_a_transaction_interrupted_right_after_begin_is_rolled_back(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    stopped = _StoppedAfterBegin(conn)
    with pytest.raises(KeyboardInterrupt), immediate(stopped):  # type: ignore[arg-type]
        raise AssertionError("the block never runs")
    assert not conn.in_transaction
    conn.execute("INSERT INTO t VALUES (1)")  # autocommitted, as every later write
    other = sqlite3.connect(tmp_path / "t.db")
    assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)
    other.close()
    conn.close()
