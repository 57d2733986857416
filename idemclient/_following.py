"""An operation httpx sends on after its answer went back unfinished: the GET that
follows a 301, 302 or 303 (which may settle it: a 303's location says what the payment
came to), and a redirect to another origin, refused.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import httpx

from . import _reconcile
from ._call import Continuation
from ._deadline import bound_body, cut_timeouts
from ._effects import Effect, Flow, Read, Send, blocking
from ._errors import StoreError
from ._exchange import current
from ._outcome import OUTCOME, Outcome, State, from_record
from ._redaction import redact_url
from ._settings import Settings
from ._states import Event, after
from ._store import Claim, StoredResponse, new_owner, release_owner
from ._telling import unsettled_error
from ._time import lease_until

__all__ = ["failed_after", "follow", "refuse"]


def refuse(settings: Settings, request: httpx.Request, continuation: Continuation) -> Exception:
    """The error for a redirect to another origin: nothing is sent there."""
    scheme, host, port = continuation.origin
    origin = f"{scheme.decode()}://{host.decode()}" + (f":{port}" if port else "")
    outcome = continuation.outcome
    error = unsettled_error(
        outcome,
        f"the server redirected it (HTTP {continuation.status}) to {request.url.scheme}://"
        f"{request.url.netloc.decode('ascii', 'replace')}, another origin than {origin}:"
        " not followed, so that neither its key nor the credentials go there",
    )
    if not continuation.told:
        continuation.told = True
        settings.hooks.outcome(outcome)
    return error


def follow(settings: Settings, request: httpx.Request, continuation: Continuation) -> Flow:
    """The GET that httpx sends after a 301, 302 or 303 to an operation: not the operation
    (it carries no key), but after a 303 See Other it is where the server says the
    result of the request is, and an answer that says what the payment came to settles
    it (see `_settle`). Within the operation's deadline, like every attempt."""
    slot = settings.resolve(request).key
    if slot.header is not None:
        request.headers.pop(slot.header, None)
    remaining = _remaining(settings, continuation)
    if remaining() <= 0:
        raise unsettled_error(
            continuation.outcome,
            f"the deadline passed before its HTTP {continuation.status} could be followed",
        )
    cut_timeouts(request.extensions, min(settings.policy.attempt_timeout, remaining()))
    # Only the answer to the operation's own request says where its result is: a 303
    # met on the way after that (a login page, a redirect chain) says nothing about it.
    see_other = continuation.status == 303 and not continuation.followed
    continuation.followed = True
    response: httpx.Response = yield Send(request)
    settings.heard(request, response)
    response.extensions[OUTCOME] = continuation.outcome
    if not see_other or not response.is_success:
        bound_body(response, remaining)
        return response
    bound_body(response, remaining)
    yield Read(response)
    try:
        settled = yield from _settle(settings, continuation, request, response)
    except StoreError as exc:
        raise failed_after(continuation, exc) from exc
    if settled is not None:
        continuation.told = True
        exchange = current(settings)
        if exchange is not None and exchange.continuation is continuation:
            exchange.continuation = None
        response.extensions[OUTCOME] = settled
        settings.hooks.outcome(settled)
    return response


def _remaining(settings: Settings, continuation: Continuation) -> Callable[[], float]:
    clock = settings.clock
    return lambda: continuation.deadline - clock.monotonic()


def _settle(
    settings: Settings,
    continuation: Continuation,
    request: httpx.Request,
    response: httpx.Response,
) -> Generator[Effect, Any, Outcome | None]:
    """Settle the operation by the answer at its 303's location, if that answer says
    what the payment came to (judged as a look-up's answer is: its status); else None,
    and it stays indeterminate."""
    verdict = _reconcile.judge(response)
    if verdict.finding != "found" or verdict.state is None:
        return None
    store, clock = settings.store, settings.clock
    owner = new_owner()
    try:
        now = clock.time()
        begin = yield blocking(
            store.claim,
            operation_id=continuation.operation_id,
            owner=owner,
            now=now,
            lease_until=lease_until(now),
        )
        if begin.claim is Claim.BUSY:
            return None
        record = begin.record
        if begin.claim is not Claim.FINISHED:
            found = Event.FOUND_DECLINED if verdict.state is State.FAILED else Event.FOUND_APPLIED
            after(record.state, found)  # the table allows it, or it is a bug
            record = yield blocking(
                store.settle,
                operation_id=continuation.operation_id,
                owner=owner,
                applied=True,
                state=verdict.state,
                evidence=(f"HTTP 303 See Other, then GET {redact_url(request.url)}: {verdict.why}"),
                now=clock.time(),
                response=StoredResponse.of(
                    response.status_code,
                    tuple(response.headers.multi_items()),
                    response.content,
                ),
            )
    finally:
        release_owner(owner)
    return from_record(
        record,
        response=response,
        from_store=False,
        not_before=None,
        body_omitted=False,
        last_status=response.status_code,
    )


def failed_after(continuation: Continuation, error: StoreError) -> Exception:
    """The error for a store that fails when an operation handed back to httpx goes on:
    an attempt of it was made, so never one that says nothing has changed."""
    return unsettled_error(
        continuation.outcome,
        f"the store {error.path!r} failed as the operation went on after its"
        f" HTTP {continuation.status}: {error.reason}",
    )
