"""Earlier versions of the package, extracted from git, to write real stores with their
own `batch submit`: 7069689 (keys from the file's name and the value date), 55e0a4b
(a row found by look-up recorded in two writes), 466c54d (the last whose
fingerprints are over the body's bytes), and a98a92d (the last that compared
references by their bytes)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[3]
#: Keys from the batch reference (the file's name by default) and the value date.
FILE_KEYS = "7069689"
#: A row found by its look-up recorded in two writes (admitted in flight, then settled).
TWO_WRITES = "55e0a4b"
#: The last version whose fingerprints are over the body's bytes (64 hex digits).
BYTES_FINGERPRINTS = "466c54d"
#: The last version that compared references by their bytes (not in Unicode NFC), and
#: kept no digest of a row's payment.
BEFORE_NFC = "a98a92d"


def extract(into: Path, commit: str = FILE_KEYS) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "idemclient"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        pytest.fail(f"cannot read {commit} from git: {archive.stderr.decode()[:200]}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def old_submit(old: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "idemclient", "batch", "submit", *args],
        capture_output=True, text=True, timeout=120, check=False, **old_process(old),
    )  # fmt: skip


def old_process(old: Path) -> dict[str, object]:
    """Options for a subprocess that imports the earlier version: its PYTHONPATH, and
    its working directory (`-c` and `-m` put the working directory first on sys.path)."""
    return {"env": dict(os.environ, PYTHONPATH=str(old)), "cwd": str(old)}


def age(store: Path, seconds: float) -> None:
    """The store as if written `seconds` ago."""
    assert store.is_absolute()
    with sqlite3.connect(store) as conn:
        conn.execute(
            "UPDATE operations SET created_at = created_at - ?, updated_at = updated_at - ?,"
            " finished_at = finished_at - ?",
            (seconds, seconds, seconds),
        )


def lapse_leases(store: Path) -> None:
    """Every lease in the store as lapsed: the time its holder had is over. An owner an
    earlier version named says nothing of its PID namespace, so its lease is respected
    until then, whether or not its pid is alive here."""
    assert store.is_absolute()
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE operations SET lease_expires = 0 WHERE lease_expires IS NOT NULL")
