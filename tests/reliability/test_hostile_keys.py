"""Hostile idempotency keys: refused by the client before anything is recorded or sent,
and by the server with 400 before anything is stored; the quoted form is the same key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import idemclient
from idemclient import AsyncClient, Client
from idemclient.errors import InvalidKey
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, Counting, payment
from .wire import raw_post

AUTH = {"Authorization": "Bearer merchant-1"}

HOSTILE_KEYS = [
    pytest.param("", id="empty"),
    pytest.param("k" * 256, id="256-chars"),
    pytest.param("k" * 10_000, id="10000-chars"),
    pytest.param("ключ-1", id="cyrillic"),
    pytest.param("café", id="latin-1"),
    pytest.param("pay\u200bment", id="zero-width-space"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\r\nX-Injected: 1", id="header-injection"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\tb", id="tab"),
    pytest.param("a\x7fb", id="del"),
    pytest.param("1'; DROP TABLE operations;--", id="sql"),
    pytest.param("k' OR '1'='1", id="sql-or"),
    pytest.param('"k-1"', id="quoted"),  # the client takes keys bare, never quoted
    pytest.param(" k-1", id="leading-space"),
    pytest.param("k/../1", id="path"),
]


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer() as running:
        yield running


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_a_hostile_key_is_refused_by_the_client_before_anything_is_recorded_or_sent(
    server: ReferenceServer, tmp_path: Path, key: str, figures: Figures
) -> None:
    transport = Counting(server)
    wrapped_store = SQLiteStore(tmp_path / "wrapped.db")
    with (
        Client(
            store=tmp_path / "client.db",
            transport=transport,
            base_url="http://psp.test",
            headers=AUTH,
        ) as client,
        idemclient.wrap(
            httpx.Client(transport=transport, base_url="http://psp.test", headers=AUTH),
            store=wrapped_store,
        ) as wrapped,
    ):
        with pytest.raises(InvalidKey):
            client.post(PATH, json=payment("r-1"), key=key)
        with pytest.raises(InvalidKey):
            client.post(PATH, json=payment("r-1"), headers={"Idempotency-Key": key})
        if key.isascii():
            with pytest.raises(InvalidKey):
                wrapped.post(PATH, json=payment("r-1"), headers={"Idempotency-Key": key})
        else:
            # httpx itself refuses a non-ASCII header value while it builds the request,
            # before any transport (and so idemclient) sees it.
            with pytest.raises(UnicodeEncodeError):
                wrapped.post(PATH, json=payment("r-1"), headers={"Idempotency-Key": key})
        assert client.store.operations() == []
        assert wrapped_store.operations() == []
    wrapped_store.close()
    assert transport.requests == 0
    assert server.ledger() == ()
    figures.count("hostile input", keys_refused_by_the_client=3)


@pytest.mark.anyio
@pytest.mark.parametrize("key", HOSTILE_KEYS[:8])
async def test_the_async_client_refuses_them_too(
    server: ReferenceServer, tmp_path: Path, key: str
) -> None:
    transport = Counting(server)
    async with AsyncClient(
        store=tmp_path / "client.db", transport=transport, base_url="http://psp.test", headers=AUTH
    ) as client:
        with pytest.raises(InvalidKey):
            await client.post(PATH, json=payment("r-1"), key=key)
        with pytest.raises(InvalidKey):
            await client.post(PATH, json=payment("r-1"), headers={"Idempotency-Key": key})
        assert client.store.operations() == []
    assert transport.requests == 0


def test_a_hostile_operation_id_is_data_not_sql(server: ReferenceServer, tmp_path: Path) -> None:
    hostile = "x'); DROP TABLE operations; --"
    with Client(
        store=tmp_path / "client.db",
        transport=server.transport,
        base_url="http://psp.test",
        headers=AUTH,
    ) as client:
        first = client.post(PATH, json=payment("r-sql"), operation_id=hostile)
        again = client.post(PATH, json=payment("r-sql"), operation_id=hostile)
        assert [op.operation_id for op in client.store.operations()] == [hostile]
    assert again.from_store
    assert again.key == first.key
    [entry] = server.ledger()
    assert entry.idempotency_key == first.key


# -- keys, server side, over a real socket ------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with serve() as running:
        yield running


@pytest.fixture
def fresh(live: LiveServer) -> Iterator[LiveServer]:
    live.server.reset()
    yield live
    live.server.reset()


SERVER_REFUSED = [
    pytest.param(b"", id="empty"),
    pytest.param(b"k" * 256, id="256-chars"),
    pytest.param(b"k" * 8000, id="8000-chars"),
    pytest.param("ключ-1".encode(), id="utf-8"),
    pytest.param("café".encode("latin-1"), id="latin-1"),
    pytest.param(b"a\x00b", id="nul"),
    pytest.param(b"a\x01b", id="control"),
    pytest.param(b"a\x7fb", id="del"),
    pytest.param(b"1'; DROP TABLE idempotency_keys;--", id="sql"),
    pytest.param(b"k' OR '1'='1", id="sql-or"),
    pytest.param(b'""', id="quoted-empty"),
    pytest.param(b'"a b"', id="quoted-space"),
    pytest.param(b'"k-1', id="unbalanced-quote"),
    pytest.param(b'"k\\"1"', id="quoted-escape"),
    pytest.param(b"k-1, k-2", id="list"),
    pytest.param(b"k/../1", id="path"),
]


@pytest.mark.parametrize("raw_key", SERVER_REFUSED)
def test_the_server_answers_400_to_a_hostile_key_and_stores_nothing(
    fresh: LiveServer, raw_key: bytes, figures: Figures
) -> None:
    body = json.dumps(payment("r-hostile")).encode()
    answer = raw_post(
        fresh.url,
        PATH,
        [(b"Authorization", b"Bearer merchant-1"), (b"Idempotency-Key", raw_key)],
        body,
    )
    # 400 from the protocol (a problem naming the key), or from the HTTP parser for bytes
    # no header may carry; never anything stored.
    assert answer.status == 400, answer
    if answer.json_body is not None:
        assert answer.json_body["type"] == "urn:idemclient:problem:invalid-idempotency-key"
    assert fresh.server.ledger() == ()
    # The server is still serving.
    check = httpx.post(
        f"{fresh.url}{PATH}", json=payment("r-ok"), headers={**AUTH, "Idempotency-Key": "k-ok"}
    )
    assert check.status_code == 201
    figures.count("hostile input", keys_refused_by_the_server=1)


def test_two_keys_in_one_request_are_refused(fresh: LiveServer) -> None:
    response = httpx.post(
        f"{fresh.url}{PATH}",
        json=payment("r-two"),
        headers=[
            ("Authorization", "Bearer merchant-1"),
            ("Idempotency-Key", "k-1"),
            ("Idempotency-Key", "k-2"),
        ],
    )
    assert response.status_code == 400
    assert fresh.server.ledger() == ()


@pytest.mark.parametrize(
    "quoted",
    [
        pytest.param(b'"k-quoted"', id="quoted"),
        pytest.param(b'"k-quoted"  \t', id="quoted-with-whitespace"),
    ],
)
def test_the_quoted_form_is_accepted_and_is_the_same_key_as_the_bare_one(
    fresh: LiveServer, quoted: bytes
) -> None:
    body = json.dumps(payment("r-q")).encode()
    auth = (b"Authorization", b"Bearer merchant-1")
    first = raw_post(fresh.url, PATH, [auth, (b"Idempotency-Key", quoted)], body)
    assert first.status == 201, first
    bare = raw_post(fresh.url, PATH, [auth, (b"Idempotency-Key", b"k-quoted")], body)
    assert bare.status == 201
    assert b"idempotent-replayed: true" in bare.head.lower()
    assert bare.body == first.body
    [entry] = fresh.server.ledger()
    assert entry.idempotency_key == "k-quoted"


def test_the_longest_key_and_every_allowed_character_are_accepted(fresh: LiveServer) -> None:
    url = f"{fresh.url}{PATH}"
    for n, key in enumerate(["k" * 255, "AZaz09-_.:~", "~", "1"]):
        response = httpx.post(url, json=payment(f"r-{n}"), headers={**AUTH, "Idempotency-Key": key})
        assert response.status_code == 201, key
        assert response.json()["idempotency_key"] == key
    assert len(fresh.server.ledger()) == 4
