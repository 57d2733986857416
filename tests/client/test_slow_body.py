"""The deadline bounds the answer's body too: httpx's read timeout is per read, so a
server (or a proxy) dripping a 2xx one byte at a time would otherwise hold the call, and
its lease, as long as it liked. A 2xx whose body did not arrive whole is no answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
BODY = b'{"id": "pay_1", "status": "succeeded", "padding": "' + b"x" * 60 + b'"}'


class Dripping(httpx.SyncByteStream, httpx.AsyncByteStream):
    """One byte every `pause` seconds of the shared clock."""

    def __init__(self, clock: ManualClock, pause: float) -> None:
        self.clock = clock
        self.pause = pause
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        for byte in BODY:
            self.clock.advance(self.pause)
            self.sent += 1
            yield bytes([byte])

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


class DrippingPSP:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.streams: list[Dripping] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # no body to a HEAD: the client's time probe
            return httpx.Response(200)
        stream = Dripping(self.clock, pause=0.5)
        self.streams.append(stream)
        return httpx.Response(201, stream=stream)


def test_a_dripping_body_ends_the_call_at_the_deadline(tmp_path: Path) -> None:
    clock = ManualClock()
    psp = DrippingPSP(clock)
    with Client(
        store=tmp_path / "c.db",
        clock=clock,
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        policy=RetryPolicy(deadline=2.0),
    ) as client:
        start = clock.monotonic()
        with pytest.raises(Indeterminate) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        elapsed = clock.monotonic() - start
        stored = client.operation("op")
    assert elapsed <= 2.0 + 0.5  # the deadline, plus at most one read
    assert [s.sent for s in psp.streams] == [4]
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied, outcome.last_status) == (
        State.INDETERMINATE,
        True,
        201,
    )
    assert "body" in outcome.evidence
    assert stored is not None
    assert stored.state is State.INDETERMINATE


@pytest.mark.anyio
async def test_the_async_client_bounds_a_dripping_body_too(tmp_path: Path) -> None:
    clock = ManualClock()
    psp = DrippingPSP(clock)
    async with AsyncClient(
        store=tmp_path / "c.db",
        clock=clock,
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        policy=RetryPolicy(deadline=2.0),
    ) as client:
        with pytest.raises(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT)
    assert [s.sent for s in psp.streams] == [4]


def test_a_body_that_arrives_in_time_is_the_answer(tmp_path: Path) -> None:
    clock = ManualClock()
    psp = DrippingPSP(clock)
    with Client(
        store=tmp_path / "c.db",
        clock=clock,
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        policy=RetryPolicy(deadline=120.0),
    ) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.response is not None
    assert outcome.response.content == BODY
