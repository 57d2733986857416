"""The store contract (`idemclient.testing.store_contract`) against PostgreSQL, and what
the contract cannot see, against both durable backends: the bytes they write (no
secret header, no digest in clear where bodies are encrypted) and the index an
unfinished operation is found through. SQLite runs the contract in tests/store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from idemclient import State
from idemclient.postgres import PostgresStore
from idemclient.store import (
    AdminStore,
    Intent,
    Progress,
    SQLiteStore,
    Store,
    StoredResponse,
    new_owner,
)
from idemclient.testing.store_contract import StoreContract, make_intent

from .conftest import StoreFactory, raw_dump

NOW = 1_800_000_000.0


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_shared_url: str, pg_schema: str) -> None:
        self.url, self.schema = pg_shared_url, pg_schema

    def open_store(self, **options: Any) -> AdminStore:
        return PostgresStore(self.url, schema=self.schema, **options)


def progress() -> Progress:
    return Progress(attempts=1, maybe_applied=True, evidence="HTTP 201", not_before=None, now=NOW)


def reference_intent(operation_id: str, reference: str) -> Intent:
    return dataclasses.replace(
        make_intent(operation_id, f"key-{operation_id}"), reference=reference
    )


def test_secret_headers_are_never_written(make_store: StoreFactory) -> None:
    secrets = {
        "Authorization": "Bearer sk_live_authorization_secret",
        "Cookie": "session=cookie_secret",
        "Proxy-Authorization": "Basic proxy_secret",
        "X-Api-Key": "api_key_secret",
        "X-Partner-Signature": "user_named_secret",
    }
    store = make_store(secret_headers={"x-partner-signature"})
    intent = make_intent(headers=(("Content-Type", "application/json"), *secrets.items()))
    owner = new_owner()
    store.begin(intent, owner=owner, now=NOW, lease_until=NOW + 60)
    store.register([make_intent("op-2", "key-2", headers=tuple(secrets.items()))], now=NOW)
    response = StoredResponse.of(
        201, (("Set-Cookie", "sid=set_cookie_secret"), ("X-Request-Id", "req_1")), b"{}"
    )
    record = store.finish(
        "op-1", owner=owner, state=State.SUCCEEDED, progress=progress(), response=response
    )
    assert dict(record.headers) == {"Content-Type": "application/json"}
    assert record.response is not None
    assert dict(record.response.headers) == {"X-Request-Id": "req_1"}
    raw = raw_dump(store)
    assert b"req_1" in raw  # the check below looks at the right bytes
    for value in [*secrets.values(), "set_cookie_secret"]:
        assert value.encode() not in raw, value


def test_unfinished_operations_are_found_through_the_partial_index(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    intents = [make_intent(f"op-{n}", f"key-{n}") for n in range(3000)]
    store.register(intents, now=NOW)
    if isinstance(store, SQLiteStore):
        with store._use() as conn:
            conn.execute(
                "UPDATE operations SET state = 'succeeded', finished_at = ? WHERE id != 'op-7'",
                (NOW,),
            )
            plan = conn.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM operations WHERE finished_at IS NULL"
                " ORDER BY created_at"
            ).fetchall()
        assert any("operations_unfinished" in str(row) for row in plan), plan
    else:
        assert isinstance(store, PostgresStore)
        with store._use() as conn:
            conn.execute(
                f'UPDATE "{store.schema}".operations SET state = %s, finished_at = %s'
                " WHERE id != 'op-7'",
                ("succeeded", NOW),
            )
            conn.execute(f'ANALYZE "{store.schema}".operations')
            plan = conn.execute(
                f'EXPLAIN SELECT id FROM "{store.schema}".operations WHERE finished_at IS NULL'
                " ORDER BY created_at, seq LIMIT 100"
            ).fetchall()
        assert "operations_unfinished" in str(plan), plan
    assert [r.operation_id for r in store.unfinished()] == ["op-7"]


def test_contents_are_kept_as_a_keyed_hash_where_bodies_are_encrypted(
    make_store: StoreFactory,
) -> None:
    from idemclient.store import BodyEncryption

    old, new = BodyEncryption.new_key(), BodyEncryption.new_key()
    store = make_store(encryption=BodyEncryption(old))
    store.register([reference_intent("batch/payout/R1", "R1")], now=NOW)
    digest = "v1:" + "ab" * 32
    store.note_contents([("batch/payout/R1", digest)])
    assert store.find_contents([digest]) == [(digest, "batch/payout/R1")]
    assert digest.encode() not in raw_contents(store)  # it would confirm a guessed payment
    store.close()
    # After a rotation, found under the old key as under the new.
    rotated = make_store(encryption=BodyEncryption(new, old_keys=[old]))
    assert rotated.find_contents([digest]) == [(digest, "batch/payout/R1")]


def raw_contents(store: Store) -> bytes:
    if isinstance(store, SQLiteStore):
        return b"".join(p.read_bytes() for p in Path(store.path).parent.glob("ops.db*"))
    assert isinstance(store, PostgresStore)
    with store._use() as conn:
        rows = conn.execute(f'SELECT digest FROM "{store.schema}".contents').fetchall()
    return "\n".join(text for (text,) in rows).encode()
