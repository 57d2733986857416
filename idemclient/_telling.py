"""What the caller and the hooks are told when a call ends: the `Outcome`, and the
exception for an operation that has no final answer.
"""

from __future__ import annotations

import dataclasses

import httpx

from ._answer import AnswerWithoutBody, stored_response
from ._call import CONTINUATION, Call, Continuation
from ._classify import AttemptKind, classify_response
from ._errors import (
    ChallengeRequired,
    Indeterminate,
    NotSent,
    OutcomeError,
    ReconcileRequired,
    StoreError,
)
from ._hooks import EndEvent, logger
from ._outcome import OUTCOME, Outcome, Recorded, State, from_record, seen_from_record
from ._profile import codes_in
from ._reading import key_shared
from ._settings import origin_of
from ._store._base import OperationRecord

__all__ = [
    "busy_outcome",
    "continuation_of",
    "ended",
    "lost",
    "outcome_of",
    "store_failed",
    "stored_answer",
    "tell_hooks",
    "unsettled_error",
    "unsettled_failure",
]


def unsettled_error(
    outcome: Outcome,
    reason: str,
    *,
    reconcile: bool = False,
    lost_to: str | None = None,
    lost_held: bool = True,
) -> OutcomeError:
    """The exception for an operation that has no final answer (`outcome` says where it
    stands): `NotSent` only when nothing of it can have reached the server. `lost_to`:
    the caller that took this call's lapsed lease over, which holds it still
    (`lost_held`) or has let it go since."""
    text = (
        f"operation {outcome.operation_id!r} (key {outcome.key}) is {outcome.state.words}"
        f" after {outcome.attempts} attempt(s): {reason}; last seen: {outcome.evidence}"
    )
    if lost_to is not None:
        now = (
            "it holds it now, and sends it with the same key"
            if lost_held
            else "it has let it go since, unfinished"
        )
        return Indeterminate(
            text + f". This call's lease lapsed and {lost_to} took the operation over: {now}."
            " It may have been applied: look at it again later (re-issue it, or resume),"
            " never under a new key.",
            outcome,
        )
    if outcome.state is State.CHALLENGED:
        return ChallengeRequired(
            text + ". Nothing was applied. The server asks for the request to be signed"
            " (strong customer authentication): clear the challenge of the one-time token"
            " in the answer's x-2fa-approval header (outcome.response), then issue the"
            " same operation again with that header; the key stays the same.",
            outcome,
        )
    if outcome.state is State.NOT_SENT and not outcome.maybe_applied:
        if outcome.last_status is None:
            told = "Nothing reached the server"
        else:
            # A 429 or 503 reached the server, which said it did nothing with it.
            told = f"The server answered (HTTP {outcome.last_status}) and applied nothing"
        return NotSent(f"{text}. {told}; safe to send again with the same key.", outcome)
    if reconcile:
        error = ReconcileRequired(
            text + ". Settle it with Client.reconcile(operation_id, lookup=...): a"
            " look-up on the server, never a second send.",
            outcome,
        )
        error.reason = reason
        return error
    return Indeterminate(
        text + ". It may have been applied: resume it with the same key, or look it up.",
        outcome,
    )


def outcome_of(
    call: Call,
    record: Recorded,
    response: httpx.Response | None,
    *,
    from_store: bool = False,
    tell: bool = True,
) -> Outcome:
    replayed = response is not None and (
        call.profile.replayed(response.headers)
        or (not from_store and call.last_kind is AttemptKind.REPLAYED)
    )
    outcome = seen_from_record(
        record,
        response,
        replayed=replayed,
        from_store=from_store,
        last_status=response.status_code if response is not None else call.last_status,
        body_omitted=isinstance(response, AnswerWithoutBody),
        existing=call.existing or _existing(call, record, response),
        key_conflict=_conflict(call, record, response),
    )
    if call.challenge is not None and record.state is State.NOT_SENT and not record.maybe_applied:
        outcome = dataclasses.replace(outcome, state=State.CHALLENGED, response=call.challenge)
    if response is not None:
        response.extensions[OUTCOME] = outcome
    if outcome.state is State.SUCCEEDED and not from_store:
        call.settings.budget.deposit()
    if tell:
        tell_hooks(call, outcome)
    return outcome


def tell_hooks(call: Call, outcome: Outcome) -> None:
    call.key_told = outcome.key
    call.settings.hooks.outcome(outcome)
    if call.call_hooks is not None:
        call.call_hooks.outcome(outcome, log=False)


def ended(call: Call, error: BaseException | None) -> None:
    """Tell the hooks that this call ended, however it ended (see `EndEvent`). A
    hook that raises while something else is ending the call is logged, never put
    in the place of what ended it (a cancellation must stay a cancellation)."""
    hooks, call_hooks = call.settings.hooks, call.call_hooks
    if hooks.on_end is None and (call_hooks is None or call_hooks.on_end is None):
        return
    event = EndEvent(
        operation_id=call.operation_id,
        key=call.key_told or call.key,
        error=error,
        budget_spent=call.budget_spent,
    )
    for told in (hooks, call_hooks):
        if told is None:
            continue
        if error is None:
            told.end(event)
            continue
        try:
            told.end(event)
        except Exception:
            logger.warning(
                "a hook raised as a call of operation %r ended by %s",
                call.operation_id,
                type(error).__name__,
                exc_info=True,
            )


