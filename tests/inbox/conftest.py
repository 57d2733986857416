"""Fixtures for the inbox tests: a merchant's database, its handler, and signed requests.

The merchant application here keeps one table, `effects`, with no unique constraint:
a message processed twice leaves two rows, so counting rows is how a test sees
"exactly once" (the inbox, not the schema, must prevent the second).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import WSGIApplication

import pytest

from idemclient import ManualClock
from idemclient.inbox import (
    SQLiteInbox,
    StandardWebhooks,
    WebhookEvent,
    WebhookReceiver,
)

# Standard Webhooks secrets: "whsec_" and the key in base64 (24 bytes each).
SECRET = "whsec_dGVzdC1rZXktMDEyMzQ1Njc4OWFiY2Rl"
OTHER_SECRET = "whsec_b3RoZXIta2V5LWZlZGNiYTk4NzY1NDMy"
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
    """The headers a Standard Webhooks sender holding `secrets` attaches to a delivery."""
    return {
        **StandardWebhooks(secrets).headers(
            message_id=message_id, timestamp=int(timestamp), body=body
        ),
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
    return WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect
    )


# -- servers on 127.0.0.1 for the socket tests ------------------------------------------


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a test's output is for failures, not for access logs


@contextmanager
def wsgi_server(app: WSGIApplication) -> Iterator[str]:
    """`app` under the stdlib's wsgiref server on 127.0.0.1 and a free port; yields the URL."""
    httpd = make_server("127.0.0.1", 0, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/webhooks"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
        httpd.server_close()


@contextmanager
def asgi_server(app: Any) -> Iterator[str]:
    """`app` under uvicorn on 127.0.0.1 and a free port, in a thread; yields the URL."""
    import uvicorn

    from idemclient.testing._adapters.live import bind, url_for

    config = uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on")
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        # Bounded wait for uvicorn to say it is serving: a flag it sets, polled at 10 ms.
        assert wait_until(lambda: server.started, timeout=10), "uvicorn did not start"
        yield f"{url_for(sock)}/webhooks"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def wait_until(condition: Callable[[], bool], *, timeout: float) -> bool:
    """Poll `condition` until it holds or `timeout` (real) seconds pass.

    Only for work happening in another thread or process over a real socket, where
    no clock can be injected; each turn waits 10 ms on an Event that nobody sets.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)
    return True
