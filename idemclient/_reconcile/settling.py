"""What a look-up's verdict does to the stored operation: leased for the look-up
(`take`), recorded (`apply`), given back (`release`). Never a second send.

- found, final: the operation is settled as `succeeded` or `failed`, with the
  look-up's answer as its response;
- found, not final: it stays unsettled, and is now "maybe applied" (the server holds
  it), so it is never sent again blindly;
- not found, when the operation keeps an answer its profile reads as a replay that
  no attempt of ours explained (`replay_unexplained`: another sender's payment under
  the key, or the application's own refusal, django-idempotency-key's 409), and the
  look-up is by reference alone: that answer was the refusal, and the operation is
  settled `failed`, with it as its answer (`refused`); unless that answer's body names
  a payment (`kept_payment`): then, by any look-up, it stays unsettled; else
- not found: it becomes `not_sent` and is no longer "maybe applied", so it may be
  sent again with its key; unless an attempt that may have been applied was sent
  less than the server profile's `in_flight_for` ago (`last_sent`), plus the clock skew
  allowed between the store's hosts (`_time.in_flight_until`: a send stamped by a slow
  host is later than it looks): the server may still be running it (a request it
  admitted and had not begun, a crash its recovery finishes), so nothing found yet is
  not "never applied", and it stays unsettled (`too_early`);
- anything else: unchanged, for a person to settle.

The judgements of a record (`last_sent`, `still_in_flight`, `refused`, `kept_payment`)
are pure; the rest takes a store and a clock, and the clients do the network's half.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from .._answer import stored_response
from .._clock import Clock
from .._errors import Indeterminate
from .._outcome import Outcome, State, from_record
from .._store._base import (
    Claim,
    OperationRecord,
    Progress,
    StoredResponse,
    owner_sent_until,
)
from .._store._interface import SendingStore
from .._store._owners import new_owner, release_owner
from .._time import CLOCK_SKEW, lease_until, look_up_none_until, parse_date, watched
from .judgement import Verdict

__all__ = [
    "Taken",
    "answered_at",
    "apply",
    "kept_payment",
    "last_sent",
    "refused",
    "release",
    "settle_found",
    "settled",
    "still_in_flight",
    "take",
    "too_early",
    "unsettled",
]


@dataclass(frozen=True, slots=True)
class Taken:
    """An unfinished operation leased for a look-up: as it was, and by whom."""

    before: OperationRecord
    owner: str
    #: when it was leased: a look-up asked right after is judged as of then
    at: float | None = None


def take(store: SendingStore, clock: Clock, operation_id: str) -> Taken | Outcome:
    """Lease an unfinished operation for a look-up; a finished one is its outcome.
    Raises `Indeterminate` when another caller holds it, `ValueError` if unknown."""
    before = store.get(operation_id)
    if before is None:
        raise ValueError(f"no operation {operation_id!r} in {store.path}")
    if before.state.finished:
        return from_record(before)
    owner = new_owner()
    now = clock.time()
    try:
        # A look-up's lease, not a send's: the operation keeps its state, and a
        # takeover of it (this process killed while it waits for the server) counts
        # no send, so it neither makes the operation maybe applied nor moves its send
        # time, which would put off the next look-up's verdict by in_flight_for.
        begin = store.claim(
            operation_id, owner=owner, now=now, lease_until=lease_until(now), look_up=True
        )
    except BaseException:
        release_owner(owner)
        raise
    if begin.claim is Claim.FINISHED:
        release_owner(owner)
        return from_record(begin.record)
    if begin.claim is Claim.BUSY:
        release_owner(owner)
        doing = "looked up" if begin.record.lease_look_up else "sent"
        raise unsettled(before, f"it is being {doing} by another caller right now")
    # Judged, and given back, as it was when leased: another caller may have sent it
    # since `before` was read (then a look-up's "none" may be too early).
    return Taken(begin.prior or before, owner, now)


def release(store: SendingStore, clock: Clock, taken: Taken, *, exists: bool = False) -> None:
    """Give the operation back as it was; `exists`: the server holds it, not final yet,
    so it is maybe applied from now on (and never `not_sent`)."""
    before = taken.before
    state = before.state
    if exists and state in (State.PENDING, State.NOT_SENT, State.IN_FLIGHT):
        state = State.INDETERMINATE
    try:
        _give_back(store, clock, taken, state, exists)
    finally:
        release_owner(taken.owner)


def _give_back(store: SendingStore, clock: Clock, taken: Taken, state: State, exists: bool) -> None:
    before = taken.before
    now = clock.time()
    sent = last_sent(before, now=now)
    store.finish(
        before.operation_id,
        owner=taken.owner,
        state=state,
        progress=Progress(
            attempts=before.attempts,
            maybe_applied=before.maybe_applied or exists,
            evidence=before.evidence,
            not_before=before.not_before,
            now=now,
            # Kept as a time of its own: this write's time is no send.
            sent_at=sent,
            # ... with the server's time at it, where it is the send the record keeps.
            server_sent_at=before.server_sent_at if sent == before.sent_at else None,
        ),
    )


def last_sent(record: OperationRecord, *, now: float) -> float | None:
    """The latest time an attempt of `record` that may have been applied was (or may
    have been) sent; None if none may have been. An owner in flight may be sending
    until its lease's end, or, dead or out of its lease, may have sent until now; a
    record written before `sent_at` was kept has its last write's time instead."""
    owner = owner_sent_until(record, now=now)
    if not record.maybe_applied and owner is None:
        return None
    sent = record.updated_at if record.sent_at is None else record.sent_at
    return sent if owner is None else max(sent, owner)


