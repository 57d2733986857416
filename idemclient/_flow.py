"""One request's way through the transport, written once for sync and async.

The flow is a generator. It yields what it needs done, an `Effect` (call the store,
send one attempt, read or close a response, sleep), and the transport's driver does it
(`IdempotentTransport` in the calling thread, `AsyncIdempotentTransport` awaiting, with
store calls in a worker thread) and sends back the result, or throws in what was
raised. So every rule is here once; the two transports differ only in how they do
things, and cannot drift apart.

What one operation request goes through (`operation`):

1. admission: record the intent durably and take the lease (`Store.begin`), or find
   the operation again; wait for another live owner's lease; a finished operation is
   answered from the store;
2. the gate: key retention, the server's not-before time;
3. attempts, each classified (`_call.Call`): a final answer is stored and returned; a
   401/407 or a 3xx goes back to httpx (its auth flow, its redirect handling) with the
   operation recorded as it stands, to be continued if httpx sends it on; anything
   else is retried or stops the call (`NotSent`, `Indeterminate`);
4. whatever cuts the call short (a cancellation, an interrupt, a hook that raised)
   leaves a truthful record behind, and a store that fails once an attempt may have
   arrived is reported as `Indeterminate`, never as nothing having happened.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from typing import Any, TypeVar

import httpx

from ._admission import admit, ask_the_time, giving_back
from ._call import CONTINUATION, Call, Continuation
from ._deciding import decide, gate
from ._effects import (
    Blocking,
    Body,
    Close,
    Effect,
    Flow,
    Read,
    Send,
    Shield,
    Sleep,
    blocking,
)
from ._errors import OperationMismatch, StoreError
from ._exchange import current, handed_back, route
from ._following import failed_after, follow, refuse
from ._intent import buffered_body
from ._outcome import State
from ._policy import Decision
from ._reading import learnt_maybe_applied, observe
from ._reissue import recorded_body, refusal, send_recorded
from ._settings import Settings
from ._states import Event, final_answer
from ._store import (
    Claim,
    OperationRecord,
    StoredResponse,
    gone_in_words,
    new_owner,
    release_owner,
)
from ._store._base import whole
from ._store._interface import final_write
from ._telling import (
    continuation_of,
    ended,
    lost,
    outcome_of,
    store_failed,
    stored_answer,
    tell_hooks,
    unsettled_failure,
)

__all__ = ["handle", "operation"]

T = TypeVar("T")


def handle(settings: Settings, request: httpx.Request) -> Flow:
    """Everything a transport does with one request: pass it on, refuse it, follow an
    operation's redirect, or run an operation."""
    where = route(settings, request, settings.keyed)
    if where.action == "pass":
        response: httpx.Response = yield Send(request)
        settings.heard(request, response)  # a look-up's answer tells the server's time too
        return response
    if where.action == "refuse":
        assert where.continuation is not None
        raise refuse(settings, request, where.continuation)
    if where.action == "follow":
        assert where.continuation is not None
        return (yield from follow(settings, request, where.continuation))
    body = buffered_body(request, settings.max_request_body)
    if body is None:
        body = yield Body(request, settings.max_request_body)
    return (yield from operation(settings, request, body, where.continuation))


def operation(
    settings: Settings,
    request: httpx.Request,
    body: bytes,
    continuation: Continuation | None = None,
) -> Flow:
    """One operation request, from admission to its answer (see the module docstring).
    However the call ends (an answer, an error, cut short), the hooks are told last."""
    call = Call(settings, request, body, continuation=continuation)
    error: BaseException | None = None
    try:
        return (yield from _operation(call, settings, request, body, continuation))
    except BaseException as exc:
        error = exc
        raise
    finally:
        ended(call, error)


