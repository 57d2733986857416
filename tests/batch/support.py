"""Driving `idemclient batch submit` as a real process against a live reference server."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from idemclient import key_from_identity
from idemclient.testing import LiveServer

HEADER = "ref,employee_id,name,account,amount,currency,value_date"


def payroll(
    rows: int = 20,
    *,
    prefix: str = "2026-11-E",
    amount: int = 100_000,
    value_date: str = "2026-11-30",
    delimiter: str = ",",
) -> str:
    """A payout file of `rows` rows, references `<prefix>1000`, `<prefix>1001`..."""
    lines = [HEADER.replace(",", delimiter)]
    for n in range(rows):
        cells = [
            f"{prefix}{1000 + n}",
            f"E{1000 + n}",
            f"Employee {n}",
            f"GB{10 + n % 90}TEST{10**13 + n}",
            str(amount + n),
            "GBP",
            value_date,
        ]
        lines.append(delimiter.join(cells))
    return "\n".join(lines) + "\n"


def references(rows: int = 20, prefix: str = "2026-11-E") -> list[str]:
    return [f"{prefix}{1000 + n}" for n in range(rows)]


def key_of(reference: str, scope: str | None = None, operation: str = "payout") -> str:
    """The key this version gives a row: its (scoped) reference and the operation."""
    return key_from_identity(reference if scope is None else f"{scope}/{reference}", operation)


def command(
    live_url: str,
    file: Path,
    store: Path,
    *extra: str,
    token: str | None = "payroll-ops",
    report: Path | None = None,
) -> list[str]:
    argv = [
        sys.executable, "-m", "idemclient", "batch", "submit", str(file),
        "--url", live_url, "--store", str(store), "--timeout", "2",
    ]  # fmt: skip
    if token is not None:
        argv += ["--token", token]
    if report is not None:
        argv += ["--report", str(report)]
    return [*argv, *extra]


def run(argv: Sequence[str], **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, check=False, **options
    )


def read_report(path: Path) -> list[dict[str, str]]:
    if path.suffix == ".json":
        rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"]
        return [{k: "" if v is None else str(v) for k, v in row.items()} for row in rows]
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def ledger_by_reference(live: LiveServer) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for entry in live.server.ledger():
        found.setdefault(entry.reference, []).append(entry)
    return found


def exactly_once(live: LiveServer, expected: Sequence[str]) -> None:
    """Every reference in `expected` paid once at both external systems, nothing else."""
    by_reference = ledger_by_reference(live)
    assert sorted(by_reference) == sorted(expected)
    for reference, entries in by_reference.items():
        assert len(entries) == 1, (reference, len(entries))
        assert (entries[0].ext1_applied, entries[0].ext2_applied) == (1, 1), reference


def wait_for(
    process: subprocess.Popen[str], reached: Callable[[], bool], limit: float = 60
) -> bool:
    """True once `reached()` while `process` runs; False if it ends first. A bounded
    poll: each turn waits on the process itself for at most 5 ms."""
    for _ in range(int(limit / 0.005)):
        if reached():
            return True
        try:
            process.wait(timeout=0.005)
        except subprocess.TimeoutExpired:
            continue
        return False
    raise AssertionError("the submitter neither finished nor reached the point")
