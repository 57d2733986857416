"""The floor to beat: the least a client can do and still keep a key durable.

A client that makes one key per operation (UUIDv7), commits the intent (key, method,
URL, body, its hash) to SQLite before the request is sent, sends it once through
httpx, and records the answer with one update after. No retries, no deadline, no
classification, no leases, no hooks: everything idemclient adds beyond this is what
`benchmarks.instructions` measures against it. It is a yardstick, not a product: it
must never be used to move money (it cannot tell "maybe applied" from "not sent").
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Any

import httpx
import uuid6

__all__ = ["DurableKeyClient"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    key          TEXT NOT NULL,
    method       TEXT NOT NULL,
    url          TEXT NOT NULL,
    body         BLOB NOT NULL,
    fingerprint  BLOB NOT NULL,
    state        TEXT NOT NULL,
    status       INTEGER,
    response     BLOB,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL
)
"""
_FIND = "SELECT key, fingerprint, state, status, response FROM operations WHERE operation_id = ?"
_INTENT = (
    "INSERT INTO operations (operation_id, key, method, url, body, fingerprint, state,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'in_flight', ?, ?)"
)
_OUTCOME = (
    "UPDATE operations SET state = ?, status = ?, response = ?, updated_at = ?"
    " WHERE operation_id = ?"
)


class DurableKeyClient:
    """POST with a durable key: intent committed before the send, the answer after."""

    def __init__(self, path: str, http: httpx.Client) -> None:
        self.http = http
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # the intent survives a power loss
        self.db.execute(_SCHEMA)

    def post(self, url: str, *, json_body: Any, operation_id: str | None = None) -> httpx.Response:
        body = json.dumps(json_body, separators=(",", ":")).encode()
        fingerprint = hashlib.sha256(b"POST " + url.encode() + b"\n" + body).digest()
        row = None if operation_id is None else self.db.execute(_FIND, (operation_id,)).fetchone()
        if row is not None:
            key, known, state, status, stored = row
            if known != fingerprint:
                raise ValueError(f"operation {operation_id!r} was recorded with another body")
            if state == "succeeded":
                return httpx.Response(status, content=stored)
        else:
            key = str(uuid6.uuid7())
            operation_id = operation_id or key
            now = time.time()
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(_INTENT, (operation_id, key, "POST", url, body, fingerprint, now, now))
            self.db.execute("COMMIT")
        response = self.http.post(
            url,
            content=body,
            headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        )
        state = "succeeded" if response.is_success else "failed"
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            _OUTCOME, (state, response.status_code, response.content, time.time(), operation_id)
        )
        self.db.execute("COMMIT")
        return response

    def close(self) -> None:
        self.db.close()