def still_in_flight(
    record: OperationRecord,
    *,
    now: float,
    in_flight_for: float,
    asked_at: float | None = None,
    server_at: float | None = None,
    watched_since: float | None = None,
) -> float | None:
    """When a look-up that finds nothing will say "never applied": None if it says so
    now, else the time from which it will (the last attempt that may have been
    applied, plus the profile's `in_flight_for` and the hosts' clock skew:
    `_time.in_flight_until`). `asked_at`: when the look-up was asked, if before `now` (its
    "none" is as old as its question: an answer given within the window says nothing
    of a send the server ran after it, whenever it is read). `server_at`: the server's
    time when it answered (its `Date`), if it said: the window must be over by that
    clock too (this one may have been stepped forward since the send was stamped), and
    the time returned is when it is over by both, on this clock. `watched_since`: when
    the asking client started watching its clock; a send stamped since is judged by
    this clock alone (`_time.watched`)."""
    sent = last_sent(record, now=now)
    if sent is None:
        return None
    if watched(sent, since=watched_since):
        server_at = None
    # The server's time at that send, where the record keeps it (not for a send an
    # owner in flight may have made since, which no one stamped).
    server_sent = record.server_sent_at if sent == record.sent_at else None
    return look_up_none_until(
        sent,
        in_flight_for=in_flight_for,
        now=now,
        asked_at=asked_at,
        server_at=server_at,
        server_sent=server_sent,
    )


def answered_at(response: httpx.Response | None) -> float | None:
    """The server's time as it answered `response` (its `Date`), or None."""
    if response is None:
        return None
    raw = response.headers.get("date")
    return None if raw is None else parse_date(raw)


def apply(
    store: SendingStore,
    clock: Clock,
    taken: Taken,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response | None,
    in_flight_for: float,
    asked_at: float | None = None,
    by_reference: bool = False,
    uncarried: str | None = None,
    watched_since: float | None = None,
) -> Outcome:
    """Record what the look-up `where` (e.g. ``GET /v1/payments?reference=R``) found,
    and give the lease back. Raises `Indeterminate` when it settled nothing.
    `in_flight_for`: how long the server profile's server may still run an attempt
    after it was sent (`Profile.in_flight_for`). `asked_at`: when the look-up was asked
    (default: when `taken` was leased, just before it). `by_reference`: the look-up
    asks by the end-to-end reference alone (`by_reference_alone`), so its "none" holds
    after the server has forgotten the key (see `refused`). `uncarried`: the reference
    the look-up asks by, where the request never carried it (`templates.carried`): its
    "none" settles nothing."""
    try:
        return _apply(
            store,
            clock,
            taken,
            verdict,
            where=where,
            response=response,
            in_flight_for=in_flight_for,
            asked_at=taken.at if asked_at is None else asked_at,
            by_reference=by_reference,
            uncarried=uncarried,
            watched_since=watched_since,
        )
    finally:
        release_owner(taken.owner)  # the look-up's call is over, whatever the store did


