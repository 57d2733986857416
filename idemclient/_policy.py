"""The retry policy: an immutable value, and the pure decision of what to do next.

Backoff is exponential with full jitter. Before retry number ``n`` (1 for the first
retry) the client waits a uniformly random time in

    [0, min(max_backoff, initial_backoff * backoff_factor ** (n - 1))]

and never less than what the server asked for with `Retry-After` (the server's wait is
a floor that jitter never shortens). The exponential ceiling is tenacity's
`wait_exponential`; the jitter is drawn from an injectable `random.Random`.

A tenacity wait strategy given as `RetryPolicy(wait=...)` replaces that formula: the
wait before retry ``n`` is what the strategy says for attempt number ``n`` (its own
jitter, if any), still floored by the server's wait and cut by the deadline.

One total deadline covers every attempt and every sleep. A wait that would end past the
deadline is not slept: the client stops at once and records the server's not-before
time, so a later resume honours it. It never retries early.
"""

from __future__ import annotations

import dataclasses
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ._classify import AttemptKind, Classification

if TYPE_CHECKING:
    import tenacity

__all__ = ["Decision", "RetryPolicy", "backoff_ceiling", "decide", "retention_set"]

#: A tenacity wait strategy: the seconds to wait, given tenacity's retry state.
WaitStrategy = Callable[["tenacity.RetryCallState"], float]


class _ProfileRetention(float):
    """The default `key_retention`: 24 hours, read as "the profile's" by the client."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{float(self)!r} (the profile's)"


_PROFILE_RETENTION = _ProfileRetention(24 * 3600.0)

_DEFAULT_RETRY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
_DEFAULT_METHODS = frozenset({"POST", "PATCH"})

#: Retry budget tokens per retry (5 for anything not listed). Timeouts and dropped
#: connections cost more: they tie up a struggling server longest. Polling a server
#: that is working on the request (409 in progress, 202 accepted) costs nothing: it
#: is waiting for an answer, not adding load to a failing server.
_BUDGET_COST = {
    AttemptKind.MAYBE_APPLIED: 10,
    AttemptKind.IN_PROGRESS: 0,
    AttemptKind.ACCEPTED: 0,
}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try, and for how long. Immutable: `policy.replace(deadline=30.0)`
    returns a changed copy, validated like a new policy (so does `dataclasses.replace`).

    Every bound has a finite default: a payment client must not retry forever.
    """

    #: attempts per call, the first one included
    max_attempts: int = 8
    #: one deadline, in seconds, over every attempt and every sleep of a call
    deadline: float = 60.0
    #: the first backoff ceiling, in seconds
    initial_backoff: float = 0.25
    #: each retry multiplies the backoff ceiling by this
    backoff_factor: float = 2.0
    #: the backoff ceiling never grows past this, in seconds
    max_backoff: float = 20.0
    #: a server wait (Retry-After) longer than this stops the call at once instead
    max_retry_after: float = 60.0
    #: the timeout of one attempt (each is also cut to the time left before the deadline)
    attempt_timeout: float = 30.0
    #: statuses worth another attempt with the same key
    retry_statuses: frozenset[int] = _DEFAULT_RETRY_STATUSES
    #: the unsafe methods that get a key; others pass straight through
    methods: frozenset[str] = _DEFAULT_METHODS
    #: obey `Stripe-Should-Retry` / `x-should-retry` over the status table
    follow_server_hints: bool = False
    #: the server answers a key it has finished with that key's stored answer, errors
    #: included (Stripe, the reference server): a refusal that follows an attempt which
    #: may have been applied is then that operation's answer. Off, such a refusal may be
    #: the server refusing a duplicate, and the operation is indeterminate. A refusal
    #: marked `Idempotent-Replayed: true` is the stored answer either way.
    server_replays: bool = False
    #: deprecated: how long the server keeps keys is the server profile's
    #: (`Profile.key_retention`). Set here, it wins over the profile's. An operation
    #: that may have been applied and is older than this is never re-sent
    #: automatically (it could apply twice)
    key_retention: float = _PROFILE_RETENTION
    #: a tenacity wait strategy (``tenacity.wait_random_exponential(multiplier=0.5,
    #: max=30)``, ``wait_fixed(2) + wait_random(0, 1)``...) in place of the backoff
    #: above: the wait before retry n is the strategy's for attempt number n. It is
    #: given the attempt number only (not the error: `wait_exception` cannot work),
    #: and the server's wait and the deadline still bound it
    wait: WaitStrategy | None = None

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str]] = [
            (self.max_attempts >= 1, "max_attempts must be at least 1"),
            (_positive(self.deadline), "deadline must be a positive number of seconds"),
            (_non_negative(self.initial_backoff), "initial_backoff must be >= 0"),
            (
                math.isfinite(self.backoff_factor) and self.backoff_factor >= 1,
                "backoff_factor must be >= 1",
            ),
            (_non_negative(self.max_backoff), "max_backoff must be >= 0"),
            (_non_negative(self.max_retry_after), "max_retry_after must be >= 0"),
            (_positive(self.attempt_timeout), "attempt_timeout must be positive"),
            (_positive(self.key_retention), "key_retention must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"RetryPolicy: {message}")
        if retention_set(self):
            warnings.warn(
                "RetryPolicy(key_retention=...) is deprecated: the server's key retention"
                " is its profile's (Client(profile=...), Profile.key_retention); the"
                " policy's still wins while it is set",
                DeprecationWarning,
                stacklevel=3,
            )
        if self.wait is not None:
            _check_strategy(self.wait)
        object.__setattr__(self, "retry_statuses", frozenset(self.retry_statuses))
        object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))

    def replace(self, **changes: object) -> RetryPolicy:
        """A copy with `changes` applied (validated like a new policy)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]  # checked in __post_init__


def retention_set(policy: RetryPolicy) -> bool:
    """The caller set `key_retention` on this policy (it then wins over the profile's)."""
    return not isinstance(policy.key_retention, _ProfileRetention)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _non_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def backoff_ceiling(policy: RetryPolicy, retry_number: int) -> float:
    """The top of the jitter window before retry `retry_number` (1-based); with a wait
    strategy of the caller's (`RetryPolicy.wait`), the strategy's wait itself."""
    import tenacity  # at the first retry, not with idemclient

    if policy.wait is not None:
        return _strategy_wait(policy.wait, retry_number)
    strategy = tenacity.wait_exponential(
        multiplier=policy.initial_backoff, exp_base=policy.backoff_factor, max=policy.max_backoff
    )
    return float(strategy(_retry_state(retry_number)))


def backoff(policy: RetryPolicy, retry_number: int, rng: random.Random) -> float:
    """The wait before retry `retry_number`, before the server's floor: full jitter
    under the ceiling, or the caller's strategy's wait (its own jitter) as it is."""
    if policy.wait is not None:
        return backoff_ceiling(policy, retry_number)
    return rng.uniform(0.0, backoff_ceiling(policy, retry_number))


def _retry_state(attempt_number: int) -> tenacity.RetryCallState:
    """A tenacity retry state after `attempt_number` attempts, as its strategies read it."""
    import tenacity

    state = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]  # a wait strategy reads neither
    state.attempt_number = attempt_number
    return state


