"""The batch command's peak memory: `idemclient batch submit`, run as operators run it,
in a process of its own, its peak resident set size read when it ends.

For each size, a payroll file of that many rows and three runs of the command against
the reference server (spawned on loopback by the caller):

- fresh: a new store, look-ups on (the default): every row is looked up on the
  server's search (`GET /v1/payouts?reference=`), then registered, then sent (to the
  no-op endpoint, so that the server's own cost stays out of the time);
- rerun: the same command again, every row answered from the store (nothing sent);
- dry run: `--dry-run` on that store.

Each figure is the child's own peak RSS (`wait4`'s rusage), in MB; the times are wall
seconds on this machine, for orientation only. Run alone:

    python -m benchmarks.batch_memory                  # 10k and 100k rows
    python -m benchmarks.batch_memory 10000 100000 1000000

A million rows take the look-ups and sends of a million rows (about half an hour on
two cores); the full benchmark run (`benchmarks.run`) measures 10k and 100k.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COLUMNS = ["fresh_mb", "rerun_mb", "dry_run_mb", "fresh_s", "rerun_s", "dry_run_s"]
NOOP = "/_sandbox/noop"
LOOKUP = "/v1/payouts?reference={reference}"


def write_csv(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("ref,employee_id,name,account,amount,currency,value_date\n")
        for n in range(rows):
            out.write(f"R{n:07d},E{n},Employee {n},GB00TEST{n:014d},{100000 + n},GBP,2026-11-30\n")


def measure(argv: list[str], work: Path) -> tuple[float, float, int]:
    """Run `argv`; its peak RSS (MB), its wall time (s) and its exit code."""
    with (work / "out.txt").open("w") as out, (work / "err.txt").open("w") as err:
        began = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        _pid, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        took = time.perf_counter() - began
    return usage.ru_maxrss / 1024, took, child.returncode


def command(csv_path: Path, url: str, store: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "idemclient", "batch", "submit", str(csv_path),
        "--url", url, "--token", "bench-memory", "--store", str(store),
        "--path", NOOP, "--lookup", LOOKUP, "--concurrency", "16", *extra,
    ]  # fmt: skip


def run(url: str, work: Path, sizes: tuple[int, ...]) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for rows in sizes:
        csv_path = work / f"payroll-{rows}.csv"
        write_csv(csv_path, rows)
        store = work / f"store-{rows}.db"
        row: dict[str, Any] = {}
        for name, extra in (("fresh", ()), ("rerun", ()), ("dry_run", ("--dry-run",))):
            peak, took, code = measure(command(csv_path, url, store, *extra), work)
            if code != 0:
                raise RuntimeError(
                    f"{name} run of {rows} rows exited {code}: {(work / 'err.txt').read_text()}"
                )
            row[f"{name}_mb"], row[f"{name}_s"] = peak, took
        results[f"{rows:,} rows"] = row
        for leftover in work.glob(f"store-{rows}.db*"):
            leftover.unlink()
        csv_path.unlink()
    return results


def main() -> int:
    from idemclient.testing import spawn

    sizes = tuple(int(arg) for arg in sys.argv[1:]) or (10_000, 100_000)
    with tempfile.TemporaryDirectory(prefix="idemclient-batch-memory-") as tmp:
        work = Path(tmp)
        with spawn(db=work / "server.sqlite3", recovery_interval=0) as server:
            results = run(server.url, work / "batch", sizes)
    print(json.dumps(results, indent=2))
    for label, row in results.items():
        print(
            f"{label:>16}: fresh {row['fresh_mb']:.0f} MB ({row['fresh_s']:.0f} s),"
            f" rerun {row['rerun_mb']:.0f} MB ({row['rerun_s']:.0f} s),"
            f" dry run {row['dry_run_mb']:.0f} MB ({row['dry_run_s']:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
