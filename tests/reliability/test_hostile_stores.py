"""Store files that are not what they claim: truncated, random bytes, another program's
database, a foreign schema, a newer schema, and a read-only file.

Through every door that opens a store (`Client`, `idemclient batch submit`,
`idemclient ops list`): a clear error naming the file, no crash, and the file left
byte for byte as it was, with no -wal or -shm file created beside it.

The suite runs as root, whom file permissions do not stop. The read-only checks
therefore run in a child process as the unprivileged user `nobody` (setpriv), and
first prove that the mechanism works there: a direct write to the file must fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from idemclient import (
    Client,
    ForeignStore,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
)
from idemclient._store._schema import APPLICATION_ID, SCHEMA_VERSION
from idemclient.cli import main
from idemclient.testing import ReferenceServer

from .conftest import Figures
from .support import PATH, payment

CSV = "ref,amount,currency,value_date\nrow-1,100,EUR,2026-11-30\nrow-2,200,EUR,2026-11-30\n"


def make_real_store(path: Path, operations: int = 30) -> None:
    """A store with finished operations in it, closed cleanly (no -wal, no -shm)."""
    with (
        ReferenceServer() as server,
        Client(
            store=path,
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": "Bearer merchant-1"},
        ) as client,
    ):
        for n in range(operations):
            client.post(PATH, json=payment(f"r-{n}"), operation_id=f"op-{n}")


def truncated(path: Path) -> None:
    make_real_store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def truncated_header(path: Path) -> None:
    make_real_store(path)
    path.write_bytes(path.read_bytes()[:60])


def random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def sqlite_magic_then_garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(8192 - 16))


def another_programs_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total INTEGER)")
        conn.execute("INSERT INTO invoices VALUES (1, 100)")
    conn.close()


def another_application_id(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1179012692")
        conn.execute("CREATE TABLE t (x)")
    conn.close()


def foreign_schema(path: Path) -> None:
    """Our application id and schema version, but someone else's operations table."""
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("CREATE TABLE operations (id TEXT PRIMARY KEY, payload BLOB)")
        conn.execute("INSERT INTO operations VALUES ('op-1', x'00ff')")
    conn.close()


