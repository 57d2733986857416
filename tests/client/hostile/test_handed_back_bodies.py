"""The deadline bounds the body of an answer handed back to httpx as it bounds a final
one: httpx reads a redirect's body before following it, and an auth flow that asks for
it reads the 401's. A dripping body does not hold the call past its deadline."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, OutcomeError, RetryPolicy

from .psp import PAYMENT

DEADLINE = 2.0


class Dripping(httpx.SyncByteStream):
    """`size` bytes, one every `pause` seconds of the shared clock."""

    def __init__(self, clock: ManualClock, size: int, pause: float) -> None:
        self.clock, self.size, self.pause = clock, size, pause

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(self.size):
            self.clock.advance(self.pause)
            yield b" "


class ReadingAuth(httpx.Auth):
    """A token refresh that looks at the 401's body (error codes live there)."""

    requires_response_body = True

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = "Bearer fresh"
            yield request


@pytest.mark.parametrize("status", [307, 401])
def test_a_dripping_handed_back_body_ends_the_call_at_the_deadline(
    tmp_path: Path, status: int
) -> None:
    clock = ManualClock()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") == "Bearer fresh" or request.url.path == "/v2":
            return httpx.Response(201, json={"id": "pay_1"})
        return httpx.Response(
            status, headers={"location": "/v2"}, stream=Dripping(clock, size=600, pause=0.5)
        )

    with Client(
        store=tmp_path / "c.db",
        clock=clock,
        transport=httpx.MockTransport(handler),
        base_url="https://psp.test",
        follow_redirects=True,
        auth=ReadingAuth(),
        policy=RetryPolicy(deadline=DEADLINE, attempt_timeout=1.0),
    ) as client:
        start = clock.monotonic()
        with contextlib.suppress(OutcomeError):
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        elapsed = clock.monotonic() - start
    assert elapsed <= DEADLINE + 1.0, f"the call ran {elapsed:.0f}s under a {DEADLINE}s deadline"
