"""What one attempt came back with, read: its classification under the call's profile
and what it says of the operation (maybe applied, a replay, the resource made, a
challenge), kept on the `Call` as its evidence.
"""

from __future__ import annotations

import httpx

from ._call import Call
from ._classify import (
    AttemptKind,
    Classification,
    after_maybe_applied,
    classify_error,
    classify_response,
)
from ._evidence import answer_evidence, error_name
from ._hooks import AttemptEndEvent
from ._profile import codes_in
from ._redaction import redact_location

__all__ = ["key_shared", "learnt_maybe_applied", "observe"]

_REFUSALS = frozenset({AttemptKind.REJECTED, AttemptKind.KEY_CONFLICT})


def observe(call: Call, result: httpx.Response | Exception) -> Classification:
    call.on_wire = False
    unexplained = False
    if isinstance(result, httpx.Response):
        codes = (
            codes_in(result.content, call.profile.code_paths)
            if call.reads_first(result)
            else frozenset()
        )
        found = classify_response(
            result,
            retry_statuses=call.policy.retry_statuses,
            follow_server_hints=call.policy.follow_server_hints,
            profile=call.profile,
            codes=codes,
        )
        if found.kind is AttemptKind.REPLAYED and not _may_be_known(call):
            # A replay of what? No attempt under this key may have reached the
            # server, and no one else knows the key: the status is the server's own
            # answer (a 409 of the application's), a refusal, not a stored success.
            found = Classification(
                AttemptKind.REJECTED, retry=False, maybe_applied=False, final=True
            )
        elif found.kind is AttemptKind.REPLAYED and not _replay_explained(call, result):
            # Others may know the key (the caller's), but no attempt of ours may have
            # been applied (or one such answer already came unexplained): the replay
            # of another sender's payment under it, or the application's own refusal
            # (a 409 of its own). Maybe applied, with no answer; a look-up settles it.
            unexplained = call.replay_unexplained = True
            call.reconcile_required = True
            found = Classification(
                AttemptKind.UNKNOWN, retry=False, maybe_applied=True, final=False
            )
        if call.maybe_applied:
            found = _after_maybe_applied(call, result, found)
        call.evidence = answer_evidence(result)
        if found.kind is AttemptKind.REDIRECT and "location" in result.headers:
            call.evidence += f" to {redact_location(result.headers['location'])}"
        elif call.maybe_applied and not found.final and found.kind in _REFUSALS:
            call.evidence += _DUPLICATE
        if unexplained:
            call.evidence += (
                " (a stored success's replay under this profile) to a key others may"
                " know, with no attempt of ours that may have been applied before it"
            )
        call.last_status = result.status_code
        call.existing = None
        if found.kind is AttemptKind.EXISTING:
            call.existing = call.profile.existing_id(
                result.status_code, result.headers, result.content
            )
            call.evidence += (
                f" naming {call.existing or 'a resource'} as made under this key"
                " already: what it came to is read from the resource"
            )
        if found.kind is AttemptKind.CHALLENGED:
            call.evidence += " (the server asks for the request to be signed first: x-2fa-approval)"
            call.challenge = result
    else:
        found = classify_error(result)
        call.evidence = f"{type(result).__name__}: {result}".rstrip(": ")
        call.cause = result
    call.doubted = unexplained
    # An unexplained replay counts as a send too, the time it was learnt: a look-up's
    # "none" waits from there (the row's last write, which stands in otherwise, may
    # be ahead of the clock by a step it went back). Not an answer naming the
    # resource made under the key: that request ran nothing (the one that made it
    # was sent before, and its send is kept already).
    if found.maybe_applied and found.kind is not AttemptKind.EXISTING:
        call._sent_now()
    call.maybe_applied = call.maybe_applied or found.maybe_applied
    call.last_kind = found.kind
    hooks, call_hooks = call.settings.hooks, call.call_hooks
    if hooks.on_attempt_end is None and (call_hooks is None or call_hooks.on_attempt_end is None):
        return found
    event = AttemptEndEvent(
        operation_id=call.operation_id,
        key=call.key,
        attempt=call.total_attempts,
        status=result.status_code if isinstance(result, httpx.Response) else None,
        classification=found.kind.value,
        evidence=call.evidence,
        maybe_applied=call.maybe_applied,
        error=None if isinstance(result, httpx.Response) else error_name(result),
    )
    hooks.attempt_end(event)
    if call_hooks is not None:
        call_hooks.attempt_end(event)
    return found


_DUPLICATE = " after an attempt that may have been applied (the server may be refusing a duplicate)"


def _after_maybe_applied(
    call: Call, response: httpx.Response, found: Classification
) -> Classification:
    return after_maybe_applied(
        found,
        status=response.status_code,
        replayed=call.profile.replayed(response.headers),
        server_replays=call.policy.server_replays or call.profile.replays_errors,
    )


def learnt_maybe_applied(
    call: Call, response: httpx.Response, found: Classification
) -> Classification:
    """`found`, a final refusal the store would not record, judged again: the store
    knows the operation may have been applied by an attempt of another caller's, noted
    after this call read the row (its lease was taken over: `_guards.refusal_judged_blind`).
    This call's request went out while it held the lease, before that attempt (or,
    paused, beside it): its refusal says nothing of what the other attempt did (a refusal
    the server gave without admitting the request binds nothing to the key, and the
    other's request under it may have paid). It settles the operation only where the
    server marks it as its stored answer for the key (a replay marker); else the call
    stops with the operation maybe applied, for a look-up or a resume under its key."""
    call.maybe_applied = True
    if call.profile.replayed(response.headers):
        return found
    call.evidence += _OLDER_THAN_ANOTHER
    return Classification(found.kind, retry=False, maybe_applied=True, final=False)


#: A refusal met by another caller's attempt (`learnt_maybe_applied`).
_OLDER_THAN_ANOTHER = (
    " to a request sent before another caller's attempt that may have been applied"
)


def _may_be_known(call: Call) -> bool:
    """The server may hold an answer under this key: an attempt of the operation
    may have reached it, or the key is not one this client made for this call (the
    caller's, an identity's, or a continued operation's), so others may have sent it.
    An operation issued again by its id alone is sent under its recorded key, which
    may have been the caller's: not the one made for this call."""
    return call.maybe_applied or key_shared(call)


def key_shared(call: Call) -> bool:
    """Others may know the key: it is not one this client made for this exchange (a
    continuation after an auth flow's 401 or a redirect keeps the first call's)."""
    if call.continuation is not None:
        return call.continuation.key_shared
    intent = call.intent
    return intent is None or intent.key_given or call.key != intent.key


def _replay_explained(call: Call, response: httpx.Response) -> bool:
    """An answer read as a replay is this operation's stored success: it says so
    (its profile's replay asks for a header or an error code that the application's
    own answer never has, or it carries the profile's replay marker), or an attempt
    of ours may have been applied and no such answer has come unexplained before
    (after one, the application's own refusal would read the same)."""
    replay = call.profile.replay
    if replay is not None and (replay.header is not None or replay.codes):
        return True
    if call.profile.replayed(response.headers):
        return True
    return call.maybe_applied and not call.replay_unexplained
