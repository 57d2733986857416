"""The async client's final answer written behind it, on PostgreSQL: a client of another
event loop on the same database waits for the queued write rather than send again, and
a queued write that fails is told by the next operation and settled under its key."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from idemclient import AsyncClient, State
from idemclient.errors import StoreError
from idemclient.postgres import PostgresStore
from idemclient.testing import ReferenceServer
from tests.client.test_write_behind import BOUND, PAYMENT, TOKEN, Counted


class HeldPostgres(PostgresStore):
    """A PostgreSQL store whose write of a final answer (armed) waits until released,
    or fails."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.hold = False
        self.fail = 0
        self.held = threading.Event()
        self.release = threading.Event()

    def finish(self, operation_id: str, **kwargs: Any) -> Any:
        if kwargs["state"].finished:
            if self.fail:
                self.fail -= 1
                raise StoreError("postgresql", "connection lost")
            if self.hold:
                self.held.set()
                assert self.release.wait(BOUND)
        return super().finish(operation_id, **kwargs)


def _client(server: ReferenceServer, store: Any, transport: Any) -> AsyncClient:
    return AsyncClient(
        store=store,
        base_url="http://psp.test",
        transport=transport,
        headers=TOKEN,
        server_clock=False,
    )


def _pay(client: AsyncClient, operation: str) -> Any:
    return client.post(
        "/v1/payments", json={**PAYMENT, "reference": operation}, operation_id=operation
    )


def test_another_event_loop_waits_for_the_queued_answer_on_postgres(pg_url: str) -> None:
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldPostgres(pg_url)
    results: dict[str, Any] = {}

    def other_loop() -> None:
        async def main() -> Any:
            async with _client(server, PostgresStore(pg_url), counted) as other:
                return await _pay(other, "o-1")

        try:
            results["other"] = asyncio.run(main())
        except BaseException as error:  # told to the test
            results["error"] = error

    async def main() -> None:
        async with _client(server, store, counted) as client:
            store.hold = True
            first = await asyncio.wait_for(_pay(client, "o-1"), BOUND)
            assert await asyncio.to_thread(store.held.wait, BOUND)
            thread = threading.Thread(target=other_loop)
            thread.start()
            await asyncio.sleep(0.3)  # real: a client that does not wait would send
            assert thread.is_alive()
            store.release.set()
            await asyncio.to_thread(thread.join, BOUND)
            assert "error" not in results, results.get("error")
            assert results["other"].from_store
            assert results["other"].key == first.key

    asyncio.run(main())
    assert len(server.ledger()) == 1
    assert counted.sent == 1


def test_a_failed_queued_write_on_postgres_is_told_then_resumed_once(pg_url: str) -> None:
    server = ReferenceServer()
    counted = Counted(server)
    store = HeldPostgres(pg_url)

    async def main() -> None:
        async with _client(server, store, counted) as client:
            store.fail = 1
            first = await _pay(client, "o-1")
            assert first.state is State.SUCCEEDED
            with pytest.raises(StoreError, match=r"'o-1'"):
                await _pay(client, "o-2")
            resumed = await client.resume()
            assert [(o.operation_id, o.state) for o in resumed] == [("o-1", State.SUCCEEDED)]
            assert resumed[0].key == first.key

    asyncio.run(main())
    assert len(server.ledger()) == 1
