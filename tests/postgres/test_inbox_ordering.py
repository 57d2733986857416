"""The ordering guard, `inbox.advance`, on SQLite and on PostgreSQL alike.

The inbox applies each event once and promises no order. The guard keeps, per
resource, the greatest version (the event's own sequence or creation time) applied so
far, in the inbox's transaction: an event older than that, or equal to it, is
ignored, whatever order the deliveries arrive in, and however many arrive at once.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

from idemclient.inbox import Inbox

from .conftest import MerchantDatabase, add_effect


@pytest.fixture
def payments(merchant: MerchantDatabase) -> MerchantDatabase:
    with merchant.connect() as conn:
        conn.execute("CREATE TABLE payments (id text PRIMARY KEY, status text NOT NULL)")
        conn.commit()
    return merchant


def status_of(merchant: MerchantDatabase, payment: str) -> str | None:
    mark = "?" if merchant.backend == "sqlite" else "%s"
    with merchant.connect() as conn:
        row = conn.execute(f"SELECT status FROM payments WHERE id = {mark}", (payment,)).fetchone()
    return None if row is None else str(row[0])


def deliver(
    inbox: Inbox[Any],
    message_id: str,
    payment: str,
    status: str,
    version: float,
    order: list[float] | None = None,
) -> tuple[bool, bool]:
    """One event, processed as a merchant's handler would: (duplicate, applied).
    `order`: where an applied version is noted, inside the transaction while the guard
    holds the resource (so in the order the applying transactions commit)."""
    applied: list[bool] = []

    def handler(tx: Any) -> None:
        newer = inbox.advance(tx, "psp", f"payment/{payment}", version)
        applied.append(newer)
        if newer:
            if order is not None:
                order.append(version)
            mark = "?" if type(tx).__module__ == "sqlite3" else "%s"
            tx.execute(
                f"INSERT INTO payments (id, status) VALUES ({mark}, {mark})"
                " ON CONFLICT (id) DO UPDATE SET status = excluded.status",
                (payment, status),
            )
            add_effect(tx, message_id)

    receipt = inbox.process("psp", message_id, handler)
    return receipt.duplicate, bool(applied and applied[0])


def test_succeeded_delivered_before_created_leaves_the_payment_succeeded(
    payments: MerchantDatabase,
) -> None:
    inbox = payments.open_inbox()
    assert deliver(inbox, "evt_2", "pay_1", "succeeded", 2) == (False, True)
    assert deliver(inbox, "evt_1", "pay_1", "created", 1) == (False, False)  # late: ignored
    assert deliver(inbox, "evt_1", "pay_1", "created", 1) == (True, False)  # and a duplicate
    assert status_of(payments, "pay_1") == "succeeded"
    assert payments.effects() == {"evt_2": 1}
    # Both ids are recorded: the late one was received, and deliberately not applied.
    assert payments.recorded() == {("psp", "evt_1"), ("psp", "evt_2")}


def test_an_equal_or_older_version_is_ignored_and_a_newer_one_applied(
    payments: MerchantDatabase,
) -> None:
    inbox = payments.open_inbox()
    assert deliver(inbox, "evt_a", "pay_1", "created", 5)[1]
    assert not deliver(inbox, "evt_b", "pay_1", "processing", 5)[1]  # equal: ignored
    assert not deliver(inbox, "evt_c", "pay_1", "pending", 4)[1]  # older: ignored
    assert deliver(inbox, "evt_d", "pay_1", "succeeded", 6)[1]
    assert deliver(inbox, "evt_e", "pay_2", "created", 1)[1]  # another resource: its own
    assert status_of(payments, "pay_1") == "succeeded"
    assert status_of(payments, "pay_2") == "created"


def test_creation_times_with_fractions_order_as_numbers(payments: MerchantDatabase) -> None:
    inbox = payments.open_inbox()
    assert deliver(inbox, "evt_2", "pay_1", "succeeded", 1_700_000_000.75)[1]
    assert not deliver(inbox, "evt_1", "pay_1", "created", 1_700_000_000.25)[1]
    assert deliver(inbox, "evt_3", "pay_1", "refunded", 1_700_000_001)[1]
    assert status_of(payments, "pay_1") == "refunded"


def test_the_guard_rolls_back_with_a_failing_handler(payments: MerchantDatabase) -> None:
    inbox = payments.open_inbox()

    def advance_then_fail(tx: Any) -> None:
        assert inbox.advance(tx, "psp", "payment/pay_1", 9)
        raise RuntimeError("the handler broke after the guard")

    with pytest.raises(RuntimeError, match="broke"):
        inbox.process("psp", "evt_9", advance_then_fail)
    # Nothing of it stayed: version 2 is still newer than what is applied.
    assert deliver(inbox, "evt_2", "pay_1", "succeeded", 2)[1]
    assert payments.recorded() == {("psp", "evt_2")}


def test_the_guard_joins_the_merchants_own_transaction(payments: MerchantDatabase) -> None:
    inbox = payments.open_inbox()
    with payments.transaction() as conn:
        assert inbox.record(conn, "psp", "evt_2")
        assert inbox.advance(conn, "psp", "payment/pay_1", 2)
    with payments.transaction() as conn:
        assert inbox.record(conn, "psp", "evt_1")
        assert not inbox.advance(conn, "psp", "payment/pay_1", 1)


@pytest.mark.parametrize(
    ("resource", "version", "error"),
    [
        ("", 1, ValueError),
        ("x" * 256, 1, ValueError),
        ("payment/pay_1", float("nan"), ValueError),
        ("payment/pay_1", float("inf"), ValueError),
        ("payment/pay_1", True, TypeError),
        ("payment/pay_1", "2", TypeError),
    ],
)
def test_a_bad_resource_or_version_is_refused(
    payments: MerchantDatabase, resource: str, version: Any, error: type[Exception]
) -> None:
    inbox = payments.open_inbox()
    with pytest.raises(error):
        inbox.process("psp", "evt_1", lambda tx: inbox.advance(tx, "psp", resource, version))
    assert payments.recorded() == set()


def test_the_guard_outside_a_transaction_is_refused(payments: MerchantDatabase) -> None:
    # On an autocommit connection the version would commit on its own, before (and
    # without) the effect: refused, as `record` is.
    inbox = payments.open_inbox()
    if payments.backend == "sqlite":
        conn: Any = sqlite3.connect(payments.target, isolation_level=None)
    else:
        conn = psycopg.connect(payments.target, autocommit=True)
    with contextlib.closing(conn), pytest.raises((ValueError, TypeError)):
        inbox.advance(conn, "psp", "payment/pay_1", 1)


def test_eight_versions_racing_on_one_resource_leave_the_greatest(
    payments: MerchantDatabase,
) -> None:
    """Eight receivers, each with its own connection, get eight states of one payment
    at once, in a shuffled order: whichever commits last, the payment ends at the
    greatest version, and every applied state was newer than the one before it."""
    versions = list(range(1, 9))
    random.Random(7).shuffle(versions)
    inboxes = [payments.open_inbox() for _ in versions]
    barrier = threading.Barrier(len(inboxes))
    applied: list[float] = []
    failures: list[BaseException] = []

    def run(inbox: Inbox[Any], version: int) -> None:
        try:
            barrier.wait(timeout=10)
            # Noted inside the transaction: noted after it returned, the threads may
            # append in another order than they committed.
            deliver(inbox, f"evt_{version}", "pay_1", f"v{version}", version, applied)
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=pair) for pair in zip(inboxes, versions, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == []
    assert status_of(payments, "pay_1") == "v8"
    assert 8 in applied
    # Applied in commit order, each newer than the last: never an older state on top.
    assert applied == sorted(applied)
    assert payments.effects() == {f"evt_{v}": 1 for v in applied}
    assert len(payments.recorded()) == 8
