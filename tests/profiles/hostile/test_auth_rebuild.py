"""An auth flow that signs by building a new request, under a profile whose key goes in
a header other than Idempotency-Key: the caller's key must be the one sent."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named

from ..scripted import Scripted


class Rebuilding(httpx.Auth):
    """Signs the request by building a fresh one that carries only the headers it knows."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield httpx.Request(
            request.method,
            request.url,
            content=request.content,
            headers={"Content-Type": "application/json", "X-Signature": "signed"},
        )


@pytest.mark.parametrize(
    ("profile", "path", "header", "sent"),
    [
        ("paypal", "/v2/payments/captures", "PayPal-Request-Id", "k-1234"),
        ("razorpay", "/v1/payouts", "X-Payout-Idempotency", "k-1234"),
        ("razorpay", "/v1/transfers", "X-Transfer-Idempotency", "k-1234"),
        ("checkout", "/payments", "Cko-Idempotency-Key", "k-1234"),
        ("ietf", "/payments", "Idempotency-Key", '"k-1234"'),
    ],
)
def test_a_rebuilt_request_carries_the_callers_key_on_a_reissue(
    make: Callable[..., Client],
    clock: ManualClock,
    profile: str,
    path: str,
    header: str,
    sent: str,
) -> None:
    # The first call may have been applied (a read timeout, one attempt allowed); the
    # caller re-issues it with the same key= and must reach the server under that key,
    # not a new one (a second payment). Under a server without an in-flight guard
    # (paypal), only once the first attempt has surely ended (`in_flight_for`).
    server = Scripted(httpx.ReadTimeout)
    client = make(server, profile, auth=Rebuilding(), policy=RetryPolicy(max_attempts=1))
    with pytest.raises(Indeterminate):
        client.post(path, json={"amount": 100}, key="k-1234")
    clock.advance(named(profile).in_flight_for + CLOCK_SKEW)
    outcome = client.post(path, json={"amount": 100}, key="k-1234")
    assert outcome.state is State.SUCCEEDED
    assert outcome.operation_id == "k-1234"
    assert {r.headers.get(header) for r in server.posts} == {sent}


@pytest.mark.anyio
async def test_a_rebuilt_request_carries_the_callers_key_async(
    store_path: Path, clock: ManualClock
) -> None:
    server = Scripted(httpx.ReadTimeout)
    async with AsyncClient(
        store=store_path,
        clock=clock,
        transport=httpx.MockTransport(server),
        base_url="https://api.psp.test",
        auth=Rebuilding(),
        policy=RetryPolicy(max_attempts=1),
        profile="paypal",
    ) as client:
        with pytest.raises(Indeterminate):
            await client.post("/v2/payments/captures", json={"amount": 1}, key="k-5678")
        clock.advance(named("paypal").in_flight_for + CLOCK_SKEW)
        outcome = await client.post("/v2/payments/captures", json={"amount": 1}, key="k-5678")
    assert outcome.operation_id == "k-5678"
    assert [r.headers.get("PayPal-Request-Id") for r in server.posts] == ["k-5678", "k-5678"]
