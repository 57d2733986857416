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
import inspect
import os
import random
import types
import warnings
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

import anyio.to_thread
import httpx

from . import _reconcile
from ._budget import RetryBudget
from ._call import Continuation, Settings, check_store_clock
from ._clock import Clock
from ._deferred import opened, unopened
from ._errors import Indeterminate, OutcomeError, ReconcileRequired
from ._exchange import install
from ._hooks import Hooks, log_fields, logger
from ._operations import (
    Blocking,
    Close,
    Http,
    Op,
    Sent,
    arun,
    check_method,
    key_in_json,
    request_options,
    run,
    send_registered,
    sent_by,
    sent_headers,
    settings_of,
    settle,
    target_url,
)
from ._outcome import Outcome, State, from_record
from ._policy import RetryPolicy
from ._profile import Lookup, Profile, existing_url
from ._redaction import origin_of, shown_url
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
P = ParamSpec("P")
T = TypeVar("T")

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
    profile: str | Profile | None = None,
    server_clock: bool = True,
    profile_by_host: bool = True,
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
    header as well as `clock`, and one probe (HEAD) asks for it before such an operation
    is sent again by a process that has heard none; False for a server whose `Date` is
    known to be wrong.
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
        start=_start_store,
        server_clock=server_clock,
        profile_by_host=profile_by_host,
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


def _not_resumed(record: OperationRecord, reason: str) -> Outcome:
    """The outcome of an operation a resume refused to send: as the store has it."""
    logger.warning(
        "operation %r not resumed: %s",
        record.operation_id,
        reason,
        extra=log_fields(
            "not_resumed",
            operation_id=record.operation_id,
            key=record.key,
            state=record.state.value,
            evidence=reason,
        ),
    )
    return from_record(record, evidence=f"not resumed: {reason}")


def _moved(settings: Settings, record: OperationRecord, origin: str | None) -> OperationRecord:
    """`record`, bound to `origin` first if one is asked for (an explicit move). Not
    moved (a ValueError) where it would be sent under another profile than its own: the
    chosen one contradicting the provider of the new host (`ProfileMismatch`), or the
    one that host speaks for a client that chose none."""
    if origin is None or origin_of(origin) == origin_of(record.url):
        return record
    target = httpx.URL(origin)
    to = httpx.URL(record.url).copy_with(scheme=target.scheme, host=target.host, port=target.port)
    speaks = settings.resolve_url(record.method, to).profile.name
    was_under = record.profile or "generic"
    if speaks != was_under:
        raise ValueError(
            f"operation {record.operation_id!r} was sent under the {was_under} server"
            f" profile; at {to.host} this client speaks {speaks}. It is not moved there:"
            " an operation is never sent on under another profile"
        )
    return settings.store.move(record.operation_id, origin=origin, now=settings.clock.time())


def _check_origin(origin: str | None) -> None:
    if origin is not None:
        parsed = httpx.URL(origin)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"origin {origin!r} must be an http(s) URL with a host")


def read_existing(settings: Settings, sent: Sent, url: httpx.URL) -> Op[Sent]:
    """`sent`, once the resource an "already done, here it is" answer names (GoCardless)
    is read: fetched through the client (with its auth) from `url`, the operation's.
    The resource is the answer the request that made it would have had: `succeeded`,
    with the resource as its response, whatever its status (the payment's life since,
    for the application to read); `failed` only for a status the profile says a refused
    creation leaves (see `Existing`). A creation still running, or a fetch that fails,
    leaves it `indeterminate` (maybe applied: never "not sent"), to resume later."""
    existing = settings.profile_at(url).existing
    error = sent.error
    if existing is None or not isinstance(error, Indeterminate) or error.outcome.existing is None:
        return sent
    before = error.outcome
    named = before.existing
    assert named is not None
    where = existing_url(url, existing.fetch, named)
    try:
        fetched: httpx.Response = yield Http("get", (where,))
    except httpx.HTTPError as exc:
        verdict = _reconcile.Verdict("unknown", f"no answer ({type(exc).__name__}: {exc})")
        fetched_or_none: httpx.Response | None = None
    else:
        verdict = _reconcile.judge_created(fetched, existing)
        fetched_or_none = fetched
    if fetched_or_none is not None and verdict.settles:
        outcome: Outcome = yield Blocking(
            _reconcile.settle_found,
            (settings.store, settings.clock, before.operation_id, verdict),
            {"where": f"GET {where}", "response": fetched_or_none},
        )
        outcome = dataclasses.replace(outcome, existing=named)
        settings.hooks.outcome(outcome)
        return Sent(outcome, response=fetched_or_none)
    why = (
        f"the server says it made {named} under key {before.key} already, and GET {where}"
        f" says {verdict.why}: not the answer to the request that made it. It is never"
        " sent as new: resume it (or Client.reconcile) later"
    )
    logger.warning("operation %r: %s", before.operation_id, why)
    unsettled = dataclasses.replace(before, evidence=why)
    return Sent(
        unsettled, error=Indeterminate(f"operation {before.operation_id!r}: {why}", unsettled)
    )