def no_operations_table(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("CREATE TABLE notes (x)")
    conn.close()


def newer_schema(path: Path) -> None:
    make_real_store(path, operations=2)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()


DAMAGED: dict[str, tuple[Callable[[Path], None], type[StoreError], str]] = {
    "truncated": (truncated, StoreCorrupt, "damaged"),
    "truncated-in-the-header": (truncated_header, StoreCorrupt, "truncated"),
    "random-bytes": (random_bytes, StoreCorrupt, "not a SQLite database"),
    "sqlite-magic-then-garbage": (sqlite_magic_then_garbage, StoreCorrupt, ""),
    "another-programs-database": (another_programs_database, ForeignStore, "did not create"),
    "another-application-id": (another_application_id, ForeignStore, "another program"),
    "foreign-schema": (foreign_schema, StoreCorrupt, "lacks"),
    "no-operations-table": (no_operations_table, StoreCorrupt, "no operations table"),
    "newer-schema": (newer_schema, StoreTooNew, "schema version"),
}


def snapshot(directory: Path) -> dict[str, str]:
    """Every file in `directory` and the sha256 of its bytes."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
    }


@pytest.mark.parametrize(("damage", "error", "match"), DAMAGED.values(), ids=list(DAMAGED))
def test_a_damaged_store_is_refused_by_every_door_and_left_as_it_was(
    tmp_path: Path,
    damage: Callable[[Path], None],
    error: type[StoreError],
    match: str,
    figures: Figures,
) -> None:
    store = tmp_path / "stores" / "payments.db"
    store.parent.mkdir()
    damage(store)
    before = snapshot(store.parent)
    assert list(before) == ["payments.db"]

    with pytest.raises(StoreError) as caught:
        Client(store=store, base_url="http://psp.test")
    assert isinstance(caught.value, error), caught.value
    assert str(store) in str(caught.value)
    assert match in str(caught.value)
    assert caught.value.path == str(store)

    csv = tmp_path / "payroll.csv"
    csv.write_text(CSV)
    runner = CliRunner()
    for argv in (
        ["ops", "list", "--store", str(store)],
        ["ops", "resume", "--store", str(store), "--token", "t"],
        ["batch", "submit", str(csv), "--store", str(store), "--url", "http://127.0.0.1:9"],
        ["batch", "submit", str(csv), "--store", str(store), "--url", "x", "--token", "t"],
    ):
        result = runner.invoke(main, argv, env={"IDEMCLIENT_TOKEN": "t"})
        assert result.exit_code == 2, (argv, result.output)
        assert str(store) in result.output, result.output
        assert "Traceback" not in result.output

    assert snapshot(store.parent) == before  # not a byte changed, nothing added
    figures.count("hostile input", damaged_store_files_refused=1, doors_per_store_file=5)


# -- read-only: a real unprivileged process ------------------------------------------------

CHILD = r"""
import json, os, sys
import httpx
from click.testing import CliRunner
from idemclient import Client, StoreError
from idemclient.cli import main
from idemclient.testing import ReferenceServer

store = sys.argv[1]
report = {"euid": os.geteuid()}
try:  # prove the mechanism: this process must not be able to write the file
    with open(store, "r+b"):
        report["direct_write"] = "allowed"
except PermissionError:
    report["direct_write"] = "refused"
except OSError as exc:
    report["direct_write"] = f"refused: {exc.strerror}"
server = ReferenceServer()
def client():
    return Client(store=store, transport=server.transport, base_url="http://psp.test",
                  headers={"Authorization": "Bearer merchant-1"})
try:
    with client() as opened:
        report["opened"] = True
        outcome = opened.post("/v1/payments", json={"amount": 1, "currency": "EUR",
                                                     "reference": "r-new"})
        report["state"] = outcome.state.value
        report["operations"] = len(opened.store.operations())
except StoreError as exc:
    report["error"] = type(exc).__name__
    report["message"] = str(exc)
result = CliRunner().invoke(main, ["ops", "list", "--store", store])
report["cli_exit"] = result.exit_code
report["cli_output"] = result.output
print(json.dumps(report))
"""


def as_nobody(store: Path) -> dict[str, Any]:
    """Run CHILD as the user nobody. Fails loudly if the mechanism is unavailable."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to drop root for this test"
    drop = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    done = subprocess.run(
        [*drop, sys.executable, "-c", CHILD, str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["euid"] != 0, "the child still runs as root: permissions prove nothing"
    return report


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the user nobody can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="idemclient-readonly-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_a_read_only_store_is_refused_untouched_and_usable_once_writable_again(
    shared_dir: Path, figures: Figures
) -> None:
    shared_dir.chmod(0o777)  # nobody may create files here: only the store is read-only
    store = shared_dir / "payments.db"
    make_real_store(store)
    store.chmod(0o444)
    before = snapshot(shared_dir)

    refused = as_nobody(store)
    assert refused["direct_write"].startswith("refused")
    assert refused["error"] == "StoreUnavailable", refused
    assert str(store) in refused["message"]
    assert "read-only" in refused["message"]
    assert refused["cli_exit"] == 2
    assert str(store) in refused["cli_output"]
    # Nothing written, and no read-only -wal or -shm left behind to poison the store.
    assert snapshot(shared_dir) == before

    store.chmod(0o666)  # the owner makes it writable again: it must just work
    repaired = as_nobody(store)
    assert repaired.get("error") is None, repaired
    assert (repaired["state"], repaired["operations"]) == ("succeeded", 31)
    figures.count("hostile input", read_only_store_checks_as_nobody=2)


def test_a_store_in_a_directory_that_cannot_be_written_is_refused_naming_it(
    shared_dir: Path,
) -> None:
    shared_dir.chmod(0o755)  # nobody may read here but not create the -wal and -shm
    store = shared_dir / "payments.db"
    make_real_store(store)
    os.chown(store, 65534, 65534)  # the file itself is nobody's, and writable
    before = snapshot(shared_dir)

    refused = as_nobody(store)
    assert refused["direct_write"] == "allowed"
    assert refused["error"] == "StoreUnavailable", refused
    assert "directory" in refused["message"]
    assert str(shared_dir) in refused["message"]
    assert snapshot(shared_dir) == before


def test_a_read_only_shm_beside_the_store_is_named(shared_dir: Path) -> None:
    shared_dir.chmod(0o777)
    store = shared_dir / "payments.db"
    make_real_store(store)
    os.chown(store, 65534, 65534)
    for suffix in ("-wal", "-shm"):  # left by another user's process, read-only to nobody
        companion = Path(f"{store}{suffix}")
        companion.write_bytes(b"")
        companion.chmod(0o444)
    before = snapshot(shared_dir)

    refused = as_nobody(store)
    assert refused["error"] == "StoreUnavailable", refused
    assert "payments.db-wal" in refused["message"]
    assert snapshot(shared_dir) == before
