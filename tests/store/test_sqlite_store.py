"""What is particular to the SQLite store: its file (private, WAL, fsync levels, the
bytes on disk), refusing files that are not ours, migrations, processes creating one
store at once, and group commit. The behaviour every backend shares is pinned by
tests/postgres/test_store_contract.py, which runs on SQLite and PostgreSQL alike."""

import dataclasses
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlite_utils

from idemclient import Client, State
from idemclient._store import Claim, OperationRecord, Progress, StoredResponse, new_owner
from idemclient._store._base import Finished
from idemclient._store._interface import final_write
from idemclient._store._schema import APPLICATION_ID, SCHEMA_VERSION, open_database
from idemclient.errors import ForeignStore, StoreCorrupt, StoreTooNew, StoreUnavailable
from idemclient.store import Durability, SQLiteStore

from .conftest import NOW, make_intent


def progress(attempts: int = 1, *, now: float = NOW, applied: bool = True) -> Progress:
    return Progress(
        attempts=attempts, maybe_applied=applied, evidence="HTTP 201", not_before=None, now=now
    )


def _store_at_version(path: Path, version: int, row: str) -> None:
    """A store as an earlier version left it: migrated to `version` only, with one row
    written by that version's columns (`row`, an INSERT)."""
    from idemclient._store._schema import MIGRATIONS

    open_database(str(path), busy_timeout=1, migrations=MIGRATIONS[:version]).close()
    with sqlite3.connect(path) as conn:
        conn.execute(row)


def _schema_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the file --------------------------------------------------------------------------


def test_store_file_is_private_and_in_wal_mode(store: SQLiteStore, store_path: Path) -> None:
    store.begin(make_intent(), owner=new_owner(), now=NOW, lease_until=NOW + 60)
    for path in (store_path, Path(f"{store_path}-wal"), Path(f"{store_path}-shm")):
        assert path.exists(), path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def traced(store: SQLiteStore) -> list[tuple[int, str]]:
    """Every statement the store runs from now on, with the fsync level (`PRAGMA
    synchronous`: 2 FULL, 1 NORMAL) of the connection that ran it."""
    statements: list[tuple[int, str]] = []
    connections = {store._conn, store._flushing()}
    for conn in connections:
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.set_trace_callback(lambda sql, level=level: statements.append((level, sql)))
    return statements


@pytest.mark.parametrize(
    ("durability", "intent_fsynced", "outcome_fsynced"),
    [
        (Durability.FULL, True, True),
        (Durability.INTENT, True, False),  # the default
        (Durability.BUFFERED, False, False),
    ],
)
def test_durability_levels_decide_which_commits_are_fsynced(
    store_path: Path, durability: Durability, intent_fsynced: bool, outcome_fsynced: bool
) -> None:
    """In WAL mode, synchronous=FULL flushes the log at each commit; NORMAL does not.
    Each commit runs on a connection whose level was set once, when it was opened: no
    level is switched per operation (a statement before and after each intent)."""
    with SQLiteStore(store_path, durability=durability) as store:
        statements = traced(store)
        owner = new_owner()
        store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
        store.finish("op-1", owner=owner, state=State.SUCCEEDED, progress=progress())
        store.begin(make_intent("op-2", "key-2"), owner=owner, now=NOW, lease_until=NOW + 60)
    assert not [sql for _, sql in statements if "PRAGMA" in sql.upper()]
    insert = next(level for level, sql in statements if sql.startswith("INSERT"))
    update = next(level for level, sql in statements if sql.startswith("UPDATE"))
    assert (insert == 2, update == 2) == (intent_fsynced, outcome_fsynced)


def test_default_durability_is_intent(store: SQLiteStore) -> None:
    assert store.durability is Durability.INTENT


