"""httpx transports (sync and async) that make unsafe requests safe to retry.

They wrap any inner transport. Requests whose method the policy does not cover pass
straight through, and so do the requests an auth flow makes of its own (`_exchange`).
For the others, one call goes: record the intent durably, take the lease, attempt and
retry within the deadline, store where it ended, release the lease; then return the
final response, or raise `NotSent` / `Indeterminate` when there is none. What happens
is written once, as a flow of effects (`_flow`); the two classes here only do those
effects, one in the calling thread, the other awaiting.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any, Generic, TypeVar, cast

import anyio.to_thread
import httpx

from ._behind import Finish, queued, written
from ._budget import RetryBudget
from ._clock import Clock, StepWatch, SystemClock
from ._clock_steps import check_store_clock, keep_step
from ._db import is_postgres_url
from ._deferred import DeferredStore
from ._effects import (
    Blocking,
    Body,
    Close,
    Effect,
    Read,
    Send,
    Shield,
    Sleep,
    Turn,
)
from ._errors import StoreError
from ._flow import handle
from ._frozen import fast_constructor
from ._hooks import Hooks, StoreEvent, log_fields, logger
from ._hosts import ByHost
from ._intent import abody_from_chunks, body_from_chunks
from ._policy import RetryPolicy
from ._profile import Profile
from ._server_time import ServerTimes
from ._settings import CALL_OPTIONS, CallOptions, Settings
from ._store import OperationStore
from ._store._open import open_store
from ._time import CLOCK_SKEW
from ._worker import to_thread
from .profiles import DEFAULT, named

__all__ = [
    "AsyncIdempotentTransport",
    "IdempotentTransport",
    "call_extensions",
    "make_settings",
    "to_thread",
]

DEFAULT_MAX_REQUEST_BODY = 1024 * 1024

Inner = TypeVar("Inner", httpx.BaseTransport, httpx.AsyncBaseTransport)
T = TypeVar("T")


def make_settings(
    store: OperationStore | str | os.PathLike[str],
    *,
    policy: RetryPolicy | None = None,
    clock: Clock | None = None,
    budget: RetryBudget | None = None,
    hooks: Hooks | None = None,
    max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
    rng: random.Random | None = None,
    secret_headers: Collection[str] = (),
    persist_headers: Collection[str] = (),
    deferred: bool = False,
    start: Callable[[OperationStore, Clock], object] | None = None,
    profile: str | Profile | None = None,
    server_clock: bool = True,
    profile_by_host: bool = True,
    time_probe: bool = False,
) -> Settings:
    """The settings of a client or transport. `start` is what is done to the store once
    it is open (see `_client`). `deferred` (async) opens and starts the store at its
    first call, which an async client makes in a worker thread: nothing is opened now.
    `server_clock`: judge a stored operation's age and hold by the servers' `Date`
    headers as well as `clock` (see `_server_time`), learnt from the answers to the
    caller's own requests; off for a server whose `Date` is known to be wrong.
    `time_probe`: also ask an origin its time (one `HEAD /`) before the first operation
    there, unless an answer told it already. `profile_by_host`: a known provider's API
    host speaks its provider's profile unless one was chosen, and refuses a chosen one it
    contradicts (see `_hosts`)."""
    if max_request_body < 0:
        raise ValueError("max_request_body must be >= 0")
    if time_probe and not server_clock:
        raise ValueError(
            "time_probe=True asks the server's time for the server_clock judgement, which"
            " server_clock=False turns off: pass one or the other"
        )
    # An unknown name fails before the store is opened.
    chosen = None if profile is None else named(profile)
    clock = clock or SystemClock()
    # Watching from now: a step back before the first call is seen at that call.
    watch = StepWatch(clock, tolerance=CLOCK_SKEW)
    owns_store = isinstance(store, str | os.PathLike)
    opening = functools.partial(
        open_store, store, secret_headers=secret_headers, persist_headers=persist_headers
    )
    # A transport used alone checks the clock against the store's times, as a client's
    # start does (which also reaps).
    begin = functools.partial(_start, start or check_store_clock, clock)
    if isinstance(store, str | os.PathLike) and deferred:
        where = "a PostgreSQL store" if is_postgres_url(store) else os.fspath(store)
        opened: OperationStore = cast(OperationStore, DeferredStore(opening, begin, where=where))
    else:
        given = opened = opening()  # opens a path; a store object is only checked
        if deferred:
            opened = cast(OperationStore, DeferredStore(lambda: given, begin))
        else:
            begin(given)
    return Settings(
        owns_store=owns_store,
        store=opened,
        policy=policy or RetryPolicy(),
        clock=clock,
        budget=budget or RetryBudget(),
        hooks=hooks or Hooks(),
        max_request_body=max_request_body,
        rng=rng or random.Random(),
        profile=chosen or DEFAULT,
        hosts=ByHost(chosen, DEFAULT) if profile_by_host else None,
        watch=watch,
        server_times=ServerTimes() if server_clock else None,
        time_probe=time_probe,
        watched_since=clock.time(),
    )


#: A client's last call may have run across a step back of its clock.
_AT_CLOSE = "by a client as it closed"


def _kept_at_close(settings: Settings, step: float) -> None:
    """Keep a step back seen as a client closes. Closing goes on if the store cannot
    take it (a store the caller closed first): the failure is logged, with the step."""
    try:
        keep_step(settings, step, seen=_AT_CLOSE)
    except StoreError as error:
        logger.error(
            "the clock went back %.0fs (seen as a client closed), and the store could not"
            " keep it: %s. Operations of that store that may have been applied may look"
            " younger than they are; look them up rather than re-sending them",
            step,
            error,
            extra=log_fields("clock_went_back", step=step, marked=0),
        )


def _start(
    start: Callable[[OperationStore, Clock], object], clock: Clock, store: OperationStore
) -> None:
    start(store, clock)


def call_extensions(
    extensions: Any,
    *,
    operation_id: str | None,
    reference: str | None,
    hooks: Hooks | None = None,
) -> dict[str, Any]:
    """A request's `extensions` with what the caller says about its operation, under
    the key only the transport reads."""
    extended = dict(extensions or {})
    extended[CALL_OPTIONS] = _new_call_options(
        operation_id=operation_id, reference=reference, hooks=hooks
    )
    return extended


#: `CallOptions(...)` without a call per field (see `_frozen`): one per operation.
_new_call_options = fast_constructor(CallOptions)


def _settings(
    owner: str,
    store: OperationStore | str | os.PathLike[str] | None,
    settings: Settings | None,
    options: Any,
    *,
    deferred: bool,
) -> Settings:
    if settings is None:
        if store is None:
            raise TypeError(f"{owner} needs a store (a path, a URL or a Store)")
        return make_settings(store, deferred=deferred, **options)
    if store is not None or options:
        raise TypeError("pass either settings or store and its options, not both")
    return settings


@contextlib.contextmanager
def _timed(hooks: Hooks, effect: Blocking[Any]) -> Iterator[None]:
    """Tell `hooks` how long a store call took (a client's `on_store`)."""
    started = time.perf_counter()
    failed = True
    try:
        yield
        failed = False
    finally:
        name = getattr(effect.fn, "__name__", "store")
        hooks.store(StoreEvent(name, time.perf_counter() - started, failed=failed))


class _Wrapping(Generic[Inner]):
    """What both transports are: settings, and the inner transport they wrap. Each one
    drives the same flow (`_flow.handle`), one in the calling thread, one awaiting."""

    inner: Inner
    settings: Settings
    #: the inner transport when none is given
    _default: Callable[[], Inner]
    #: a store given as a path is opened at its first call (async: in a worker thread)
    _deferred: bool = False

    def __init__(
        self,
        inner: Inner | None = None,
        *,
        store: OperationStore | str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> None:
        owner = type(self).__name__
        self.settings = _settings(owner, store, settings, options, deferred=self._deferred)
        self.inner = inner if inner is not None else self._default()


class IdempotentTransport(_Wrapping[httpx.BaseTransport], httpx.BaseTransport):
    """A sync transport giving every unsafe request a durable key and safe retries."""

    _default = httpx.HTTPTransport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # `_effects.drive`, with the flow's three common effects done in the loop itself
        # (a store call, a send, a read: the rest, and a store call a hook times, by
        # `_do`): a request's flow asks for some five effects, each a turn of this loop.
        flow = handle(self.settings, request)
        send, throw = flow.send, flow.throw
        untimed = self.settings.hooks.on_store is None
        inner = self.inner
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                while True:  # inside the handler: a Ctrl-C at its turn is thrown in too
                    effect = send(answer) if error is None else throw(error)
                    error = None
                    if type(effect) is Blocking and untimed:
                        answer = effect.fn(*effect.args, **effect.kwargs)
                    elif type(effect) is Send:
                        answer = inner.handle_request(effect.request)
                    elif type(effect) is Read:
                        answer = effect.response.read()
                    else:
                        answer = self._do(effect)
            except BaseException as exc:
                # Raised by an effect, or here between two: the flow (suspended) decides,
                # and leaves the record that says where the operation stands.
                if getattr(flow, "gi_frame", None) is not None:
                    answer, error = None, exc
                    continue
                if isinstance(exc, StopIteration):
                    response: httpx.Response = exc.value
                    return response
                raise  # the flow's own end

    def _do(self, effect: Effect) -> Any:
        if isinstance(effect, Shield):
            effect = effect.effect
        if isinstance(effect, Blocking):
            if self.settings.hooks.on_store is None:
                return effect.fn(*effect.args, **effect.kwargs)
            with _timed(self.settings.hooks, effect):
                return effect.fn(*effect.args, **effect.kwargs)
        if isinstance(effect, Send):
            return self.inner.handle_request(effect.request)
        if isinstance(effect, Read):
            return effect.response.read()
        if isinstance(effect, Close):
            return effect.response.close()
        if isinstance(effect, Turn):
            return effect.lock.acquire(timeout=effect.limit)
        if isinstance(effect, Body):
            stream = effect.request.stream
            if not isinstance(stream, httpx.SyncByteStream):
                raise TypeError("a sync transport needs a request with a sync body")
            return body_from_chunks(stream, effect.limit)
        if isinstance(effect, Sleep):
            return (effect.clock or self.settings.clock).sleep(effect.seconds)
        raise TypeError(f"not an effect of a request's flow: {effect!r}")

    def close(self) -> None:
        self.inner.close()
        step = self.settings.step_back()
        if step:
            _kept_at_close(self.settings, step)
        if self.settings.owns_store:
            self.settings.store.close()  # idempotent: every mount of a client shares it


class AsyncIdempotentTransport(_Wrapping[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """The async twin of `IdempotentTransport`: the same flow, awaited. Store calls run
    in a worker thread so that an fsync never blocks the event loop; a store given as
    a path is opened at its first call, in a worker thread too."""

    _default = httpx.AsyncHTTPTransport
    _deferred = True

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # `_effects.adrive`, with the flow's common effects awaited in the loop itself
        # (see `IdempotentTransport.handle_request`): no coroutine made per effect for
        # a store call, a send or a read.
        flow = handle(self.settings, request)
        send, throw = flow.send, flow.throw
        untimed = self.settings.hooks.on_store is None
        inner = self.inner
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                while True:
                    effect = send(answer) if error is None else throw(error)
                    error = None
                    if type(effect) is Blocking and untimed:
                        fn = effect.fn
                        # A final answer's write, queued behind the answer (see `_behind`).
                        record = queued(fn, effect.kwargs) if type(fn) is Finish else None
                        if record is not None:
                            answer = record
                        else:
                            call = functools.partial(fn, *effect.args, **effect.kwargs)
                            answer = await to_thread(call)
                    elif type(effect) is Send:
                        answer = await inner.handle_async_request(effect.request)
                    elif type(effect) is Read:
                        answer = await effect.response.aread()
                    else:
                        answer = await self._shielded(effect)
            except BaseException as exc:
                if getattr(flow, "gi_frame", None) is not None:
                    answer, error = None, exc
                    continue
                if isinstance(exc, StopIteration):
                    response: httpx.Response = exc.value
                    return response
                raise

    async def _shielded(self, effect: Effect) -> Any:
        if isinstance(effect, Shield):
            # A cancelled task must still leave a truthful record behind: the write
            # runs, even if a cancellation comes again before a thread has taken it.
            with anyio.CancelScope(shield=True):
                return await self._do(effect.effect, shielded=True)
        return await self._do(effect)

    async def _do(self, effect: Effect, *, shielded: bool = False) -> Any:
        if isinstance(effect, Blocking):
            if type(effect.fn) is Finish and self.settings.hooks.on_store is None:
                # A final answer's write, queued behind the answer (see `_behind`).
                record = queued(effect.fn, effect.kwargs)
                if record is not None:
                    return record
            call = functools.partial(effect.fn, *effect.args, **effect.kwargs)
            if self.settings.hooks.on_store is None:
                return await to_thread(call, shielded=shielded)
            with _timed(self.settings.hooks, effect):
                return await to_thread(call, shielded=shielded)
        if isinstance(effect, Send):
            return await self.inner.handle_async_request(effect.request)
        if isinstance(effect, Read):
            return await effect.response.aread()
        if isinstance(effect, Close):
            return await effect.response.aclose()
        if isinstance(effect, Sleep):
            return await (effect.clock or self.settings.clock).asleep(effect.seconds)
        if isinstance(effect, Turn):
            return await _take_turn(effect)
        if isinstance(effect, Body):
            stream = effect.request.stream
            if not isinstance(stream, httpx.AsyncByteStream):
                raise TypeError("an async transport needs a request with an async body")
            return await abody_from_chunks(stream, effect.limit)
        raise TypeError(f"not an effect: {effect!r}")  # pragma: no cover - Shield is unwrapped

    async def aclose(self) -> None:
        await self.inner.aclose()
        await written()  # the answers' writes still queued end first (see `_behind`)
        step = self.settings.step_back()
        if step:
            await to_thread(functools.partial(_kept_at_close, self.settings, step))
        if self.settings.owns_store:  # in a worker thread, as every store call
            await to_thread(self.settings.store.close)


#: How often an async call waiting for another's time probe looks again (real seconds).
_TURN_POLL = 0.01


async def _take_turn(turn: Turn) -> bool:
    """`Turn` for the event loop: the lock is a thread lock (the asker may be a task of
    this loop, which must keep running), tried without blocking, every `_TURN_POLL`
    seconds of real time (never the client's clock) until `turn.limit` has passed."""
    give_up = time.monotonic() + turn.limit
    while not turn.lock.acquire(blocking=False):
        if time.monotonic() >= give_up:
            return False
        await anyio.sleep(_TURN_POLL)
    return True
