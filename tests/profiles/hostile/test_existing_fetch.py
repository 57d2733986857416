"""GoCardless's "already done, here it is": the payment is made whatever the fetch of
the resource it names comes to, so a fetch that fails must not read as "not sent"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, State

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
def test_a_failed_fetch_keeps_the_operation_succeeded(
    make: Callable[..., Client], get: Callable[[httpx.Request], httpx.Response]
) -> None:
    server = Scripted(httpx.Response(409, json=CONFLICT), get=get)
    client = make(server, "gocardless")
    outcome = client.post("/payments", json={"amount": 100})
    assert outcome.state is State.SUCCEEDED
    assert outcome.existing == "PM123"
    assert outcome.status_code == 409  # the server's own answer, kept
    (record,) = client.store.operations()
    assert record.state is State.SUCCEEDED
    assert len(server.posts) == 1


@pytest.mark.anyio
async def test_a_failed_fetch_keeps_the_operation_succeeded_async(
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
        outcome = await client.post("/payments", json={"amount": 100})
    assert outcome.state is State.SUCCEEDED
    assert outcome.existing == "PM123"
