"""The inbox's promises, on SQLite and on PostgreSQL alike: one effect per message,
whatever the duplicates, races and crashes.

The merchant's effect is a row in its own `effects` table, written in the inbox's
transaction; the table has no unique constraint, so a second processing would show as
a second row.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from idemclient import ManualClock
from idemclient.inbox import StandardWebhooks, WebhookEvent, WebhookReceiver
from idemclient.testing import ReferenceServer

from ..inbox.conftest import SECRET, SENDER, signed
from .conftest import MerchantDatabase, add_effect

CHILD = Path(__file__).with_name("inbox_child.py")


def test_a_new_message_commits_with_its_effect_and_a_duplicate_is_dropped(
    merchant: MerchantDatabase,
) -> None:
    inbox = merchant.open_inbox()
    first = inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1"))
    calls: list[object] = []
    again = inbox.process("psp", "evt_1", calls.append)
    assert (first.duplicate, again.duplicate, calls) == (False, True, [])
    assert inbox.process("bank", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate is False
    assert merchant.effects() == {"evt_1": 2}  # once per sender
    assert merchant.recorded() == {("psp", "evt_1"), ("bank", "evt_1")}
    assert inbox.seen("psp", "evt_1")
    assert not inbox.seen("psp", "evt_2")


def test_a_failing_handler_records_nothing_and_the_redelivery_is_processed(
    merchant: MerchantDatabase,
) -> None:
    inbox = merchant.open_inbox()

    def half_done_then_fails(tx: Any) -> None:
        add_effect(tx, "evt_1")
        raise RuntimeError("the handler broke after writing")

    with pytest.raises(RuntimeError, match="broke"):
        inbox.process("psp", "evt_1", half_done_then_fails)
    assert (merchant.effects(), merchant.recorded()) == ({}, set())
    assert not inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1")).duplicate
    assert merchant.effects() == {"evt_1": 1}


def _commit_method(tx: Any) -> None:
    tx.commit()


def _with_block(tx: Any) -> None:
    with tx:
        pass


def _rollback_method(tx: Any) -> None:
    tx.rollback()


@pytest.mark.parametrize(
    "ends_the_transaction",
    [
        pytest.param(_commit_method, id="tx.commit()"),
        pytest.param(_with_block, id="with tx"),
        pytest.param(_rollback_method, id="tx.rollback()"),
    ],
)
def test_a_handler_cannot_commit_half_of_its_effect(
    merchant: MerchantDatabase, ends_the_transaction: Any
) -> None:
    """The connection a handler gets refuses to end the inbox's transaction: were it
    to, the id would commit with the first half, and the redelivery be dropped.

    psycopg refuses `commit()` and `rollback()` inside `conn.transaction()`; SQLite's
    connection is made to refuse them, and the statements too (tests/inbox/test_inbox.py).
    A COMMIT statement sent through psycopg reaches the server, which commits: the
    limit docs/inbox.md states for PostgreSQL."""
    inbox = merchant.open_inbox()

    def in_two_halves(tx: Any) -> None:
        add_effect(tx, "evt_1", "first half")
        ends_the_transaction(tx)
        add_effect(tx, "evt_1", "second half")

    refused = r"ran \w+ inside the inbox's transaction|forbidden within a Transaction context"
    with pytest.raises(Exception, match=refused):
        inbox.process("psp", "evt_1", in_two_halves)
    assert (merchant.effects(), merchant.recorded()) == ({}, set())

    def whole(tx: Any) -> None:
        add_effect(tx, "evt_1", "first half")
        add_effect(tx, "evt_1", "second half")

    assert not inbox.process("psp", "evt_1", whole).duplicate
    assert inbox.process("psp", "evt_1", whole).duplicate
    assert merchant.effects() == {"evt_1": 2}
    assert merchant.recorded() == {("psp", "evt_1")}


def test_record_joins_the_merchants_own_transaction(merchant: MerchantDatabase) -> None:
    inbox = merchant.open_inbox()
    for _ in range(2):
        with merchant.transaction() as conn:
            if inbox.record(conn, "psp", "evt_1"):
                add_effect(conn, "evt_1")

    class ChangedMind(Exception):
        pass

    def record_then_change_mind() -> None:
        with merchant.transaction() as conn:
            assert inbox.record(conn, "psp", "evt_2")
            add_effect(conn, "evt_2")
            raise ChangedMind  # rolled back: the id goes with the effect

    with pytest.raises(ChangedMind):
        record_then_change_mind()
    assert merchant.effects() == {"evt_1": 1}
    assert merchant.recorded() == {("psp", "evt_1")}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_event_delivered_one_to_three_times_shuffled_has_one_effect(
    merchant: MerchantDatabase, seed: int
) -> None:
    rng = random.Random(seed)
    clock = ManualClock()

    def on_event(event: WebhookEvent, tx: Any) -> None:
        add_effect(tx, event.message_id, event.json()["type"])

    receiver = WebhookReceiver(
        merchant.open_inbox(clock=clock),
        sender=SENDER,
        scheme=StandardWebhooks([SECRET]),
        handler=on_event,
        clock=clock,
    )
    kinds = ["payment.succeeded", "payment.failed", "payout.succeeded", "payout.failed"]
    events = {f"evt_{seed}_{n}": rng.choice(kinds) for n in range(20)}
    deliveries = [i for i in events for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    outcomes: Counter[str] = Counter()
    for message_id in deliveries:
        clock.advance(rng.uniform(0, 30))  # redeliveries come later, signed anew
        body = json.dumps({"id": message_id, "type": events[message_id]}).encode()
        answer = receiver.handle(signed(body, message_id, timestamp=clock.time()), body)
        assert answer.status == 200
        outcomes[answer.outcome] += 1
    assert merchant.effects() == dict.fromkeys(events, 1)
    with merchant.connect() as conn:
        assert dict(conn.execute("SELECT message_id, note FROM effects").fetchall()) == events
    assert outcomes == {"processed": 20, "duplicate": len(deliveries) - 20}


def test_eight_connections_racing_on_one_message_apply_it_once(
    merchant: MerchantDatabase,
) -> None:
    """Eight receivers, each with its own connection as separate hosts would have, get
    the same message at once. The losers wait for the winner's commit, then drop it."""
    inboxes = [merchant.open_inbox() for _ in range(8)]
    barrier = threading.Barrier(len(inboxes))
    duplicates: list[bool] = []
    failures: list[BaseException] = []

    def deliver(inbox: Any) -> None:
        try:
            barrier.wait(timeout=10)
            receipt = inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1"))
            duplicates.append(receipt.duplicate)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in inboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == []
    assert sorted(duplicates) == [False] + [True] * 7
    assert merchant.effects() == {"evt_1": 1}


