"""`make bench`: what safety costs, beside plain httpx and the peer retry libraries.

One run, one loopback reference server (its own process, a file database), every
contender measured in interleaved rounds so that drift on a shared machine hits all
of them alike. Figures are medians. Writes a table to stdout and the same as JSON.

The run starts its own PostgreSQL (initdb in a temporary folder, loopback, fsync on,
stopped at the end; the same helper the tests use) for idemclient's PostgreSQL store
and the reference server on PostgreSQL, which are measured beside their SQLite
counterparts. `--no-postgres` leaves them out.

From the repository's root (the run imports the tests' PostgreSQL helper,
tests/support/pgcluster.py, which the installed package does not ship):

    python -m benchmarks.run                 # the full run (a few minutes)
    python -m benchmarks.run --quick         # a smoke run of tiny sizes
    python -m benchmarks.run --only store    # one section
    python -m benchmarks.run --only cpu      # the client's CPU on a mock transport
    python -m benchmarks.run --only startup  # import time, and the pytest plugin's cost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from idemclient import State
from idemclient._fingerprint import fingerprint
from idemclient._store import Intent, Progress, StoredResponse, new_owner, release_owner
from idemclient.store import SQLiteStore
from idemclient.testing import spawn
from tests.support.pgcluster import Cluster

from . import batch_bench, batch_memory, client_cpu, contenders, server_bench, startup, store_bench

NOOP = "/_sandbox/noop"
PAYMENTS = "/v1/payments"


class Sizes:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.seq_ops = 60 if quick else 600  # per contender per round
        self.seq_rounds = 2 if quick else 5
        self.conc_seconds = 0.5 if quick else 4.0
        self.batch_rows = (200, 1000) if quick else (10_000, 100_000)
        # A million rows: `python -m benchmarks.batch_memory 1000000` (half an hour).
        self.batch_memory_rows = (200, 1000) if quick else (10_000, 100_000)
        self.store_finished = 10_000 if quick else 1_000_000
        self.server_seconds = 1 if quick else 5


def start_postgres(stack: ExitStack) -> str:
    """A PostgreSQL for this run, stopped when `stack` closes; the URL of its database.

    fsync stays on (unlike the test suite's): the durability levels are the point of
    several rows, and a commit must cost what it costs on this disk."""
    cluster = Cluster()
    stack.callback(cluster.stop)
    cluster.start(durable=True)
    url = cluster.create_database("bench")
    print(f"PostgreSQL {cluster.bindir} on port {cluster.port} (fsync on)")
    return url


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def fsync_alone(workdir: Path, n: int) -> float:
    """One small write and fsync, the floor of a durable intent."""
    path = workdir / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return median_us(samples)


def commits_alone(workdir: Path, n: int) -> dict[str, dict[str, float]]:
    """The store's two writes per operation, timed alone (no client, no network): the
    intent (`begin`) and the outcome (`finish`), per durability, medians in us. With
    the fsync, the floor under idemclient's time above plain httpx: everything above
    it is the client's Python."""
    url = httpx.URL("http://127.0.0.1/_sandbox/noop")
    body = json.dumps(contenders.BODY).encode()
    answer = StoredResponse.of(200, (("content-type", "application/json"),), b"{}")
    found: dict[str, dict[str, float]] = {}
    for durability in ("full", "intent", "buffered"):
        begins: list[float] = []
        finishes: list[float] = []
        with SQLiteStore(workdir / f"alone-{durability}.db", durability=durability) as store:
            for i in range(n):
                intent = Intent(
                    operation_id=f"op-{i}",
                    key=f"key-{i}",
                    key_given=False,
                    method="POST",
                    url=str(url),
                    headers=(("content-type", "application/json"),),
                    body=body,
                    fingerprint=fingerprint("POST", url, body),
                )
                owner = new_owner()
                now = time.time()
                started = time.perf_counter()
                begin = store.begin(intent, owner=owner, now=now, lease_until=now + 60)
                begins.append(time.perf_counter() - started)
                progress = Progress(
                    attempts=1, maybe_applied=True, evidence="HTTP 200 OK", not_before=None, now=now
                )
                started = time.perf_counter()
                store.finish(
                    intent.operation_id,
                    owner=owner,
                    state=State.SUCCEEDED,
                    progress=progress,
                    response=answer,
                    known=begin.record,
                )
                finishes.append(time.perf_counter() - started)
                release_owner(owner)
        found[durability] = {"begin_us": median_us(begins), "finish_us": median_us(finishes)}
    return found


def sequential(
    url: str, path: str, workdir: Path, sizes: Sizes, pg_url: str | None
) -> dict[str, Any]:
    entrants = contenders.sync_contenders(url, path, workdir, pg_url)
    samples: dict[str, list[float]] = {c.name: [] for c in entrants}
    try:
        for c in entrants:  # warm up connections, stores and caches
            for _ in range(50):
                c.send()
        for round_ in range(sizes.seq_rounds):
            order = entrants[round_ % len(entrants) :] + entrants[: round_ % len(entrants)]
            for c in order:
                for _ in range(sizes.seq_ops):
                    start = time.perf_counter()
                    c.send()
                    samples[c.name].append(time.perf_counter() - start)
    finally:
        for c in entrants:
            c.close()
    base = median_us(samples["httpx"])
    return {
        name: {"median_us": median_us(s), "ratio": median_us(s) / base, "n": len(s)}
        for name, s in samples.items()
    }


def threaded(
    url: str, path: str, workdir: Path, sizes: Sizes, pg_url: str | None, workers: int = 16
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    entrants = contenders.sync_contenders(url, path, workdir / "threads", pg_url)
    try:
        for c in entrants:
            for _ in range(20):
                c.send()
        for _round in range(2 if sizes.quick else 3):
            for c in entrants:
                rate = _threaded_rate(c.send, workers, sizes.conc_seconds)
                results.setdefault(c.name, []).append(rate)
    finally:
        for c in entrants:
            c.close()
    return _rates(results)


def _threaded_rate(send: Callable[[], None], workers: int, seconds: float) -> float:
    stop = time.perf_counter() + seconds
    counts = [0] * workers
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        try:
            while time.perf_counter() < stop:
                send()
                counts[i] += 1
        except BaseException as exc:  # reported below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts) / (time.perf_counter() - started)


def asynchronous(
    url: str, path: str, workdir: Path, sizes: Sizes, pg_url: str | None, tasks: int = 16
) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        entrants = contenders.async_contenders(url, path, workdir / "async", pg_url)
        results: dict[str, list[float]] = {}
        try:
            for c in entrants:
                for _ in range(20):
                    await c.send()
            for _round in range(2 if sizes.quick else 3):
                for c in entrants:
                    stop = time.perf_counter() + sizes.conc_seconds
                    count = 0

                    async def loop(send: contenders.ASend = c.send, until: float = stop) -> None:
                        nonlocal count
                        while time.perf_counter() < until:
                            await send()
                            count += 1

                    started = time.perf_counter()
                    await asyncio.gather(*(loop() for _ in range(tasks)))
                    results.setdefault(c.name, []).append(count / (time.perf_counter() - started))
        finally:
            for c in entrants:
                await c.close()
        return _rates(results)

    return asyncio.run(run())


def _rates(results: dict[str, list[float]]) -> dict[str, Any]:
    base = statistics.median(results["httpx"])
    return {
        name: {"ops_per_s": statistics.median(r), "vs_httpx": statistics.median(r) / base}
        for name, r in results.items()
    }


def print_table(title: str, rows: dict[str, dict[str, Any]], columns: list[str]) -> None:
    print(f"\n{title}")
    width = max(len(n) for n in rows) + 2
    cell = max(14, *(len(c) + 2 for c in columns))
    print("  " + "".ljust(width) + "".join(c.rjust(cell) for c in columns))
    for name, values in rows.items():
        cells = "".join(_fmt(values.get(c)).rjust(cell) for c in columns)
        print("  " + name.ljust(width) + cells)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return "-" if value is None else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--json", default="bench-results/results.json")
    parser.add_argument(
        "--only",
        choices=["sequential", "concurrent", "cpu", "batch", "store", "server", "startup"],
        default=None,
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="measure the SQLite contenders only"
    )
    args = parser.parse_args()
    sizes = Sizes(args.quick)
    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "quick": args.quick,
    }
    wanted = lambda s: args.only in (None, s)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="idemclient-bench-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        pg_url: str | None = None
        if not args.no_postgres and args.only not in ("batch", "startup"):
            pg_url = start_postgres(stack)
        (work / "threads").mkdir()
        (work / "async").mkdir()
        with spawn(db=work / "server.sqlite3", recovery_interval=0) as server:
            url = server.url
            if wanted("sequential"):
                report["fsync_us"] = fsync_alone(work, 200 if sizes.quick else 1000)
                print(f"fsync alone (100 bytes, this disk): {report['fsync_us']:.0f} us")
                report["commits_alone"] = commits_alone(work, 100 if sizes.quick else 1000)
                print_table(
                    "the store's two writes alone (median)",
                    report["commits_alone"],
                    ["begin_us", "finish_us"],
                )
                for label, path in (("no-op endpoint", NOOP), ("new payment", PAYMENTS)):
                    folder = work / label.replace(" ", "-")
                    folder.mkdir()
                    rows = sequential(url, path, folder, sizes, pg_url)
                    report[f"sequential {label}"] = rows
                    print_table(
                        f"sequential, {label} (median per request)", rows, ["median_us", "ratio"]
                    )
            if wanted("concurrent"):
                report["threads16"] = threaded(url, NOOP, work, sizes, pg_url)
                print_table(
                    "16 threads, no-op endpoint (throughput)",
                    report["threads16"],
                    ["ops_per_s", "vs_httpx"],
                )
                report["asyncio16"] = asynchronous(url, NOOP, work, sizes, pg_url)
                print_table(
                    "16 asyncio tasks, no-op endpoint (throughput)",
                    report["asyncio16"],
                    ["ops_per_s", "vs_httpx"],
                )
            if wanted("batch"):
                report["batch"] = batch_bench.run(url, work / "batch", sizes.batch_rows)
                print_table("batches", report["batch"], batch_bench.COLUMNS)
                report["batch_memory"] = batch_memory.run(
                    url, work / "batch-memory", sizes.batch_memory_rows
                )
                print_table(
                    "the batch command's peak RSS (MB) and wall time (s), in a process of its own",
                    report["batch_memory"],
                    batch_memory.COLUMNS,
                )
        if wanted("cpu"):
            # No server, no disk: the client's own CPU per operation (see `client_cpu`).
            report["client_cpu"] = client_cpu.run(
                ops=300 if sizes.quick else 2000, rounds=2 if sizes.quick else 5
            )
            print_table(
                "client CPU per operation, mock transport (thread CPU time)",
                report["client_cpu"],
                client_cpu.COLUMNS,
            )
        if wanted("startup"):
            # Fresh interpreters, no server: what importing idemclient costs a process.
            report["startup"] = startup.run(rounds=9 if sizes.quick else 41)
            print_table(
                "start-up (median over fresh interpreters)", report["startup"], startup.COLUMNS
            )
        if wanted("store"):
            report["store"] = {"sqlite": store_bench.run(work / "store", sizes.store_finished)}
            if pg_url is not None:
                report["store"]["postgres"] = store_bench.run_postgres(pg_url, sizes.store_finished)
            print_table("store", report["store"], store_bench.COLUMNS)
        if wanted("server"):
            report["server"] = server_bench.run(work / "srv", sizes.server_seconds, pg_url)
            print_table("reference server (throughput)", report["server"], ["req_per_s", "vs_noop"])
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
