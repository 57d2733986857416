"""docs/guides/psp-sdks.md works as written: a merchant's `stripe.StripeClient` code, with
the guide's `IdemclientHTTPClient` as its `http_client=`, gets durable keys (its own
`idempotency_key`, or the one the SDK draws), indeterminate outcomes and crash-resume,
against the reference server in the `stripe` profile; and the SDK's own retries
(`max_network_retries`) never draw a new key and add nothing beside idemclient's.

The class is taken from the guide's first code block and run as it is written there."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe

import idemclient
from idemclient import Indeterminate, ManualClock, NotSent, RetryPolicy, State
from idemclient.clock import set_testing
from idemclient.testing import ReferenceServer

GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "psp-sdks.md"
API = "https://api.stripe.test"
PATH = "/v2/money_management/outbound_payments"
#: The reference server speaks JSON, as Stripe's v2 API does (v1 is form-encoded).
PAYMENT = {"amount": 1999, "currency": "eur", "reference": "inv-7"}


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.M | re.S)


def _guide_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_blocks()[0], str(GUIDE), "exec"), namespace)  # the guide's class
    return namespace


IdemclientHTTPClient: type[Any] = _guide_namespace()["IdemclientHTTPClient"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> ReferenceServer:
    return ReferenceServer(profile="stripe", clock=ManualClock())


class Wire:
    """What reached the server: (method, path, Idempotency-Key) of each request."""

    def __init__(self, server: ReferenceServer) -> None:
        self.server = server
        self.seen: list[tuple[str, str, str | None]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.path, request.headers.get("Idempotency-Key")))
        return self.server.transport.handle_request(request)

    async def ahandle(self, request: httpx.Request) -> httpx.Response:
        return self.handle(request)

    def posts(self) -> list[str | None]:
        return [key for method, _, key in self.seen if method == "POST"]


@pytest.fixture
def wire(server: ReferenceServer) -> Wire:
    return Wire(server)


def _http(wire: Wire, store: Path, **options: Any) -> httpx.Client:
    """As the guide wires it: the credentials on the client, the SDK's headers kept."""
    return idemclient.wrap(
        httpx.Client(
            transport=httpx.MockTransport(wire.handle),
            headers={"Authorization": "Bearer sk_test_merchant"},
        ),
        store=store,
        profile="stripe",
        persist_headers=["Stripe-Version", "X-Stripe-Client-User-Agent"],
        clock=ManualClock(),
        server_clock=False,
        **options,
    )


