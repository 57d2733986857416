"""Where operations are kept: the store interface, and the SQLite backend.

`Client(store=...)` and `wrap(..., store=...)` take a path (SQLite), a PostgreSQL URL,
or a store object: `SQLiteStore`, `idemclient.postgres.PostgresStore`, `MemoryStore`
(for tests: not durable), or one of your own.

The interface is in two parts, both `typing.Protocol`s (see docs/store.md):

- `OperationStore`, what a client needs to send, reconcile and resume operations
  (begin, record an attempt, finish, get, find, claim, settle, the list of unfinished
  operations, and the store's clock), with the rules of leases and clock steps;
- `AdminStore`, everything: the client's part and what the batch command and the
  operator's commands need beside it;
- `BriefFinish`, optional: a brief form of `finish`, which a client asks only of a
  store that declares it.

`Store` is the name the whole interface had before it was split: deprecated, kept as
`AdminStore`. A backend proves itself with `idemclient.testing.store_contract`. The
values the interface passes (`Intent`, `Progress`, `Begin`, ...) and the lease rules a
backend applies (`holder_is_live`, `owner_is_dead`, `owner_sent_until`) are here too.
The errors of a store that cannot be used are in `idemclient.errors` (`StoreError` and
its kinds).
"""

from ._server_time import ServerTime
from ._store import (
    AdminStore,
    Begin,
    BodyEncryption,
    BriefFinish,
    Claim,
    Durability,
    Intent,
    MemoryStore,
    NotFound,
    OperationRecord,
    OperationStore,
    Progress,
    SQLiteStore,
    Store,
    StoredResponse,
    holder_is_live,
    new_owner,
    owner_is_dead,
    owner_sent_until,
    release_owner,
)

__all__ = [
    "AdminStore",
    "Begin",
    "BodyEncryption",
    "BriefFinish",
    "Claim",
    "Durability",
    "Intent",
    "MemoryStore",
    "NotFound",
    "OperationRecord",
    "OperationStore",
    "Progress",
    "SQLiteStore",
    "ServerTime",
    "Store",
    "StoredResponse",
    "holder_is_live",
    "new_owner",
    "owner_is_dead",
    "owner_sent_until",
    "release_owner",
]
