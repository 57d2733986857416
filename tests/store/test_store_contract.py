"""The store contract (`idemclient.testing.store_contract`), run against the SQLite
store and the in-memory one. PostgreSQL runs it in tests/postgres."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from idemclient.store import AdminStore, MemoryStore, SQLiteStore
from idemclient.testing.store_contract import StoreContract


class TestSQLiteStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def open_store(self, **options: Any) -> AdminStore:
        return SQLiteStore(self.folder / "ops.db", **options)


class TestMemoryStore(StoreContract):
    def open_store(self, **options: Any) -> AdminStore:
        return MemoryStore(**options)