def _apply(
    store: SendingStore,
    clock: Clock,
    taken: Taken,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response | None,
    in_flight_for: float,
    asked_at: float | None,
    by_reference: bool,
    uncarried: str | None,
    watched_since: float | None,
) -> Outcome:
    before = taken.before
    evidence = f"settled by look-up: {where}: {verdict.why}"
    if verdict.finding == "not_found" and uncarried is not None:
        release(store, clock, taken)
        raise unsettled(
            before,
            f"{where}: {verdict.why}; but the request was never sent with the reference"
            f" {uncarried!r} (not in its URL, headers or body), so the server finds nothing"
            " by it, made or not: look it up by what the request carried (lookup= with"
            " {key}, or the reference its body names), and pass reference= as the body"
            " names it",
        )
    if verdict.finding == "not_found":
        now = clock.time()
        until = still_in_flight(
            before,
            now=now,
            in_flight_for=in_flight_for,
            asked_at=asked_at,
            server_at=answered_at(response),
            watched_since=watched_since,
        )
        if until is not None:
            release(store, clock, taken)
            raise too_early(before, f"{where}: {verdict.why}", now=now, until=until)
        named = kept_payment(before)
        if named is not None:
            # The answer kept as maybe the application's refusal names a payment: the
            # replay of one the server made under this key. A look-up that does not
            # list it looks elsewhere (another collection, an index behind): its "none"
            # settles nothing, neither "refused" nor "never applied, send again".
            assert before.response is not None
            release(store, clock, taken, exists=True)
            raise unsettled(
                before,
                f"{where}: {verdict.why}; but the HTTP {before.response.status_code} it"
                f" was answered names {named}, a payment the server made under its key"
                " (a replay), which this look-up does not list: look that payment up",
            )
        if refused(before, by_reference=by_reference):
            return _settle_refused(store, clock, taken, f"{where}: {verdict.why}")
    if verdict.settles:
        applied = verdict.finding == "found"
        record = store.settle(
            before.operation_id,
            owner=taken.owner,
            applied=applied,
            evidence=evidence,
            now=clock.time(),
            response=StoredResponse.of(
                response.status_code, tuple(response.headers.multi_items()), response.content
            )
            if applied and response is not None
            else None,
            state=verdict.state or State.SUCCEEDED,
        )
        if not record.state.finished and record.evidence != evidence:
            # Not written: this look-up outlived its lease, and another caller took the
            # operation meanwhile (a send, maybe): it is as that caller has it, unsettled.
            raise unsettled(
                record,
                f"{where}: {verdict.why}; but another caller took the operation while it"
                " was being looked up (the look-up outlived its lease), so nothing was"
                f" recorded: it is {record.state.words}",
            )
        return settled(record, response)
    release(store, clock, taken, exists=verdict.finding == "found")
    raise unsettled(before, f"{where}: {verdict.why}")


def refused(record: OperationRecord, *, by_reference: bool) -> bool:
    """Whether a look-up's believed "none" (past the in-flight window: `still_in_flight`)
    settles `record` as refused: pure.

    Only where the operation keeps an answer its profile read as a replay that no
    attempt of ours explained (`replay_unexplained`, the answer kept with it): a
    replay is of a request the server applied under this key, so a payment (another
    sender's of this reference, or ours) that a look-up by reference finds for good;
    none found, the answer was the application's refusal of this request, and nothing
    of it was applied. A look-up that asks by key as well is not enough (the server may
    have forgotten the key, and a "none" says nothing then); an operation with no kept
    answer (recorded by an earlier version) is `not_sent`, sent again with its key, and
    keeps the answer the next time."""
    return by_reference and record.replay_unexplained and record.response is not None


