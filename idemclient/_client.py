"""`Client` and `AsyncClient`, `wrap()` for an existing httpx client, and `resume()`.

A `Client` is an `httpx.Client` whose transports are wrapped, plus methods that speak
in operations: `post(...)` returns an `Outcome`, and raises when the operation has no
final answer (`NotSent`, `Indeterminate`) or when the server says the key was used for
another request (`KeyConflict`). A final refusal (400, 402, 404...) is an answer, and
comes back as an `Outcome` in state `failed`, like an httpx response with that status.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import anyio.to_thread
import httpx

from . import _reconcile
from ._budget import RetryBudget
from ._call import (
    CALL_OPTIONS,
    CLOCK_SKEW,
    KEY_HEADER,
    CallOptions,
    Continuation,
    Settings,
    unsettled_error,
)
from ._clock import Clock
from ._errors import AnswerNotKept, KeyConflict, OutcomeError
from ._exchange import install
from ._hooks import Hooks, logger
from ._keys import key_from_identity, validate_key
from ._outcome import Outcome, State, outcome_of
from ._policy import RetryPolicy
from ._redaction import looks_secret, origin_of
from ._retrofit import replace_transports, transport_of
from ._store import OperationRecord, Store
from ._transport import (
    DEFAULT_MAX_REQUEST_BODY,
    AsyncIdempotentTransport,
    IdempotentTransport,
    make_settings,
)

__all__ = ["AsyncClient", "Client", "aresume", "resume", "wrap"]

HttpxClient = TypeVar("HttpxClient", httpx.Client, httpx.AsyncClient)

StoreArg = Store | str | os.PathLike[str]


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
) -> HttpxClient:
    """Give an existing httpx client safe retries, in place, and return it.

    Its transport and every mounted transport are wrapped, so its auth, limits,
    proxies, TLS settings and event hooks stay as they were. Unsafe requests (POST and
    PATCH by default) get a durable key and retries; others pass straight through.

    `secret_headers` and `persist_headers` add header names to the store's rule (see
    `SQLiteStore`) when `store` is a path or URL; a `Store` you built has its own.
    """
    settings = make_settings(
        store,
        policy=policy,
        clock=clock,
        budget=budget,
        hooks=hooks,
        max_request_body=max_request_body,
        rng=rng,
        secret_headers=secret_headers,
        persist_headers=persist_headers,
    )
    _wrap_with(client, settings)
    return client


def _wrap_with(client: httpx.Client | httpx.AsyncClient, settings: Settings) -> None:
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


def settings_of(client: httpx.Client | httpx.AsyncClient) -> Settings:
    transport = transport_of(client)
    if not isinstance(transport, IdempotentTransport | AsyncIdempotentTransport):
        raise TypeError("this httpx client is not wrapped by idemclient.wrap()")
    return transport.settings


def _options(
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    headers: Any,
    extensions: Any,
) -> tuple[httpx.Headers, dict[str, Any]]:
    """Per-call options to the headers and extensions the transport reads."""
    if key is not None and identity is not None:
        raise ValueError("pass key= or identity=, not both: an identity is a way to make a key")
    if identity is not None:
        parts = (identity,) if isinstance(identity, str) else tuple(identity)
        key = key_from_identity(*parts)
    try:
        merged = httpx.Headers(headers)
    except UnicodeEncodeError:
        # httpx refuses a non-ASCII header value; when it is the key, say so as for any
        # other invalid key (validate_key raises InvalidKey naming the character).
        given = _raw_key(headers)
        if given is not None:
            validate_key(given)
        raise
    if key is not None:
        merged[KEY_HEADER] = validate_key(key)
    elif KEY_HEADER in merged:
        validate_key(merged[KEY_HEADER])
    extended = dict(extensions or {})
    extended[CALL_OPTIONS] = CallOptions(
        operation_id=operation_id, reference=reference, hooks=hooks
    )
    return merged, extended


def _raw_key(headers: Any) -> object:
    """The Idempotency-Key among headers as the caller gave them, or None."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs or ():
        text = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if text.lower() == KEY_HEADER.lower():
            return value
    return None