def _resumed(
    client: httpx.Client | httpx.AsyncClient, limit: int | None, origin: str | None
) -> Op[list[Outcome]]:
    """`resume` and `aresume`, as one step (see `_operations`)."""
    _check_origin(origin)
    settings = settings_of(client)
    records = yield Blocking(settings.store.unfinished, kwargs={"limit": limit})
    outcomes = []
    for stored in records:
        try:
            record = yield Blocking(_moved, (settings, stored, origin))
            sent = yield from send_registered(client, record)
            sent = yield from read_existing(settings, sent, httpx.URL(record.url))
        except ValueError as exc:  # refused before sending: the operation is as it was
            outcomes.append(_not_resumed(stored, str(exc)))
            continue
        if sent.response is not None:
            yield Close(sent.response)
        outcomes.append(sent.outcome or from_record(record))
    return outcomes


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
    return run(_resumed(client, limit, origin), client)


async def aresume(
    client: httpx.AsyncClient, *, limit: int | None = None, origin: str | None = None
) -> list[Outcome]:
    """`resume` for an async client."""
    return await arun(_resumed(client, limit, origin), client)


def _start_store(store: Store, clock: Clock) -> None:
    """What a client does to its store as it starts: check the clock against the
    latest time the store has seen, and reap old bodies by the store's time."""
    now = clock.time()
    seen = check_store_clock(store, clock)
    # Finished operations past the store's retention lose their bodies now, a bounded
    # batch per client start, so the table never becomes the largest one you own. By
    # the store's time, not only this clock's: a clock that jumped ahead drops no body
    # early at this start.
    store.reap(now=min(now, seen) if seen else now)


class _Twin(Generic[P, T]):
    """A client method written once, as a step (see `_operations`). Each client class
    gets it as a function of its own (`_Common.__init_subclass__`): `Client` runs the
    step in the calling thread, `AsyncClient` awaits it (store calls in a worker
    thread). So `Client.post` is a plain function and `AsyncClient.post` a coroutine
    function, as code built on the classes (subclasses, mocks, `inspect`) expects."""

    def __init__(self, step: Callable[Concatenate[Any, P], Op[T]]) -> None:
        self.step = step
        functools.update_wrapper(cast(Any, self), step)

    @overload
    def __get__(self, obj: None, owner: type) -> _Twin[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, T]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        return self  # replaced by a function in every client class


class _Verb(_Twin[P, T]):
    """`post`, `patch`, `put`, `delete`: `request` with the method filled in, called as
    `self.request`, so that a subclass's own `request` is what they go through. The
    step gives the verb its signature, type and doc; the function calls `request`."""

    def __init__(self, method: str, step: Callable[Concatenate[Any, P], Op[T]]) -> None:
        super().__init__(step)
        self.method = method


def _verb(method: str) -> Callable[[Callable[Concatenate[Any, P], Op[T]]], _Verb[P, T]]:
    def make(step: Callable[Concatenate[Any, P], Op[T]]) -> _Verb[P, T]:
        return _Verb(method, step)

    return make


def _method(twin: _Twin[Any, Any], name: str, owner: type, *, awaited: bool) -> Any:
    """The function `owner` has for `twin`: the step run (or awaited), or for a verb a
    call of the instance's `request`; its name, doc and signature are the step's, with
    what a call returns in place of `Op[...]`."""
    step = twin.step
    method: Any
    if isinstance(twin, _Verb) and awaited:
        verb = twin.method

        async def method(self: AsyncClient, url: Any, **kwargs: Any) -> Any:
            return await self.request(verb, url, **kwargs)

    elif isinstance(twin, _Verb):
        verb = twin.method

        def method(self: Client, url: Any, **kwargs: Any) -> Any:
            return self.request(verb, url, **kwargs)

    elif awaited:

        async def method(self: AsyncClient, /, *args: Any, **kwargs: Any) -> Any:
            return await arun(step(self, *args, **kwargs), self.http)

    else:

        def method(self: Client, /, *args: Any, **kwargs: Any) -> Any:
            return run(step(self, *args, **kwargs), self.http)

    functools.update_wrapper(method, step)
    del method.__wrapped__  # the signature below is the one to show
    method.__qualname__ = f"{owner.__qualname__}.{name}"
    signature = inspect.signature(step)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Op[") and returns.endswith("]"):
        returns = returns[3:-1]
    method.__signature__ = signature.replace(return_annotation=returns)
    method.__annotations__ = {**step.__annotations__, "return": returns}
    return method