def _stripe(http: Any, **options: Any) -> stripe.StripeClient:
    return stripe.StripeClient(
        "sk_test_merchant",
        http_client=http,
        base_addresses={"api": API},
        **options,
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "payments.db"


def _create(client: stripe.StripeClient, key: str | None = None) -> Any:
    options: Any = {} if key is None else {"idempotency_key": key}
    return client.v2.money_management.outbound_payments.create(dict(PAYMENT), options)


def test_the_merchant_s_own_key_is_the_one_recorded_and_sent(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    key = idemclient.key_from_identity("checkout", "order-7")
    http = _http(wire, store)
    server.answer(503, times=1)  # retried by idemclient, under the same key
    payment = _create(_stripe(IdemclientHTTPClient(http), max_network_retries=0), key)
    assert payment.status == "succeeded"
    assert wire.posts() == [key, key]
    http.close()
    # The merchant's code runs again (a redeploy, a double click): from the store.
    again_http = _http(wire, store)
    again = _create(_stripe(IdemclientHTTPClient(again_http)), key)
    assert again.id == payment.id
    assert wire.posts() == [key, key]  # nothing sent
    assert len(server.ledger()) == 1
    again_http.close()


def test_without_a_key_the_sdk_s_own_is_recorded_before_sending(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    server.drop(times=3)  # applied every time, never answered
    http = _http(wire, store, policy=RetryPolicy(max_attempts=3))
    with pytest.raises(Indeterminate) as raised:
        _create(_stripe(IdemclientHTTPClient(http)))
    drawn = wire.posts()
    assert len(set(drawn)) == 1  # one key, the SDK's, on every attempt
    assert drawn[0]
    assert raised.value.outcome.key == drawn[0]
    assert raised.value.outcome.state is State.INDETERMINATE
    http.close()
    # A crash, a new process: the store knows the payment under the SDK's key.
    after = _http(wire, store)
    (resumed,) = idemclient.resume(after)
    assert resumed.state is State.SUCCEEDED
    assert resumed.key == drawn[0]
    assert set(wire.posts()) == {drawn[0]}
    assert len(server.ledger()) == 1
    after.close()


def test_an_indeterminate_payment_raises_then_resumes_once(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    key = idemclient.key_from_identity("checkout", "order-8")
    server.drop(times=3)
    http = _http(wire, store, policy=RetryPolicy(max_attempts=3))
    client = _stripe(IdemclientHTTPClient(http), max_network_retries=0)
    with pytest.raises(Indeterminate, match="indeterminate"):
        _create(client, key)
    assert len(server.ledger()) == 1  # applied, its answer lost
    http.close()
    resumed_http = _http(wire, store)
    (resumed,) = idemclient.resume(resumed_http)
    assert (resumed.state, resumed.key, resumed.replayed) == (State.SUCCEEDED, key, True), (
        resumed.evidence
    )
    assert set(wire.posts()) == {key}
    assert len(server.ledger()) == 1
    resumed_http.close()


def test_an_indeterminate_payment_is_finished_by_running_the_code_again(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    """With the merchant's own key, a rerun of the same code (the SDK call under the
    same key) finishes the unfinished payment: sent again, replayed, paid once."""
    key = idemclient.key_from_identity("checkout", "order-12")
    server.drop(times=3)
    http = _http(wire, store, policy=RetryPolicy(max_attempts=3))
    with pytest.raises(Indeterminate):
        _create(_stripe(IdemclientHTTPClient(http)), key)
    http.close()
    rerun_http = _http(wire, store)
    payment = _create(_stripe(IdemclientHTTPClient(rerun_http)), key)
    assert payment.status == "succeeded"
    assert set(wire.posts()) == {key}
    assert len(server.ledger()) == 1
    rerun_http.close()


def test_a_final_refusal_is_still_the_sdk_s_own_error(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    server.answer(402, times=1, body=b'{"error": {"type": "card_error", "message": "declined"}}')
    http = _http(wire, store)
    with pytest.raises(stripe.StripeError) as raised:
        _create(_stripe(IdemclientHTTPClient(http)), "order-9")
    assert raised.value.http_status == 402
    assert len(wire.posts()) == 1
    http.close()


def test_the_sdk_s_retries_reuse_its_key_and_add_nothing_beside_idemclient(
    server: ReferenceServer, wire: Wire, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(stripe._http_client.time, "sleep", slept.append)  # type: ignore[attr-defined]
    # Without idemclient: the SDK's own retries (a plain httpx client underneath)
    # re-send under the key it drew once for the call.
    plain = httpx.Client(transport=httpx.MockTransport(wire.handle))
    server.answer(503, times=2)
    alone = _stripe(IdemclientHTTPClient(plain), max_network_retries=2)
    _create(alone)
    sdk_keys = wire.posts()
    assert len(sdk_keys) == 3
    assert len(set(sdk_keys)) == 1  # the key it drew once, on each of its retries
    assert sdk_keys[0]
    assert len(slept) == 2  # its waits, between its retries
    # With idemclient underneath and the SDK's retries left on: idemclient's attempts
    # only (it hands the SDK no retryable answer), all under one key.
    wire.seen.clear()
    slept.clear()
    server.answer(503, times=5)
    http = _http(wire, store, policy=RetryPolicy(max_attempts=3))
    both = _stripe(IdemclientHTTPClient(http), max_network_retries=2)
    with pytest.raises(NotSent):
        _create(both, "order-10")
    assert wire.posts() == ["order-10"] * 3
    assert slept == []  # the SDK never retried
    http.close()


@pytest.mark.anyio
async def test_the_async_methods_take_a_wrapped_async_client(
    server: ReferenceServer, wire: Wire, store: Path
) -> None:
    http = idemclient.wrap(
        httpx.AsyncClient(transport=httpx.MockTransport(wire.ahandle)),
        store=store,
        persist_headers=["Stripe-Version", "X-Stripe-Client-User-Agent"],
        profile="stripe",
        clock=ManualClock(),
        server_clock=False,
    )
    server.answer(503, times=1)
    client = _stripe(IdemclientHTTPClient(async_http=http), max_network_retries=0)
    payment = await client.v2.money_management.outbound_payments.create_async(
        dict(PAYMENT), {"idempotency_key": "order-11"}
    )
    assert payment.status == "succeeded"
    assert wire.posts() == ["order-11", "order-11"]
    await http.aclose()


@pytest.fixture
def no_real_sleeps() -> Iterator[None]:
    """The guide's client is on the system clock: its waits are not slept here."""
    set_testing(True)
    yield
    set_testing(False)


@pytest.mark.usefixtures("no_real_sleeps")
def test_the_guide_s_wiring_block_builds_a_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's second block, as written: it builds its clients (and would send the
    payment to Stripe: the request is stopped at the door here)."""
    monkeypatch.chdir(tmp_path)
    sent: list[httpx.Request] = []

    def stop(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise httpx.ConnectError("not in a test", request=request)

    class OfflineClient(httpx.Client):
        def __init__(self, **options: Any) -> None:
            super().__init__(transport=httpx.MockTransport(stop), **options)

    offline = types.ModuleType("httpx")
    offline.__dict__.update(vars(httpx))
    offline.Client = OfflineClient  # type: ignore[attr-defined]
    namespace = {**_guide_namespace(), "httpx": offline}
    with pytest.raises(NotSent):
        exec(compile(_blocks()[1], str(GUIDE), "exec"), namespace)
    posts = [r for r in sent if r.method == "POST"]
    assert posts
    assert {r.headers["Idempotency-Key"] for r in posts} == {
        idemclient.key_from_identity("checkout", "order-7")
    }
    namespace["http"].close()
