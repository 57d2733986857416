"""The contenders: one unsafe POST each, the way their users would write it.

Every contender sends the same request (a JSON body and an `Idempotency-Key`, made once
per logical operation) over one keep-alive connection to the same server. Only
idemclient persists the key, in a SQLite file or, as `idemclient-pg[...]`, in the
run's PostgreSQL (each contender in a schema of its own); the peers keep it in memory,
which is what they offer.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import stamina
import tenacity
from httpx_retries import Retry, RetryTransport

import idemclient
from idemclient.postgres import PostgresStore
from idemclient.store import BodyEncryption, SQLiteStore

BODY = {"amount": 1250, "currency": "EUR", "reference": "bench"}
HEADERS = {"Authorization": "Bearer bench-merchant"}

Send = Callable[[], None]
ASend = Callable[[], Awaitable[None]]


@dataclass
class Contender:
    name: str
    send: Send
    close: Callable[[], None]


@dataclass
class AsyncContender:
    name: str
    send: ASend
    close: Callable[[], Awaitable[None]]


_schemas = itertools.count(1)


def _pg_store(
    pg_url: str, durability: str, encryption: BodyEncryption | None = None
) -> PostgresStore:
    """A PostgreSQL store in a fresh schema (no contender reads another's rows), its
    pool sized for the 16 concurrent workers rather than the default 4."""
    return PostgresStore(
        pg_url,
        schema=f"bench_{next(_schemas)}",
        durability=durability,
        max_connections=16,
        encryption=encryption,
    )


def _key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def _check(response: httpx.Response) -> None:
    if response.status_code >= 300:
        raise RuntimeError(f"benchmark request failed: {response.status_code} {response.text}")


def plain_httpx(url: str, path: str) -> Contender:
    http = httpx.Client(base_url=url, headers=HEADERS)

    def send() -> None:
        _check(http.post(path, json=BODY, headers=_key()))

    return Contender("httpx", send, http.close)


def httpx_retries(url: str, path: str) -> Contender:
    retry = Retry(total=8, allowed_methods=["POST"], backoff_factor=0.25)
    http = httpx.Client(base_url=url, headers=HEADERS, transport=RetryTransport(retry=retry))

    def send() -> None:
        _check(http.post(path, json=BODY, headers=_key()))

    return Contender("httpx-retries", send, http.close)


def tenacity_httpx(url: str, path: str) -> Contender:
    http = httpx.Client(base_url=url, headers=HEADERS)
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(8),
        wait=tenacity.wait_random_exponential(multiplier=0.25, max=20),
        retry=tenacity.retry_if_exception_type(httpx.TransportError),
        reraise=True,
    )

    def send() -> None:
        headers = _key()  # once per operation, outside the retry loop
        for attempt in retrying:
            with attempt:
                _check(http.post(path, json=BODY, headers=headers))

    return Contender("tenacity+httpx", send, http.close)


def stamina_httpx(url: str, path: str) -> Contender:
    http = httpx.Client(base_url=url, headers=HEADERS)

    def send() -> None:
        headers = _key()
        for attempt in stamina.retry_context(on=httpx.TransportError, attempts=8):
            with attempt:
                _check(http.post(path, json=BODY, headers=headers))

    return Contender("stamina+httpx", send, http.close)


#: One key for the run's encrypted contenders (bodies at rest, AES-256-GCM).
_BODY_KEY = BodyEncryption(BodyEncryption.new_key())


def idem(
    url: str, path: str, store: Path | str, durability: str, *, encrypted: bool = False
) -> Contender:
    """idemclient on a SQLite file, or on PostgreSQL when `store` is a URL; with
    `encrypted`, its bodies (and their fingerprints and hashes) encrypted at rest."""
    postgres = isinstance(store, str)
    encryption = _BODY_KEY if encrypted else None
    client = idemclient.Client(
        base_url=url,
        headers=HEADERS,
        store=(
            _pg_store(store, durability, encryption)
            if isinstance(store, str)
            else SQLiteStore(store, durability=durability, encryption=encryption)
        ),
    )

    def send() -> None:
        outcome = client.post(path, json=BODY)
        if outcome.status_code is None or outcome.status_code >= 300:
            raise RuntimeError(f"benchmark request failed: {outcome}")

    def close() -> None:
        client.close()
        client.store.close()

    name = "idemclient-pg" if postgres else "idemclient"
    suffix = ",aes-gcm" if encrypted else ""
    return Contender(f"{name}[{durability}{suffix}]", send, close)


def sync_contenders(url: str, path: str, workdir: Path, pg_url: str | None) -> list[Contender]:
    """The peers, idemclient on SQLite, and idemclient on PostgreSQL when there is one."""
    return [
        plain_httpx(url, path),
        httpx_retries(url, path),
        tenacity_httpx(url, path),
        stamina_httpx(url, path),
        *(idem(url, path, workdir / f"{d}.db", d) for d in ("full", "intent", "buffered")),
        # What encrypting bodies at rest adds to the default, beside it in the same run.
        idem(url, path, workdir / "intent-aes.db", "intent", encrypted=True),
        *(idem(url, path, pg_url, d) for d in ("full", "intent") if pg_url is not None),
    ]


def async_plain(url: str, path: str) -> AsyncContender:
    http = httpx.AsyncClient(base_url=url, headers=HEADERS)

    async def send() -> None:
        _check(await http.post(path, json=BODY, headers=_key()))

    return AsyncContender("httpx", send, http.aclose)


def async_tenacity(url: str, path: str) -> AsyncContender:
    http = httpx.AsyncClient(base_url=url, headers=HEADERS)

    async def send() -> None:
        headers = _key()
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(8),
            wait=tenacity.wait_random_exponential(multiplier=0.25, max=20),
            retry=tenacity.retry_if_exception_type(httpx.TransportError),
            reraise=True,
        ):
            with attempt:
                _check(await http.post(path, json=BODY, headers=headers))

    return AsyncContender("tenacity+httpx", send, http.aclose)


def async_idem(url: str, path: str, store: Path | str, durability: str) -> AsyncContender:
    """idemclient on a SQLite file, or on PostgreSQL when `store` is a URL."""
    postgres = isinstance(store, str)
    client = idemclient.AsyncClient(
        base_url=url,
        headers=HEADERS,
        store=(
            _pg_store(store, durability)
            if isinstance(store, str)
            else SQLiteStore(store, durability=durability)
        ),
    )

    async def send() -> None:
        outcome = await client.post(path, json=BODY)
        if outcome.status_code is None or outcome.status_code >= 300:
            raise RuntimeError(f"benchmark request failed: {outcome}")

    async def close() -> None:
        await client.aclose()
        client.store.close()

    name = "idemclient-pg" if postgres else "idemclient"
    return AsyncContender(f"{name}[{durability}]", send, close)


def async_contenders(
    url: str, path: str, workdir: Path, pg_url: str | None
) -> list[AsyncContender]:
    return [
        async_plain(url, path),
        async_tenacity(url, path),
        *(async_idem(url, path, workdir / f"a-{d}.db", d) for d in ("intent", "buffered")),
        *([async_idem(url, path, pg_url, "intent")] if pg_url is not None else []),
    ]