def _outcome(response: httpx.Response) -> Outcome:
    outcome = outcome_of(response)
    if outcome is None:
        # Every request `Client` sends is an operation, and whatever ends its exchange
        # carries the operation's outcome (see `_exchange.finish_exchange`).
        raise RuntimeError(  # pragma: no cover - a bug, not a state of the world
            f"the response (HTTP {response.status_code}) carries no idemclient outcome"
        )
    if not outcome.state.finished:
        # An answer that went back to httpx and ended the call there: a 401 that no
        # auth flow sent on, a redirect not followed.
        response.close()
        raise unsettled_error(outcome, _handed_back_reason(response.status_code))
    if outcome.state is State.FAILED and response.status_code == 422:
        raise KeyConflict(
            f"the server refused key {outcome.key} of operation {outcome.operation_id!r}"
            " (HTTP 422): it holds this key for a different request. This is a bug in the"
            " caller: a key must never be reused for another request.",
            outcome,
        )
    return outcome


def _handed_back_reason(status: int) -> str:
    if status in (401, 407):
        return (
            f"the server refused the credentials (HTTP {status}); fix them and send it"
            " again with the same key"
        )
    if 300 <= status < 400:
        return (
            f"the server redirected it (HTTP {status}) and the redirect was not followed"
            " (follow_redirects=False, or another origin)"
        )
    if 200 <= status < 300:
        return (
            f"it was redirected, and the answer at the new location (HTTP {status}) does"
            " not say what the payment came to"
        )
    return f"HTTP {status} is not an answer about the operation"


def _resume_request(
    client: httpx.Client | httpx.AsyncClient, record: OperationRecord
) -> httpx.Request:
    """The request that sends `record` again: its stored URL, headers and body, and what
    the store never kept (credentials, withheld headers, secret query values) from the
    live client. Whatever the live client lacks, the store refuses before sending."""
    headers = httpx.Headers(list(record.headers))
    headers[KEY_HEADER] = record.key
    url = _with_live_secrets(httpx.URL(record.url), client.params)
    request = client.build_request(
        record.method,
        url,
        headers=headers,
        content=record.body,
        extensions={
            CALL_OPTIONS: CallOptions(operation_id=record.operation_id, reference=record.reference)
        },
    )
    # The stored URL exactly: a client with params= would replace its whole query
    # (httpx 0.28 merges the client's params over the URL's, dropping the rest).
    request.url = url
    return request


def _with_live_secrets(url: httpx.URL, live: httpx.QueryParams) -> httpx.URL:
    """`url` with each secret query parameter the store kept without its value given
    the live client's value, in its place. One the live client lacks stays empty: an
    empty secret parameter counts as missing, and the store refuses to send it."""
    pairs = url.params.multi_items()
    if not any(looks_secret(name) and not value for name, value in pairs):
        return url
    filled = [
        (name, live.get(name, "") if looks_secret(name) and not value else value)
        for name, value in pairs
    ]
    return url.copy_with(params=httpx.QueryParams(filled))


_stored_outcome = _reconcile.stored_outcome


def _not_resumed(record: OperationRecord, reason: str) -> Outcome:
    """The outcome of an operation a resume refused to send: as the store has it."""
    logger.warning("operation %r not resumed: %s", record.operation_id, reason)
    return dataclasses.replace(_stored_outcome(record), evidence=f"not resumed: {reason}")


def _moved(settings: Settings, record: OperationRecord, origin: str | None) -> OperationRecord:
    """`record`, bound to `origin` first if one is asked for (an explicit move)."""
    if origin is None or origin_of(origin) == origin_of(record.url):
        return record
    return settings.store.move(record.operation_id, origin=origin, now=settings.clock.time())


def _check_origin(origin: str | None) -> None:
    if origin is not None:
        parsed = httpx.URL(origin)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"origin {origin!r} must be an http(s) URL with a host")


def resume(
    client: httpx.Client, *, limit: int | None = None, origin: str | None = None
) -> list[Outcome]:
    """Finish the unfinished operations of a wrapped client's store, oldest first.

    Each is sent again with its original key, method, URL and body, to the origin
    (scheme, host, port) it was first sent to, whatever the client's `base_url`; the
    live client supplies credentials (which are never stored). Returns one `Outcome`
    per operation, including those that are still not sent or indeterminate, and those
    another process is sending right now (state `in_flight`).

    `origin` (``"https://api.psp.example"``) moves every unfinished operation bound to
    another origin there first, durably, and sends it there: the one way to move an
    operation, say from a sandbox to production. An operation the live client cannot
    send as it was sent (it lacks a header the store withheld, or a secret query
    parameter) is not sent: its outcome says why, in `evidence`.
    """
    _check_origin(origin)
    settings = settings_of(client)
    outcomes = []
    for stored in settings.store.unfinished(limit=limit):
        try:
            record = _moved(settings, stored, origin)
            response = client.send(_resume_request(client, record))
        except OutcomeError as exc:
            outcomes.append(exc.outcome)
            continue
        except AnswerNotKept as exc:  # finished meanwhile, its body not kept
            outcomes.append(exc.outcome)
            continue
        except ValueError as exc:  # refused before sending: the operation is as it was
            outcomes.append(_not_resumed(stored, str(exc)))
            continue
        response.close()
        outcomes.append(_resumed_outcome(response, record))
    return outcomes


