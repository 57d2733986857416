"""Retrofitting an existing httpx client keeps everything it had."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import idemclient
from idemclient import ManualClock, State
from idemclient._retrofit import transport_of
from idemclient.errors import StoreUnavailable
from idemclient.store import SQLiteStore
from idemclient.transport import IdempotentTransport

from .fakes import OK, FakePSP, error, status

PAYMENT = {"amount": 500, "currency": "GBP"}


def test_wrap_keeps_auth_headers_hooks_and_transport(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    hooked: list[str] = []
    client = httpx.Client(
        base_url="http://psp.test",
        auth=("merchant", "secret"),
        headers={"X-Merchant": "m-1"},
        transport=psp.transport(),
        event_hooks={"request": [lambda r: hooked.append(r.method)]},
    )
    assert idemclient.wrap(client, store=store_path, clock=clock) is client
    psp.script = [status(503), OK]
    response = client.post("/v1/payments", json=PAYMENT)
    assert response.status_code == 201
    outcome = response.extensions["idemclient.outcome"]
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 2
    for request in psp.requests:
        assert request.headers["authorization"].startswith("Basic ")
        assert request.headers["x-merchant"] == "m-1"
    assert hooked == ["POST"]  # event hooks run once per logical request
    client.close()


def test_wrap_wraps_every_mount(store_path: Path, clock: ManualClock) -> None:
    main, other = FakePSP(), FakePSP(error(httpx.ReadTimeout), OK)
    client = httpx.Client(
        transport=main.transport(), mounts={"http://other.test": other.transport()}
    )
    idemclient.wrap(client, store=store_path, clock=clock)
    client.post("http://main.test/pay", json=PAYMENT)
    client.post("http://other.test/pay", json=PAYMENT)
    assert len(main.requests) == 1
    assert len(other.requests) == 2
    assert len(set(other.keys)) == 1
    client.close()


def test_non_unsafe_methods_pass_straight_through(store_path: Path, psp: FakePSP) -> None:
    client = idemclient.wrap(httpx.Client(transport=psp.transport()), store=store_path)
    client.get("http://psp.test/v1/payments/1")
    client.put("http://psp.test/v1/payments/1", json={})  # PUT is not covered by default
    assert psp.keys == [None, None]
    transport = transport_of(client)
    assert isinstance(transport, IdempotentTransport)
    assert transport.settings.store.operations() == []


def test_wrapping_twice_is_refused(store_path: Path, psp: FakePSP) -> None:
    client = idemclient.wrap(httpx.Client(transport=psp.transport()), store=store_path)
    with pytest.raises(ValueError, match="wrapped already"):
        idemclient.wrap(client, store=store_path)


def test_wrapped_client_raises_indeterminate(store_path: Path, clock: ManualClock) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout)] * 8)
    client = idemclient.wrap(httpx.Client(transport=psp.transport()), store=store_path, clock=clock)
    with pytest.raises(idemclient.Indeterminate):
        client.post("http://psp.test/pay", json=PAYMENT)


def test_resume_on_a_wrapped_client_uses_its_live_credentials(
    store_path: Path, clock: ManualClock
) -> None:
    psp = FakePSP(*[error(httpx.ConnectError)] * 8)
    client = httpx.Client(transport=psp.transport(), headers={"Authorization": "Bearer live"})
    idemclient.wrap(client, store=store_path, clock=clock)
    with pytest.raises(idemclient.NotSent):
        client.post("http://psp.test/pay", json=PAYMENT)
    outcomes = idemclient.resume(client)
    assert [o.state for o in outcomes] == [State.SUCCEEDED]
    assert psp.requests[-1].headers["authorization"] == "Bearer live"


def test_resume_of_an_unwrapped_client_is_refused() -> None:
    with pytest.raises(TypeError, match="not wrapped"):
        idemclient.resume(httpx.Client())


@pytest.mark.anyio
async def test_wrap_async_client(store_path: Path, clock: ManualClock, psp: FakePSP) -> None:
    client = idemclient.wrap(
        httpx.AsyncClient(transport=psp.async_transport()), store=store_path, clock=clock
    )
    psp.script = [status(429, retry_after="1"), OK]
    response = await client.post("http://psp.test/pay", json=PAYMENT)
    assert response.status_code == 201
    assert len(set(psp.keys)) == 1
    assert len(psp.keys) == 2
    await client.aclose()


def test_closing_a_wrapped_client_closes_the_store_it_opened(store_path: Path) -> None:
    client = idemclient.wrap(httpx.Client(transport=FakePSP().transport()), store=store_path)
    transport = transport_of(client)
    assert isinstance(transport, IdempotentTransport)
    client.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        transport.settings.store.get("anything")


def test_a_store_passed_as_an_object_stays_the_callers(store_path: Path) -> None:
    store = SQLiteStore(store_path)
    client = idemclient.wrap(httpx.Client(transport=FakePSP().transport()), store=store)
    client.close()
    assert store.get("anything") is None  # still open
    store.close()


def test_a_bad_httpx_option_leaves_no_store_open(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []
    real_close = SQLiteStore.close

    def counting_close(self: SQLiteStore) -> None:
        closed.append(self.path)
        real_close(self)

    monkeypatch.setattr(SQLiteStore, "close", counting_close)
    with pytest.raises(TypeError):
        idemclient.Client(store=store_path, no_such_option=1)
    assert closed == [str(store_path)]