def stored_answer(call: Call, record: OperationRecord) -> httpx.Response:
    """The final answer of a finished operation, rebuilt from the store."""
    assert record.response is not None, "a finished operation has a stored response"
    # Its body, or, if the store did not keep it, a response that says so when read.
    response = stored_response(record.response, call.request)
    outcome_of(call, record, response, from_store=True)
    return response


def continuation_of(call: Call, record: OperationRecord, response: httpx.Response) -> Continuation:
    """The continuation of an operation whose answer goes back to httpx unfinished."""
    outcome = outcome_of(call, record, response, tell=False)
    continuation = Continuation(
        operation_id=call.operation_id,
        key=record.key,
        method=call.request.method,
        origin=(
            call.continuation.origin
            if call.continuation is not None
            else origin_of(call.request.url)
        ),
        deadline=call.deadline,
        attempts=call.attempts_here,
        status=response.status_code,
        outcome=outcome,
        key_shared=key_shared(call),
    )
    call.request.extensions[CONTINUATION] = continuation
    return continuation


def _existing(call: Call, record: Recorded, response: httpx.Response | None) -> str | None:
    """The resource an "already done, here it is" answer names, if this is one."""
    if response is None or record.state is not State.SUCCEEDED or call.profile.existing is None:
        return None
    if isinstance(response, AnswerWithoutBody):
        return None
    return call.profile.existing_id(response.status_code, response.headers, response.content)


def _conflict(call: Call, record: Recorded, response: httpx.Response | None) -> bool:
    """The final answer says the key was used for another request."""
    if response is None or record.state is not State.FAILED:
        return False
    codes: frozenset[str] = frozenset()
    if response.status_code in call.profile.needs_codes and not isinstance(
        response, AnswerWithoutBody
    ):
        codes = codes_in(response.content, call.profile.code_paths)
    found = classify_response(response, retry_statuses=(), profile=call.profile, codes=codes)
    return found.kind is AttemptKind.KEY_CONFLICT


def unsettled_failure(call: Call, outcome: Outcome, reason: str) -> OutcomeError:
    """The exception for an operation that ended without a final answer."""
    error = unsettled_error(outcome, reason, reconcile=call.reconcile_required)
    if call.cause is not None:
        error.__cause__ = call.cause
    return error


def lost(call: Call, record: OperationRecord) -> OutcomeError:
    """The exception for a call whose lease another caller took over: what this call
    did and saw (its attempts, not the other caller's; its last evidence), and that
    it lost the lease, to a caller that holds it now or has let it go since."""
    outcome = from_record(
        record,
        attempts=call.total_attempts,
        evidence=call.evidence or record.evidence,
        maybe_applied=True,
        from_store=False,
        body_omitted=False,
        last_status=call.last_status,
    )
    tell_hooks(call, outcome)
    holder = record.lease_owner
    return unsettled_error(
        outcome,
        "this call lost its lease to another caller",
        lost_to=holder or "another caller",
        lost_held=holder is not None,
    )


def store_failed(call: Call, error: StoreError, response: httpx.Response | None) -> OutcomeError:
    """The exception for a store that failed after an attempt was made: the attempt
    may have arrived, so never an error that says nothing has changed: an answer
    from the server (a refusal too, which it may keep under the key) shows that
    something reached it."""
    reached = call.maybe_applied or call.last_status is not None
    outcome = Outcome(
        operation_id=call.operation_id,
        key=call.key,
        state=State.INDETERMINATE if reached else State.NOT_SENT,
        attempts=call.total_attempts,
        response=response,
        evidence=f"{call.evidence}; the store could not record it: {error.reason}",
        not_before=call.not_before,
        maybe_applied=call.maybe_applied,
        last_status=call.last_status,
    )
    if response is not None:
        response.extensions[OUTCOME] = outcome
    tell_hooks(call, outcome)
    failure = unsettled_error(outcome, f"the store {error.path!r} failed")
    failure.__cause__ = error
    return failure


def busy_outcome(call: Call, record: OperationRecord) -> OutcomeError:
    outcome = _unsettled_outcome(
        call, record, f"held by {record.lease_owner} until {record.lease_expires}"
    )
    tell_hooks(call, outcome)
    doing = "looked up on the server" if record.lease_look_up else "sent"
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) is being {doing} by"
        f" another caller ({record.lease_owner}) and did not finish within the deadline",
        outcome,
    )


def _unsettled_outcome(call: Call, record: OperationRecord, evidence: str) -> Outcome:
    return from_record(
        record,
        evidence=evidence,
        maybe_applied=True,
        from_store=False,
        body_omitted=False,
        last_status=call.last_status,
    )
