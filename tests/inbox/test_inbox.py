"""The inbox itself: the id and the effect commit together, or neither does."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from idemclient import ManualClock
from idemclient.errors import ForeignStore, InvalidKey, StoreCorrupt, StoreTooNew, StoreUnavailable
from idemclient.inbox import (
    DEFAULT_RETENTION,
    Inbox,
    InvalidMessageId,
    SQLiteInbox,
    SQLiteInboxStorage,
)

from .conftest import create_effects_table, effects, recorded_ids


def add_effect(message_id: str) -> Callable[[sqlite3.Connection], str]:
    def handler(tx: sqlite3.Connection) -> str:
        tx.execute("INSERT INTO effects (message_id) VALUES (?)", (message_id,))
        return f"did {message_id}"

    return handler


def test_a_new_message_runs_the_handler_and_commits_both(inbox: SQLiteInbox, app_db: Path) -> None:
    receipt = inbox.process("psp", "evt_1", add_effect("evt_1"))
    assert (receipt.duplicate, receipt.result) == (False, "did evt_1")
    assert effects(app_db) == {"evt_1": 1}
    assert recorded_ids(app_db) == {("psp", "evt_1")}
    assert inbox.seen("psp", "evt_1")


def test_a_duplicate_is_dropped_without_calling_the_handler(
    inbox: SQLiteInbox, app_db: Path
) -> None:
    inbox.process("psp", "evt_1", add_effect("evt_1"))
    calls: list[sqlite3.Connection] = []
    receipt = inbox.process("psp", "evt_1", calls.append)
    assert receipt.duplicate
    assert receipt.result is None
    assert calls == []
    assert effects(app_db) == {"evt_1": 1}


def test_a_failing_handler_records_nothing_and_the_redelivery_is_processed(
    inbox: SQLiteInbox, app_db: Path
) -> None:
    def half_done_then_fails(tx: sqlite3.Connection) -> None:
        tx.execute("INSERT INTO effects (message_id) VALUES ('evt_1')")
        raise RuntimeError("the handler broke after writing")

    with pytest.raises(RuntimeError, match="broke"):
        inbox.process("psp", "evt_1", half_done_then_fails)
    assert effects(app_db) == {}
    assert recorded_ids(app_db) == set()
    assert not inbox.seen("psp", "evt_1")
    assert not inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
    assert effects(app_db) == {"evt_1": 1}


def test_ids_are_scoped_per_sender(inbox: SQLiteInbox, app_db: Path) -> None:
    assert not inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
    assert not inbox.process("bank", "evt_1", add_effect("evt_1")).duplicate
    assert inbox.process("bank", "evt_1", add_effect("evt_1")).duplicate
    assert recorded_ids(app_db) == {("psp", "evt_1"), ("bank", "evt_1")}


def test_receive_is_the_same_as_a_context_manager(inbox: SQLiteInbox, app_db: Path) -> None:
    with inbox.receive("psp", "evt_1") as delivery:
        assert not delivery.duplicate
        delivery.tx.execute("INSERT INTO effects (message_id) VALUES ('evt_1')")
    with inbox.receive("psp", "evt_1") as again:
        assert again.duplicate

    def fail_inside() -> None:
        with inbox.receive("psp", "evt_2") as failing:
            failing.tx.execute("INSERT INTO effects (message_id) VALUES ('evt_2')")
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_inside()
    assert effects(app_db) == {"evt_1": 1}
    assert recorded_ids(app_db) == {("psp", "evt_1")}


def test_record_joins_a_transaction_the_application_opened(
    app_db: Path, clock: ManualClock
) -> None:
    conn = sqlite3.connect(app_db, isolation_level=None)
    inbox = SQLiteInbox(conn, clock=clock)
    for _ in range(2):
        conn.execute("BEGIN IMMEDIATE")
        if inbox.record(conn, "psp", "evt_1"):
            conn.execute("INSERT INTO effects (message_id) VALUES ('evt_1')")
        conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    assert inbox.record(conn, "psp", "evt_2")
    conn.execute("ROLLBACK")  # the application changed its mind: the id goes too
    assert effects(app_db) == {"evt_1": 1}
    assert recorded_ids(app_db) == {("psp", "evt_1")}
    inbox.close()
    conn.execute("SELECT 1")  # the application's connection is the application's to close
    conn.close()


def test_record_outside_a_transaction_is_refused(app_db: Path) -> None:
    conn = sqlite3.connect(app_db, isolation_level=None)
    inbox = SQLiteInbox(conn)
    with pytest.raises(ValueError, match="open transaction"):
        inbox.record(conn, "psp", "evt_1")
    assert recorded_ids(app_db) == set()
    conn.close()


def test_the_application_connection_with_python_default_transactions(app_db: Path) -> None:
    conn = sqlite3.connect(app_db)  # the sqlite3 module's implicit transactions
    inbox = SQLiteInbox(conn)
    assert not inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
    assert inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
    assert effects(app_db) == {"evt_1": 1}
    conn.close()


def test_process_inside_an_open_transaction_points_to_record(app_db: Path) -> None:
    conn = sqlite3.connect(app_db, isolation_level=None)
    inbox = SQLiteInbox(conn)
    conn.execute("BEGIN")
    with pytest.raises(ValueError, match=r"inbox\.record"):
        inbox.process("psp", "evt_1", add_effect("evt_1"))
    conn.execute("ROLLBACK")
    conn.close()


def _commit_method(tx: sqlite3.Connection) -> None:
    tx.commit()


def _with_block(tx: sqlite3.Connection) -> None:
    with tx:
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'inside with')")


def _commit_statement(tx: sqlite3.Connection) -> None:
    tx.execute("COMMIT")


def _end_statement(tx: sqlite3.Connection) -> None:
    tx.cursor().execute("/* done */ END TRANSACTION")


def _rollback_method(tx: sqlite3.Connection) -> None:
    tx.rollback()


def _rollback_statement(tx: sqlite3.Connection) -> None:
    tx.execute("ROLLBACK")


def _executescript(tx: sqlite3.Connection) -> None:
    # sqlite3 commits any open transaction before running a script.
    tx.executescript("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'script');")


def _begin_statement(tx: sqlite3.Connection) -> None:
    tx.execute("BEGIN")


TRANSACTION_ENDERS = [
    pytest.param(_commit_method, "COMMIT", id="tx.commit()"),
    pytest.param(_with_block, "COMMIT", id="with tx"),
    pytest.param(_commit_statement, "COMMIT", id="COMMIT"),
    pytest.param(_end_statement, "COMMIT", id="END TRANSACTION"),
    pytest.param(_rollback_method, "ROLLBACK", id="tx.rollback()"),
    pytest.param(_rollback_statement, "ROLLBACK", id="ROLLBACK"),
    pytest.param(_executescript, "COMMIT", id="executescript"),
    pytest.param(_begin_statement, "BEGIN", id="BEGIN"),
]


def two_halves(
    middle: Callable[[sqlite3.Connection], None], *, swallow: bool = False
) -> Callable[[sqlite3.Connection], None]:
    """A handler writing its effect in two halves with `middle` between them."""

    def handler(tx: sqlite3.Connection) -> None:
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'first half')")
        try:
            middle(tx)
        except sqlite3.Error:
            if not swallow:
                raise
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'second half')")

    return handler


def effect_halves(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(t for (t,) in conn.execute("SELECT type FROM effects"))


def redeliver_whole(inbox: SQLiteInbox, app_db: Path) -> None:
    """The redelivery is processed as new, and the whole effect lands exactly once."""
    assert not inbox.seen("psp", "evt_1")
    assert not inbox.process("psp", "evt_1", two_halves(lambda tx: None)).duplicate
    assert inbox.process("psp", "evt_1", two_halves(lambda tx: None)).duplicate
    assert effect_halves(app_db) == ["first half", "second half"]
    assert recorded_ids(app_db) == {("psp", "evt_1")}


@pytest.mark.parametrize("swallow", [False, True], ids=["raised", "swallowed"])
@pytest.mark.parametrize(("middle", "statement"), TRANSACTION_ENDERS)
def test_a_handler_cannot_end_the_inbox_transaction(
    inbox: SQLiteInbox,
    app_db: Path,
    middle: Callable[[sqlite3.Connection], None],
    statement: str,
    swallow: bool,
) -> None:
    # Ending the transaction early would commit the id with half of the effect: the
    # sender would get a 500, and its redelivery would be dropped as a duplicate. A
    # handler that catches the refusal and carries on fails all the same.
    with pytest.raises(sqlite3.ProgrammingError, match=f"ran {statement} inside the inbox"):
        inbox.process("psp", "evt_1", two_halves(middle, swallow=swallow))
    assert effects(app_db) == {}
    assert recorded_ids(app_db) == set()
    redeliver_whole(inbox, app_db)


def test_the_refusal_is_the_handlers_error_to_see(inbox: SQLiteInbox) -> None:
    seen: list[BaseException] = []

    def handler(tx: sqlite3.Connection) -> None:
        try:
            tx.commit()
        except sqlite3.Error as exc:
            seen.append(exc)
            raise

    with pytest.raises(sqlite3.ProgrammingError) as raised:
        inbox.process("psp", "evt_1", handler)
    assert "The inbox commits the effect together with the message id" in str(raised.value)
    [refused] = seen
    assert isinstance(refused, sqlite3.DatabaseError)
    assert raised.value.__cause__ is refused


def test_savepoints_inside_the_handler_are_allowed(inbox: SQLiteInbox, app_db: Path) -> None:
    def handler(tx: sqlite3.Connection) -> None:
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'first half')")
        tx.execute("SAVEPOINT attempt")
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'undone')")
        tx.execute("ROLLBACK TO attempt")
        tx.execute("RELEASE attempt")
        tx.execute("SAVEPOINT kept")
        tx.execute("INSERT INTO effects (message_id, type) VALUES ('evt_1', 'second half')")
        tx.execute("RELEASE kept")

    assert not inbox.process("psp", "evt_1", handler).duplicate
    assert effect_halves(app_db) == ["first half", "second half"]
    assert recorded_ids(app_db) == {("psp", "evt_1")}


def test_the_connection_commits_again_after_the_handler(app_db: Path) -> None:
    # The guard lasts as long as the inbox's transaction, never longer: the
    # application's own connection is the application's again afterwards.
    conn = sqlite3.connect(app_db, isolation_level=None)
    inbox = SQLiteInbox(conn)
    with pytest.raises(sqlite3.ProgrammingError):
        inbox.process("psp", "evt_1", _commit_method)
    assert not inbox.process("psp", "evt_2", add_effect("evt_2")).duplicate
    conn.execute("BEGIN")
    conn.execute("INSERT INTO effects (message_id) VALUES ('own')")
    conn.commit()
    conn.execute("BEGIN")
    conn.execute("INSERT INTO effects (message_id) VALUES ('undone')")
    conn.rollback()
    assert effects(app_db) == {"evt_2": 1, "own": 1}
    inbox.close()
    conn.close()


@pytest.mark.parametrize(
    ("sender", "message_id", "what"),
    [
        ("psp", "", "message id"),
        ("psp", "evt 1", "message id"),  # a space
        ("psp", "evt/1", "message id"),
        ("psp", "é", "message id"),
        ("psp", "x" * 256, "message id"),
        ("psp", None, "message id"),
        ("", "evt_1", "sender"),
        ("my psp", "evt_1", "sender"),
    ],
)
def test_ids_and_senders_follow_the_key_rules(
    inbox: SQLiteInbox, app_db: Path, sender: object, message_id: object, what: str
) -> None:
    calls: list[object] = []
    with pytest.raises(InvalidMessageId, match=f"invalid {what}") as caught:
        inbox.process(sender, message_id, calls.append)  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidKey)
    assert isinstance(caught.value, ValueError)
    assert calls == []
    assert recorded_ids(app_db) == set()


def test_the_longest_valid_id_is_accepted(inbox: SQLiteInbox) -> None:
    assert not inbox.process("psp", "a" * 255, lambda tx: None).duplicate


# -- retention -----------------------------------------------------------------------


def test_reaping_never_touches_ids_inside_the_window(app_db: Path) -> None:
    clock = ManualClock()
    with SQLiteInbox(app_db, clock=clock, retention=3600) as inbox:
        inbox.process("psp", "old", lambda tx: None)
        clock.advance(1800)
        inbox.process("psp", "newer", lambda tx: None)
        clock.advance(1800)  # "old" is exactly retention old: kept
        assert inbox.reap() == 0
        clock.advance(0.5)
        assert inbox.reap() == 1
        assert not inbox.seen("psp", "old")
        assert inbox.seen("psp", "newer")
        clock.advance(1800)
        assert inbox.reap() == 1
        assert inbox.reap() == 0


def test_reaping_goes_in_batches(app_db: Path, clock: ManualClock) -> None:
    with SQLiteInbox(app_db, clock=clock, retention=10) as inbox:
        for n in range(5):
            inbox.process("psp", f"evt_{n}", lambda tx: None)
        clock.advance(11)
        assert [inbox.reap(batch=2) for _ in range(4)] == [2, 2, 1, 0]
        with pytest.raises(ValueError, match="batch"):
            inbox.reap(batch=0)


def test_an_id_reaped_after_the_window_is_new_again(app_db: Path, clock: ManualClock) -> None:
    # Why the window must outlast every redelivery: after it, a duplicate is processed.
    with SQLiteInbox(app_db, clock=clock, retention=60) as inbox:
        inbox.process("psp", "evt_1", add_effect("evt_1"))
        clock.advance(61)
        inbox.reap()
        assert not inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
    assert effects(app_db) == {"evt_1": 2}


@pytest.mark.parametrize("retention", [0, -1, float("nan"), float("inf")])
def test_retention_must_be_positive_and_finite(app_db: Path, retention: float) -> None:
    with pytest.raises(ValueError, match="retention"):
        SQLiteInbox(app_db, retention=retention)


def test_the_default_retention_is_thirty_days(inbox: SQLiteInbox) -> None:
    assert inbox.retention == DEFAULT_RETENTION == 30 * 24 * 3600


# -- the file ------------------------------------------------------------------------


def test_a_new_database_file_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with SQLiteInbox(path) as inbox:
        inbox.process("psp", "evt_1", lambda tx: None)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_existing_application_database_keeps_its_settings(app_db: Path) -> None:
    with SQLiteInbox(app_db):
        pass
    with sqlite3.connect(app_db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {
        "effects",
        "idemclient_inbox",
        "idemclient_resource_versions",
        "idemclient_schema",
    }


def test_reopening_keeps_the_ids(app_db: Path) -> None:
    with SQLiteInbox(app_db) as first:
        first.process("psp", "evt_1", lambda tx: None)
    with SQLiteInbox(app_db) as second:
        assert second.process("psp", "evt_1", lambda tx: None).duplicate


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 10)
    with pytest.raises(StoreCorrupt, match=str(path)):
        SQLiteInbox(path)
    assert path.read_bytes() == b"these are my notes, not a database" * 10


def test_a_table_of_the_same_name_made_by_someone_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE idemclient_inbox (whatever TEXT)")
    with pytest.raises(ForeignStore, match="did not create"):
        SQLiteInbox(path)
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"idemclient_inbox"}  # nothing added


def test_a_newer_inbox_schema_is_refused(app_db: Path) -> None:
    with SQLiteInbox(app_db):
        pass
    with sqlite3.connect(app_db) as conn:
        conn.execute("UPDATE idemclient_schema SET version = 99 WHERE component = 'inbox'")
    with pytest.raises(StoreTooNew, match="inbox schema version 99"):
        SQLiteInbox(app_db)


def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="cannot be created"):
        SQLiteInbox(tmp_path / "no" / "such" / "dir.db")


def test_a_connection_in_a_transaction_is_not_accepted(app_db: Path) -> None:
    conn = sqlite3.connect(app_db, isolation_level=None)
    conn.execute("BEGIN")
    with pytest.raises(ValueError, match="outside a transaction"):
        SQLiteInboxStorage(conn)
    conn.execute("ROLLBACK")
    conn.close()


def test_a_connection_used_from_the_wrong_thread_is_unavailable_not_corrupt(
    app_db: Path,
) -> None:
    conn = sqlite3.connect(app_db)  # check_same_thread: only this thread may use it
    inbox = SQLiteInbox(conn)
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            inbox.process("psp", "evt_1", lambda tx: None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(timeout=10)
    [error] = errors
    assert isinstance(error, StoreUnavailable)
    assert "same thread" in str(error)
    conn.close()


def test_a_closed_inbox_says_so(app_db: Path) -> None:
    inbox = SQLiteInbox(app_db)
    inbox.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        inbox.process("psp", "evt_1", lambda tx: None)


def test_the_generic_inbox_takes_any_storage(app_db: Path, clock: ManualClock) -> None:
    storage = SQLiteInboxStorage(app_db)
    with Inbox(storage, clock=clock) as inbox:
        assert not inbox.process("psp", "evt_1", lambda tx: None).duplicate
        assert repr(inbox).startswith("Inbox(")


# -- concurrency ---------------------------------------------------------------------


def test_the_same_message_from_many_threads_and_connections_applies_once(app_db: Path) -> None:
    """Eight receivers (each its own connection, as separate processes would have) get
    the same message at once: exactly one effect."""
    inboxes = [SQLiteInbox(app_db) for _ in range(8)]
    barrier = threading.Barrier(len(inboxes))
    duplicates: list[bool] = []

    def deliver(inbox: SQLiteInbox) -> None:
        barrier.wait(timeout=10)
        duplicates.append(inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in inboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for inbox in inboxes:
        inbox.close()
    assert sorted(duplicates) == [False] + [True] * 7
    assert effects(app_db) == {"evt_1": 1}


def test_an_in_memory_database_works_for_tests() -> None:
    with SQLiteInbox(":memory:") as inbox:
        with inbox.storage.transaction() as tx:
            create_effects_table(tx)
        assert not inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
        assert inbox.process("psp", "evt_1", add_effect("evt_1")).duplicate
