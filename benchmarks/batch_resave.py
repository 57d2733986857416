"""The re-saved file's hold (`idemclient.batch._resave`) at scale: how long a store of
many batch rows takes to digest once (rows recorded before digests were kept), and how
long a new file's rows take to be matched against it, through the index of digests.

    python -m benchmarks.batch_resave [STORE_ROWS] [FILE_ROWS]

A SQLite store in a temporary directory gets STORE_ROWS rows as the batch records them
(registered, their bodies kept), then: `backfill` digests them all (once per store);
every later run's check that none is left; a file of FILE_ROWS new rows, a tenth of
them re-saved copies of stored rows (their references changed), is matched (`held`);
the figure is rows per second, and the held rows found must be exactly the re-saved
ones.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx

from idemclient._fingerprint import fingerprints
from idemclient._store import Intent
from idemclient.batch import _resave as resave
from idemclient.batch._plan import encode_body
from idemclient.store import SQLiteStore


def payload(n: int, reference: str) -> dict[str, object]:
    return {
        "ref": reference,
        "employee_id": f"E{n}",
        "name": f"Employee {n}",
        "account": f"GB00TEST{n:014d}",
        "amount": 100_000 + n,
        "currency": "GBP",
        "value_date": "2026-11-30",
        "reference": reference,
    }


def main(store_rows: int, file_rows: int) -> None:
    url = "https://psp.example/v1/payouts"
    fingerprint = fingerprints("POST", httpx.URL(url))
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "store.db")

        def intents() -> object:
            for n in range(store_rows):
                reference = f"R{n:07d}"
                body = encode_body(payload(n, reference))
                yield Intent(
                    operation_id=f"batch/payout/{reference}",
                    key=f"k-{n}",
                    key_given=True,
                    method="POST",
                    url=url,
                    headers=(("content-type", "application/json"),),
                    body=body,
                    fingerprint=fingerprint(body),
                    reference=reference,
                )

        started = time.perf_counter()
        store.register(intents(), now=time.time())  # type: ignore[arg-type]
        registered = time.perf_counter() - started
        started = time.perf_counter()
        digested = resave.backfill(store, "payout")
        backfill = time.perf_counter() - started
        started = time.perf_counter()
        again = resave.backfill(store, "payout")  # every later run: nothing left to do
        steady = time.perf_counter() - started
        # A tenth of the file re-saved from stored rows (another reference, the same
        # payment); the rest new payments.
        resaved = max(1, file_rows // 10)
        rows = []
        for n in range(file_rows):
            source = n if n < resaved else store_rows + n
            reference = f"S{n:07d}"
            digest = resave.payment_digest(payload(source, reference), reference)
            rows.append((n + 1, reference, reference, digest))
        started = time.perf_counter()
        mine = frozenset(r[1] for r in rows)
        held = list(resave.held(store, "payout", rows, mine.__contains__))
        matched = time.perf_counter() - started
        store.close()
    assert digested == store_rows, digested
    assert sorted(t.number for t in held) == list(range(1, resaved + 1)), len(held)
    print(f"store of {store_rows:,} rows: registered in {registered:.1f} s")
    print(f"  digested once (backfill): {backfill:.1f} s, {store_rows / backfill:,.0f} rows/s")
    print(f"  every later run's check that none is left: {steady * 1000:.0f} ms ({again} digested)")
    print(
        f"file of {file_rows:,} rows ({resaved:,} re-saved): matched in {matched:.2f} s,"
        f" {file_rows / matched:,.0f} rows/s; {len(held):,} held"
    )


if __name__ == "__main__":
    arguments = [int(a) for a in sys.argv[1:]]
    main(*(arguments + [200_000, 100_000][len(arguments) :]))
