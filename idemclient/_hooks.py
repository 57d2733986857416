"""Hooks and logging: every operation, attempt, retry and outcome, told to the caller.

Hooks are plain callables; an exception raised by a hook propagates (a hook is the
caller's code, and hiding its failure would hide a bug). Log records go to the
`idemclient` logger: DEBUG for attempts, INFO for retries and outcomes, WARNING for
indeterminate and not-sent outcomes. Each record carries its facts as attributes too,
namespaced (`idemclient.event`, `idemclient.operation_id`, `idemclient.key`...), so that
a JSON formatter or structlog gets fields without one of ours overwriting one of theirs
(structlog's `event` is its message). The same facts under their bare names (`event`,
`key`...) are kept for one release, deprecated: `drop_legacy_fields` leaves them out now.
URLs in records are redacted as stored (`_redaction.shown_url`): no user, password or
secret query value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ._outcome import Outcome, State
from ._redaction import shown_url

__all__ = [
    "AttemptEndEvent",
    "AttemptEvent",
    "EndEvent",
    "Hooks",
    "RetryEvent",
    "StartEvent",
    "StoreEvent",
    "drop_legacy_fields",
    "log_fields",
    "logger",
]

logger = logging.getLogger("idemclient")
# A library leaves output to the application: without a handler configured, nothing is
# printed (rather than Python's last-resort handler writing warnings to stderr).
logger.addHandler(logging.NullHandler())


@dataclass(frozen=True, slots=True)
class StartEvent:
    """A call of an operation starts: before the store is asked about it, and before
    any attempt. A call that continues one handed back to httpx (a redirect, an auth
    flow) is the same operation, and starts nothing."""

    operation_id: str
    key: str
    method: str
    url: str


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
class AttemptEndEvent:
    """What an attempt came to, before the call decides what follows it."""

    operation_id: str
    key: str
    attempt: int
    #: the answer's HTTP status, or None when no answer arrived (an error was raised)
    status: int | None
    #: how the attempt is classified: `succeeded`, `throttled`, `server_error`,
    #: `not_sent`, `maybe_applied`... (the kinds of the attempt classification table)
    classification: str
    #: what was observed, in words
    evidence: str
    #: whether any attempt so far may have reached the server and been applied
    maybe_applied: bool
    #: the error raised instead of an answer, by its class's full name
    #: (``httpx.ConnectError``); None when an answer arrived
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EndEvent:
    """A call of an operation ended, however it ended: after its outcome, or cut short
    (cancelled, interrupted, a hook or the store raised). Told once per call that told
    `StartEvent`, last."""

    operation_id: str
    #: the key the operation has (a re-issued one's, from the store)
    key: str
    #: what ended the call by raising (an `OutcomeError` for a call that raised its
    #: outcome, `asyncio.CancelledError`, `KeyboardInterrupt`, a hook's error...);
    #: None when it returned
    error: BaseException | None = None
    #: the client's retry budget refused a retry this call would have made
    budget_spent: bool = False


@dataclass(frozen=True, slots=True)
class StoreEvent:
    """A call to the store made for an operation (a client's hooks only): `call` is the
    store's method (`begin`, `claim`, `record_attempt`, `finish`), `seconds` how long it
    took as the caller saw it (an async client's worker thread hop included)."""

    call: str
    seconds: float
    #: it raised (a `StoreError`, or the caller was cut short)
    failed: bool = False


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
    on_start: Callable[[StartEvent], None] | None = None
    on_attempt_end: Callable[[AttemptEndEvent], None] | None = None
    #: told by the client's hooks only (not a call's): see `StoreEvent`
    on_store: Callable[[StoreEvent], None] | None = None
    on_end: Callable[[EndEvent], None] | None = None

    def takes_attempt(self, *, log: bool = True) -> bool:
        """Whether `attempt` does anything: a hook, or (with `log`) a DEBUG record. The
        event is built only then (its URL costs a serialization)."""
        return self.on_attempt is not None or (log and logger.isEnabledFor(logging.DEBUG))

    def start(self, event: StartEvent) -> None:
        if self.on_start is not None:
            self.on_start(event)

    def end(self, event: EndEvent) -> None:
        if self.on_end is not None:
            self.on_end(event)

    def attempt(self, event: AttemptEvent, *, log: bool = True) -> None:
        # The record's fields are built only for a logger that takes it: on the hot
        # path, DEBUG is almost always off.
        if log and logger.isEnabledFor(logging.DEBUG):
            url = shown_url(event.url)
            logger.debug(
                "attempt %d of %s %s (key %s, timeout %.3fs)",
                event.attempt,
                event.method,
                url,
                event.key,
                event.timeout,
                extra=log_fields(
                    "attempt",
                    operation_id=event.operation_id,
                    key=event.key,
                    attempt=event.attempt,
                    method=event.method,
                    url=url,
                    timeout=event.timeout,
                ),
            )
        if self.on_attempt is not None:
            self.on_attempt(event)

    def attempt_end(self, event: AttemptEndEvent) -> None:
        if self.on_attempt_end is not None:
            self.on_attempt_end(event)

    def store(self, event: StoreEvent) -> None:
        if self.on_store is not None:
            self.on_store(event)

    def retry(self, event: RetryEvent, *, log: bool = True) -> None:
        if log and logger.isEnabledFor(logging.INFO):
            logger.info(
                "retrying operation %s (key %s) in %.3fs after attempt %d: %s",
                event.operation_id,
                event.key,
                event.wait,
                event.attempt,
                event.evidence,
                extra=log_fields(
                    "retry",
                    operation_id=event.operation_id,
                    key=event.key,
                    attempt=event.attempt,
                    wait=event.wait,
                    evidence=event.evidence,
                    maybe_applied=event.maybe_applied,
                ),
            )
        if self.on_retry is not None:
            self.on_retry(event)

    def outcome(self, outcome: Outcome, *, log: bool = True) -> None:
        if log:
            log_outcome(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def log_outcome(outcome: Outcome) -> None:
    """The record of an outcome. An answer given back from the store says so: no
    request was sent for it now."""
    level = (
        logging.WARNING if outcome.state in (State.INDETERMINATE, State.NOT_SENT) else logging.INFO
    )
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "operation %s (key %s) %s after %d attempt(s)%s: %s",
        outcome.operation_id,
        outcome.key,
        outcome.state.value,
        outcome.attempts,
        _FROM_STORE if outcome.from_store else "",
        outcome.evidence,
        extra=log_fields(
            "outcome",
            operation_id=outcome.operation_id,
            key=outcome.key,
            state=outcome.state.value,
            attempts=outcome.attempts,
            attempt=outcome.attempts,
            evidence=outcome.evidence,
            status=outcome.last_status,
            from_store=outcome.from_store,
            replayed=outcome.replayed,
            maybe_applied=outcome.maybe_applied,
        ),
    )


_FROM_STORE = ", as the store has it (nothing sent now)"


#: The prefix of every field idemclient adds to a log record.
PREFIX = "idemclient."


def log_fields(event: str, **fields: object) -> dict[str, object]:
    """The `extra=` of a record: each field under ``idemclient.<name>`` (``event`` too),
    and, deprecated for one release, under its bare name as well."""
    namespaced = {f"{PREFIX}{name}": value for name, value in fields.items()}
    namespaced[f"{PREFIX}event"] = event
    return {"event": event, **fields, **namespaced}


class DropLegacyFields(logging.Filter):
    """Removes the bare field names (`event`, `key`, `operation_id`...) from idemclient's
    records, keeping the ``idemclient.*`` ones: add it to your handler (a filter on a
    handler sees the records of every ``idemclient.*`` logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "idemclient" or record.name.startswith(PREFIX):
            fields = record.__dict__
            for name in [n[len(PREFIX) :] for n in fields if n.startswith(PREFIX)]:
                fields.pop(name, None)
        return True


#: A `logging.Filter` for a handler: idemclient's records without the deprecated bare
#: field names, so that they can never overwrite a formatter's own (`event`).
drop_legacy_fields: logging.Filter = DropLegacyFields()