def _own_init(owner: type) -> Any:
    """`_Common.__init__` as a function of `owner`'s own, named after it, so that a call
    missing an argument says ``Client() missing 1 required keyword-only argument:
    'store'`` (Python names the function in that message), not the shared base."""
    shared = _Common.__init__
    init = types.FunctionType(
        shared.__code__,
        shared.__globals__,
        shared.__name__,
        shared.__defaults__,
        shared.__closure__,
    )
    init.__kwdefaults__ = shared.__kwdefaults__
    functools.update_wrapper(init, shared)
    init.__qualname__ = owner.__qualname__
    return init


class _Common(Generic[HttpxClient]):
    """`Client` and `AsyncClient`: every method is written here once; the two classes
    differ only in how they run it (a function each, see `_Twin`) and close."""

    settings: Settings
    http: HttpxClient
    #: builds the httpx client from the httpx options given
    _factory: Callable[..., HttpxClient]
    #: the store is opened and started at its first call (async: in a worker thread)
    _deferred: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" not in vars(cls):
            cls.__init__ = _own_init(cls)  # type: ignore[method-assign]  # the same function, renamed
        for name in dir(cls):
            twin = inspect.getattr_static(cls, name)
            if isinstance(twin, _Twin):  # not where a subclass has its own already
                setattr(cls, name, _method(twin, name, cls, awaited=cls._deferred))

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
        http: HttpxClient | None = None,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        profile: str | Profile | None = None,
        server_clock: bool = True,
        profile_by_host: bool = True,
        **httpx_options: Any,
    ) -> None:
        self.settings = make_settings(
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
            deferred=self._deferred,
            start=_start_store,
            server_clock=server_clock,
            profile_by_host=profile_by_host,
        )
        self.http = self._attach(http, self._factory, httpx_options)

    def _check_method(self, method: str, profile: Profile) -> None:
        """An operation's method must be one the policy gives keys to (under `profile`,
        the one its host speaks): anything else would be sent with no key and no
        record, and could not be retried safely."""
        check_method(
            self.settings,
            method,
            then="; nothing was sent. Add it to RetryPolicy.methods if the server takes"
            " idempotency keys on it, or send it as a plain request with client.http",
            profile=profile,
        )

    @property
    def store(self) -> Store:
        """The store, as given or as opened from the path or URL given. An `AsyncClient`
        opens it here, in the calling thread, if it has not yet (its own calls open it in
        a worker thread)."""
        return opened(self.settings.store)

    @property
    def policy(self) -> RetryPolicy:
        return self.settings.policy

    def _stored(self, /, operation_id: str) -> Op[Outcome | None]:
        """What the store knows of an operation, without any network call."""
        record = yield Blocking(self.settings.store.get, (operation_id,))
        return None if record is None else from_record(record)

    @_Twin
    def request(
        self,
        /,
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
    ) -> Op[Outcome]:
        """Run one operation to its outcome.

        - `key`: use this idempotency key as given (never replaced).
        - `identity`: derive the key from a natural identity (uuid5), e.g.
          ``("invoice-7", "charge")``: the same identity gives the same key anywhere.
        - `operation_id`: your name for the operation; issuing it again returns the
          stored final answer without a network call, or resumes it with its key and
          its recorded body (a body of the same meaning is sent as the bytes it was
          first sent with; one of another meaning raises `OperationMismatch`).
        - `reference`: the end-to-end reference, kept for reconciliation.
        - `hooks`: callbacks for this call only, beside the client's.

        Returns the `Outcome` for a final answer (state `succeeded` or `failed`).
        Raises `NotSent`, `Indeterminate` (maybe applied) or `KeyConflict`.
        """
        target = target_url(self.http, url)
        self._check_method(method, self.settings.profile_at(target))
        # Refused here, before anything is recorded, where the chosen profile
        # contradicts the provider of the target's host (`ProfileMismatch`).
        resolved = self.settings.resolve_url(method, target)
        profile = resolved.profile
        if not resolved.keyed:
            # Sent, it would carry a key the server does not read there, and a retry of
            # it would be a second request to the server.
            raise ValueError(
                f"the {profile.name} profile's server takes no idempotency key at"
                f" {method.upper()} {target.path}; nothing was sent. Send it once as a"
                " plain request with client.http (it cannot be retried safely)"
            )
        merged, extended, chosen = request_options(
            key,
            operation_id,
            identity,
            reference,
            hooks,
            headers,
            extensions,
            resolved.key,
            defaults=self.http.headers,
        )
        if unopened(self.settings.store):
            # Opened (an async client's in a worker thread) before httpx sees the
            # request: a store that cannot be opened fails before any hook of httpx's
            # says a request is going out.
            yield Blocking(opened, (self.settings.store,))
        if resolved.key.field is not None:
            # The key goes in the body, before the request is built (an auth flow that
            # signs the body signs the key too); a re-issued operation's is its own.
            known = None
            if operation_id is not None and chosen is None:
                records = yield Blocking(
                    self.settings.store.find, kwargs={"operation_ids": [operation_id]}
                )
                known = records[0].key if records else None
            source = "identity=" if identity is not None else "key="
            kwargs = key_in_json(
                resolved,
                chosen,
                known,
                kwargs,
                source=source,
                headers=sent_headers(self.http, merged),
            )
        options = {"headers": merged, "extensions": extended, **kwargs}
        sent = yield from sent_by(Http("request", (method, url), options))
        if profile.existing is not None:
            # Only a profile whose server answers "already done, here it is" needs the
            # operation's URL again (building a request costs as much as the rest of
            # the client's work on one).
            sent = yield from read_existing(self.settings, sent, target)
        return settle(sent)

    @_verb("POST")
    def post(self, /, url: httpx.URL | str, **kwargs: Any) -> Op[Outcome]:
        """POST, as one operation: ``request("POST", url, ...)``.

        Takes every option of `request`: ``key``, ``operation_id``, ``identity``,
        ``reference`` and ``hooks`` (see there), and what httpx's ``request`` takes:
        ``json``, ``content``, ``data``, ``files``, ``params``, ``headers``,
        ``cookies``, ``auth``, ``timeout``, ``extensions``.

        Returns the `Outcome` of a final answer (check it:
        ``outcome.raise_for_status()``); raises `NotSent`, `Indeterminate` or
        `KeyConflict`.
        """
        return (yield from _Common.request.step(self, "POST", url, **kwargs))

    @_verb("PATCH")
    def patch(self, /, url: httpx.URL | str, **kwargs: Any) -> Op[Outcome]:
        """PATCH, as one operation: ``request("PATCH", url, ...)``, with the options of
        `post`."""
        return (yield from _Common.request.step(self, "PATCH", url, **kwargs))

    @_verb("PUT")
    def put(self, /, url: httpx.URL | str, **kwargs: Any) -> Op[Outcome]:
        """PUT, as one operation: ``request("PUT", url, ...)``, with the options of
        `post`. The policy's `methods` must include PUT (else a ValueError, before
        anything is sent)."""
        return (yield from _Common.request.step(self, "PUT", url, **kwargs))

    @_verb("DELETE")
    def delete(self, /, url: httpx.URL | str, **kwargs: Any) -> Op[Outcome]:
        """DELETE, as one operation: ``request("DELETE", url, ...)``, with the options
        of `post`. The policy's `methods` must include DELETE (else a ValueError,
        before anything is sent)."""
        return (yield from _Common.request.step(self, "DELETE", url, **kwargs))

    @_Twin
    def get(self, /, url: httpx.URL | str, **kwargs: Any) -> Op[httpx.Response]:
        """A plain GET (safe; no key, no store)."""
        response: httpx.Response = yield Http("get", (url,), kwargs)
        return response

    @_Twin
    def resume(
        self, /, *, limit: int | None = None, origin: str | None = None
    ) -> Op[list[Outcome]]:
        """Finish every unfinished operation in the store (see `idemclient.resume`);
        `origin` moves them there first."""
        return (yield from _resumed(self.http, limit, origin))

    @_Twin
    def reconcile(
        self,
        /,
        operation_id: str,
        *,
        lookup: str | None = None,
        statuses: Mapping[str, State] | None = None,
        status_field: str | None = None,
        reliable_404: bool = False,
        found: Callable[[httpx.Response], bool] | None = None,
    ) -> Op[Outcome]:
        """Settle an unfinished operation by looking it up on the server, never re-sending.

        `lookup` is a URL template with `{reference}` or `{key}`, for example
        ``"/v1/payments?reference={reference}"``: prefer the end-to-end reference, which
        the server keeps after it has forgotten keys. The answer is judged by the
        payment's status (`status_field`), through `statuses` (default
        `succeeded`/`completed` -> succeeded, `failed`/`declined` -> failed):

        - one payment with a final status: the operation is `succeeded` or `failed`,
          with the look-up's answer as its response;
        - an empty list: it was never applied, and becomes `not_sent`, safe to send
          again with its key; unless an attempt of it that may have been applied was
          sent less than the profile's `in_flight_for` ago (the server may still be
          running it): then `Indeterminate`, unsettled, with `not_before` saying when
          a look-up's "none" will count. An operation that keeps an answer read as a
          replay that no attempt of ours explained (django-idempotency-key's 409 to a
          caller's key) is `failed` instead, with that answer as its
          response: the application's refusal, never sent again; only for a look-up
          by `{reference}` alone (one by `{key}` finds nothing once the server has
          forgotten the key);
        - a payment whose status is not final (pending, processing...), several
          payments, a 404 (unless `reliable_404`: your API answers 404 for "no such
          payment"), any other answer or none: raises `Indeterminate` and the
          operation stays unsettled (and "maybe applied" once the server holds it).

        `found` (deprecated): your own judge; True counts as found and succeeded.

        Without `lookup`, the server profile's look-up is used (its template, status
        field and final statuses), if it has one; else a ValueError asks for one. An
        operation sent under another profile raises ValueError, nothing looked up: its
        server's `in_flight_for` is that profile's.
        """
        # The profile this client speaks where the operation was sent.
        record = yield Blocking(self.settings.store.get, (operation_id,))
        where = httpx.URL(record.url) if record is not None else self.http.base_url
        profile = self.settings.profile_at(where)
        profiled = profile.lookup
        quoting = None
        covering: Lookup | None = None
        if lookup is None:
            if profiled is None:
                raise ValueError(
                    f"the {profile.name} profile knows no look-up: pass"
                    " lookup= (a URL template with {reference} or {key})"
                )
            lookup, quoting, covering = profiled.template, profiled.quoting, profiled
            if statuses is None:
                statuses = {
                    **dict.fromkeys(profiled.succeeded, State.SUCCEEDED),
                    **dict.fromkeys(profiled.failed, State.FAILED),
                }
            status_field = status_field or profiled.status_field
        judgement = _judgement(found, statuses, status_field or "status", reliable_404)
        hooks = self.settings.hooks
        try:
            taken = yield Blocking(
                self._lookup_of, (operation_id, lookup, quoting, covering, profile)
            )
            if isinstance(taken, Outcome):
                hooks.outcome(taken)
                return taken
            lease, url = taken
            answer: httpx.Response | BaseException
            try:
                answer = yield Http("get", (url,))
            except httpx.TransportError as exc:
                answer = exc
            judged: Outcome = yield Blocking(
                self._judged,
                (lease, url, answer, judgement, _reconcile.by_reference_alone(lookup), profile),
            )
        except OutcomeError as unsettled:
            # Left unsettled (or refused): told as every outcome is, then raised.
            hooks.outcome(unsettled.outcome)
            raise
        # Settled (or found never applied): a log record, a span, and the gauge of
        # indeterminate operations down, as for an outcome of a call.
        hooks.outcome(judged)
        return judged

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

    # -- reconciliation: the store's half is in `_reconcile`, the network's above

    def _lookup_of(
        self,
        operation_id: str,
        lookup: str,
        quoting: str | None,
        covering: Lookup | None,
        profile: Profile,
    ) -> tuple[_reconcile.Taken, str] | Outcome:
        """Lease an unfinished operation for a look-up, with the look-up's URL; a
        finished one is its outcome. A bad template fails before the lease is taken;
        a reference the template cannot carry safely, or an operation the profile's
        look-up (`covering`) does not find, leaves the operation as it was."""
        store = self.settings.store
        record = store.get(operation_id)
        if record is None:
            raise ValueError(f"no operation {operation_id!r} in {store.path}")
        if record.state.finished:
            return from_record(record)
        was_under, speaks = record.profile or "generic", profile.name
        if was_under != speaks:
            # Its server's in_flight_for (how long a "none" is too early to believe), its
            # look-up and its statuses are that profile's: judged by this client's, a
            # payment its server was still running could be settled never applied.
            raise ValueError(
                f"operation {operation_id!r} (key {record.key}) was sent under the"
                f" {was_under} server profile; this client speaks {speaks}. Nothing was"
                f" looked up or changed: reconcile it with a client with"
                f" profile={was_under!r}"
            )
        path = httpx.URL(record.url).path
        if covering is not None and not covering.covers_path(path):
            # "None found" there would say nothing of it: never read as "not applied".
            raise ReconcileRequired(
                f"operation {operation_id!r} (key {record.key}) was sent to"
                f" {record.method} {path}, which the {profile.name}"
                f" profile's look-up ({covering.template}) does not find (it covers"
                f" {', '.join(covering.covers)}). Nothing was looked up or changed:"
                " pass lookup= (a URL template with {reference} or {key}) that finds"
                " this operation's resource",
                from_record(record),
            )
        try:
            url = _reconcile.lookup_url(lookup, record, quoting=quoting)
        except _reconcile.Unquotable as exc:
            raise _reconcile.unsettled(record, str(exc)) from exc
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
        by_reference: bool,
        profile: Profile,
    ) -> Outcome:
        store, clock = self.settings.store, self.settings.clock
        if isinstance(response, BaseException):
            _reconcile.release(store, clock, taken)
            raise _reconcile.unsettled(
                taken.before, f"GET {shown_url(url)} failed: {type(response).__name__}"
            ) from response
        verdict = judgement(response)
        return _reconcile.apply(
            store,
            clock,
            taken,
            verdict,
            where=f"GET {shown_url(url)}",
            response=response,
            in_flight_for=profile.in_flight_for,
            by_reference=by_reference,
            watched_since=self.settings.watched_since,
        )


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


