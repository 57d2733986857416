"""The async client: the same decisions, awaited."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from idemclient import AsyncClient, Indeterminate, KeyConflict, ManualClock, NotSent, State
from idemclient.errors import InvalidKey, OperationMismatch, RequestNotReplayable

from .fakes import OK, FakePSP, error, status

pytestmark = pytest.mark.anyio
PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


def make(psp: FakePSP, store: Path, clock: ManualClock, **options: object) -> AsyncClient:
    return AsyncClient(
        store=store,
        clock=clock,
        transport=psp.async_transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        **options,  # type: ignore[arg-type]
    )


async def test_same_key_on_every_attempt(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    psp.script = [error(httpx.ReadTimeout, apply=True), status(503, retry_after="2"), OK]
    async with make(psp, store_path, clock) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert set(psp.keys) == {outcome.key}
    assert psp.effects == {outcome.key: 1}
    assert clock.sleeps[1] >= 2.0


async def test_indeterminate_and_not_sent(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    async with make(psp, store_path, clock) as client:
        psp.script = [error(httpx.ReadTimeout)] * 8
        with pytest.raises(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT)
        psp.script = [error(httpx.ConnectError)] * 8
        with pytest.raises(NotSent):
            await client.post("/v1/payments", json=PAYMENT)


async def test_stored_answer_and_mismatch(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    async with make(psp, store_path, clock) as client:
        first = await client.post("/v1/payments", json=PAYMENT, operation_id="o")
        again = await client.post("/v1/payments", json=PAYMENT, operation_id="o")
        assert again.from_store
        assert again.key == first.key
        with pytest.raises(OperationMismatch):
            await client.post("/v1/payments", json={"amount": 1}, operation_id="o")
    assert len(psp.requests) == 1


async def test_key_conflict_and_invalid_key(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    async with make(psp, store_path, clock) as client:
        with pytest.raises(InvalidKey):
            await client.post("/v1/payments", json=PAYMENT, key="no spaces")
        psp.script = [status(422)]
        with pytest.raises(KeyConflict):
            await client.post("/v1/payments", json=PAYMENT)


async def test_async_streamed_body_is_buffered_and_bounded(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        yield b'{"amount": '
        yield b"5}"

    psp.script = [error(httpx.ReadTimeout), OK]
    async with make(psp, store_path, clock, max_request_body=20) as client:
        await client.post("/v1/payments", content=chunks())
        assert [r.content for r in psp.requests] == [b'{"amount": 5}'] * 2

        async def too_big():  # type: ignore[no-untyped-def]
            yield b"x" * 21

        with pytest.raises(RequestNotReplayable):
            await client.post("/v1/payments", content=too_big())


async def test_cancelled_call_leaves_no_live_lease(store_path: Path, clock: ManualClock) -> None:
    started = anyio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the time probe answers; the payment hangs
            return httpx.Response(200)
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with AsyncClient(
        store=store_path, clock=clock, transport=httpx.MockTransport(handler)
    ) as client:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                await client.post("http://psp.test/v1/payments", json=PAYMENT, operation_id="op")

            group.start_soon(call)
            await started.wait()
            group.cancel_scope.cancel()
        record = client.store.get("op")
    assert record is not None
    assert record.state is State.INDETERMINATE
    assert record.lease_owner is None


async def test_async_resume(store_path: Path, clock: ManualClock, psp: FakePSP) -> None:
    async with make(psp, store_path, clock) as client:
        psp.script = [error(httpx.ReadTimeout, apply=True)] * 8
        with pytest.raises(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        outcomes = await client.resume()
    assert [o.state for o in outcomes] == [State.SUCCEEDED]
    assert outcomes[0].replayed
    assert list(psp.effects.values()) == [1]


async def test_async_storm_of_tasks_makes_one_effect(store_path: Path, psp: FakePSP) -> None:
    async with AsyncClient(
        store=store_path, transport=psp.async_transport(), base_url="http://psp.test"
    ) as client:
        outcomes = []

        async def call() -> None:
            outcomes.append(await client.post("/v1/payments", json=PAYMENT, operation_id="same"))

        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(call)
        assert len(client.store.operations()) == 1
    assert len(psp.effects) == 1
    assert sum(psp.effects.values()) == 1
    bodies = {o.response.content for o in outcomes if o.response is not None}
    assert len(outcomes) == 50
    assert len(bodies) == 1
