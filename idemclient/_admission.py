"""Before an operation's first attempt here: the server's time asked (with
`time_probe=True` only), the intent recorded and the lease taken (or the operation
found again, another live owner's lease waited for), and a lease given back by a call
cut short before it sent anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import httpx

from ._call import Call
from ._clock_steps import clock_went_back, keep_step
from ._effects import (
    Blocking,
    Close,
    Effect,
    Send,
    Sleep,
    Turn,
    blocking,
)
from ._evidence import interrupted_before_sending
from ._outcome import State
from ._settings import origin_of
from ._store import (
    Begin,
    Claim,
    OperationRecord,
    Progress,
    SendingStore,
)
from ._telling import (
    busy_outcome,
)
from ._time import ahead

__all__ = ["admit", "ask_the_time", "give_back", "giving_back"]


def ask_the_time(call: Call) -> Generator[Effect, Any, None]:
    """With `time_probe` (off by default: the time is then learnt from the answers to
    the caller's own requests only), ask the operation's server its time (its `Date`)
    before this client first records or sends an operation there, unless an answer
    from it told it already: the record keeps the server's time beside its own stamps,
    and an operation recorded before (which may have been applied) is judged by the
    server's clock as well as this one, which may have been stepped while no client
    ran, or may be wrong now. One HEAD per origin at a time (others wait for its answer,
    within the probe's time), no retry; one that fails is not sent again for
    `ASK_AGAIN_AFTER`; without an answer, or an answer without a `Date`, operations are
    judged by this clock alone, as without the probe."""
    times = call.settings.server_times
    if times is None or not call.settings.time_probe:
        return
    origin = origin_of(call.request.url)
    clock = call.clock
    limit = call.probe_timeout()
    if limit <= 0 or not times.ask(origin, clock.monotonic()):
        return
    turn = times.turn(origin)
    if not (yield Turn(turn, limit)):
        return  # another caller's question took all this one's time: judged as without
    try:
        if not times.ask(origin, clock.monotonic()):
            return  # answered (or found silent) while this caller waited its turn
        request = call.probe(limit)
        try:
            response: httpx.Response = yield Send(request)
        except Exception:  # advice only: the operation goes on, judged by this clock
            times.answered(origin, clock.monotonic(), heard=False)
            return
        call.settings.heard(request, response)
        times.answered(origin, clock.monotonic(), heard=True)
        with contextlib.suppress(Exception):
            yield Close(response)
    finally:
        turn.release()


def admit(call: Call, owner: str) -> Generator[Effect, Any, Begin]:
    """Record the operation (or find it) and take its lease, waiting for a live owner."""
    settings, clock = call.settings, call.clock
    step = settings.step_back()
    if step:
        yield blocking(keep_step, settings=settings, step=step, seen="by a running client")
    if call.intent is not None:
        begin: Begin = yield blocking(
            settings.store.begin,
            intent=call.stamped_intent(),
            owner=owner,
            now=clock.time(),
            lease_until=call.lease_until(),
        )
    else:
        begin = yield from _claim(call, owner)
    while begin.claim is Claim.BUSY:
        wait = call.busy_wait()
        if wait is None:
            raise busy_outcome(call, begin.record)
        yield Sleep(wait)
        begin = yield from _claim(call, owner)
    record = begin.record
    now = clock.time()
    recorded_ahead = ahead(record.created_at, now)
    if recorded_ahead and not record.state.finished:
        # Recorded at a time this clock has not reached: a clock (this one now, or its
        # recorder's then) went back. Kept before anything is sent: once true time has
        # caught up, nothing else would show it.
        yield blocking(
            clock_went_back,
            store=settings.store,
            step=recorded_ahead,
            now=now,
            seen="on an operation recorded ahead",
        )
    return begin


def _claim(call: Call, owner: str) -> Generator[Effect, Any, Any]:
    return (
        yield blocking(
            call.settings.store.claim,
            operation_id=call.operation_id,
            owner=owner,
            now=call.clock.time(),
            lease_until=call.lease_until(),
            server_time=call.server_now(),
        )
    )


def giving_back(call: Call, owner: str, error: BaseException) -> Blocking[OperationRecord | None]:
    """The write that gives back a lease `owner` may have taken (its call cut short by
    `error` while the store admitted it, before it sent anything): the operation keeps
    its attempts and what it knew, and is unsettled again, `not_sent` unless it may have
    been applied before. Nothing is written unless `owner` holds the lease: the store's
    admission may never have run, or run for another owner's benefit."""
    return blocking(
        give_back,
        store=call.settings.store,
        operation_id=call.operation_id,
        owner=owner,
        now=call.clock.time(),
        error=error,
    )


def give_back(
    store: SendingStore, *, operation_id: str, owner: str, now: float, error: BaseException
) -> OperationRecord | None:
    """See `giving_back` (this runs as one store call: a worker thread's, in async)."""
    record = store.get(operation_id)
    if record is None or record.lease_owner != owner or record.state.finished:
        return record
    progress = Progress(
        attempts=record.attempts,
        maybe_applied=record.maybe_applied,
        evidence=interrupted_before_sending(error, record.evidence),
        not_before=record.not_before,
        now=now,
        replay_unexplained=record.replay_unexplained,
    )
    # Unsettled, with no send of its own (sent_at stays as it was); `finish` makes it
    # indeterminate if it may have been applied before.
    return store.finish(
        operation_id, owner=owner, state=State.NOT_SENT, progress=progress, known=record
    )
