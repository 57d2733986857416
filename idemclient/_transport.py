"""httpx transports (sync and async) that make unsafe requests safe to retry.

They wrap any inner transport. Requests whose method the policy does not cover pass
straight through. For the others, one call goes: record the intent durably, take the
lease, attempt and retry within the deadline, store where it ended, release the lease;
then return the final response, or raise `NotSent` / `Indeterminate` when there is none.
The decisions live in `_call.Call`; the two classes here differ only in how they wait.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import anyio.to_thread
import httpx

from ._budget import RetryBudget
from ._call import Call, Settings, abody_from_chunks, body_from_chunks, buffered_body
from ._classify import Classification
from ._clock import Clock, SystemClock
from ._hooks import Hooks
from ._policy import Decision, RetryPolicy
from ._store import Claim, Store, StoredResponse, new_owner
from ._store._open import open_store

__all__ = ["AsyncIdempotentTransport", "IdempotentTransport", "make_settings"]

T = TypeVar("T")

DEFAULT_MAX_REQUEST_BODY = 1024 * 1024


def make_settings(
    store: Store | str | os.PathLike[str],
    *,
    policy: RetryPolicy | None = None,
    clock: Clock | None = None,
    budget: RetryBudget | None = None,
    hooks: Hooks | None = None,
    max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
    rng: random.Random | None = None,
    secret_headers: Collection[str] = (),
    persist_headers: Collection[str] = (),
) -> Settings:
    if max_request_body < 0:
        raise ValueError("max_request_body must be >= 0")
    return Settings(
        owns_store=isinstance(store, str | os.PathLike),
        store=open_store(store, secret_headers=secret_headers, persist_headers=persist_headers),
        policy=policy or RetryPolicy(),
        clock=clock or SystemClock(),
        budget=budget or RetryBudget(),
        hooks=hooks or Hooks(),
        max_request_body=max_request_body,
        rng=rng or random.Random(),
    )


def _settings(
    owner: str,
    store: Store | str | os.PathLike[str] | None,
    settings: Settings | None,
    options: Any,
) -> Settings:
    if settings is None:
        if store is None:
            raise TypeError(f"{owner} needs a store (a path, a URL or a Store)")
        return make_settings(store, **options)
    if store is not None or options:
        raise TypeError("pass either settings or store and its options, not both")
    return settings


class IdempotentTransport(httpx.BaseTransport):
    """A sync transport giving every unsafe request a durable key and safe retries."""

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        store: Store | str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> None:
        settings = _settings(type(self).__name__, store, settings, options)
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.settings = settings

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        settings = self.settings
        if request.method not in settings.policy.methods:
            return self.inner.handle_request(request)
        body = buffered_body(request, settings.max_request_body)
        if body is None:
            stream = request.stream
            if not isinstance(stream, httpx.SyncByteStream):
                raise TypeError("a sync transport needs a request with a sync body")
            body = body_from_chunks(stream, settings.max_request_body)
        call = Call(settings, request, body)
        store, clock = settings.store, settings.clock
        owner = new_owner()
        begin = store.begin(
            call.intent, owner=owner, now=clock.time(), lease_until=call.lease_until()
        )
        while begin.claim is Claim.BUSY:
            wait = call.busy_wait()
            if wait is None:
                raise call.busy_outcome(begin.record)
            clock.sleep(wait)
            begin = store.claim(
                call.intent.operation_id,
                owner=owner,
                now=clock.time(),
                lease_until=call.lease_until(),
            )
        if begin.claim is Claim.FINISHED:
            return call.stored_answer(begin.record)
        call.adopt(begin.record)
        try:
            return self._attempts(call, owner)
        except BaseException as exc:
            if not call.settled:  # cut short: leave a truthful record, not a live lease
                call.interrupted(exc)
                store.finish(
                    call.intent.operation_id,
                    owner=owner,
                    state=call.unsettled_state(),
                    progress=call.progress(settling=True),
                )
            raise

    def _attempts(self, call: Call, owner: str) -> httpx.Response:
        clock = self.settings.clock
        gate = call.gate()
        if isinstance(gate, Decision):
            return self._stop(call, owner, gate)
        if gate > 0:
            clock.sleep(gate)
        while True:
            if call.prepare() is None:
                return self._stop(call, owner, Decision("stop", reason="the deadline passed"))
            response: httpx.Response | None = None
            try:
                response = self.inner.handle_request(call.request)
                found = call.observe(response)
                if found.final:
                    body = response.read()
                    return self._finish(call, owner, response, body, found)
            except Exception as exc:
                if call.settled:
                    raise
                if response is not None:
                    response.close()
                    response = None  # the answer was lost with its body: not an answer
                found = call.observe(exc)
            if response is not None:
                response.close()  # a discarded answer frees its connection before we wait
            decision = call.decide(found, response)
            if decision.action == "stop":
                return self._stop(call, owner, decision)
            self.settings.store.record_attempt(
                call.intent.operation_id,
                owner=owner,
                progress=call.progress(),
                lease_until=call.lease_until(),
            )
            clock.sleep(decision.wait)

    def _finish(
        self, call: Call, owner: str, response: httpx.Response, body: bytes, found: Classification
    ) -> httpx.Response:
        stored = StoredResponse.of(
            response.status_code, tuple(response.headers.multi_items()), body
        )
        record = self.settings.store.finish(
            call.intent.operation_id,
            owner=owner,
            state=call.final_state(found),
            progress=call.progress(settling=True),
            response=stored,
            known=call.record,
        )
        call.outcome(record, response)
        return response

    def _stop(self, call: Call, owner: str, decision: Decision) -> httpx.Response:
        record = self.settings.store.finish(
            call.intent.operation_id,
            owner=owner,
            state=call.unsettled_state(),
            progress=call.progress(settling=True),
        )
        raise call.error(call.outcome(record, None), decision.reason)

    def close(self) -> None:
        self.inner.close()
        if self.settings.owns_store:
            self.settings.store.close()  # idempotent: every mount of a client shares it


class AsyncIdempotentTransport(httpx.AsyncBaseTransport):
    """The async twin of `IdempotentTransport`. Store calls run in a worker thread so
    that an fsync never blocks the event loop."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        store: Store | str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> None:
        settings = _settings(type(self).__name__, store, settings, options)
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.settings = settings

    async def _store(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        settings = self.settings
        if request.method not in settings.policy.methods:
            return await self.inner.handle_async_request(request)
        body = buffered_body(request, settings.max_request_body)
        if body is None:
            stream = request.stream
            if not isinstance(stream, httpx.AsyncByteStream):
                raise TypeError("an async transport needs a request with an async body")
            body = await abody_from_chunks(stream, settings.max_request_body)
        call = Call(settings, request, body)
        store, clock = settings.store, settings.clock
        owner = new_owner()
        begin = await self._store(
            store.begin, call.intent, owner=owner, now=clock.time(), lease_until=call.lease_until()
        )
        while begin.claim is Claim.BUSY:
            wait = call.busy_wait()
            if wait is None:
                raise call.busy_outcome(begin.record)
            await clock.asleep(wait)
            begin = await self._store(
                store.claim,
                call.intent.operation_id,
                owner=owner,
                now=clock.time(),
                lease_until=call.lease_until(),
            )
        if begin.claim is Claim.FINISHED:
            return call.stored_answer(begin.record)
        call.adopt(begin.record)
        try:
            return await self._attempts(call, owner)
        except BaseException as exc:
            if not call.settled:
                call.interrupted(exc)
                # Shielded: a cancelled task must still leave a truthful record behind.
                with anyio.CancelScope(shield=True):
                    await self._store(
                        store.finish,
                        call.intent.operation_id,
                        owner=owner,
                        state=call.unsettled_state(),
                        progress=call.progress(settling=True),
                    )
            raise

    async def _attempts(self, call: Call, owner: str) -> httpx.Response:
        clock = self.settings.clock
        gate = call.gate()
        if isinstance(gate, Decision):
            return await self._stop(call, owner, gate)
        if gate > 0:
            await clock.asleep(gate)
        while True:
            if call.prepare() is None:
                return await self._stop(call, owner, Decision("stop", reason="the deadline passed"))
            response: httpx.Response | None = None
            try:
                response = await self.inner.handle_async_request(call.request)
                found = call.observe(response)
                if found.final:
                    body = await response.aread()
                    stored = StoredResponse.of(
                        response.status_code, tuple(response.headers.multi_items()), body
                    )
                    record = await self._store(
                        self.settings.store.finish,
                        call.intent.operation_id,
                        owner=owner,
                        state=call.final_state(found),
                        progress=call.progress(settling=True),
                        response=stored,
                        known=call.record,
                    )
                    call.outcome(record, response)
                    return response
            except Exception as exc:
                if call.settled:
                    raise
                if response is not None:
                    await response.aclose()
                    response = None  # the answer was lost with its body: not an answer
                found = call.observe(exc)
            if response is not None:
                await response.aclose()
            decision = call.decide(found, response)
            if decision.action == "stop":
                return await self._stop(call, owner, decision)
            await self._store(
                self.settings.store.record_attempt,
                call.intent.operation_id,
                owner=owner,
                progress=call.progress(),
                lease_until=call.lease_until(),
            )
            await clock.asleep(decision.wait)

    async def _stop(self, call: Call, owner: str, decision: Decision) -> httpx.Response:
        record = await self._store(
            self.settings.store.finish,
            call.intent.operation_id,
            owner=owner,
            state=call.unsettled_state(),
            progress=call.progress(settling=True),
        )
        raise call.error(call.outcome(record, None), decision.reason)

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.settings.owns_store:
            self.settings.store.close()
