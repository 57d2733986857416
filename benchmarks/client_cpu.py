"""The client's own CPU per operation: idemclient beside plain httpx, no network, no disk.

Every contender posts the same JSON body through `httpx.MockTransport` (an answer like
the reference server's no-op endpoint: 200, ``{}``), so what is left is Python: httpx's
plumbing, and for idemclient the intent (key, fingerprint, headers), the decisions,
hooks, the outcome and the store's own Python. The store contenders:

- `idemclient[no-writes]`: the SQLite store's code (headers redacted and dumped, the
  row's values built, the answer stored) on a connection that executes nothing, so the
  figure is everything but the store's writes (the floor, measured in `sequential`);
- `idemclient[memory]`: the SQLite store on an in-memory database (statements run,
  nothing reaches a disk), beside it for scale.

CPU time (`time.thread_time`), so that other work on a loaded machine moves it little;
for steadier figures still, count instructions under callgrind:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m benchmarks.client_cpu --contender idemclient[no-writes] --ops 2000

(the script prints nothing useful there: run it with two `--ops` and take the
difference of the totals, divided by the difference of the counts).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

import idemclient
from idemclient._store._sqlite import SQLiteStore
from idemclient._store._sqlstore import SQLStore
from idemclient._store._statements import Statements

from .contenders import BODY, HEADERS

URL = "http://bench.invalid"
PATH = "/_sandbox/noop"

__all__ = ["COLUMNS", "CONTENDERS", "run"]

COLUMNS = ["cpu_us", "above_httpx_us"]


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={})


def _mock() -> httpx.MockTransport:
    return httpx.MockTransport(_answer)


class _Cursor:
    rowcount = 1

    def fetchall(self) -> list[Any]:
        return []

    def fetchone(self) -> Any:
        return None


class _NoConnection:
    """A connection on which every statement succeeds and nothing is written."""

    _cursor = _Cursor()

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        return self._cursor


class NoWritesStore(SQLStore):
    """The SQLite store's Python without SQLite: every write "lands", nothing is kept.

    Only good for `begin` (a new intent) and `finish` (with `known`), which is all an
    operation that succeeds at once asks of a store."""

    _sql: Statements = SQLiteStore._sql
    _answer_from_known = True

    def __init__(self) -> None:
        self._configure(
            where="(no writes)",
            max_stored_body=1024 * 1024,
            secret_headers=(),
            persist_headers=(),
            encryption=None,
        )
        self.durability = idemclient.store.Durability.BUFFERED
        self.retention = 7 * 24 * 3600.0
        self._conn = _NoConnection()

    @property
    def path(self) -> str:
        return "(no writes)"

    @contextlib.contextmanager
    def _use(self) -> Iterator[Any]:
        yield self._conn

    @contextlib.contextmanager
    def _write(self, *, durable: bool) -> Iterator[Any]:
        yield self._conn

    _transaction = _write

    def _admit(self, values: tuple[Any, ...]) -> bool:
        return True

    def advance_clock(self, *, now: float) -> float:
        return 0.0

    def reap(self, *, now: float, batch: int = 10_000) -> int:
        return 0

    def close(self) -> None:
        pass


def plain() -> tuple[Callable[[], None], Callable[[], None]]:
    http = httpx.Client(base_url=URL, headers=HEADERS, transport=_mock())

    def send() -> None:
        response = http.post(PATH, json=BODY, headers={"Idempotency-Key": str(uuid.uuid4())})
        assert response.status_code == 200

    return send, http.close


def idem(store: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    client = idemclient.Client(base_url=URL, headers=HEADERS, transport=_mock(), store=store)

    def send() -> None:
        outcome = client.post(PATH, json=BODY)
        assert outcome.status_code == 200

    def close() -> None:
        client.close()
        client.store.close()

    return send, close


CONTENDERS: dict[str, Callable[[], tuple[Callable[[], None], Callable[[], None]]]] = {
    "httpx": plain,
    "idemclient[no-writes]": lambda: idem(NoWritesStore()),
    "idemclient[memory]": lambda: idem(SQLiteStore(":memory:", durability="buffered")),
}


def run(ops: int = 2000, rounds: int = 5) -> dict[str, dict[str, float]]:
    """CPU per operation of each contender (median of `rounds` interleaved rounds of
    `ops` operations), and above plain httpx's."""
    built = {name: make() for name, make in CONTENDERS.items()}
    samples: dict[str, list[float]] = {name: [] for name in built}
    try:
        for send, _close in built.values():  # warm up
            for _ in range(200):
                send()
        for _ in range(rounds):
            for name, (send, _close) in built.items():
                started = time.thread_time()
                for _ in range(ops):
                    send()
                samples[name].append((time.thread_time() - started) / ops * 1e6)
    finally:
        for _send, close in built.values():
            close()
    base = statistics.median(samples["httpx"])
    return {
        name: {"cpu_us": statistics.median(s), "above_httpx_us": statistics.median(s) - base}
        for name, s in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--contender", choices=sorted(CONTENDERS), default=None)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.contender is not None:  # one contender, for callgrind or cProfile
        send, close = CONTENDERS[args.contender]()
        try:
            for _ in range(args.ops):
                send()
        finally:
            close()
        return 0
    for name, row in run(args.ops, args.rounds).items():
        print(f"{name:24} {row['cpu_us']:8.1f} us  (+{row['above_httpx_us']:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