async def aresume(
    client: httpx.AsyncClient, *, limit: int | None = None, origin: str | None = None
) -> list[Outcome]:
    """`resume` for an async client."""
    _check_origin(origin)
    settings = settings_of(client)
    records = await anyio.to_thread.run_sync(lambda: settings.store.unfinished(limit=limit))
    outcomes = []
    for stored in records:
        try:
            record = await anyio.to_thread.run_sync(_moved, settings, stored, origin)
            response = await client.send(_resume_request(client, record))
        except OutcomeError as exc:
            outcomes.append(exc.outcome)
            continue
        except AnswerNotKept as exc:
            outcomes.append(exc.outcome)
            continue
        except ValueError as exc:
            outcomes.append(_not_resumed(stored, str(exc)))
            continue
        await response.aclose()
        outcomes.append(_resumed_outcome(response, record))
    return outcomes


def _resumed_outcome(response: httpx.Response, record: OperationRecord) -> Outcome:
    return outcome_of(response) or _stored_outcome(record)


def _start_store(settings: Settings) -> None:
    """What a client does to its store as it starts: check the clock against the
    latest time the store has seen, and reap old bodies by the store's time."""
    store, now = settings.store, settings.clock.time()
    seen = store.advance_clock(now=now)
    if seen - now > CLOCK_SKEW:
        logger.warning(
            "the clock reads %.0fs earlier than the latest time the store %s has seen:"
            " it went back. Nothing is forgotten: operations recorded ahead of it count"
            " as of unknown age, and are looked up rather than sent again.",
            seen - now,
            store.path,
        )
    # Finished operations past the store's retention lose their bodies now, a bounded
    # batch per client start, so the table never becomes the largest one you own. By
    # the store's time, not only this clock's: a clock that jumped ahead drops no body
    # early at this start.
    store.reap(now=min(now, seen) if seen else now)


class _Common:
    """What `Client` and `AsyncClient` share besides I/O."""

    settings: Settings

    def _init_settings(
        self,
        store: StoreArg,
        policy: RetryPolicy | None,
        clock: Clock | None,
        budget: RetryBudget | None,
        hooks: Hooks | None,
        max_request_body: int,
        rng: random.Random | None,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
    ) -> None:
        self.settings = make_settings(
            store,
            policy=policy,
            clock=clock,
            budget=budget,
            hooks=hooks,
            max_request_body=max_request_body,
            rng=rng,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
        )
        _start_store(self.settings)

    def _check_method(self, method: str) -> None:
        """An operation's method must be one the policy gives keys to: anything else
        would be sent with no key and no record, and could not be retried safely."""
        if method.upper() not in self.settings.policy.methods:
            allowed = ", ".join(sorted(self.settings.policy.methods))
            raise ValueError(
                f"{method.upper()} is not an operation under this client's policy"
                f" (methods: {allowed}); nothing was sent. Add it to RetryPolicy.methods"
                " if the server takes idempotency keys on it, or send it as a plain"
                " request with client.http"
            )

    @property
    def store(self) -> Store:
        return self.settings.store

    @property
    def policy(self) -> RetryPolicy:
        return self.settings.policy

    def operation(self, operation_id: str) -> Outcome | None:
        """What the store knows of an operation, without any network call."""
        record = self.settings.store.get(operation_id)
        return None if record is None else _stored_outcome(record)

    def _attach(
        self,
        http: HttpxClient | None,
        factory: Callable[..., HttpxClient],
        httpx_options: dict[str, Any],
    ) -> HttpxClient:
        """The httpx client (given, or built from `httpx_options`), wrapped with this
        client's settings. On any failure the store just opened is closed again."""
        try:
            if http is not None and httpx_options:
                raise TypeError("pass either http= or httpx options, not both")
            client = http if http is not None else factory(**httpx_options)
            _wrap_with(client, self.settings)
        except BaseException:
            self._close_store()
            raise
        return client

    def _close_store(self) -> None:
        # Closing the http client closed it already through its transports; a store
        # passed in as an object stays open: it is the caller's.
        if self.settings.owns_store:
            self.settings.store.close()

    # -- reconciliation: the store's half is in `_reconcile`, the network's in each client

    def _lookup_of(self, operation_id: str, lookup: str) -> tuple[_reconcile.Taken, str] | Outcome:
        """Lease an unfinished operation for a look-up, with the look-up's URL; a
        finished one is its outcome. A bad template fails before the lease is taken."""
        store = self.settings.store
        record = store.get(operation_id)
        if record is None:
            raise ValueError(f"no operation {operation_id!r} in {store.path}")
        if record.state.finished:
            return _stored_outcome(record)
        url = _reconcile.lookup_url(lookup, record)
        taken = _reconcile.take(store, self.settings.clock, operation_id)
        if isinstance(taken, Outcome):
            return taken
        return taken, url

    def _judged(
        self,
        taken: _reconcile.Taken,
        url: str,
        response: httpx.Response | BaseException,
        judgement: Callable[[httpx.Response], _reconcile.Verdict],
    ) -> Outcome:
        store, clock = self.settings.store, self.settings.clock
        if isinstance(response, BaseException):
            _reconcile.release(store, clock, taken)
            raise _reconcile.unsettled(
                taken.before, f"GET {url} failed: {type(response).__name__}"
            ) from response
        verdict = judgement(response)
        return _reconcile.apply(store, clock, taken, verdict, where=f"GET {url}", response=response)


