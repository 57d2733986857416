"""What a call does next: send now, wait first, retry after a wait, or stop.

`gate` judges an operation before its first attempt here (key retention, a clock gone
back, an answer its server does not keep, a server's not-before); `decide` judges each
attempt's classified result against the policy, the profile and the retry budget.
"""

from __future__ import annotations

import math

import httpx

from ._call import Call
from ._classify import AttemptKind, Classification
from ._evidence import status_in
from ._hooks import RetryEvent
from ._policy import Decision
from ._policy import decide as decide_by_policy
from ._retry_after import parse_retry_after
from ._time import ahead, retained

__all__ = ["BUDGET_STOP", "decide", "gate", "past_retention"]

#: Appended to the evidence of an operation the retry budget stopped.
BUDGET_STOP = "; stopped by the client's retry budget"


def gate(call: Call) -> float | Decision:
    """Before the first attempt: seconds to wait first (0.0 for none), or a stop."""
    now = call.clock.time()
    if call.maybe_applied:
        # By this clock: a stamp ahead of it is a step back.
        recorded_ahead = ahead(call.created_at, now)
        # Judged at the time it would be sent: after a wait it must keep first (the
        # in-flight hold, a server's not-before), which this call may sleep out.
        late = past_retention(
            call, now=now, at=now if call.not_before is None else max(now, call.not_before)
        )
        if late is not None:
            return late
        unstored = status_in(call.evidence)
        if unstored is not None and unstored in call.profile.unstored:
            # Its server kept no answer under the key for that: the same key sent
            # again runs the request again, which may have been applied.
            call.reconcile_required = True
            return Decision(
                "stop",
                reason=(
                    f"maybe applied, and its last answer (HTTP {unstored}) is one the"
                    f" {call.profile.name} profile's server does not keep under its key:"
                    " sent again it would run again; look it up instead"
                ),
            )
        stepped = call.record.clock_stepped if call.record is not None else None
        if stepped is not None:
            # A clock went back while it was unfinished: it may have been recorded
            # by a clock running fast, so its age may be more than it looks, by any
            # amount, and it looks young long after the server forgot its key.
            call.reconcile_required = True
            return Decision(
                "stop",
                reason=(
                    f"maybe applied, and a clock of this store was seen to go back"
                    f" {stepped:.0f}s while it was unfinished: its age, and so whether"
                    " the server still holds its key, is unknown; look it up instead"
                ),
            )
        if recorded_ahead:
            # Recorded at a time this clock has not reached: the clock went back, or
            # was fast then. Its real age is unknown, so it may be past retention.
            call.reconcile_required = True
            return Decision(
                "stop",
                reason=(
                    f"maybe applied, and recorded {recorded_ahead:.0f}s ahead of this"
                    " clock: its age, and so whether the server still holds its key, is"
                    " unknown; look it up instead"
                ),
            )
    if call.not_before is not None and call.not_before > now:
        wait = call.not_before - now
        if wait > call.policy.max_retry_after or wait >= call.remaining():
            reason = f"the server asked for no retry before {call.not_before:.3f}"
            if call.maybe_applied and not call.profile.guards_in_flight:
                reason = (
                    f"maybe applied, and its attempt may still be running at the server,"
                    f" which does not refuse a second request while the first runs"
                    f" ({call.profile.name} profile): not sent again for {wait:.0f}s"
                    " more (the profile's in_flight_for, and the clock skew allowed"
                    " between the store's hosts); look it up, or resume it after that"
                )
            return Decision("stop", not_before=call.not_before, reason=reason)
        return wait
    return 0.0


def past_retention(call: Call, *, now: float, at: float) -> Decision | None:
    """A stop for a look-up if an operation that may have been applied, sent at `at`
    (now, or after a wait this call would sleep), may reach a server that has
    forgotten its key by then; None if not."""
    retention = call.settings.retention(call.resolved)
    # By every clock that can measure its age (this one may have been set back since
    # it was recorded, which no record shows), with the hosts' skew, as of the send.
    # A stamp ahead of this clock is `gate`'s to stop for, with its own reason.
    server = call.server_time(call.created_at)
    if retained(
        call.created_at,
        now=now,
        retention=retention,
        server=server,
        server_stamped=call.server_created_at,
        after=at - now,
        ahead_by=math.inf,
    ):
        return None
    call.reconcile_required = True
    age = call.age(now)
    when = "" if at <= now else f", {max(0.0, age + at - now):.0f}s once its wait ends"
    local = now - call.created_at
    by = "" if age <= local else f" by the server's clock ({max(0.0, local):.0f}s by this host's)"
    return Decision(
        "stop",
        reason=(
            f"maybe applied and {max(0.0, age):.0f}s old{by}{when}, past the server's key"
            f" retention ({retention:.0f}s, {call.profile.name} profile): look"
            " it up instead"
        ),
    )


def decide(call: Call, found: Classification, response: httpx.Response | None) -> Decision:
    if call.doubted:
        return Decision(
            "stop",
            reason=(
                "it may be the replay of a payment another process made under this key,"
                " or the application's own refusal, and sending again cannot tell"
            ),
        )
    if found.kind is AttemptKind.EXISTING:
        return Decision(
            "stop",
            reason=(
                f"the server says it made {call.existing or 'a resource'} under this"
                " key already; whether that payment was applied, declined or is still"
                " running is read from the resource (Client fetches it; or"
                " Client.reconcile, or resume)"
            ),
        )
    if found.retry and call.maybe_applied and not call.profile.guards_in_flight:
        return Decision(
            "stop",
            reason=(
                f"the {call.profile.name} profile's server is not known to refuse a"
                " second request while the first runs, so an attempt that may have"
                " been applied is not followed by another; look it up"
                " (Client.reconcile), or resume it once the first has surely ended"
            ),
        )
    if found.retry and response is not None and response.status_code in call.profile.unstored:
        return Decision(
            "stop",
            reason=(
                f"the {call.profile.name} profile's server does not keep an HTTP"
                f" {response.status_code} answer under its key, so the same key sent"
                " again would run the request again; look it up (Client.reconcile)"
            ),
        )
    now = call.clock.time()
    server_wait = None if response is None else parse_retry_after(response.headers, now)
    decision = decide_by_policy(
        call.policy,
        found,
        attempts=call.attempts_here,
        remaining=call.remaining(),
        server_wait=server_wait,
        now=now,
        rng=call.settings.rng,
    )
    if decision.not_before is not None:
        call.not_before = decision.not_before
    if decision.action == "retry" and call.maybe_applied:
        # The retry is sent after its wait: not once the server may have forgotten
        # the key of an attempt that may have been applied.
        late = past_retention(call, now=now, at=now + decision.wait)
        if late is not None:
            return late
    if decision.action == "retry":
        if not call.settings.budget.withdraw(decision.cost):
            call.evidence += BUDGET_STOP
            call.budget_spent = True
            return Decision("stop", reason="the client's retry budget is spent")
        event = RetryEvent(
            operation_id=call.operation_id,
            key=call.key,
            attempt=call.total_attempts,
            evidence=call.evidence,
            wait=decision.wait,
            maybe_applied=call.maybe_applied,
        )
        call.settings.hooks.retry(event)
        if call.call_hooks is not None:
            call.call_hooks.retry(event, log=False)
    return decision
