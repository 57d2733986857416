"""Once an operation has gone back to httpx (a 401 for its auth flow, a 3xx for its
redirect handling), whatever httpx or the auth flow raises next (a failed token
refresh, a redirect loop, a failed GET after a 303, a malformed digest challenge) ends
the operation as what it is, `NotSent` or `Indeterminate`, never as a bare httpx error
that a caller could read as "nothing was sent"."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    OutcomeError,
    RetryPolicy,
    State,
    wrap,
)

from .psp import PAYMENT, PSP, answer, applied_then


class TokenAuth(httpx.Auth):
    """httpx's documented token-refresh flow; the auth server is down."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = "Bearer stale"
        response = yield request
        if response.status_code == 401:
            refresh = yield httpx.Request("POST", "https://auth.test/token", json={"r": 1})
            request.headers["Authorization"] = f"Bearer {refresh.json()['access_token']}"
            yield request


def auth_down(psp: PSP, request: httpx.Request) -> httpx.Response | None:
    raise httpx.ConnectError("auth server down", request=request)


def test_a_failed_token_refresh_after_a_maybe_applied_attempt_is_indeterminate(
    tmp_path: Path,
) -> None:
    # attempt 1: applied, answer lost; attempt 2 (same key): 401, the token expired
    psp = PSP(applied_then(httpx.ReadTimeout), answer(401), auth_down)
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=TokenAuth(),
    ) as client:
        try:
            client.post("/v1/payments", json=PAYMENT)
        except httpx.ConnectError:
            # "could not connect": the caller sends the payment again
            client.post("/v1/payments", json=PAYMENT)
            raised: BaseException | None = httpx.ConnectError("escaped")
        except OutcomeError as exc:
            raised = exc
    assert psp.total == 1, f"paid {psp.total} times"
    assert isinstance(raised, Indeterminate)


def see_other(location: str):  # type: ignore[no-untyped-def]
    def step(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        psp.apply(request)  # processed; the result lives at `location`
        return httpx.Response(303, headers={"location": location})

    return step


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ReadTimeout])
def test_a_303_whose_get_fails_is_indeterminate_not_an_httpx_error(
    tmp_path: Path, error: type[httpx.TransportError]
) -> None:
    def get_fails(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        raise error("result page unreachable", request=request)

    psp = PSP(see_other("/v1/payments/pay_1"), get_fails)
    with (
        Client(
            store=tmp_path / "c.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
            follow_redirects=True,
        ) as client,
        pytest.raises(Indeterminate) as raised,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert raised.value.outcome.state is State.INDETERMINATE


def test_a_redirect_loop_is_indeterminate_not_too_many_redirects(tmp_path: Path) -> None:
    def loop(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(307, headers={"location": "/v1/payments"})

    psp = PSP(*[loop] * 50)
    with (
        Client(
            store=tmp_path / "c.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
            follow_redirects=True,
            policy=RetryPolicy(max_attempts=3),
        ) as client,
        pytest.raises(Indeterminate),
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    # and the loop was bounded by the policy's attempts, not by httpx's 20 hops
    assert len(psp.seen) <= 3, f"{len(psp.seen)} POSTs of one operation"


def test_a_malformed_digest_challenge_after_a_timeout_is_indeterminate(tmp_path: Path) -> None:
    def bad_challenge(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(401, headers={"www-authenticate": "Digest garbage"})

    psp = PSP(applied_then(httpx.ReadTimeout), bad_challenge)
    with (
        Client(
            store=tmp_path / "c.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
            auth=httpx.DigestAuth("merchant", "s3cret"),
        ) as client,
        pytest.raises(Indeterminate),
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")


class AsyncTokenAuth(httpx.Auth):
    """The same token-refresh flow, for httpx.AsyncClient."""

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = "Bearer stale"
        response = yield request
        if response.status_code == 401:
            refresh = yield httpx.Request("POST", "https://auth.test/token", json={"r": 1})
            await refresh.aread()
            request.headers["Authorization"] = f"Bearer {refresh.json()['access_token']}"
            yield request


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["AsyncClient", "wrap"])
async def test_the_async_send_says_indeterminate_when_the_refresh_fails_after_an_applied_attempt(
    tmp_path: Path, how: str
) -> None:
    # The async send of a wrapped client translates an error raised above the transport
    # as the sync one does: a caller told "could not connect" would pay again.
    psp = PSP(applied_then(httpx.ReadTimeout), answer(401), auth_down)
    options: dict[str, Any] = {
        "transport": httpx.MockTransport(psp.ahandler),
        "base_url": "https://psp.test",
        "auth": AsyncTokenAuth(),
    }
    raised: BaseException
    if how == "AsyncClient":
        async with AsyncClient(store=tmp_path / "c.db", clock=ManualClock(), **options) as client:
            with pytest.raises(OutcomeError) as caught:
                await client.post("/v1/payments", json=PAYMENT)
            raised = caught.value
    else:
        async with wrap(
            httpx.AsyncClient(**options), store=tmp_path / "c.db", clock=ManualClock()
        ) as http:
            with pytest.raises(OutcomeError) as caught:
                await http.post("/v1/payments", json=PAYMENT)
            raised = caught.value
    assert isinstance(raised, Indeterminate)
    assert psp.total == 1, f"paid {psp.total} times"
