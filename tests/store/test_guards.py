"""The stores' guards, held to the state table (see tests/store/guards.py): SQLite and
the store in memory. PostgreSQL runs them in tests/postgres/test_guards_postgres.py."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from idemclient import State
from idemclient.store import AdminStore, MemoryStore, SQLiteStore

from .guards import GuardsDrawnFromTheTable


class TestSQLiteGuards(GuardsDrawnFromTheTable):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def open_store(self) -> AdminStore:
        return SQLiteStore(self.folder / "ops.db")

    def force(
        self,
        store: AdminStore,
        operation_id: str,
        *,
        state: State,
        finished_at: float | None,
        lease_owner: str | None,
        lease_expires: float | None,
    ) -> None:
        with sqlite3.connect(self.folder / "ops.db") as conn:
            conn.execute(
                "UPDATE operations SET state = ?, finished_at = ?, lease_owner = ?,"
                " lease_expires = ? WHERE id = ?",
                (state.value, finished_at, lease_owner, lease_expires, operation_id),
            )
        conn.close()


class TestMemoryGuards(GuardsDrawnFromTheTable):
    def open_store(self) -> AdminStore:
        return MemoryStore()

    def force(
        self,
        store: AdminStore,
        operation_id: str,
        *,
        state: State,
        finished_at: float | None,
        lease_owner: str | None,
        lease_expires: float | None,
    ) -> None:
        assert isinstance(store, MemoryStore)
        row = store._rows[operation_id]
        row.record = dataclasses.replace(
            row.record,
            state=state,
            finished_at=finished_at,
            lease_owner=lease_owner,
            lease_expires=lease_expires,
        )
