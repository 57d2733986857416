"""GoCardless's "already done, here it is": a resource was made under the key, and is
the answer the request that made it would have had (`succeeded`, the payment's status
since for the application to read), unless its status says that request was refused or
is still running. A fetch that fails says nothing of it: the operation stays maybe
applied (`indeterminate`), never "not sent" and never "succeeded"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, State

from ..scripted import Scripted

CONFLICT = {
    "error": {
        "errors": [
            {
                "reason": "idempotent_creation_conflict",
                "links": {"conflicting_resource_id": "PM123"},
            }
        ]
    }
}


def _unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    "get",
    [_unreachable, lambda request: httpx.Response(503)],
    ids=["connect-error", "http-503"],
)
def test_a_failed_fetch_leaves_the_operation_maybe_applied(
    make: Callable[..., Client], get: Callable[[httpx.Request], httpx.Response]
) -> None:
    server = Scripted(httpx.Response(409, json=CONFLICT), get=get)
    client = make(server, "gocardless")
    with pytest.raises(Indeterminate, match="PM123") as raised:
        client.post("/payments", json={"amount": 100})
    assert raised.value.outcome.existing == "PM123"
    assert raised.value.outcome.maybe_applied
    (record,) = client.store.operations()
    assert record.state is State.INDETERMINATE
    assert record.maybe_applied
    assert len(server.posts) == 1


@pytest.mark.anyio
async def test_a_failed_fetch_leaves_the_operation_maybe_applied_async(
    store_path: Path, clock: ManualClock
) -> None:
    server = Scripted(httpx.Response(409, json=CONFLICT), get=_unreachable)
    async with AsyncClient(
        store=store_path,
        clock=clock,
        transport=httpx.MockTransport(server),
        base_url="https://api.psp.test",
        profile="gocardless",
    ) as client:
        with pytest.raises(Indeterminate) as raised:
            await client.post("/payments", json={"amount": 100})
    assert raised.value.outcome.state is State.INDETERMINATE
    assert raised.value.outcome.existing == "PM123"
    assert len(server.posts) == 1


@pytest.mark.parametrize(
    ("resource", "state"),
    [
        # Made under the key: its creation answered 201, whatever the payment's life
        # has been since (first status, collected, failed or cancelled days later).
        ({"payments": {"id": "PM123", "status": "pending_submission"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123", "status": "submitted"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123", "status": "paid_out"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123", "status": "confirmed"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123", "status": "failed"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123", "status": "cancelled"}}, State.SUCCEEDED),
        ({"payments": {"id": "PM123"}}, State.SUCCEEDED),  # no status at all
        # The reference server's words: a creation it refused (answered 402)...
        ({"id": "PM123", "status": "declined"}, State.FAILED),  # not wrapped
        # ...and one it is still running (no answer yet).
        ({"payments": {"id": "PM123", "status": "pending"}}, None),
        ({"payments": {"id": "PM123", "status": "authorized"}}, None),
    ],
)
@pytest.mark.anyio
async def test_the_resource_s_status_is_what_the_operation_came_to(
    store_path: Path, clock: ManualClock, resource: dict[str, object], state: State | None
) -> None:
    server = Scripted(
        httpx.Response(409, json=CONFLICT), get=lambda request: httpx.Response(200, json=resource)
    )
    async with AsyncClient(
        store=store_path,
        clock=clock,
        transport=httpx.MockTransport(server),
        base_url="https://api.psp.test",
        profile="gocardless",
    ) as client:
        if state is None:
            with pytest.raises(Indeterminate, match="still running"):
                await client.post("/payments", json={"amount": 100}, operation_id="op")
        else:
            outcome = await client.post("/payments", json={"amount": 100}, operation_id="op")
            assert outcome.state is state
            assert outcome.json() == resource
        record = await client.aoperation("op")
    assert record is not None
    assert record.state is (state or State.INDETERMINATE)
    assert len(server.posts) == 1
