"""`idemclient ops --store` takes a PostgreSQL URL as well as a SQLite file."""

from __future__ import annotations

from pathlib import Path

import psycopg
from click.testing import CliRunner

from idemclient import State
from idemclient._store import Progress, StoredResponse, new_owner
from idemclient.cli import main
from idemclient.postgres import PostgresStore

from ..store.conftest import NOW, make_intent


def test_ops_reads_and_purges_a_postgresql_store(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.register([make_intent("op-pending", "key-p")], now=NOW)
        owner = new_owner()
        store.begin(make_intent("op-done", "key-d"), owner=owner, now=NOW, lease_until=NOW)
        store.finish(
            "op-done",
            owner=owner,
            state=State.SUCCEEDED,
            progress=Progress(1, True, "HTTP 201 Created", None, NOW),
            response=StoredResponse.of(201, (), b'{"id":"pay_1"}'),
        )
    runner = CliRunner()
    listed = runner.invoke(main, ["ops", "list", "--unfinished", "--store", pg_url])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.split()[:2] == ["op-pending", "pending"]
    shown = runner.invoke(main, ["ops", "show", "--store", pg_url, "key-d"])
    assert shown.exit_code == 0, shown.output
    assert "pay_1" in shown.stdout
    refused = runner.invoke(main, ["ops", "purge", "--store", pg_url, "op-pending"])
    assert refused.exit_code == 2
    assert "not finished" in refused.stderr
    purged = runner.invoke(main, ["ops", "purge", "--store", pg_url, "op-done"])
    assert purged.exit_code == 0, purged.output
    assert "purged 1" in purged.stdout
    with PostgresStore(pg_url) as store:
        assert [r.operation_id for r in store.operations()] == ["op-pending"]


def test_ops_still_takes_a_sqlite_file_and_names_a_missing_one(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["ops", "list", "--store", str(tmp_path / "none.db")])
    assert missing.exit_code == 2
    assert "no store at" in missing.stderr
    directory = runner.invoke(main, ["ops", "list", "--store", str(tmp_path)])
    assert directory.exit_code == 2
    assert "is a directory" in directory.stderr


def test_ops_names_an_unreachable_postgresql_store(pg_url: str) -> None:
    url = pg_url.rsplit("/", 1)[0] + "/no_such_database"
    result = CliRunner().invoke(main, ["ops", "list", "--store", url])
    assert result.exit_code == 2
    assert "no_such_database" in result.stderr
    assert "does not exist" in result.stderr


def _schemas(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
            " AND nspname NOT IN ('information_schema', 'public')"
        ).fetchall()
    return [row[0] for row in rows]


def test_ops_on_a_database_that_holds_no_store_says_so_and_creates_none(
    pg_url: str, tmp_path: Path
) -> None:
    # The operator points --store at the wrong database (the application's own, another
    # environment's): like a SQLite file that is not there, it holds no store. Reading
    # it must neither answer "0 operations", "resumed 0" as if all were well, nor write
    # idemclient's schema into it.
    runner = CliRunner()
    env = {"IDEMCLIENT_TOKEN": "t", "IDEMCLIENT_URL": "http://127.0.0.1:9"}
    for args in (
        ["ops", "list"],
        ["ops", "show", "op-1"],
        ["ops", "resume"],
        ["ops", "reconcile", "op-1"],
        ["ops", "purge", "--yes", "--older-than", "0"],
    ):
        result = runner.invoke(main, [*args, "--store", pg_url], env=env)
        assert result.exit_code == 2, (args, result.output)
        assert "no store at" in result.stderr, (args, result.stderr)
    file = tmp_path / "payroll.csv"
    file.write_text(
        "ref,employee_id,name,account,amount,currency,value_date\n"
        "R-1,E1,Ada,GB1,100,GBP,2026-11-30\n"
    )
    dry = runner.invoke(
        main, ["batch", "submit", "--dry-run", "--store", pg_url, str(file)], env=env
    )
    assert dry.exit_code == 0, dry.output
    assert _schemas(pg_url) == []  # nothing was created in it
