"""The reference server's cost per request in process: through the ASGI app, no HTTP.

wrk measures the whole stack (uvicorn, h11, the event loop) and moves with whatever
else the machine runs; this measures what the server itself spends on a request, one
at a time, so that a change to the core or its storage shows even on a busy machine.
Each request goes through `ReferenceApp` (the worker-thread hop included) on a SQLite
file in WAL mode, as `idemclient server --db FILE` runs it; the figures are medians of
many requests, in interleaved rounds. `--tasks 16` sends sixteen at a time, as wrk does,
to show what the requests cost each other (the storage lock, the GIL).

    python -m benchmarks.server_inprocess              # medians, in microseconds
    python -m benchmarks.server_inprocess --n 2000 --rounds 5
    python -m benchmarks.server_inprocess --mode replay --n 5000 --rounds 1   # one mode,
                                                       # e.g. under valgrind --tool=callgrind
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from idemclient._clock import SystemClock
from idemclient.testing import ReferenceServer
from idemclient.testing._adapters.asgi import ReferenceApp

_BODY = b'{"amount": 1250, "currency": "EUR", "reference": "bench"}'
_PATHS = {"noop": "/_sandbox/noop", "new": "/v1/payments", "replay": "/v1/payments"}
MODES = tuple(_PATHS)


def _scope(path: str, key: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [
            (b"authorization", b"Bearer bench-load"),
            (b"content-type", b"application/json"),
            (b"idempotency-key", key.encode()),
            (b"content-length", str(len(_BODY)).encode()),
        ],
    }


async def _one(app: ReferenceApp, path: str, key: str) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": _BODY, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(_scope(path, key), receive, send)
    status: int = sent[0]["status"]
    return status


async def _measure(
    app: ReferenceApp, modes: tuple[str, ...], n: int, rounds: int, tasks: int
) -> dict[str, tuple[float, float]]:
    counter = itertools.count()
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    if "replay" in modes:
        assert await _one(app, _PATHS["replay"], "replay-key") == 201

    async def worker(mode: str, count: int) -> None:
        path = _PATHS[mode]
        for _ in range(count):
            key = f"k-{next(counter)}" if mode == "new" else "replay-key"
            start = time.perf_counter()
            status = await _one(app, path, key)
            latencies[mode].append(time.perf_counter() - start)
            assert status in (200, 201), (mode, status)

    per_task = max(1, n // tasks)
    for _ in range(rounds):
        for mode in modes:
            start = time.perf_counter()
            await asyncio.gather(*(worker(mode, per_task) for _ in range(tasks)))
            walls[mode].append((time.perf_counter() - start) / (per_task * tasks))
    return {
        mode: (statistics.median(latencies[mode]) * 1e6, statistics.median(walls[mode]) * 1e6)
        for mode in modes
    }


def measure(
    db: Path | str, modes: tuple[str, ...], n: int, rounds: int, tasks: int = 1
) -> dict[str, tuple[float, float]]:
    """For each mode, on a fresh server over `db`: the median request's latency, and
    the wall time per request (the inverse of the throughput; with one task, the mean
    latency, which counts the rare slow request, a WAL checkpoint say), in microseconds."""
    with ReferenceServer(db=db, clock=SystemClock()) as server:
        app = ReferenceApp(server)
        return asyncio.run(_measure(app, modes, n, rounds, tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", choices=MODES, action="append", help="default: every mode")
    parser.add_argument("--memory", action="store_true", help="an in-memory database")
    parser.add_argument(
        "--tasks", type=int, default=1, help="concurrent requests (wrk runs 16 connections)"
    )
    args = parser.parse_args()
    modes = tuple(args.mode or MODES)
    with tempfile.TemporaryDirectory() as tmp:
        db = ":memory:" if args.memory else Path(tmp) / "inprocess.sqlite3"
        medians = measure(db, modes, args.n, args.rounds, args.tasks)
    noop = medians.get("noop")
    print(f"{'':>7}  {'median':>9}  {'per request':>11}  of the no-op rate")
    for mode, (median, wall) in medians.items():
        ratio = f"{noop[1] / wall:8.2f}" if noop else ""
        print(f"{mode:>7}: {median:6.1f} us  {wall:8.1f} us  {ratio}")


if __name__ == "__main__":
    main()