def _operation(
    call: Call,
    settings: Settings,
    request: httpx.Request,
    body: bytes,
    continuation: Continuation | None,
) -> Flow:
    if continuation is not None:
        # This call takes over from the one that handed the operation back: it tells
        # the outcome from now on, and the request is not a continuation once more.
        request.extensions.pop(CONTINUATION, None)
        continuation.told = True
        exchange = current(settings)
        if exchange is not None and exchange.continuation is continuation:
            exchange.continuation = None
    else:
        yield from ask_the_time(call)
    owner = new_owner()
    try:
        begin = yield from admit(call, owner)
        exchange = current(settings)
        if begin.claim is not Claim.FINISHED:
            # Issued again with other bytes of the same meaning: sent as recorded; not
            # where an auth flow may have signed the other bytes already (`_reissue`).
            recorded = recorded_body(begin.record, body)
            if recorded is not None:
                if exchange is not None and exchange.body_read_above:
                    refused = refusal(begin.record)
                    yield Shield(giving_back(call, owner, refused))
                    raise refused
                send_recorded(request, begin.record)
                body = recorded
        if exchange is not None:
            # What an auth flow's rebuilt request of this call must carry.
            exchange.key, exchange.body = begin.record.key, body
            exchange.key_header = call.resolved.key.header, call.resolved.key.quoted
        if begin.claim is Claim.FINISHED:
            return stored_answer(call, begin.record)
        call.adopt(begin.record)
        if (
            continuation is not None
            and continuation.redirected
            and call.attempts_here >= settings.policy.max_attempts
        ):
            # A redirect loop: every hop is an attempt, and they are bounded too.
            return (
                yield from _stop(
                    call,
                    owner,
                    Decision(
                        "stop",
                        reason=f"{call.attempts_here} attempts made through redirects"
                        " (max_attempts)",
                    ),
                )
            )
        if begin.taken_over and not call.profile.guards_in_flight:
            if begin.dead_holder is not None:
                return (yield from _after_dead_holder(call, owner, begin.dead_holder))
            return (yield from _await_holder(call, owner))
        return (yield from _attempts(call, owner))
    except BaseException as exc:
        admitting = call.record is None
        if call.settled or isinstance(exc, GeneratorExit):
            raise  # settled already; or closed, with nothing left to drive a write
        # Cut short: leave a truthful record, never a live lease. What cut the call
        # short matters more than a failing store: the lease is released with the owner
        # below, and a takeover counts the operation maybe applied.
        if not admitting:
            call.interrupted(exc)
            with contextlib.suppress(StoreError):
                yield Shield(_finish_unsettled(call, owner))
        elif not isinstance(exc, OperationMismatch):
            # Cut short (a cancellation, a Ctrl-C, a store that failed) while the store
            # was admitting it: the lease it may have taken goes back, and the operation
            # is as it was, nothing of this call having been sent.
            with contextlib.suppress(StoreError):
                yield Shield(giving_back(call, owner, exc))
        if admitting and isinstance(exc, StoreError) and continuation is not None:
            raise failed_after(continuation, exc) from exc
        raise  # before anything was sent, the error says what it is
    finally:
        release_owner(owner)


def _await_holder(call: Call, owner: str) -> Flow:
    """Taken over from an owner whose lease lapsed (a process paused, or dead where this
    host cannot see it: another host's) under a profile whose server does not guard a
    key in flight: that owner's attempt may still be running there, and the same key
    sent now would run beside it (a second payment).
    Nothing is sent: the store is polled, within the deadline, for the answer that
    owner records when it comes back (a final answer is recorded whoever holds the
    lease); else the operation stops, maybe applied. Its lease released, a later call
    (`resume`) sends it with its key: by then the earlier attempt has had this whole
    call's deadline, beyond its own lease, to end."""
    call.evidence = (
        "taken over from a caller whose lease lapsed unreleased: its attempt may still be"
        " running at the server"
    )
    while (wait := call.busy_wait()) is not None:
        yield Sleep(wait)
        record: OperationRecord | None = yield blocking(
            call.settings.store.get, operation_id=call.operation_id
        )
        if record is not None and record.state.finished:
            return stored_answer(call, record)
    call.hold_in_flight()  # that owner's attempt may be running still
    return (
        yield from _stop(
            call,
            owner,
            Decision(
                "stop",
                reason=(
                    "another caller's attempt under this key may still be running at the"
                    f" server (its lease lapsed unreleased), and the {call.profile.name}"
                    " profile's server does not refuse a second request while the first"
                    " runs: nothing was sent. Resume it later, or look it up"
                    " (Client.reconcile)"
                ),
            ),
        )
    )


