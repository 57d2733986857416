"""Durable operations: the store interface, its SQLite backend and one in memory.

The PostgreSQL backend (`_postgres`) needs psycopg, an optional dependency, so nothing
here imports it: `_open.open_store` does, when a PostgreSQL URL is given. The SQLite
backend, and the one in memory (which shares the SQL stores' rules), are imported when
first named: the engine reads the interface here (records, the protocol, owners)
without loading a database.
"""

from typing import TYPE_CHECKING

from ._base import (
    NEVER_APPLIED_STATUSES,
    Begin,
    Claim,
    Durability,
    Intent,
    NotFound,
    OperationRecord,
    Progress,
    StoredResponse,
    holder_is_live,
    owner_sent_until,
)
from ._cipher import BodyEncryption
from ._interface import (
    AdminStore,
    BatchStore,
    BriefFinish,
    OperationStore,
    OperatorStore,
    SendingStore,
    Store,
    as_admin,
)
from ._owners import gone_in_words, new_owner, owner_is_dead, release_owner
from ._rows import DEFAULT_SECRET_HEADERS

if TYPE_CHECKING:
    from ._memory import MemoryStore
    from ._sqlite import SQLiteStore

__all__ = [
    "DEFAULT_SECRET_HEADERS",
    "NEVER_APPLIED_STATUSES",
    "AdminStore",
    "BatchStore",
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
    "OperatorStore",
    "Progress",
    "SQLiteStore",
    "SendingStore",
    "Store",
    "StoredResponse",
    "as_admin",
    "gone_in_words",
    "holder_is_live",
    "new_owner",
    "owner_is_dead",
    "owner_sent_until",
    "release_owner",
]


def __getattr__(name: str) -> object:
    if name == "SQLiteStore":
        from ._sqlite import SQLiteStore

        globals()[name] = SQLiteStore  # looked up once
        return SQLiteStore
    if name == "MemoryStore":
        from ._memory import MemoryStore

        globals()[name] = MemoryStore
        return MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
