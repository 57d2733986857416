"""A 401 goes back to httpx's auth flow: the token-refresh pattern from httpx's docs and
`httpx.DigestAuth` work, the request they send again continues the same operation with
the same key, and the requests an auth flow makes by itself are not operations."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncGenerator, Generator
from pathlib import Path

import httpx
import pytest

import idemclient
from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    Outcome,
    State,
    outcome_of,
)
from idemclient.hooks import Hooks
from idemclient.store import SQLiteStore

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
REFRESH_SECRET = "rt_refresh_secret_value"


class TokenPSP:
    """A PSP that takes only the fresh token, and an auth server that issues it."""

    def __init__(self, *, timeout_first: bool = False) -> None:
        self.seen: list[tuple[str, str, str | None, str | None]] = []
        self.effects: Counter[str] = Counter()
        self.timeout_first = timeout_first

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client's time probe: not an operation's
            return httpx.Response(200)
        key = request.headers.get("idempotency-key")
        auth = request.headers.get("authorization")
        self.seen.append((request.method, str(request.url), key, auth))
        if request.url.host == "auth.test":
            assert json.loads(request.read())["refresh_token"] == REFRESH_SECRET
            return httpx.Response(200, json={"access_token": "fresh"})
        if self.timeout_first:
            self.timeout_first = False
            assert key is not None
            self.effects[key] += 1  # applied, and the answer is lost
            raise httpx.ReadTimeout("slow", request=request)
        if auth == "Bearer fresh" or (auth or "").startswith("Digest "):
            assert key is not None
            replayed = key in self.effects
            self.effects[key] += 0 if replayed else 1
            headers = {"Idempotent-Replayed": "true"} if replayed else {}
            return httpx.Response(201, headers=headers, json={"id": "pay_1"})
        challenge = (
            'Digest realm="psp", nonce="abc123", qop="auth"'
            if auth is None or not auth.startswith("Bearer")
            else 'Bearer realm="psp"'
        )
        return httpx.Response(401, headers={"www-authenticate": challenge})


class RefreshingAuth(httpx.Auth):
    """The token refresh pattern of httpx's "custom authentication" docs."""

    requires_response_body = True

    def __init__(self) -> None:
        self.token = "stale"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            refresh = yield httpx.Request(
                "POST", "https://auth.test/token", json={"refresh_token": REFRESH_SECRET}
            )
            self.token = refresh.json()["access_token"]
            request.headers["Authorization"] = f"Bearer {self.token}"
            yield request