def test_secret_headers_are_never_written(store_path: Path) -> None:
    secrets = {
        "Authorization": "Bearer sk_live_authorization_secret",
        "Cookie": "session=cookie_secret",
        "Proxy-Authorization": "Basic proxy_secret",
        "X-Api-Key": "api_key_secret",
        "X-Partner-Signature": "user_named_secret",
    }
    with SQLiteStore(store_path, secret_headers={"x-partner-signature"}) as store:
        intent = make_intent(headers=(("Content-Type", "application/json"), *secrets.items()))
        owner = new_owner()
        store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
        response = StoredResponse.of(
            201, (("Set-Cookie", "sid=set_cookie_secret"), ("X-Request-Id", "req_1")), b"{}"
        )
        record = store.finish(
            "op-1", owner=owner, state=State.SUCCEEDED, progress=progress(), response=response
        )
        assert dict(record.headers) == {"Content-Type": "application/json"}
        assert record.response is not None
        assert dict(record.response.headers) == {"X-Request-Id": "req_1"}
    raw = b"".join(
        p.read_bytes() for p in store_path.parent.iterdir() if p.name.startswith("ops.db")
    )
    assert b"req_1" in raw  # the check below looks at the right bytes
    for value in [*secrets.values(), "set_cookie_secret"]:
        assert value.encode() not in raw, value


# -- files that are not ours -----------------------------------------------------------


def test_random_bytes_are_refused_and_left_alone(store_path: Path) -> None:
    store_path.write_bytes(os.urandom(4096))
    before = digest(store_path)
    with pytest.raises(StoreCorrupt, match="not a SQLite database") as caught:
        SQLiteStore(store_path)
    assert str(store_path) in str(caught.value)
    assert digest(store_path) == before


def test_another_programs_database_is_refused_and_left_alone(store_path: Path) -> None:
    with sqlite3.connect(store_path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total INTEGER)")
        conn.execute("INSERT INTO invoices VALUES (1, 100)")
    before = digest(store_path)
    with pytest.raises(ForeignStore, match="did not create"):
        SQLiteStore(store_path)
    assert digest(store_path) == before


def test_a_database_with_another_application_id_is_refused(store_path: Path) -> None:
    with sqlite3.connect(store_path) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ForeignStore, match="another program"):
        SQLiteStore(store_path)