def _after_dead_holder(call: Call, owner: str, holder: str) -> Flow:
    """Taken over, under a profile whose server does not guard a key in flight, from an
    owner that had exited (a process of this host, or an ended call of this one): it
    will record nothing, so there is no answer to wait for (`_await_holder`), but its
    attempt may still be running at the server. Held from its last send (the stored
    `sent_at`: it sent nothing after it was found dead), never from less: stopped at
    once, maybe applied, while that hold lasts; sent as any resume would be once it is
    over."""
    record = call.record
    assert record is not None  # adopted
    # `adopt` held from the same send already; without a stored send time (a row from
    # before schema 7), held from now, which is later than any send of the dead owner.
    held = call.hold_in_flight(since=record.sent_at, server_since=record.server_sent_at)
    if held is None:  # that attempt has had the server's whole in-flight time to end
        return (yield from _attempts(call, owner))
    gone = gone_in_words(holder)
    call.evidence = (
        f"taken over: {gone}, its lease unreleased; its attempt may still be running at the server"
    )
    wait = held - call.clock.time()
    when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(held))
    return (
        yield from _stop(
            call,
            owner,
            Decision(
                "stop",
                reason=(
                    f"{gone} without releasing it: nobody will record the answer to its"
                    " attempt, which may still be running at the server, and the"
                    f" {call.profile.name} profile's server does not refuse a second"
                    " request while the first runs: nothing was sent. It may be sent"
                    f" again in {max(0.0, wait):.0f}s, at {when} (the profile's in_flight_for from"
                    " that attempt, and the clock skew allowed between the store's hosts):"
                    " resume it then, or look it up (Client.reconcile)"
                ),
            ),
        )
    )


def _finish_unsettled(
    call: Call, owner: str, answer: httpx.Response | None = None
) -> Blocking[OperationRecord]:
    """The write that leaves the operation unsettled; `answer`: one it keeps (see
    `Call.keeps_answer`)."""
    arguments: dict[str, Any] = {
        "operation_id": call.operation_id,
        "owner": owner,
        "state": call.unsettled_state(),
        "progress": call.progress(settling=True),
    }
    if answer is not None:
        arguments["response"] = _stored(answer)
    elif call.attempts_here:
        # Sent again since an answer was kept: whatever this send came to (a timeout,
        # a throttle, a 401), the kept answer is no longer the last thing the server
        # said, so it can no longer be taken for the refusal of this request.
        arguments["drop_answer"] = True
    return Blocking(call.settings.store.finish, kwargs=arguments)


def _stored(response: httpx.Response) -> StoredResponse:
    return StoredResponse.of(
        response.status_code, tuple(response.headers.multi_items()), response.content
    )


def _attempts(call: Call, owner: str) -> Flow:
    first = gate(call)
    if isinstance(first, Decision):
        return (yield from _stop(call, owner, first))
    if first > 0:
        yield Sleep(first)
    while True:
        if call.prepare() is None:
            return (yield from _stop(call, owner, Decision("stop", reason="the deadline passed")))
        response: httpx.Response | None = None
        try:
            response = yield Send(call.sending())
            call.settings.heard(call.request, response)
            if call.reads_first(response):
                call.bound_body(response)
                yield Read(response)
            found = observe(call, response)
            if found.final or call.keeps_answer:
                call.bound_body(response)
                yield Read(response)
            # Twice at most: a refusal judged without knowing that the operation may
            # have been applied is judged again once the store says so (`_finish`).
            while found.final:
                answer = yield from _finish(call, owner, response, call.final_state(found))
                if answer is not None:
                    return answer
                found = learnt_maybe_applied(call, response, found)
            if found.handoff:
                return (yield from _hand_back(call, owner, response))
        except Exception as exc:
            if call.settled:
                raise
            if response is not None:
                yield Close(response)
                response = None  # the answer was lost with its body: not an answer
            found = observe(call, exc)
        if response is not None:
            yield Close(response)  # a discarded answer frees its connection before we wait
        decision = decide(call, found, response)
        if decision.action == "stop":
            answer = response if call.keeps_answer else None
            return (yield from _stop(call, owner, decision, answer))
        call.move(Event.ATTEMPTED)
        try:
            kept = yield blocking(
                call.settings.store.record_attempt,
                operation_id=call.operation_id,
                owner=owner,
                progress=call.progress(),
                lease_until=call.lease_until(),
            )
        except StoreError as exc:
            call.settled = True
            raise store_failed(call, exc, None) from exc
        if not kept:
            return (yield from _lost_lease(call, owner))
        yield Sleep(decision.wait)


