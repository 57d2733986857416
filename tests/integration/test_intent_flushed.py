"""The intent is on disk before the first byte of the payment leaves.

A process pays once through `Client` (the default store, `Durability.INTENT`) against
the reference server on a loopback socket, under `strace`: the last write to the
store's write-ahead log before the request goes out is followed by a flush of that log
(`fdatasync`/`fsync`) before the request's first byte is written to the socket. A
power loss after the send then cannot forget the key of a payment the server may hold.
Observed from outside the process (its system calls), so the test says nothing of how
the store is written, only that the promise holds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer, serve

CHILD = """
import sys
from idemclient import Client, RetryPolicy
with Client(
    store=sys.argv[1],
    base_url=sys.argv[2],
    headers={"Authorization": "Bearer shop-1"},
    policy=RetryPolicy(max_attempts=1),
    server_clock=False,
) as client:
    outcome = client.post(
        "/v1/payments",
        json={"amount": 700, "currency": "EUR", "reference": "inv-1"},
        operation_id="inv-1",
    )
assert outcome.succeeded, outcome
"""


def test_the_intent_is_flushed_before_the_payment_is_sent(tmp_path: Path) -> None:
    store = tmp_path / "shop.db"
    SQLiteStore(store).close()  # made before: what the traced process writes is its own
    trace = tmp_path / "trace.txt"
    # Installed by .ci/run where it is missing: without it this proof would prove nothing.
    assert shutil.which("strace"), "strace is needed to watch the process's system calls"
    with ReferenceServer() as server, serve(server) as live:
        command = ["strace", "-f", "-qq", "-y", "-s", "64", "-o", str(trace)]
        command += ["-e", "trace=fsync,fdatasync,write,pwrite64,writev,sendto,sendmsg"]
        command += [sys.executable, "-c", CHILD, str(store), live.url]
        done = subprocess.run(
            command,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert len(server.ledger()) == 1
    lines = trace.read_text().splitlines()
    wal = f"{store}-wal>"
    sent = next(i for i, line in enumerate(lines) if '"POST /v1/payments' in line)
    before = lines[:sent]
    written = [i for i, line in enumerate(before) if "write" in line.split("(")[0] and wal in line]
    assert written, "the intent was not written to the store's log before the send"
    flushed = [
        i
        for i, line in enumerate(before)
        if re.match(r"^\d+\s+f(data)?sync\(", line) and wal in line and i > written[-1]
    ]
    assert flushed, (
        "the store's log was not flushed between the intent's last write and the send:\n"
        + "\n".join([*before[written[-1] :], lines[sent]])
    )
