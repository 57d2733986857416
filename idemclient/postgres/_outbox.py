"""The outbox rule: record an operation in the application's own transaction.

A payment that an order causes must not be lost between "order committed" and
"payment sent", nor sent for an order that rolled back. So the operation is recorded
as `pending` by the application's own psycopg connection, inside the transaction that
writes the order, and sent after the commit. If the process dies in between, the
operation is in the store like any unfinished one, and `resume()` on any host sends it
with its key.

The intent is built exactly as the transport will build it when the operation is sent
(the client's `build_request`, then `intent_for`), so the fingerprints agree and a
later `send_pending`, `resume()` or `post(..., operation_id=...)` finds it the same
request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import psycopg

from .. import AsyncClient, Client, Outcome
from .._seam import (
    Blocking,
    Op,
    arun,
    intent_ahead,
    opened,
    run,
    send_registered,
    settings_of,
    settle,
)
from .._store._postgres import PostgresStore
from ..store import OperationRecord, OperationStore, Store

__all__ = ["asend_pending", "record_pending", "send_pending"]

AnyClient = Client | AsyncClient | httpx.Client | httpx.AsyncClient


def _http(client: AnyClient) -> httpx.Client | httpx.AsyncClient:
    return client.http if isinstance(client, Client | AsyncClient) else client


def _postgres_store(store: OperationStore) -> PostgresStore:
    store = opened(store)
    if not isinstance(store, PostgresStore):
        raise TypeError(
            f"the outbox needs a client whose store is a PostgresStore in your database;"
            f" this client's store is {store!r}"
        )
    return store


def record_pending(
    conn: psycopg.Connection[Any],
    client: AnyClient,
    method: str,
    url: httpx.URL | str,
    *,
    key: str | None = None,
    operation_id: str | None = None,
    identity: str | Sequence[str] | None = None,
    reference: str | None = None,
    headers: Any = None,
    **request: Any,
) -> str:
    """Record one operation as pending in the transaction open on `conn`; return its id.

    Takes what `Client.request` takes (`key`, `operation_id`, `identity`,
    `reference`, and httpx's `json`, `content`, `data`, `params`, `headers`...),
    but sends nothing. The operation commits or rolls back with the rest of the
    transaction; after the commit, send it with `send_pending(client, operation_id)`.

    Name the operation after the business row (``operation_id=f"order-{id}"``): the
    same call in a retried transaction then records the same operation again instead
    of a second one. Raises before writing anything:

    - `TypeError` if `conn` is not a psycopg 3 `Connection`, or the client's store is
      not a `PostgresStore`;
    - `ValueError` if `conn` has no transaction to join (autocommit with none open), or
      a failed one, or is a connection to another database than the store's; or if the
      method is not one the client's policy sends as an operation;
    - `OperationMismatch` if the operation (or its key) was recorded for another request.

    If it raises, let the exception leave your transaction block: the business row
    must not commit without its operation.
    """
    http = _http(client)
    settings = settings_of(http)
    store = _postgres_store(settings.store)
    intent = intent_ahead(
        http,
        method,
        url,
        key=key,
        operation_id=operation_id,
        identity=identity,
        reference=reference,
        headers=headers,
        **request,
    )
    store.record_pending(conn, [intent], now=settings.clock.time())
    return intent.operation_id


def _committed(store: Store, operation_id: str) -> OperationRecord:
    record = store.get(operation_id)
    if record is None:
        raise KeyError(
            f"no operation {operation_id!r} in {store.path}: send it after the transaction"
            " that recorded it has committed (a rolled-back one recorded nothing)"
        )
    return record


def _sent_pending(http: httpx.Client | httpx.AsyncClient, operation_id: str) -> Op[Outcome]:
    """`send_pending` and `asend_pending`, as one step (see `_operations`)."""
    record = yield Blocking(_committed, (settings_of(http).store, operation_id))
    return settle((yield from send_registered(http, record)))


def send_pending(client: Client | httpx.Client, operation_id: str) -> Outcome:
    """Send an operation recorded by `record_pending`, after its transaction committed.

    Returns and raises as `Client.post` does. An operation already finished (by
    `resume()` on another host, say) is answered from the store without a network call;
    one that another process is sending is waited for, within the policy's deadline.
    """
    http = _http(client)
    if not isinstance(http, httpx.Client):
        raise TypeError("send_pending needs a sync client; use asend_pending")
    return run(_sent_pending(http, operation_id), http)


async def asend_pending(client: AsyncClient | httpx.AsyncClient, operation_id: str) -> Outcome:
    """`send_pending` for an async client."""
    http = _http(client)
    if not isinstance(http, httpx.AsyncClient):
        raise TypeError("asend_pending needs an async client; use send_pending")
    return await arun(_sent_pending(http, operation_id), http)