def _write(
    call: Call, effect: Blocking[T], response: httpx.Response | None
) -> Generator[Effect, Any, T]:
    """A store write after an attempt was made; its failure is the operation's news."""
    try:
        record: T = yield effect
    except StoreError as exc:
        raise store_failed(call, exc, response) from exc
    return record


def _finish(
    call: Call, owner: str, response: httpx.Response, state: State
) -> Generator[Effect, Any, httpx.Response | None]:
    """Store the final answer `response` and return what the caller is told; None where
    the store would not take a refusal judged without knowing that the operation may
    have been applied (another caller's attempt, noted after this call read the row:
    `_guards.refusal_judged_blind`): the caller judges it again, knowing."""
    stored = _stored(response)
    settings = call.settings
    # The brief form of the write where the store has one (no record built for an
    # answer written as asked); `finish` itself where a hook times the store's calls.
    write = final_write(settings.store) if settings.hooks.on_store is None else None
    record = yield from _write(
        call,
        blocking(
            write or settings.store.finish,
            operation_id=call.operation_id,
            owner=owner,
            state=call.move(final_answer(state)),
            progress=call.progress(settling=True),
            response=stored,
            known=call.record,
        ),
        response,
    )
    if record.lease_lost and not record.state.finished:
        return None  # a refusal judged blind: not written (see above)
    if record.lease_lost:
        # Another caller finished it first, while this one was paused past its lease:
        # its answer is the operation's, never this call's own under its name. (A
        # success of this call's is written over a refusal stored first, and lands: it
        # is told as its own, below; see `_states`.)
        yield Close(response)
        return stored_answer(call, whole(record))
    outcome_of(call, record, response)
    return response


def _stop(call: Call, owner: str, decision: Decision, answer: httpx.Response | None = None) -> Flow:
    record = yield from _write(call, _finish_unsettled(call, owner, answer), None)
    if record.state.finished:
        # Another caller finished it while this one was paused past its lease.
        return stored_answer(call, record)
    if record.lease_lost or record.lease_owner not in (None, owner):
        # Its lease lapsed and another caller took the operation over: that, not why
        # this call stopped (its deadline long past), is its news.
        raise lost(call, record)
    raise unsettled_failure(call, outcome_of(call, record, None), decision.reason)


def _lost_lease(call: Call, owner: str) -> Flow:
    """The lease lapsed and another caller took it: leave what this call learnt, and
    return what the other found, or say that it has the operation now."""
    record = yield from _write(call, _finish_unsettled(call, owner), None)
    if record.state.finished:
        return stored_answer(call, record)
    raise lost(call, record)


def _hand_back(call: Call, owner: str, response: httpx.Response) -> Flow:
    """A 401/407 or a 3xx: recorded as it stands, and returned to httpx, which may send
    the operation on (see `_exchange`)."""
    try:
        record = yield from _write(call, _finish_unsettled(call, owner), None)
    except BaseException:
        yield Close(response)
        raise
    if record.state.finished:
        yield Close(response)
        return stored_answer(call, record)
    # httpx reads it (a redirect's body before it follows, an auth flow's 401 if it
    # asks for it): within the deadline, like any answer.
    call.bound_body(response)
    continuation = continuation_of(call, record, response)
    if not handed_back(call.settings, continuation):
        continuation.told = True
        tell_hooks(call, continuation.outcome)
    return response
