"""A receiving process that SIGKILLs itself in the middle of one delivery.

Run by test_inbox_backends.py: ``python inbox_child.py DATABASE MODE``, where DATABASE
is a SQLite file or a PostgreSQL URL holding the merchant's `effects` table. It
processes message `evt_1` from `psp` and, per MODE:

- ``before-commit``: the handler writes the effect, says so, and the process dies
  before the inbox commits;
- ``after-commit``: the id and the effect commit, and the process dies before it
  could acknowledge the message.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from typing import Any

from idemclient.inbox import Inbox, SQLiteInbox
from idemclient.postgres import PostgresInbox


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(database: str, mode: str) -> None:
    inbox: Inbox[Any] = (
        PostgresInbox(database) if database.startswith("postgresql://") else SQLiteInbox(database)
    )

    def handler(tx: Any) -> None:
        mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
        tx.execute(f"INSERT INTO effects (message_id) VALUES ({mark})", ("evt_1",))
        print("effect written", flush=True)
        if mode == "before-commit":
            die()  # the effect is written, the id is recorded, nothing is committed

    inbox.process("psp", "evt_1", handler)
    die()  # committed; the sender never hears so


if __name__ == "__main__":
    main(*sys.argv[1:3])
