"""An auth flow that rebuilds the request (a signing flow) keeps the caller's operation
id, reference and key: re-issuing the operation id after an `Indeterminate` finds the
same operation and never pays twice."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy

from .psp import PAYMENT, PSP, applied_then


class SigningAuth(httpx.Auth):
    """Signs by building a new request with a signature in the query."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield httpx.Request(
            request.method,
            request.url.copy_merge_params({"sig": "abc"}),
            headers={**request.headers, "Authorization": "Bearer signed"},
            content=request.content,
        )


def test_reissuing_an_operation_id_through_a_rebuilding_auth_flow_pays_once(
    tmp_path: Path,
) -> None:
    psp = PSP(applied_then(httpx.ReadTimeout))
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=SigningAuth(),
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        # The documented thing to do: re-issue the same operation id.
        known = client.operation("order-1042")
        with contextlib.suppress(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    keys = [key for _, _, key, _ in psp.seen]
    assert psp.total == 1, f"paid {psp.total} times, under keys {keys}"
    assert known is not None, "the caller's operation id was never recorded"


class MerchantSigningAuth(httpx.Auth):
    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield httpx.Request(
            request.method,
            request.url.copy_merge_params({"sig": "abc"}),
            headers={**request.headers, "Authorization": "Bearer merchant-1"},
            content=request.content,
        )


def test_the_reference_servers_ledger_shows_two_payments(tmp_path: Path) -> None:
    from idemclient.testing import ReferenceServer

    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:
        server.drop(path="/v1/payments")  # applied, the connection dropped
        with Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="http://psp.test",
            auth=MerchantSigningAuth(),
            policy=RetryPolicy(max_attempts=1),
        ) as client:
            with pytest.raises(Indeterminate):
                client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        ledger = server.ledger()
    assert len(ledger) == 1, f"{len(ledger)} payments in the ledger for one operation id"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_client_pays_twice_too(tmp_path: Path, anyio_backend: str) -> None:
    from idemclient import AsyncClient

    psp = PSP(applied_then(httpx.ReadTimeout))
    async with AsyncClient(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.ahandler),
        base_url="https://psp.test",
        auth=SigningAuth(),
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        with pytest.raises(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        with contextlib.suppress(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert psp.total == 1, f"paid {psp.total} times"
