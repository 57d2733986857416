"""PostgreSQL: one store for an application on many hosts, and the outbox.

- `PostgresInbox`: the webhook inbox (`idemclient.inbox`) in your PostgreSQL database:
  each message id recorded in the same transaction as its effect, so it is processed
  once; `PostgresInboxStorage` is its storage, for `Inbox(storage, ...)`.
- `PostgresStore`: the `Store` in a PostgreSQL database. `Client(store="postgresql://...")`
  opens one from a URL.
- `record_pending`: record an operation inside your own database transaction, in the
  same commit as the business row that caused it (the outbox rule); `send_pending` /
  `asend_pending` send it after the commit. An operation whose sender died in between
  is finished by `resume()` on any host.

Needs the `postgres` extra: ``pip install 'idemclient[postgres]'``.
"""

from .._db import INSTALL_POSTGRES as _INSTALL

try:
    import psycopg  # noqa: F401  (imported to fail early, with the message below)
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"idemclient.postgres needs psycopg 3 and psycopg-pool ({exc}); install them"
        f" with: {_INSTALL}"
    ) from exc

from .._store._postgres import DEFAULT_SCHEMA, PostgresStore
from ._inbox import PostgresInbox, PostgresInboxStorage
from ._outbox import asend_pending, record_pending, send_pending

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresInbox",
    "PostgresInboxStorage",
    "PostgresStore",
    "asend_pending",
    "record_pending",
    "send_pending",
]
