"""`Client` and `AsyncClient` are ordinary classes to the code built on them: methods
are functions on the class (callable unbound, coroutine functions on `AsyncClient`,
autospec-able), a subclass's `request` is what `post`, `patch`, `put` and `delete` go
through, and what the client was given as its store is what `client.store` is."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import httpx
import pytest

from idemclient import AsyncClient, Client, ManualClock, State
from idemclient.errors import StoreError, StoreUnavailable
from idemclient.policy import RetryPolicy
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "inv-7"}
AUTH = {"Authorization": "Bearer merchant-1"}
C = TypeVar("C", Client, AsyncClient)
VERBS = ["post", "patch", "put", "delete"]
METHODS = ["request", *VERBS, "get", "resume", "reconcile"]
EVERY_METHOD = RetryPolicy(methods=frozenset({"POST", "PATCH", "PUT", "DELETE"}))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class KeyedByReference(Client):
    """A subclass that gives every call the identity of its reference (one key per
    invoice, whatever the caller passed): what `post` must go through too."""

    def request(self, method: str, url: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("identity", (kwargs["json"]["reference"], method))
        return super().request(method, url, **kwargs)


class AsyncKeyedByReference(AsyncClient):
    async def request(self, method: str, url: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("identity", (kwargs["json"]["reference"], method))
        return await super().request(method, url, **kwargs)


@pytest.fixture
def server() -> ReferenceServer:
    return ReferenceServer(clock=ManualClock())


def built(cls: type[C], store: Path, server: ReferenceServer, **options: Any) -> C:
    """A client of class `cls` on `store`, paying through `server` as merchant-1."""
    return cls(
        store=store,
        transport=server.transport,
        base_url="http://psp.test",
        headers=AUTH,
        **options,
    )


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_goes_through_a_subclass_request(
    tmp_path: Path, server: ReferenceServer, verb: str
) -> None:
    with built(KeyedByReference, tmp_path / "c.db", server, policy=EVERY_METHOD) as client:
        first = getattr(client, verb)("/v1/payments", json=PAYMENT)
        second = getattr(client, verb)("/v1/payments", json=PAYMENT)
    assert first.key == second.key  # the subclass's identity, both times


@pytest.mark.anyio
@pytest.mark.parametrize("verb", VERBS)
async def test_every_async_verb_goes_through_a_subclass_request(
    tmp_path: Path, server: ReferenceServer, verb: str
) -> None:
    async with built(
        AsyncKeyedByReference, tmp_path / "c.db", server, policy=EVERY_METHOD
    ) as client:
        first = await getattr(client, verb)("/v1/payments", json=PAYMENT)
        second = await getattr(client, verb)("/v1/payments", json=PAYMENT)
    assert first.key == second.key


def test_a_subclass_request_keyed_by_reference_pays_once(
    tmp_path: Path, server: ReferenceServer
) -> None:
    with built(KeyedByReference, tmp_path / "c.db", server) as client:
        first = client.post("/v1/payments", json=PAYMENT)
    with built(KeyedByReference, tmp_path / "other.db", server) as elsewhere:
        second = elsewhere.post("/v1/payments", json=PAYMENT)
    assert first.state is second.state is State.SUCCEEDED
    assert len(server.ledger()) == 1


@pytest.mark.parametrize("name", METHODS)
def test_methods_are_functions_of_the_class(name: str) -> None:
    assert inspect.isfunction(getattr(Client, name))
    assert not inspect.iscoroutinefunction(getattr(Client, name))
    assert inspect.iscoroutinefunction(getattr(AsyncClient, name))


def test_a_method_called_unbound_works(tmp_path: Path, server: ReferenceServer) -> None:
    with built(Client, tmp_path / "c.db", server) as c:
        outcome = Client.post(c, "/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED


def test_autospec_gives_async_mocks_for_the_async_client() -> None:
    spec = mock.create_autospec(AsyncClient, instance=True)
    assert isinstance(spec.post, mock.AsyncMock)
    assert isinstance(spec.request, mock.AsyncMock)
    assert callable(mock.create_autospec(Client, instance=True).post)


@pytest.mark.parametrize("name", ["post", "request"])
def test_signatures_say_what_a_call_returns(name: str) -> None:
    assert inspect.signature(getattr(Client, name)).return_annotation == "Outcome"
    assert inspect.signature(getattr(AsyncClient, name)).return_annotation == "Outcome"


@pytest.mark.anyio
async def test_the_store_an_async_client_was_given_is_its_store(tmp_path: Path) -> None:
    given = SQLiteStore(tmp_path / "c.db")
    async with AsyncClient(store=given, base_url="http://psp.test") as client:
        assert client.store is given
    given.close()


@pytest.mark.anyio
async def test_an_async_client_store_from_a_path_is_the_sqlite_store(tmp_path: Path) -> None:
    async with AsyncClient(store=tmp_path / "c.db", base_url="http://psp.test") as client:
        assert isinstance(client.store, SQLiteStore)


@pytest.mark.anyio
async def test_a_closed_async_client_never_opens_its_store_again(tmp_path: Path) -> None:
    client = AsyncClient(store=tmp_path / "c.db", base_url="http://psp.test")
    await client.aclose()  # never used: nothing was opened
    with pytest.raises(StoreUnavailable, match="closed"):
        client.store.unfinished()
    assert not (tmp_path / "c.db").exists()


@pytest.mark.anyio
async def test_an_async_client_whose_store_cannot_be_opened_closes_what_it_built(
    tmp_path: Path,
) -> None:
    (tmp_path / "not-a-store.db").write_bytes(b"this is not a database" * 100)
    client = AsyncClient(store=tmp_path / "not-a-store.db", base_url="http://psp.test")
    with pytest.raises(StoreError):
        async with client:
            pass
    assert client.http.is_closed


@pytest.mark.parametrize("verb", VERBS)
def test_a_verb_takes_its_url_as_a_keyword_as_httpx_does(
    tmp_path: Path, server: ReferenceServer, verb: str
) -> None:
    with built(Client, tmp_path / "c.db", server, policy=EVERY_METHOD) as client:
        outcome = getattr(client, verb)(url="/v1/payments", json=PAYMENT)
    assert outcome.state.finished  # answered (the server takes only POST here)


@pytest.mark.anyio
async def test_an_async_verb_takes_its_url_as_a_keyword(
    tmp_path: Path, server: ReferenceServer
) -> None:
    async with built(AsyncClient, tmp_path / "c.db", server) as client:
        outcome = await client.post(url="/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED


@pytest.mark.anyio
async def test_a_store_that_cannot_be_opened_fails_before_httpx_sees_the_request(
    tmp_path: Path, server: ReferenceServer
) -> None:
    (tmp_path / "not-a-store.db").write_bytes(b"this is not a database" * 100)
    announced: list[httpx.Request] = []

    async def on_request(request: httpx.Request) -> None:
        announced.append(request)

    client = built(
        AsyncClient, tmp_path / "not-a-store.db", server, event_hooks={"request": [on_request]}
    )
    with pytest.raises(StoreError):
        await client.post("/v1/payments", json=PAYMENT)
    await client.aclose()
    assert announced == []
    assert server.ledger() == ()


def test_resume_given_an_idemclient_client_says_what_it_takes(tmp_path: Path) -> None:
    from idemclient import resume

    with (
        Client(store=tmp_path / "c.db", base_url="http://psp.test") as client,
        pytest.raises(TypeError, match=r"httpx\.Client or httpx\.AsyncClient"),
    ):
        resume(client)  # type: ignore[arg-type]


def _options(function: Any, *, leave_out: tuple[str, ...] = ()) -> dict[str, tuple[Any, str]]:
    """The keyword options of `function`: name -> (default, annotation as written)."""
    return {
        name: (parameter.default, str(parameter.annotation))
        for name, parameter in inspect.signature(function).parameters.items()
        if name not in ("self", *leave_out)
    }


@pytest.mark.parametrize("name", [*METHODS, "__init__"])
def test_the_async_client_takes_the_options_of_the_client(name: str) -> None:
    asynchronous = _options(getattr(AsyncClient, name))
    assert asynchronous == {
        option: (default, annotation.replace("httpx.Client", "httpx.AsyncClient"))
        for option, (default, annotation) in _options(getattr(Client, name)).items()
    }


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_every_verb_takes_every_option_of_request_by_name(verb: str, cls: type) -> None:
    assert _options(getattr(cls, verb)) == _options(cls.request, leave_out=("method",))
    assert "kwargs" not in _options(getattr(cls, verb))


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_request_takes_every_option_of_httpx_request(cls: type) -> None:
    ours = _options(cls.request)
    for option, parameter in inspect.signature(httpx.Client.request).parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            assert ours[option][0] is parameter.default, option
    for option, parameter in inspect.signature(httpx.Client.get).parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            assert _options(cls.get)[option][0] is parameter.default, option


def test_a_deprecated_option_is_blamed_on_the_callers_line(
    tmp_path: Path, server: ReferenceServer
) -> None:
    with (
        built(Client, tmp_path / "c.db", server) as client,
        pytest.warns(DeprecationWarning, match="found=") as seen,
        pytest.raises(ValueError, match="no operation"),
    ):
        client.reconcile("order-1", lookup="/v1/payments?reference={reference}", found=bool)
    assert seen[0].filename == __file__


def test_a_request_patched_on_the_client_sees_what_a_verb_was_given(
    tmp_path: Path, server: ReferenceServer
) -> None:
    with built(Client, tmp_path / "c.db", server) as client:
        with mock.patch.object(client, "request", wraps=client.request) as patched:
            outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
        patched.assert_called_once_with(
            "POST", "/v1/payments", json=PAYMENT, operation_id="order-1"
        )
    assert outcome.state is State.SUCCEEDED


def test_a_request_patched_on_the_class_is_what_the_verbs_go_through(
    tmp_path: Path, server: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    original = Client.request

    def recorded(self: Client, method: str, url: Any, **options: Any) -> Any:
        seen.append(options)
        return original(self, method, url, **options)

    monkeypatch.setattr(Client, "request", recorded)
    with built(Client, tmp_path / "c.db", server) as client:
        client.patch("/v1/payments/1", json=PAYMENT, timeout=5.0)
    assert seen == [{"json": PAYMENT, "timeout": 5.0}]
