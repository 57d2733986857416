"""Batches of many rows: validate and register, submit with 16 workers (rows the store
knows, and on a fresh store with one look-up per row), peak memory.

Each size runs in a child process of its own, so that its peak RSS is its own.
Submission goes to the server's no-op endpoint, for idemclient and plain httpx alike:
the figure is what the client side costs at concurrency 16.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

COLUMNS = [
    "validate_s",
    "register_s",
    "submit_per_s",
    "httpx_per_s",
    "vs_httpx",
    "fresh_lookup_per_s",
    "fresh_vs_httpx",
    "peak_rss_mb",
]
NOOP = "/_sandbox/noop"
#: The reference server's search of its payouts by reference: on a fresh store every row
#: is asked here first (none is found: the rows go to the no-op endpoint).
LOOKUP = "/v1/payouts?reference={reference}"


def write_csv(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("ref,employee_id,name,account,amount,currency,value_date\n")
        for n in range(rows):
            out.write(f"R{n:07d},E{n},Employee {n},GB00TEST{n:014d},{100000 + n},GBP,2026-11-30\n")


def run(url: str, work: Path, sizes: tuple[int, ...]) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for rows in sizes:
        csv_path = work / f"batch-{rows}.csv"
        write_csv(csv_path, rows)
        child = subprocess.run(
            [sys.executable, __file__, str(csv_path), url, str(work / f"store-{rows}.db")],
            capture_output=True,
            text=True,
            check=True,
        )
        results[f"{rows:,} rows"] = json.loads(child.stdout)
    return results


def child(csv_path: str, url: str, store_path: str) -> dict[str, Any]:
    import httpx

    from idemclient import Client
    from idemclient.batch import read_batch, submit
    from idemclient.batch._run import make_run
    from idemclient.keys import DEFAULT_NAMESPACE
    from idemclient.store import SQLiteStore

    headers = {"Authorization": "Bearer bench-batch"}
    started = time.perf_counter()
    batch = read_batch(csv_path)
    validated = time.perf_counter()
    # Registration alone, into a store of its own: derive every row's identity, ask the
    # store what it knows of them, build every request, record all rows in one
    # transaction. The no-op endpoint has no look-up, so none is made (lookup=None)
    # here or below: the figures are the client's own cost, as for plain httpx.
    with Client(base_url=url, headers=headers, store=SQLiteStore(store_path + ".reg")) as client:
        before = time.perf_counter()
        run = make_run(
            batch,
            client,
            path=NOOP,
            operation="payout",
            namespace=DEFAULT_NAMESPACE,
            concurrency=16,
            on_progress=None,
            lookup=None,
            statuses=None,
            reliable_404=False,
        )
        run.plan()
        run.record()
        register_s = time.perf_counter() - before
        run.close()
        client.store.close()
        # Kept, this run's rows would still be held while the submission below runs,
        # and counted in its peak: a user runs one or the other.
        del run
    # The whole submission (registration included) into a fresh store.
    with Client(base_url=url, headers=headers, store=store_path) as client:
        began = time.perf_counter()
        report = submit(batch, client, path=NOOP, concurrency=16, lookup=None)
        submit_s = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if report.exit_code != 0:
        raise RuntimeError(report.summary())
    # A fresh store with the look-up on, as `idemclient batch submit` runs by default: every
    # row is new to the store, so each is looked up on the server (by the 16 workers, as
    # it is sent) before its first send.
    with Client(base_url=url, headers=headers, store=store_path + ".fresh") as client:
        began = time.perf_counter()
        looked = submit(batch, client, path=NOOP, concurrency=16, lookup=LOOKUP)
        fresh_s = time.perf_counter() - began
    if looked.exit_code != 0:
        raise RuntimeError(looked.summary())
    with httpx.Client(base_url=url, headers=headers) as http, ThreadPoolExecutor(16) as pool:
        began = time.perf_counter()
        answers = pool.map(
            lambda row: http.post(
                NOOP, json=row.payload(), headers={"Idempotency-Key": row.reference}
            ),
            batch.rows,
        )
        if any(a.status_code != 200 for a in answers):
            raise RuntimeError("plain httpx got errors")
        plain_s = time.perf_counter() - began
    rows = len(batch.rows)
    return {
        "validate_s": validated - started,
        "register_s": register_s,
        "submit_per_s": rows / submit_s,
        "httpx_per_s": rows / plain_s,
        "vs_httpx": plain_s / submit_s,
        "fresh_lookup_per_s": rows / fresh_s,
        "fresh_vs_httpx": plain_s / fresh_s,
        "peak_rss_mb": peak,
    }


if __name__ == "__main__":
    print(json.dumps(child(*sys.argv[1:4])))