def test_a_truncated_store_is_refused_and_left_alone(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        owner = new_owner()
        for n in range(200):
            store.begin(make_intent(f"op-{n}", f"key-{n}"), owner=owner, now=NOW, lease_until=NOW)
    with sqlite3.connect(store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = store_path.read_bytes()
    store_path.write_bytes(data[: len(data) // 3])
    for suffix in ("-wal", "-shm"):
        Path(f"{store_path}{suffix}").unlink(missing_ok=True)
    before = digest(store_path)
    with pytest.raises(StoreCorrupt), SQLiteStore(store_path) as store:
        store.unfinished()
    assert digest(store_path) == before


def test_a_header_shorter_than_sqlite_is_refused(store_path: Path) -> None:
    store_path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 10)
    with pytest.raises(StoreCorrupt, match="truncated"):
        SQLiteStore(store_path)


def test_a_store_from_a_newer_idemclient_is_refused(store_path: Path) -> None:
    SQLiteStore(store_path).close()
    with sqlite3.connect(store_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreTooNew, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteStore(store_path)


def test_an_empty_file_becomes_a_store(store_path: Path) -> None:
    store_path.touch()
    with SQLiteStore(store_path) as store:
        assert store.unfinished() == []


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="directory"):
        SQLiteStore(tmp_path)


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="cannot be created"):
        SQLiteStore(tmp_path / "missing" / "ops.db")


def test_migrations_run_in_order_once(store_path: Path) -> None:
    SQLiteStore(store_path).close()  # at the current version
    applied: list[int] = []

    def add_column(db: sqlite_utils.Database) -> None:
        applied.append(2)
        db.table("operations").add_column("note", str)

    from idemclient._store._schema import MIGRATIONS

    steps = (*MIGRATIONS, add_column)
    for _ in range(2):
        open_database(str(store_path), busy_timeout=1, migrations=steps).close()
    assert applied == [2]
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(steps)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(operations)")]
    assert "note" in columns


def test_a_failed_migration_changes_nothing(store_path: Path) -> None:
    SQLiteStore(store_path).close()
    before = digest(store_path)

    def broken(db: sqlite_utils.Database) -> None:
        db.table("operations").add_column("half_done", str)
        raise RuntimeError("migration bug")

    from idemclient._store._schema import MIGRATIONS

    with pytest.raises(RuntimeError, match="migration bug"):
        open_database(str(store_path), busy_timeout=1, migrations=(*MIGRATIONS, broken))
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [row[1] for row in conn.execute("PRAGMA table_info(operations)")]
    assert "half_done" not in columns
    del before  # the WAL may be checkpointed; what matters is the schema above


OPEN = """
import sys
from idemclient.store import SQLiteStore
SQLiteStore(sys.argv[1]).close()
"""


def test_processes_creating_one_store_at_once_all_succeed(tmp_path: Path) -> None:
    # Regression: a process reading the header while another created the schema saw
    # tables without an application id and called the file foreign.
    for round_ in range(3):
        path = tmp_path / f"race-{round_}.db"
        children = [
            subprocess.Popen([sys.executable, "-c", OPEN, str(path)], stderr=subprocess.PIPE)
            for _ in range(6)
        ]
        results = [(c.communicate(timeout=60)[1], c.returncode) for c in children]
        assert [err for err, code in results if code != 0] == []


def test_concurrent_intents_are_committed_in_groups(store: SQLiteStore) -> None:
    import threading

    commits: list[str] = []
    store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    start = threading.Barrier(16)
    results: list[Claim] = []

    def admit(n: int) -> None:
        start.wait(timeout=10)
        for m in range(20):
            intent = make_intent(f"op-{n}-{m}", f"key-{n}-{m}")
            results.append(store.begin(intent, owner=new_owner(), now=NOW, lease_until=NOW).claim)

    threads = [threading.Thread(target=admit, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results.count(Claim.CREATED) == 320
    assert len(store.operations()) == 320
    # Each commit (one fsync) admitted several intents at once.
    assert len(commits) < 240, len(commits)


def test_only_a_damaged_file_is_called_damaged() -> None:
    from idemclient._db.errors import sqlite_error as store_error

    not_a_db = sqlite3.DatabaseError("file is not a database")
    not_a_db.sqlite_errorcode = 26  # type: ignore[attr-defined]
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    closed = sqlite3.ProgrammingError("Cannot operate on a closed database.")
    assert isinstance(store_error("f.db", not_a_db), StoreCorrupt)
    assert isinstance(store_error("f.db", locked), StoreUnavailable)
    assert isinstance(store_error("f.db", closed), StoreUnavailable)
    assert "f.db" in str(store_error("f.db", closed))


def test_a_version_1_store_is_migrated_and_keeps_its_operations(store_path: Path) -> None:
    from idemclient._store._schema import MIGRATIONS

    open_database(str(store_path), busy_timeout=1, migrations=MIGRATIONS[:1]).close()
    with sqlite3.connect(store_path) as conn:
        conn.execute(
            "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
            " reference, state, attempts, maybe_applied, evidence, created_at, updated_at)"
            " VALUES ('old', 'old-key', 'POST', 'http://x/', '[]', x'', 'f', 'r',"
            " 'indeterminate', 3, 1, 'HTTP 500', 1.0, 1.0)"
        )
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(operations)")}
    assert "operations_reference" in indexes
    with SQLiteStore(store_path) as store:
        [record] = store.unfinished()
    assert (record.operation_id, record.attempts, record.evidence) == ("old", 3, "HTTP 500")
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(operations)")}
    # Dropped by version 2, back (partial, on the reference) in version 3 for the batch
    # command's look-ups by reference.
    assert "operations_reference" in indexes


def test_a_version_5_store_gains_clock_stepped_and_a_step_back_marks_its_operation(
    store_path: Path,
) -> None:

    _store_at_version(
        store_path,
        5,
        "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
        " reference, state, attempts, maybe_applied, evidence, created_at, updated_at)"
        " VALUES ('old', 'old-key', 'POST', 'http://x/', '[]', x'', 'f', 'r',"
        " 'indeterminate', 3, 1, 'HTTP 500', 1.0, 1.0)",
    )
    with SQLiteStore(store_path) as store:
        [before] = store.unfinished()
        assert store.clock_went_back(step=7200.0, now=NOW) == 1
        [after] = store.unfinished()
    assert (before.clock_stepped, after.clock_stepped) == (None, 7200.0)
    assert _schema_version(store_path) == SCHEMA_VERSION


def test_a_version_6_store_gains_sent_at_and_its_old_records_stand_on_updated_at(
    store_path: Path,
) -> None:
    from idemclient._reconcile import last_sent

    _store_at_version(
        store_path,
        6,
        "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
        " reference, state, attempts, maybe_applied, evidence, created_at, updated_at)"
        " VALUES ('old', 'old-key', 'POST', 'http://x/', '[]', x'', 'f', 'r',"
        " 'indeterminate', 3, 1, 'HTTP 500', 1.0, 2.0)",
    )
    with SQLiteStore(store_path) as store:
        [record] = store.unfinished()
    # Written before the send time was kept: its last write's time stands in for it.
    assert (record.sent_at, last_sent(record, now=NOW)) == (None, 2.0)
    assert _schema_version(store_path) == SCHEMA_VERSION


def test_a_version_7_store_gains_the_look_up_mark_and_its_leases_stay_sends(
    store_path: Path,
) -> None:

    # Leased by an earlier version (which leased look-ups in flight too), expired.
    _store_at_version(
        store_path,
        7,
        "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
        " reference, state, attempts, maybe_applied, evidence, lease_owner,"
        " lease_expires, created_at, updated_at, sent_at) VALUES ('old', 'old-key',"
        " 'POST', 'http://x/', '[]', x'', 'f', 'r', 'in_flight', 1, 0, '',"
        " 'elsewhere:1:t:1', 50.0, 1.0, 2.0, NULL)",
    )
    with SQLiteStore(store_path) as store:
        [before] = store.unfinished()
        taken = store.claim("old", owner=new_owner(), now=NOW, lease_until=NOW + 60)
    # Which it was is not known: it counts as a send, as it did before.
    assert before.lease_look_up is False
    assert (taken.taken_over, taken.record.maybe_applied, taken.record.sent_at) == (
        True,
        True,
        50.0,
    )
    assert _schema_version(store_path) == SCHEMA_VERSION


def test_a_version_8_store_gains_replay_unexplained_false_for_its_old_rows(
    store_path: Path,
) -> None:

    _store_at_version(
        store_path,
        8,
        "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
        " reference, state, attempts, maybe_applied, evidence, created_at, updated_at,"
        " sent_at) VALUES ('old', 'old-key', 'POST', 'http://x/', '[]', x'', 'f', 'r',"
        " 'indeterminate', 1, 1, 'ReadTimeout', 1.0, 2.0, 1.5)",
    )
    with SQLiteStore(store_path) as store:
        [record] = store.unfinished()
        assert (record.replay_unexplained, record.sent_at) == (False, 1.5)
        owner = new_owner()
        store.claim("old", owner=owner, now=NOW, lease_until=NOW + 60)
        doubted = Progress(
            attempts=2,
            maybe_applied=True,
            evidence="HTTP 409",
            not_before=None,
            now=NOW,
            replay_unexplained=True,
        )
        assert store.finish("old", owner=owner, state=State.INDETERMINATE, progress=doubted)
        assert store.get("old").replay_unexplained  # type: ignore[union-attr]
    assert _schema_version(store_path) == SCHEMA_VERSION


def test_a_version_2_store_gains_the_reference_index_and_answers_by_reference(
    store_path: Path,
) -> None:

    _store_at_version(
        store_path,
        2,
        "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
        " reference, state, attempts, maybe_applied, evidence, created_at, updated_at,"
        " finished_at, status_code, response_body, response_sha256, response_size)"
        " VALUES ('k', 'k', 'POST', 'http://x/v1/payouts', '[]', x'7b7d', 'f', 'E1',"
        " 'succeeded', 1, 1, 'HTTP 201', 1.0, 1.0, 1.0, 201, x'', '', 0)",
    )
    with SQLiteStore(store_path) as store:
        [record] = store.find(references=["E1"])
        assert (record.operation_id, record.state) == ("k", State.SUCCEEDED)
        plan = store._conn.execute(
            "EXPLAIN QUERY PLAN " + store._sql.find_references, ('["E1"]',)
        ).fetchall()
    assert any("operations_reference" in str(step) for step in plan)


def test_upgrading_a_store_takes_out_the_secrets_earlier_versions_wrote(
    store_path: Path,
) -> None:
    """Earlier versions wrote X-Auth-Token and secret query values in clear, and deleted
    operations after a week; this one keeps them until purged, so the upgrade takes the
    secrets out: withheld header names, a redacted URL fingerprinted again."""
    from idemclient._fingerprint import bytes_fingerprint
    from idemclient._store._schema import MIGRATIONS

    secret = "xat_SECRET_VALUE_7741"
    body = b'{"amount":1}'
    open_database(str(store_path), busy_timeout=1, migrations=MIGRATIONS[:2]).close()
    url = f"https://psp.test/v1/payouts?access_token={secret}&page=1"
    old_fingerprint = bytes_fingerprint("POST", httpx.URL(url), body)
    with sqlite3.connect(store_path) as conn:
        conn.execute(
            "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
            " reference, state, attempts, maybe_applied, evidence, created_at, updated_at,"
            " finished_at, status_code, response_headers, response_body, response_sha256,"
            " response_size) VALUES ('op', 'k', 'POST', ?, ?, ?, ?, 'E1', 'succeeded', 1, 1,"
            " 'HTTP 201', 1.0, 1.0, 1.0, 201, ?, x'7b7d', '', 2)",
            (
                url,
                json.dumps([["content-type", "application/json"], ["x-auth-token", secret]]),
                body,
                old_fingerprint,
                json.dumps([["set-session", secret], ["location", url]]),
            ),
        )
    with SQLiteStore(store_path) as store:
        record = store.get("op")
    assert record is not None
    assert record.url == "https://psp.test/v1/payouts?access_token=&page=1"
    assert record.headers == (("content-type", "application/json"),)
    assert record.withheld_headers == ("x-auth-token",)  # a resume must carry it again
    assert record.fingerprint == bytes_fingerprint("POST", httpx.URL(record.url), body)
    assert record.response is not None
    assert dict(record.response.headers) == {"location": record.url}
    files = [store_path, *store_path.parent.glob(store_path.name + "-*")]
    assert not any(secret.encode() in path.read_bytes() for path in files)


# -- answers without reading back ------------------------------------------------------


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.NOT_SENT])
def test_finish_answers_the_record_as_written(store: SQLiteStore, state: State) -> None:
    # `finish` answers from the record `begin` gave, without reading the row back: what
    # it answers must be the row, every field of it (a field added to the record and
    # not carried over shows here).
    intent = dataclasses.replace(
        make_intent(headers=(("content-type", "application/json"), ("x-trace", "t-1"))),
        profile="stripe",
    )
    owner = new_owner()
    begun = store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
    assert begun.record == store.get(intent.operation_id)  # `begin` answers so too
    answer = StoredResponse.of(201, (("content-type", "application/json"),), b'{"id":"p1"}')
    finished = store.finish(
        intent.operation_id,
        owner=owner,
        state=state,
        progress=progress(2, now=NOW + 1),
        response=answer if state.finished else None,
        known=begun.record,
    )
    assert finished == store.get(intent.operation_id)
    assert finished.withheld_headers == ("x-trace",)
    assert (finished.reference, finished.profile) == ("ref-1", "stripe")


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.INDETERMINATE])
def test_the_brief_finish_tells_what_it_wrote_and_makes_the_record_on_demand(
    store: SQLiteStore, state: State
) -> None:
    # `finish_brief` tells a write that landed by a `Finished`, which makes the record
    # only when asked: every field an outcome reads is the row's, and the record it
    # makes is the row, as `finish` would have answered it.
    intent = dataclasses.replace(make_intent(), profile="stripe", server_created_at=NOW - 1)
    owner = new_owner()
    begun = store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
    answer = StoredResponse.of(201, (("content-type", "application/json"),), b'{"id":"p1"}')
    sent = Progress(
        attempts=2,
        maybe_applied=True,
        evidence="HTTP 201",
        not_before=None,
        now=NOW + 1,
        sent_at=NOW + 0.5,
        server_sent_at=NOW + 0.4,
    )
    told = final_write(store)(
        intent.operation_id,
        owner=owner,
        state=state,
        progress=sent,
        response=answer if state.finished else None,
        known=begun.record,
    )
    stored = store.get(intent.operation_id)
    assert isinstance(told, Finished)
    assert stored is not None
    assert told.record() == stored
    read = ("operation_id", "key", "state", "attempts", "maybe_applied", "evidence")
    assert [getattr(told, name) for name in read] == [getattr(stored, name) for name in read]
    assert (told.not_before, told.response) == (stored.not_before, stored.response)
    assert (told.lease_owner, told.lease_lost) == (None, False)