def _judgement(
    found: Callable[[httpx.Response], bool] | None,
    statuses: Mapping[str, State] | None,
    status_field: str,
    reliable_404: bool,
) -> Callable[[httpx.Response], _reconcile.Verdict]:
    """How `reconcile` reads the look-up's answer (see `_reconcile.judge`)."""
    if found is not None:
        warnings.warn(
            "reconcile(found=...) is deprecated: the look-up's answer is judged by the"
            " payment's status; pass statuses= (and status_field=) instead",
            DeprecationWarning,
            stacklevel=3,
        )
        return functools.partial(_reconcile.judge_found, found=found)
    rules = _reconcile.LookupRules(
        statuses=_reconcile.DEFAULT_STATUSES if statuses is None else statuses,
        status_field=status_field,
        reliable_404=reliable_404,
    )
    return functools.partial(_reconcile.judge, rules=rules)


class Client(_Common):
    """An httpx client whose unsafe requests are durable operations.

    `store` is a path to the SQLite store (created with mode 0600), a PostgreSQL URL
    (``postgresql://...``, see `idemclient.postgres`), or a `Store`.
    Everything else that `httpx.Client` takes (base_url, auth, headers, timeout,
    limits, verify, transport, mounts...) may be passed as keyword arguments, or pass
    an `httpx.Client` you built as `http`.
    """

    def __init__(
        self,
        *,
        store: StoreArg,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        budget: RetryBudget | None = None,
        hooks: Hooks | None = None,
        max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
        rng: random.Random | None = None,
        http: httpx.Client | None = None,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        **httpx_options: Any,
    ) -> None:
        self._init_settings(
            store,
            policy,
            clock,
            budget,
            hooks,
            max_request_body,
            rng,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
        )
        self.http = self._attach(http, httpx.Client, httpx_options)

    def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        headers: Any = None,
        extensions: Any = None,
        **kwargs: Any,
    ) -> Outcome:
        """Run one operation to its outcome.

        - `key`: use this idempotency key as given (never replaced).
        - `identity`: derive the key from a natural identity (uuid5), e.g.
          ``("invoice-7", "charge")``: the same identity gives the same key anywhere.
        - `operation_id`: your name for the operation; issuing it again returns the
          stored final answer without a network call, or resumes it with its key.
        - `reference`: the end-to-end reference, kept for reconciliation.
        - `hooks`: callbacks for this call only, beside the client's.

        Returns the `Outcome` for a final answer (state `succeeded` or `failed`).
        Raises `NotSent`, `Indeterminate` (maybe applied) or `KeyConflict`.
        """
        self._check_method(method)
        merged, extended = _options(
            key, operation_id, identity, reference, hooks, headers, extensions
        )
        try:
            response = self.http.request(method, url, headers=merged, extensions=extended, **kwargs)
        except AnswerNotKept as exc:
            # Answered from the store without its body: the outcome says so, and its
            # response raises again if its body is read.
            return exc.outcome
        return _outcome(response)

    def post(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return self.request("POST", url, **kwargs)

    def patch(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return self.request("PATCH", url, **kwargs)

    def put(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        """PUT, as an operation: the policy's `methods` must include it (else a ValueError)."""
        return self.request("PUT", url, **kwargs)

    def delete(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        """DELETE, as an operation: the policy's `methods` must include it (else a ValueError)."""
        return self.request("DELETE", url, **kwargs)

    def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        """A plain GET (safe; no key, no store)."""
        return self.http.get(url, **kwargs)

    def resume(self, *, limit: int | None = None, origin: str | None = None) -> list[Outcome]:
        """Finish every unfinished operation in the store (see `idemclient.resume`);
        `origin` moves them there first."""
        return resume(self.http, limit=limit, origin=origin)

    def reconcile(
        self,
        operation_id: str,
        *,
        lookup: str,
        statuses: Mapping[str, State] | None = None,
        status_field: str = "status",
        reliable_404: bool = False,
        found: Callable[[httpx.Response], bool] | None = None,
    ) -> Outcome:
        """Settle an unfinished operation by looking it up on the server, never re-sending.

        `lookup` is a URL template with `{reference}` or `{key}`, for example
        ``"/v1/payments?reference={reference}"``: prefer the end-to-end reference, which
        the server keeps after it has forgotten keys. The answer is judged by the
        payment's status (`status_field`), through `statuses` (default
        `succeeded`/`completed` -> succeeded, `failed`/`declined` -> failed):

        - one payment with a final status: the operation is `succeeded` or `failed`,
          with the look-up's answer as its response;
        - an empty list: it was never applied, and becomes `not_sent`, safe to send
          again with its key;
        - a payment whose status is not final (pending, processing...), several
          payments, a 404 (unless `reliable_404`: your API answers 404 for "no such
          payment"), any other answer or none: raises `Indeterminate` and the
          operation stays unsettled (and "maybe applied" once the server holds it).

        `found` (deprecated): your own judge; True counts as found and succeeded.
        """
        judgement = _judgement(found, statuses, status_field, reliable_404)
        taken = self._lookup_of(operation_id, lookup)
        if isinstance(taken, Outcome):
            return taken
        lease, url = taken
        answer: httpx.Response | BaseException
        try:
            answer = self.http.get(url)
        except httpx.TransportError as exc:
            answer = exc
        return self._judged(lease, url, answer, judgement)

    def close(self) -> None:
        self.http.close()
        self._close_store()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(_Common):
    """The async `Client` (asyncio or trio, through httpx)."""

    def __init__(
        self,
        *,
        store: StoreArg,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        budget: RetryBudget | None = None,
        hooks: Hooks | None = None,
        max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
        rng: random.Random | None = None,
        http: httpx.AsyncClient | None = None,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        **httpx_options: Any,
    ) -> None:
        self._init_settings(
            store,
            policy,
            clock,
            budget,
            hooks,
            max_request_body,
            rng,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
        )
        self.http = self._attach(http, httpx.AsyncClient, httpx_options)

    async def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        headers: Any = None,
        extensions: Any = None,
        **kwargs: Any,
    ) -> Outcome:
        """See `Client.request`."""
        self._check_method(method)
        merged, extended = _options(
            key, operation_id, identity, reference, hooks, headers, extensions
        )
        try:
            response = await self.http.request(
                method, url, headers=merged, extensions=extended, **kwargs
            )
        except AnswerNotKept as exc:  # see Client.request
            return exc.outcome
        return _outcome(response)

    async def post(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return await self.request("POST", url, **kwargs)

    async def patch(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return await self.request("PATCH", url, **kwargs)

    async def put(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return await self.request("PUT", url, **kwargs)

    async def delete(self, url: httpx.URL | str, **kwargs: Any) -> Outcome:
        return await self.request("DELETE", url, **kwargs)

    async def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.http.get(url, **kwargs)

    async def resume(self, *, limit: int | None = None, origin: str | None = None) -> list[Outcome]:
        return await aresume(self.http, limit=limit, origin=origin)

    async def reconcile(
        self,
        operation_id: str,
        *,
        lookup: str,
        statuses: Mapping[str, State] | None = None,
        status_field: str = "status",
        reliable_404: bool = False,
        found: Callable[[httpx.Response], bool] | None = None,
    ) -> Outcome:
        """See `Client.reconcile`."""
        judgement = _judgement(found, statuses, status_field, reliable_404)
        taken = await anyio.to_thread.run_sync(self._lookup_of, operation_id, lookup)
        if isinstance(taken, Outcome):
            return taken
        lease, url = taken
        answer: httpx.Response | BaseException
        try:
            answer = await self.http.get(url)
        except httpx.TransportError as exc:
            answer = exc
        return await anyio.to_thread.run_sync(self._judged, lease, url, answer, judgement)

    async def aclose(self) -> None:
        await self.http.aclose()
        self._close_store()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
