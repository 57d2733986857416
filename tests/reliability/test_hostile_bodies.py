"""Request bodies that cannot be replayed, and bodies the server must not take.

A body is buffered so that every attempt can send it again. One that is too long to
buffer, or that cannot be read at all, is refused with `RequestNotReplayable` before
anything is recorded or sent. On the server side, JSON that could mean two things is
refused with 400, and nothing that is not JSON is ever echoed back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

import idemclient
from idemclient import AsyncClient, Client
from idemclient.errors import RequestNotReplayable
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

from .conftest import Figures
from .support import PATH, Counting, payment

AUTH = {"Authorization": "Bearer merchant-1"}
LIMIT = 1000


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer() as running:
        yield running


def over_the_limit() -> Iterator[bytes]:
    yield b'{"amount": 1, "note": "'
    for _ in range(20):
        yield b"x" * 100
    yield b'"}'


def write_only(tmp_path: Path, files: ExitStack) -> Any:
    return files.enter_context((tmp_path / "body.json").open("wb"))


def closed(tmp_path: Path, files: ExitStack) -> Any:
    path = tmp_path / "body.json"
    path.write_bytes(json.dumps(payment("r-1")).encode())
    handle = path.open("rb")
    handle.close()
    return handle


def text_mode(tmp_path: Path, files: ExitStack) -> Any:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(payment("r-1")))
    return files.enter_context(path.open())  # yields str, not bytes


def failing_source(tmp_path: Path, files: ExitStack) -> Iterator[bytes]:
    yield b'{"amount": '
    raise OSError(5, "Input/output error")  # the disk went away mid-body


def str_chunks(tmp_path: Path, files: ExitStack) -> Iterator[Any]:
    yield '{"amount": 1}'  # a generator of str


UNREPLAYABLE: dict[str, tuple[Callable[[Path, ExitStack], Any], type[ValueError], str]] = {
    "generator-over-the-limit": (
        lambda _, __: over_the_limit(),
        RequestNotReplayable,
        "max_request_body",
    ),
    "write-only-file": (write_only, RequestNotReplayable, "could not be read"),
    # httpx itself refuses a closed file while it builds the request (it asks its size)
    "closed-file": (closed, ValueError, "closed file"),
    "text-mode-file": (text_mode, RequestNotReplayable, "not bytes"),
    "generator-that-fails": (failing_source, RequestNotReplayable, "could not be read"),
    "generator-of-str": (str_chunks, RequestNotReplayable, "not bytes"),
}


@pytest.mark.parametrize(("make", "error", "match"), UNREPLAYABLE.values(), ids=list(UNREPLAYABLE))
def test_a_body_that_cannot_be_replayed_is_refused_before_anything(
    server: ReferenceServer,
    tmp_path: Path,
    make: Callable[[Path, ExitStack], Any],
    error: type[ValueError],
    match: str,
    figures: Figures,
) -> None:
    transport = Counting(server)
    files = ExitStack()
    wrapped_store = SQLiteStore(tmp_path / "wrapped.db")
    with (
        Client(
            store=tmp_path / "client.db",
            transport=transport,
            base_url="http://psp.test",
            headers=AUTH,
            max_request_body=LIMIT,
        ) as client,
        idemclient.wrap(
            httpx.Client(transport=transport, base_url="http://psp.test", headers=AUTH),
            store=wrapped_store,
            max_request_body=LIMIT,
        ) as wrapped,
        files,
    ):
        with pytest.raises(error, match=match):
            client.post(PATH, content=make(tmp_path, files), operation_id="op-1")
        with pytest.raises(error, match=match):
            wrapped.post(PATH, content=make(tmp_path, files))
        assert client.store.operations() == []
        assert wrapped_store.operations() == []
        # The same operation with a body that can be buffered goes through.
        assert client.post(PATH, json=payment("r-1"), operation_id="op-1").succeeded
    wrapped_store.close()
    assert transport.requests == 1
    assert len(server.ledger()) == 1
    figures.count("hostile input", unreplayable_bodies_refused=2)


async def async_over_the_limit() -> AsyncIterator[bytes]:
    for chunk in over_the_limit():
        yield chunk


async def async_failing() -> AsyncIterator[bytes]:
    yield b'{"amount": '
    raise OSError(5, "Input/output error")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("make", "match"),
    [(async_over_the_limit, "max_request_body"), (async_failing, "could not be read")],
    ids=["over-the-limit", "fails"],
)
async def test_an_async_body_that_cannot_be_replayed_is_refused_before_anything(
    server: ReferenceServer,
    tmp_path: Path,
    make: Callable[[], AsyncIterator[bytes]],
    match: str,
) -> None:
    transport = Counting(server)
    async with AsyncClient(
        store=tmp_path / "client.db",
        transport=transport,
        base_url="http://psp.test",
        headers=AUTH,
        max_request_body=LIMIT,
    ) as client:
        with pytest.raises(RequestNotReplayable, match=match) as caught:
            await client.post(PATH, content=make())
        assert client.store.operations() == []
    assert transport.requests == 0
    assert server.ledger() == ()
    if match == "could not be read":
        assert isinstance(caught.value.__cause__, OSError)  # chained, not swallowed


def test_the_limit_is_checked_while_reading_not_after(tmp_path: Path) -> None:
    """An endless body is refused once it passes the limit: it is never read whole."""
    read = 0

    def endless() -> Iterator[bytes]:
        nonlocal read
        while True:
            read += 100
            yield b"x" * 100

    with (
        ReferenceServer() as server,
        Client(
            store=tmp_path / "client.db",
            transport=server.transport,
            base_url="http://psp.test",
            headers=AUTH,
            max_request_body=LIMIT,
        ) as client,
        pytest.raises(RequestNotReplayable),
    ):
        client.post(PATH, content=endless())
    assert read <= LIMIT + 100


# -- the server's JSON handling -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        # parsers disagree on which "amount" counts: the payment must mean one thing
        (b'{"amount": 1, "amount": 100000, "currency": "EUR", "reference": "r"}', "'amount'"),
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "reference": "s"}', "'reference'"),
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "m": {"a": 1, "a": 2}}', "'a'"),
        # overflows to infinity, which would be echoed back as "Infinity" (not JSON)
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "rate": 1e400}', "out of range"),
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "rate": -1e400}', "out of range"),
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "x": [[1e999]]}', "out of range"),
        # NaN and Infinity literals are not JSON
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "rate": NaN}', "JSON object"),
        # more digits than Python converts
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "n": 1' + b"0" * 5000 + b"}", ""),
        # an amount beyond what every JSON parser reads exactly
        (b'{"amount": 9007199254740992, "currency": "EUR", "reference": "r"}', "amount"),
        (b'{"amount": 1e3, "currency": "EUR", "reference": "r"}', "amount"),
        # deeper than any parser's stack
        (b"[" * 50_000 + b"]" * 50_000, ""),
        # what one storage backend keeps and another refuses after admission
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "t": "a\\u0000"}', "NUL"),
        (b'{"amount": 1, "currency": "EUR", "reference": "r", "t": "\\udc00"}', "surrogate"),
    ],
    ids=[
        "duplicate-amount",
        "duplicate-reference",
        "duplicate-nested",
        "float-overflow",
        "negative-overflow",
        "nested-overflow",
        "nan-literal",
        "5000-digits",
        "amount-2^53",
        "amount-exponent",
        "nesting",
        "nul",
        "lone-surrogate",
    ],
)
def test_json_that_could_mean_two_things_is_400_and_stores_nothing(
    server: ReferenceServer, body: bytes, detail: str
) -> None:
    http = httpx.Client(transport=server.transport, base_url="http://psp.test", headers=AUTH)
    response = http.post(PATH, content=body, headers={"Idempotency-Key": "k-json"})
    problem = response.json()
    assert response.status_code in (400, 413), problem
    assert detail in problem["detail"]
    assert server.ledger() == ()
    assert server.key_record("merchant-1", "k-json") is None
    # The key is still free: the corrected body goes through under it.
    fixed = http.post(PATH, json=payment("r"), headers={"Idempotency-Key": "k-json"})
    assert fixed.status_code == 201


def test_echoed_fields_come_back_as_strict_json(server: ReferenceServer) -> None:
    """Whatever extra fields a body carries come back as JSON any parser accepts."""
    http = httpx.Client(transport=server.transport, base_url="http://psp.test", headers=AUTH)
    extras: dict[str, Any] = {
        "big": 10**300,
        "tiny": 5e-324,
        "max": 1.7976931348623157e308,
        # control characters but NUL, which a body may not hold (PostgreSQL cannot keep it)
        "text": "\u2028\ud7ff\x01\x1f",
        "deep": [[[[{"k": None}]]]],
    }
    for n, (name, value) in enumerate(extras.items()):
        body = {**payment(f"r-{n}"), name: value}
        response = http.post(PATH, json=body, headers={"Idempotency-Key": f"k-{n}"})
        assert response.status_code == 201
        echoed = json.loads(response.content, parse_constant=_refuse)
        assert echoed[name] == value
    assert len(server.ledger()) == len(extras)


def _refuse(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


def test_a_body_over_64_kib_is_413(server: ReferenceServer) -> None:
    http = httpx.Client(transport=server.transport, base_url="http://psp.test", headers=AUTH)
    body = {**payment("r-big"), "note": "x" * (64 * 1024)}
    response = http.post(PATH, json=body, headers={"Idempotency-Key": "k-big"})
    assert response.status_code == 413
    assert server.ledger() == ()


@pytest.mark.anyio
async def test_an_async_body_is_refused_once_past_the_limit_not_after(tmp_path: Path) -> None:
    read = 0

    async def long_body() -> AsyncIterator[bytes]:
        nonlocal read
        for _ in range(100_000):  # 10 MB if it were all read
            read += 100
            yield b"x" * 100

    with ReferenceServer() as server:
        async with AsyncClient(
            store=tmp_path / "client.db",
            transport=server.transport,
            base_url="http://psp.test",
            headers=AUTH,
            max_request_body=LIMIT,
        ) as client:
            with pytest.raises(RequestNotReplayable, match="max_request_body"):
                await client.post(PATH, content=long_body())
    assert read <= LIMIT + 100
