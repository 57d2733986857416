"""`wrap()`: an existing httpx client given safe retries, in place; and what every
client does to its store as it starts."""

from __future__ import annotations

import os
import random
from collections.abc import Collection
from typing import TypeVar

import httpx

from ._budget import RetryBudget
from ._call import Continuation
from ._clock import Clock
from ._clock_steps import check_store_clock
from ._exchange import install
from ._hooks import Hooks
from ._policy import RetryPolicy
from ._profile import Profile
from ._retrofit import replace_transports, transport_of
from ._settings import Settings
from ._store import OperationStore
from ._transport import (
    DEFAULT_MAX_REQUEST_BODY,
    AsyncIdempotentTransport,
    IdempotentTransport,
    make_settings,
)

__all__ = ["HttpxClient", "StoreArg", "start_store", "wrap", "wrap_with"]

HttpxClient = TypeVar("HttpxClient", httpx.Client, httpx.AsyncClient)

#: What a client takes as its store: a store object (an `OperationStore`), or a path or
#: URL to open one from.
StoreArg = OperationStore | str | os.PathLike[str]


def wrap(
    client: HttpxClient,
    *,
    store: StoreArg,
    policy: RetryPolicy | None = None,
    clock: Clock | None = None,
    budget: RetryBudget | None = None,
    hooks: Hooks | None = None,
    max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
    rng: random.Random | None = None,
    secret_headers: Collection[str] = (),
    persist_headers: Collection[str] = (),
    profile: str | Profile | None = None,
    server_clock: bool = True,
    profile_by_host: bool = True,
    time_probe: bool = False,
) -> HttpxClient:
    """Give an existing httpx client safe retries, in place, and return it.

    Its transport and every mounted transport are wrapped, so its auth, limits,
    proxies, TLS settings and event hooks stay as they were. Unsafe requests (POST and
    PATCH by default) get a durable key and retries; others pass straight through.

    `secret_headers` and `persist_headers` add header names to the store's rule (see
    `SQLiteStore`) when `store` is a path or URL; a `Store` you built has its own.

    `profile` says what the server means by its idempotency answers and where it reads
    the key (``"stripe"``, ``"adyen"``..., see `idemclient.profiles`). Not chosen, a
    request to a known provider's API host (``api-m.paypal.com``) speaks that
    provider's profile (logged once per host), any other the generic one; a chosen
    profile that contradicts a known host is refused there (`ProfileMismatch`, nothing
    sent), unless `profile_by_host` is False (a proxy or a test double at a provider's
    name that speaks another dialect). Where its server reads the key from the JSON
    body, the body is already built here: put the key in it yourself, or the call is
    refused (`MissingKey`).

    `server_clock` (on by default): an operation that may have been applied is judged
    (its age against the key retention, its in-flight hold) by the server's `Date`
    header as well as `clock`, read from the answers to your own requests (nothing is
    sent for it); False for a server whose `Date` is known to be wrong.

    `time_probe` (off by default): also ask each origin its time with one `HEAD /`
    (your headers, no key, no body) before the client's first operation there, unless
    an answer told it already. It covers a host clock stepped while no client ran
    that the store's own times cannot show (docs/reliability.md), at the cost of a
    request your code did not make, which strict HTTP mocks see.
    """
    settings = make_settings(
        store,
        policy=policy,
        profile=profile,
        clock=clock,
        budget=budget,
        hooks=hooks,
        max_request_body=max_request_body,
        rng=rng,
        secret_headers=secret_headers,
        persist_headers=persist_headers,
        deferred=isinstance(client, httpx.AsyncClient),
        start=start_store,
        server_clock=server_clock,
        profile_by_host=profile_by_host,
        time_probe=time_probe,
    )
    wrap_with(client, settings)
    return client


def wrap_with(client: httpx.Client | httpx.AsyncClient, settings: Settings) -> None:
    """Wrap `client`'s transports (every mounted one too) with `settings`."""
    if isinstance(transport_of(client), IdempotentTransport | AsyncIdempotentTransport):
        raise ValueError("this client is wrapped already")

    def tell(continuation: Continuation) -> None:
        settings.hooks.outcome(continuation.outcome)

    # Each send is an exchange: the transports tell the operation apart from what
    # httpx's redirects and auth flows send in the same call (see `_exchange`).
    install(client, settings, tell)
    # httpx has no public way to swap a built client's transports: see `_retrofit`.
    if isinstance(client, httpx.Client):
        replace_transports(client, lambda inner: IdempotentTransport(inner, settings=settings))
    else:
        replace_transports(client, lambda inner: AsyncIdempotentTransport(inner, settings=settings))


def start_store(store: OperationStore, clock: Clock) -> None:
    """What a client does to its store as it starts: check the clock against the
    latest time the store has seen, and reap old bodies by the store's time."""
    now = clock.time()
    seen = check_store_clock(store, clock)
    # Finished operations past the store's retention lose their bodies now, a bounded
    # batch per client start, so the table never becomes the largest one you own. By
    # the store's time, not only this clock's: a clock that jumped ahead drops no body
    # early at this start.
    # A store without `reap` (a client's part of the interface only) keeps its own.
    reap = getattr(store, "reap", None)
    if reap is not None:
        reap(now=min(now, seen) if seen else now)
