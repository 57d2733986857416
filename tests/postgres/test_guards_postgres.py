"""The PostgreSQL store's guards, held to the state table (see tests/store/guards.py)."""

from __future__ import annotations

import psycopg
import pytest

from idemclient import State
from idemclient.postgres import PostgresStore
from idemclient.store import AdminStore

from ..store.guards import GuardsDrawnFromTheTable


class TestPostgresGuards(GuardsDrawnFromTheTable):
    @pytest.fixture(autouse=True)
    def _database(self, pg_shared_url: str, pg_schema: str) -> None:
        self.url, self.schema = pg_shared_url, pg_schema

    def open_store(self) -> AdminStore:
        return PostgresStore(self.url, schema=self.schema)

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
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{self.schema}".operations SET state = %s, finished_at = %s,'
                " lease_owner = %s, lease_expires = %s WHERE id = %s",
                (state.value, finished_at, lease_owner, lease_expires, operation_id),
            )