def test_a_store_whose_finish_is_overridden_is_asked_by_that_finish(tmp_path: Path) -> None:
    # A subclass that overrides `finish` (to watch it, or change it) is never passed by
    # for the brief form of the write: the client asks its own `finish`.
    asked: list[str] = []

    class Watched(SQLiteStore):
        def finish(self, operation_id: str, **kwargs: Any) -> OperationRecord:
            asked.append(operation_id)
            return super().finish(operation_id, **kwargs)

    plain = SQLiteStore(tmp_path / "s.db")
    assert final_write(plain) == plain.finish_brief
    plain.close()
    store = Watched(tmp_path / "w.db")
    assert final_write(store) == store.finish
    with Client(
        store=store,
        transport=httpx.MockTransport(lambda request: httpx.Response(201, json={})),
        base_url="http://psp.test",
    ) as client:
        outcome = client.post("/v1/payments", json={"amount": 1}, operation_id="op-w")
    assert outcome.state is State.SUCCEEDED
    assert asked == ["op-w"]
    store.close()


def test_a_finish_patched_in_place_is_asked_after_a_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether the brief form stands for `finish` is judged again once the class's
    # `finish` changes: one patched on the class after the store's first operation (a
    # test's fault, a user's wrapper) is asked from then on.
    store = SQLiteStore(tmp_path / "s.db")
    assert final_write(store) == store.finish_brief
    finish = SQLiteStore.finish

    def watched(self: SQLiteStore, operation_id: str, **kwargs: Any) -> OperationRecord:
        return finish(self, operation_id, **kwargs)

    monkeypatch.setattr(SQLiteStore, "finish", watched)
    assert final_write(store) == store.finish
    assert final_write(store) != store.finish_brief
    store.close()


def test_a_start_reads_the_latest_time_seen_through_indexes_alone(store: SQLiteStore) -> None:
    # Every client start reads the latest time the store has seen (`advance_clock`):
    # each part of it is read through an index, so that a start costs the same in a
    # store of millions of operations (a scan of 200k finished rows took 78 ms).
    with store._use() as conn:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + store._sql.seen)]
    reads = [step for step in plan if "operations" in step]
    assert len(reads) == 3  # finished, unfinished, sent
    assert all("USING" in step and "INDEX" in step for step in reads), plan
