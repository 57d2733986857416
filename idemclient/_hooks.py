"""Hooks and logging: every attempt, retry and outcome, told to the caller.

Hooks are plain callables; an exception raised by a hook propagates (a hook is the
caller's code, and hiding its failure would hide a bug). Log records go to the
`idemclient` logger: DEBUG for attempts, INFO for retries and outcomes, WARNING for
indeterminate and not-sent outcomes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ._outcome import Outcome, State

__all__ = ["AttemptEvent", "Hooks", "RetryEvent", "logger"]

logger = logging.getLogger("idemclient")
# A library leaves output to the application: without a handler configured, nothing is
# printed (rather than Python's last-resort handler writing warnings to stderr).
logger.addHandler(logging.NullHandler())


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """An attempt is about to be sent."""

    operation_id: str
    key: str
    method: str
    url: str
    #: 1-based, counting attempts of earlier calls (before a restart) too
    attempt: int
    #: seconds this attempt may take (the policy's attempt timeout, cut to the deadline)
    timeout: float


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """An attempt did not end the operation; the next one follows after `wait` seconds."""

    operation_id: str
    key: str
    attempt: int
    #: what was observed, in words
    evidence: str
    wait: float
    maybe_applied: bool


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks for a client (every call) or for one call (`Client.request(hooks=...)`).

    Log records are written once per event, whichever hooks are set.
    """

    on_attempt: Callable[[AttemptEvent], None] | None = None
    on_retry: Callable[[RetryEvent], None] | None = None
    on_outcome: Callable[[Outcome], None] | None = None

    def attempt(self, event: AttemptEvent, *, log: bool = True) -> None:
        if log:
            logger.debug(
                "attempt %d of %s %s (key %s, timeout %.3fs)",
                event.attempt,
                event.method,
                event.url,
                event.key,
                event.timeout,
            )
        if self.on_attempt is not None:
            self.on_attempt(event)

    def retry(self, event: RetryEvent, *, log: bool = True) -> None:
        if log:
            logger.info(
                "retrying operation %s (key %s) in %.3fs after attempt %d: %s",
                event.operation_id,
                event.key,
                event.wait,
                event.attempt,
                event.evidence,
            )
        if self.on_retry is not None:
            self.on_retry(event)

    def outcome(self, outcome: Outcome, *, log: bool = True) -> None:
        if log:
            level = (
                logging.WARNING
                if outcome.state in (State.INDETERMINATE, State.NOT_SENT)
                else logging.INFO
            )
            logger.log(
                level,
                "operation %s (key %s) %s after %d attempt(s): %s",
                outcome.operation_id,
                outcome.key,
                outcome.state.value,
                outcome.attempts,
                outcome.evidence,
            )
        if self.on_outcome is not None:
            self.on_outcome(outcome)
