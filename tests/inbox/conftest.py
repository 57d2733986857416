"""Fixtures for the inbox tests: a merchant's database, its handler, and signed requests.

The merchant application here keeps one table, `effects`, with no unique constraint:
a message processed twice leaves two rows, so counting rows is how a test sees
"exactly once" (the inbox, not the schema, must prevent the second).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient import ManualClock
from idemclient.inbox import (
    MESSAGE_ID_HEADER,
    SIGNATURE_HEADER,
    SQLiteInbox,
    WebhookEvent,
    WebhookReceiver,
    sign,
)

SECRET = "whsec_test_0123456789abcdef0123456789"
OTHER_SECRET = "whsec_other_fedcba9876543210fedcba98"
SENDER = "psp"


def create_effects_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL, type TEXT, resource TEXT)"
    )


def record_effect(event: WebhookEvent, tx: sqlite3.Connection) -> None:
    """The merchant's handler: one row per processing of an event."""
    data = event.json()
    tx.execute(
        "INSERT INTO effects (message_id, type, resource) VALUES (?, ?, ?)",
        (event.message_id, data.get("type"), data.get("data", {}).get("object", {}).get("id")),
    )


def effects(path: Path | str) -> dict[str, int]:
    """message id -> how many times its effect was applied (read on a fresh connection)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT message_id, count(*) FROM effects GROUP BY message_id")
        return dict(rows.fetchall())


def recorded_ids(path: Path | str) -> set[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return set(conn.execute("SELECT sender, message_id FROM idemclient_inbox").fetchall())


def signed(
    body: bytes,
    message_id: str,
    *,
    timestamp: float,
    secrets: tuple[str, ...] = (SECRET,),
) -> dict[str, str]:
    """The headers a sender holding `secrets` attaches to a delivery."""
    return {
        MESSAGE_ID_HEADER: message_id,
        SIGNATURE_HEADER: sign(secrets, timestamp=int(timestamp), message_id=message_id, body=body),
        "content-type": "application/json",
    }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app_db(tmp_path: Path) -> Path:
    """The merchant's database file, with its own table already in it."""
    path = tmp_path / "merchant.db"
    with sqlite3.connect(path) as conn:
        create_effects_table(conn)
    return path


@pytest.fixture
def inbox(app_db: Path, clock: ManualClock) -> Iterator[SQLiteInbox]:
    with SQLiteInbox(app_db, clock=clock) as opened:
        yield opened


@pytest.fixture
def receiver(inbox: SQLiteInbox) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(inbox, sender=SENDER, secrets=[SECRET], handler=record_effect)
