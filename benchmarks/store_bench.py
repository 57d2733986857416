"""The store at size: listing unfinished operations among a million finished ones, and
reopening a store after its process was killed mid-write. SQLite, and PostgreSQL (the
run's own, see run.py) beside it."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from idemclient import State
from idemclient.postgres import PostgresStore
from idemclient.store import SQLiteStore

UNFINISHED = 1_000
COLUMNS = [
    "finished_rows",
    "unfinished_rows",
    "list_unfinished_ms",
    "reopen_after_kill_ms",
    "size_mb",
]


def fill(path: Path, finished: int) -> None:
    """Write rows straight into a new store: building a million through the client would
    measure the client, not the index."""
    with SQLiteStore(path) as store:
        conn = store._conn
        conn.execute("BEGIN IMMEDIATE")
        done, open_ = State.SUCCEEDED.value, State.INDETERMINATE.value
        rows = (
            (
                f"op-{n}", f"key-{n}", "POST", "http://psp.test/v1/payments", "[]", b"{}",
                "f" * 64, None, done if n >= UNFINISHED else open_,
                1, 1, "HTTP 201 Created", 1_800_000_000.0 + n, 1_800_000_000.0 + n,
                None if n < UNFINISHED else 1_800_000_000.0 + n,
            )
            for n in range(finished + UNFINISHED)
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
            " reference, state, attempts, maybe_applied, evidence, created_at, updated_at,"
            " finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        conn.execute("COMMIT")


WRITER = """
import sys, time
from idemclient.store import SQLiteStore
from idemclient._store import new_owner
from idemclient._store._base import Intent
if sys.argv[1].startswith("postgresql://"):
    from idemclient.postgres import PostgresStore
    store = PostgresStore(sys.argv[1], schema=sys.argv[2])
else:
    store = SQLiteStore(sys.argv[1])
print("ready", flush=True)
n = 0
while True:  # until SIGKILL
    n += 1
    intent = Intent(f"crash-{n}", f"crash-key-{n}", False, "POST", "http://x/", (), b"{}", "f" * 64)
    store.begin(intent, owner=new_owner(), now=time.time(), lease_until=time.time() + 60)
"""


def reopen_after_kill(path: Path | str, schema: str = "") -> float:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), schema], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    writer.stdout.readline()
    time.sleep(0.5)  # let it write for a while (benchmark, not a test)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    started = time.perf_counter()
    store = PostgresStore(path, schema=schema) if isinstance(path, str) else SQLiteStore(path)
    with store:
        store.unfinished(limit=1)
    return time.perf_counter() - started


def _list_unfinished(store: SQLiteStore | PostgresStore) -> float:
    """Median seconds to list every unfinished operation, over 20 runs."""
    timings = []
    for _ in range(20):
        began = time.perf_counter()
        found = store.unfinished()
        timings.append(time.perf_counter() - began)
    assert len(found) == UNFINISHED
    return statistics.median(timings)


def run(work: Path, finished: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "big.db"
    fill(path, finished)
    with SQLiteStore(path) as store:
        listing = _list_unfinished(store)
    reopen = [reopen_after_kill(path) for _ in range(3)]
    return {
        "finished_rows": finished,
        "unfinished_rows": UNFINISHED,
        "list_unfinished_ms": listing * 1000,
        "reopen_after_kill_ms": statistics.median(reopen) * 1000,
        "size_mb": path.stat().st_size / 1e6,
    }


def fill_postgres(store: PostgresStore, finished: int) -> None:
    """The rows `fill` writes, written by PostgreSQL itself (generate_series), then
    analysed, as autovacuum would have by the time a store is that large."""
    table = f"{store._quoted}.operations"
    with store._use() as conn:
        conn.execute(
            f"INSERT INTO {table} (id, key, method, url, headers, body, fingerprint, reference,"
            " state, attempts, maybe_applied, evidence, created_at, updated_at, finished_at)"
            " SELECT 'op-' || n, 'key-' || n, 'POST', 'http://psp.test/v1/payments', '[]',"
            " '\\x7b7d', repeat('f', 64), NULL,"
            " CASE WHEN n >= %(open)s THEN %(done)s ELSE %(unfinished)s END, 1, true,"
            " 'HTTP 201 Created', 1800000000.0 + n, 1800000000.0 + n,"
            " CASE WHEN n >= %(open)s THEN 1800000000.0 + n END"
            " FROM generate_series(0, %(total)s - 1) AS n",
            {
                "open": UNFINISHED,
                "done": State.SUCCEEDED.value,
                "unfinished": State.INDETERMINATE.value,
                "total": finished + UNFINISHED,
            },
        )
        conn.execute(f"ANALYZE {table}")


def run_postgres(url: str, finished: int) -> dict[str, Any]:
    """The same measurements on a PostgresStore in the run's database."""
    schema = "bench_store"
    with PostgresStore(url, schema=schema) as store:
        fill_postgres(store, finished)
        listing = _list_unfinished(store)
        with store._use() as conn:
            size = conn.execute(
                "SELECT pg_total_relation_size(%s)", (f"{store._quoted}.operations",)
            ).fetchone()
    reopen = [reopen_after_kill(url, schema) for _ in range(3)]
    return {
        "finished_rows": finished,
        "unfinished_rows": UNFINISHED,
        "list_unfinished_ms": listing * 1000,
        "reopen_after_kill_ms": statistics.median(reopen) * 1000,
        "size_mb": (size[0] if size else 0) / 1e6,
    }


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), int(sys.argv[2]))))