def _strategy_wait(strategy: WaitStrategy, retry_number: int) -> float:
    """The strategy's wait, in seconds: negative counts as none, and one that is not a
    finite number as endless (the deadline then stops the call: it never sleeps it)."""
    value = float(strategy(_retry_state(retry_number)))
    if math.isnan(value) or value == math.inf:
        return math.inf
    return max(0.0, value)


def _check_strategy(strategy: object) -> None:
    """Refuse, when the policy is made, a `wait` that cannot say how long to wait."""
    if not callable(strategy):
        raise ValueError(
            f"RetryPolicy: wait must be a tenacity wait strategy (a callable of the retry"
            f" state), not {type(strategy).__name__}"
        )
    try:
        first = strategy(_retry_state(1))
        float(first)
    except Exception as exc:
        raise ValueError(
            f"RetryPolicy: the wait strategy {strategy!r} cannot say how long to wait"
            f" ({type(exc).__name__}: {exc}); it is given the attempt number only, not the"
            " error or the result (wait_exception needs them)"
        ) from exc


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after an attempt that did not end the operation."""

    action: Literal["retry", "stop"]
    #: seconds to sleep before the next attempt (retry only)
    wait: float = 0.0
    #: the server's not-before time (wall clock), when its wait decided the stop
    not_before: float | None = None
    #: why, in words, for the record and the logs
    reason: str = ""
    #: tokens to take from the retry budget (retry only)
    cost: int = field(default=0)


def decide(
    policy: RetryPolicy,
    classification: Classification,
    *,
    attempts: int,
    remaining: float,
    server_wait: float | None,
    now: float,
    rng: random.Random,
) -> Decision:
    """Retry or stop, after `attempts` attempts of this call with `remaining` seconds left.

    Pure apart from the jitter drawn from `rng`.
    """
    if not classification.retry:
        return Decision("stop", reason=f"{classification.kind} is not retried")
    not_before = None if server_wait is None else now + server_wait
    if attempts >= policy.max_attempts:
        return Decision(
            "stop", not_before=not_before, reason=f"{attempts} attempts made (max_attempts)"
        )
    if server_wait is not None and server_wait > policy.max_retry_after:
        return Decision(
            "stop",
            not_before=not_before,
            reason=f"server asked to wait {server_wait:.3f}s, over max_retry_after",
        )
    wait = backoff(policy, attempts, rng)
    if server_wait is not None:
        wait = max(wait, server_wait)
    if wait >= remaining:
        # Never a negative time in words: a deadline passed while the answer came.
        reason = (
            f"the deadline has passed (a wait of {wait:.3f}s was due)"
            if remaining <= 0
            else f"a wait of {wait:.3f}s does not fit the {remaining:.3f}s left of the deadline"
        )
        return Decision("stop", not_before=not_before, reason=reason)
    cost = _BUDGET_COST.get(classification.kind, 5)
    return Decision("retry", wait=wait, not_before=not_before, reason="retry", cost=cost)