def kept_payment(record: OperationRecord) -> str | None:
    """The id of the payment named by the answer `record` keeps as maybe the
    application's refusal (`replay_unexplained`), if its JSON body names one (a
    replay's body is the stored payment; the application's own refusal names none):
    pure."""
    kept = record.response
    if not record.replay_unexplained or kept is None or record.state.finished:
        return None
    try:
        body = json.loads(kept.body)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("data"), list) and len(body["data"]) == 1:
        body = body["data"][0]
    value = body.get("id") if isinstance(body, dict) else None
    return str(value) if isinstance(value, str | int) and str(value) else None


def _settle_refused(store: SendingStore, clock: Clock, taken: Taken, found: str) -> Outcome:
    before = taken.before
    kept = before.response
    assert kept is not None, "refused only with an answer kept"
    evidence = (
        f"HTTP {kept.status_code} refused by the application, not a replay: a look-up"
        f" found no payment ({found}), and no attempt of it can still be running: this"
        f" request was never applied. A {kept.status_code} is a conflict: what it"
        " conflicts with (its answer's body) may exist elsewhere, outside what the"
        " look-up searched; read it before paying this another way"
    )
    record = store.settle(
        before.operation_id,
        owner=taken.owner,
        applied=False,
        evidence=evidence,
        now=clock.time(),
        state=State.FAILED,
    )
    if not record.state.finished or record.evidence != evidence:
        if record.state.finished:
            return from_record(record)
        raise unsettled(
            record,
            f"{found}; but another caller took the operation while it was being looked up"
            f" (the look-up outlived its lease), so nothing was recorded: it is"
            f" {record.state.words}",
        )
    assert record.response is not None
    answer = stored_response(record.response, httpx.Request(record.method, record.url))
    return from_record(
        record,
        response=answer,
        from_store=False,
        not_before=None,
        last_status=kept.status_code,
    )


def settle_found(
    store: SendingStore,
    clock: Clock,
    operation_id: str,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response,
) -> Outcome:
    """Settle an unfinished operation by what a resource the server named came to
    (`verdict` found, final): leased, recorded, given back. One that is finished
    already is its outcome; one another caller holds raises `Indeterminate`."""
    taken = take(store, clock, operation_id)
    if isinstance(taken, Outcome):
        # Settled by another caller meanwhile: its answer, as the store keeps it.
        record = store.get(operation_id)
        if record is not None and record.response is not None:
            return from_record(record, response=stored_response(record.response, response.request))
        return taken
    # Found, final: nothing of `in_flight_for` is asked (only "not found" waits for it).
    return apply(store, clock, taken, verdict, where=where, response=response, in_flight_for=0.0)


def too_early(record: OperationRecord, evidence: str, *, now: float, until: float) -> Indeterminate:
    """Nothing found, while the server may still be running an attempt of `record`."""
    sent = last_sent(record, now=now)
    assert sent is not None
    outcome = from_record(
        record, evidence=f"not found yet: {evidence}", body_omitted=False, not_before=until
    )
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) was not found by looking it"
        f" up ({evidence}), but an attempt of it that may have been applied was sent"
        f" {max(0.0, now - sent):.0f}s ago, and the server may still be running it"
        + (
            f" for {until - now:.0f}s more"
            if until > now
            else " (it may have run it since the look-up was asked)"
        )
        + f" (the server profile's in_flight_for, and"
        f" {CLOCK_SKEW:.0f}s for the clocks of the store's hosts): not found yet is"
        " not never applied. It stays unsettled: look it up again after that, or resume"
        " it (sent again with its key while the server keeps the key, it is the same"
        " payment).",
        outcome,
    )


def unsettled(record: OperationRecord, evidence: str) -> Indeterminate:
    outcome = from_record(record, evidence=evidence, body_omitted=False)
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) could not be settled by"
        f" looking it up: {evidence}. Settle it by hand against the server's records.",
        outcome,
    )


def settled(record: OperationRecord, response: httpx.Response | None) -> Outcome:
    return from_record(
        record,
        response=response if record.state.finished else None,
        from_store=False,
        not_before=None,
        body_omitted=False,
        last_status=None if response is None else response.status_code,
    )