class RebuildingAuth(RefreshingAuth):
    """An auth flow that sends the request again as a new request of its own."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            refresh = yield httpx.Request(
                "POST", "https://auth.test/token", json={"refresh_token": REFRESH_SECRET}
            )
            self.token = refresh.json()["access_token"]
            yield httpx.Request(
                request.method,
                request.url,
                headers={"Authorization": f"Bearer {self.token}"},
                content=request.content,
            )


def operations_in(store: Path) -> list[str]:
    with SQLiteStore(store) as opened:
        return [r.url for r in opened.operations()]


@pytest.mark.parametrize("auth", [RefreshingAuth, RebuildingAuth])
def test_a_token_refresh_continues_the_operation_with_its_key(
    tmp_path: Path, auth: type[httpx.Auth]
) -> None:
    psp = TokenPSP()
    told: list[Outcome] = []
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=auth(),
        hooks=Hooks(on_outcome=told.append),
    ) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert (outcome.state, outcome.status_code) == (State.SUCCEEDED, 201)
    payments = [s for s in psp.seen if s[1] == "https://psp.test/v1/payments"]
    [(_, _, token_key, _)] = [s for s in psp.seen if s[1] == "https://auth.test/token"]
    assert [auth_header for _, _, _, auth_header in payments] == ["Bearer stale", "Bearer fresh"]
    assert {key for _, _, key, _ in payments} == {outcome.key}
    assert token_key is None  # the auth flow's own request is not an operation
    assert psp.effects == {outcome.key: 1}
    assert operations_in(tmp_path / "c.db") == ["https://psp.test/v1/payments"]
    assert REFRESH_SECRET.encode() not in (tmp_path / "c.db").read_bytes()
    assert [o.state for o in told] == [State.SUCCEEDED]  # one outcome per operation


def test_digest_auth_works_through_a_wrapped_client(tmp_path: Path) -> None:
    psp = TokenPSP()
    http = httpx.Client(
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=httpx.DigestAuth("merchant", "s3cret"),
    )
    with idemclient.wrap(http, store=tmp_path / "c.db", clock=ManualClock()) as client:
        response = client.post("/v1/payments", json=PAYMENT)
    assert response.status_code == 201
    outcome = outcome_of(response)
    assert outcome is not None
    assert outcome.state is State.SUCCEEDED
    assert [auth is not None and auth.startswith("Digest") for *_, auth in psp.seen] == [
        False,
        True,
    ]
    assert len({key for _, _, key, _ in psp.seen}) == 1
    assert sum(psp.effects.values()) == 1


def test_a_401_with_no_auth_flow_is_not_sent_and_names_the_credentials(tmp_path: Path) -> None:
    psp = TokenPSP()
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        headers={"Authorization": "Bearer stale"},
    ) as client:
        with pytest.raises(NotSent) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert raised.value.outcome.last_status == 401
        assert "credentials" in str(raised.value)
        client.http.headers["Authorization"] = "Bearer fresh"
        again = client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert again.state is State.SUCCEEDED
    assert again.key == raised.value.key  # the same operation, the same key


def test_a_401_after_a_timeout_is_still_maybe_applied(tmp_path: Path) -> None:
    psp = TokenPSP(timeout_first=True)
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        headers={"Authorization": "Bearer stale"},
    ) as client:
        with pytest.raises(Indeterminate) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        stored = client.operation("op")
    assert raised.value.outcome.last_status == 401
    assert stored is not None
    assert (stored.state, stored.maybe_applied) == (State.INDETERMINATE, True)


def test_a_wrapped_client_without_an_auth_flow_gets_the_401(tmp_path: Path) -> None:
    psp = TokenPSP()
    http = httpx.Client(transport=httpx.MockTransport(psp.handler), base_url="https://psp.test")
    with idemclient.wrap(http, store=tmp_path / "c.db", clock=ManualClock()) as client:
        response = client.post("/v1/payments", json=PAYMENT, headers={"Authorization": "x"})
    assert response.status_code == 401  # as plain httpx would answer
    outcome = outcome_of(response)
    assert outcome is not None
    assert (outcome.state, outcome.maybe_applied) == (State.NOT_SENT, False)


class AsyncRefreshingAuth(httpx.Auth):
    def __init__(self) -> None:
        self.token = "stale"

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            refresh = yield httpx.Request(
                "POST", "https://auth.test/token", json={"refresh_token": REFRESH_SECRET}
            )
            await refresh.aread()
            self.token = refresh.json()["access_token"]
            request.headers["Authorization"] = f"Bearer {self.token}"
            yield request


@pytest.mark.anyio
async def test_the_async_client_hands_401_to_the_auth_flow(tmp_path: Path) -> None:
    psp = TokenPSP()
    async with AsyncClient(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=AsyncRefreshingAuth(),
    ) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert sum(psp.effects.values()) == 1
    assert operations_in(tmp_path / "c.db") == ["https://psp.test/v1/payments"]


@pytest.mark.anyio
async def test_the_async_client_says_not_sent_for_a_401_with_no_auth_flow(tmp_path: Path) -> None:
    # The handed-back 401 is closed the async way: NotSent naming the credentials, not
    # an error about closing an async stream synchronously.
    psp = TokenPSP()
    async with AsyncClient(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        headers={"Authorization": "Bearer stale"},
    ) as client:
        with pytest.raises(NotSent) as raised:
            await client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert raised.value.outcome.last_status == 401
        assert "credentials" in str(raised.value)
        client.http.headers["Authorization"] = "Bearer fresh"
        again = await client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert again.state is State.SUCCEEDED
    assert again.key == raised.value.key
    assert sum(psp.effects.values()) == 1