def test_reaping_keeps_the_window_and_goes_in_batches(merchant: MerchantDatabase) -> None:
    clock = ManualClock()
    inbox = merchant.open_inbox(clock=clock, retention=3600)
    for n in range(5):
        inbox.process("psp", f"old_{n}", lambda tx: None)
    clock.advance(1800)
    inbox.process("psp", "newer", lambda tx: None)
    clock.advance(1800)  # the old ones are exactly `retention` old: kept
    assert inbox.reap() == 0
    clock.advance(0.5)
    assert [inbox.reap(batch=2) for _ in range(4)] == [2, 2, 1, 0]
    assert merchant.recorded() == {("psp", "newer")}
    # After the window an id is new again: why retention must outlast every retry.
    assert not inbox.process("psp", "old_0", lambda tx: None).duplicate


@pytest.mark.parametrize(
    ("mode", "committed_before_the_kill"),
    [
        ("before-commit", 0),  # effect written, not committed: it must not survive
        ("after-commit", 1),  # committed, the 2xx never left: the redelivery is a duplicate
    ],
)
def test_a_receiver_killed_mid_delivery_finishes_on_redelivery_exactly_once(
    merchant: MerchantDatabase, mode: str, committed_before_the_kill: int
) -> None:
    child = subprocess.run(
        [sys.executable, str(CHILD), merchant.target, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout == "effect written\n"
    assert merchant.effects() == ({"evt_1": 1} if committed_before_the_kill else {})
    assert len(merchant.recorded()) == committed_before_the_kill

    # The sender never got a 2xx, so it delivers again; the receiver has restarted.
    inbox = merchant.open_inbox()
    receipt = inbox.process("psp", "evt_1", lambda tx: add_effect(tx, "evt_1"))
    assert receipt.duplicate is bool(committed_before_the_kill)
    assert merchant.effects() == {"evt_1": 1}
    assert merchant.recorded() == {("psp", "evt_1")}


def test_the_reference_servers_deliveries_reach_a_postgres_inbox_once(pg_url: str) -> None:
    """The server's delivery loop, duplicating and losing acknowledgements, against a
    receiver on PostgreSQL: one effect per event."""
    import httpx

    merchant = MerchantDatabase("postgres", pg_url)
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server, merchant.open_inbox(clock=clock) as inbox:
        receiver = WebhookReceiver(
            inbox,
            sender=SENDER,
            scheme=StandardWebhooks([SECRET]),
            handler=lambda event, tx: add_effect(tx, event.message_id),
            clock=clock,
        )
        server.set_webhook_endpoint(
            "http://merchant.test/webhooks",
            secrets=[SECRET],
            transport=httpx.WSGITransport(app=receiver.wsgi_app()),
        )
        with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
            for n in range(6):
                client.post(
                    "/v1/payments",
                    json={"amount": 100 + n, "currency": "EUR", "reference": f"ref-{n}"},
                    headers={"Authorization": "Bearer alice", "Idempotency-Key": f"key-{n}"},
                ).raise_for_status()
        server.webhook_fault("duplicate", times=3)
        server.webhook_fault("lose_ack", times=2)
        for _ in range(10):  # bounded: each pass moves the clock past the retries
            server.deliver_webhooks()
            clock.advance(60)
        events = server.webhook_events()
    assert {e.state for e in events} == {"delivered"}
    assert sum(e.posts for e in events) > len(events)  # duplicates really happened
    assert merchant.effects() == {e.id: 1 for e in events}
