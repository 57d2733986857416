"""Where operations are kept: the `Store` interface and its SQLite backend.

`Client(store=...)` and `wrap(..., store=...)` take a path (SQLite), a PostgreSQL URL,
or a `Store` built here (or `idemclient.postgres.PostgresStore`). The errors of a store
that cannot be used are in `idemclient.errors` (`StoreError` and its kinds).
"""

from ._store import BodyEncryption, Durability, OperationRecord, SQLiteStore, Store

__all__ = ["BodyEncryption", "Durability", "OperationRecord", "SQLiteStore", "Store"]