class Client(_Common[httpx.Client]):
    """An httpx client whose unsafe requests are durable operations.

    `store` is a path to the SQLite store (created with mode 0600), a PostgreSQL URL
    (``postgresql://...``, see `idemclient.postgres`), or a `Store`.
    Everything else that `httpx.Client` takes (base_url, auth, headers, timeout,
    limits, verify, transport, mounts...) may be passed as keyword arguments, or pass
    an `httpx.Client` you built as `http`. `server_clock`: see `wrap`.

    Each method is written once for both clients, as a step: where its return type
    reads `Op[X]`, a `Client` returns the `X`, and an `AsyncClient` an awaitable of it.
    """

    _factory = httpx.Client

    #: What the store knows of an operation (its `Outcome`, or None), without any
    #: network call.
    operation = _Twin(_Common._stored)

    def close(self) -> None:
        self.http.close()
        self._close_store()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(_Common[httpx.AsyncClient]):
    """The async `Client` (asyncio or trio, through httpx): every method is the same
    with `await`, `operation` too.

    Nothing is opened when it is built, on the event loop or before there is one: the
    store is opened (and its old bodies reaped) in a worker thread when the client is
    entered (`async with`), or else at its first use; every store call runs in a worker
    thread, so the event loop is never blocked by the store. Where a method's return
    type reads `Op[X]`, it returns an awaitable of the `X`.
    """

    _factory = httpx.AsyncClient
    _deferred = True

    #: What the store knows of an operation (its `Outcome`, or None), without any
    #: network call; the store is read in a worker thread.
    aoperation = _Twin(_Common._stored)

    def operation(self, operation_id: str) -> Outcome | None:
        """Deprecated: reads the store in the calling thread, which in async code is the
        event loop's. Use ``await client.aoperation(operation_id)``."""
        warnings.warn(
            "AsyncClient.operation() reads the store on the event loop; use"
            " `await client.aoperation(operation_id)`",
            DeprecationWarning,
            stacklevel=2,
        )
        record = opened(self.settings.store).get(operation_id)
        return None if record is None else from_record(record)

    async def aclose(self) -> None:
        await self.http.aclose()
        await anyio.to_thread.run_sync(self._close_store)

    async def __aenter__(self) -> AsyncClient:
        try:
            await anyio.to_thread.run_sync(opened, self.settings.store)
        except BaseException:
            # `async with` will not call __aexit__: close what was built, as a
            # `Client` whose store cannot be opened does.
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
