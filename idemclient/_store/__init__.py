"""Durable operations: the store interface and its SQLite backend."""

from ._base import (
    Begin,
    Claim,
    Durability,
    Intent,
    OperationRecord,
    Progress,
    Store,
    StoredResponse,
)
from ._owners import new_owner, owner_is_dead
from ._sqlite import DEFAULT_SECRET_HEADERS, SQLiteStore

__all__ = [
    "DEFAULT_SECRET_HEADERS",
    "Begin",
    "Claim",
    "Durability",
    "Intent",
    "OperationRecord",
    "Progress",
    "SQLiteStore",
    "Store",
    "StoredResponse",
    "new_owner",
    "owner_is_dead",
]
