"""Store files that are not what they claim: truncated, random bytes, another program's
database, a foreign schema, a newer schema, and a read-only file.

Through every door that opens a store (`Client`, `idemclient batch submit`,
`idemclient ops list`): a clear error naming the file, no crash, and the file left
byte for byte as it was, with no -wal or -shm file created beside it.

The suite runs as root, whom file permissions do not stop. The read-only checks
therefore run in a child process from which setpriv has dropped the capabilities that
let root ignore file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER): the
modes then bind it as they bind any user, while it can still read the project and
pytest's private temporary directory wherever they are (a switch to the user nobody
would need both to be readable by all). The child first proves that the mechanism
works: the capabilities are gone and a direct write to the file fails. If setpriv is
missing or cannot drop them, the tests fail; they never skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from idemclient import Client, StoreError
from idemclient._store._schema import APPLICATION_ID, SCHEMA_VERSION
from idemclient.cli import main
from idemclient.errors import ForeignStore, StoreCorrupt, StoreTooNew
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
        ["batch", "submit", str(csv), "--store", str(store), "--url", "http://x", "--token", "t"],
    ):
        result = runner.invoke(main, argv, env={"IDEMCLIENT_TOKEN": "t"})
        assert result.exit_code == 2, (argv, result.output)
        assert str(store) in result.output, result.output
        assert "Traceback" not in result.output

    assert snapshot(store.parent) == before  # not a byte changed, nothing added
    figures.count("hostile input", damaged_store_files_refused=1, doors_per_store_file=5)


# -- read-only: a child bound by file permissions ----------------------------------------

CHILD = r"""
import json, os, sys
from click.testing import CliRunner
from idemclient import Client, StoreError
from idemclient.cli import main
from idemclient.testing import ReferenceServer

store = sys.argv[1]
with open("/proc/self/status") as status:
    effective = status.read().split("CapEff:")[1].split()[0]
report = {"cap_eff": int(effective, 16)}
try:  # prove the mechanism: this process must not be able to write the file
    with open(store, "r+b"):
        report["direct_write"] = "allowed"
except OSError as exc:
    report["direct_write"] = f"refused: {exc.strerror}"
server = ReferenceServer()
try:
    with Client(store=store, transport=server.transport, base_url="http://psp.test",
                headers={"Authorization": "Bearer merchant-1"}) as opened:
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

#: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER: capability bits 1, 2 and 3
PERMISSION_CAPABILITIES = (1 << 1) | (1 << 2) | (1 << 3)


def bound_by_permissions(store: Path) -> dict[str, Any]:
    """Run CHILD without root's power over file modes. Fails loudly if it cannot."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to drop root's powers"
    drop = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]
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
    assert report["cap_eff"] & PERMISSION_CAPABILITIES == 0, "modes would prove nothing"
    return report


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "stores"
    path.mkdir()
    yield path
    path.chmod(0o755)  # whatever a test made of it, pytest cleans it up


def test_a_read_only_store_is_refused_untouched_and_usable_once_writable_again(
    directory: Path, figures: Figures
) -> None:
    store = directory / "payments.db"  # the directory stays writable: only the file is not
    make_real_store(store)
    store.chmod(0o444)
    before = snapshot(directory)

    refused = bound_by_permissions(store)
    assert refused["direct_write"].startswith("refused")
    assert refused["error"] == "StoreUnavailable", refused
    assert str(store) in refused["message"]
    assert "read-only" in refused["message"]
    assert refused["cli_exit"] == 2
    assert str(store) in refused["cli_output"]
    # Nothing written, and no read-only -wal or -shm left behind to poison the store.
    assert snapshot(directory) == before

    store.chmod(0o644)  # the owner makes it writable again: it must just work
    repaired = bound_by_permissions(store)
    assert repaired.get("error") is None, repaired
    assert (repaired["state"], repaired["operations"]) == ("succeeded", 31)
    figures.count("hostile input", read_only_store_checks_without_root_powers=2)


def test_a_store_in_a_directory_that_cannot_be_written_is_refused_naming_it(
    directory: Path, figures: Figures
) -> None:
    store = directory / "payments.db"
    make_real_store(store)
    directory.chmod(0o555)  # the file is writable, but no -wal or -shm can be created
    before = snapshot(directory)

    refused = bound_by_permissions(store)
    assert refused["direct_write"] == "allowed"
    assert refused["error"] == "StoreUnavailable", refused
    assert f"its directory {str(directory)!r} is not writable" in refused["message"]
    assert "payments.db-wal and payments.db-shm" in refused["message"]
    assert snapshot(directory) == before
    figures.count("hostile input", read_only_store_checks_without_root_powers=1)


def test_a_read_only_wal_beside_the_store_is_named(directory: Path, figures: Figures) -> None:
    store = directory / "payments.db"
    make_real_store(store)
    for suffix in ("-wal", "-shm"):  # left read-only by another user's failed open
        companion = Path(f"{store}{suffix}")
        companion.write_bytes(b"")
        companion.chmod(0o444)
    before = snapshot(directory)

    refused = bound_by_permissions(store)
    assert refused["error"] == "StoreUnavailable", refused
    assert "payments.db-wal" in refused["message"]
    assert snapshot(directory) == before
    figures.count("hostile input", read_only_store_checks_without_root_powers=1)
