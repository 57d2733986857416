"""Rows in flight when a run is cut short for good (a second Ctrl-C, SIGTERM or SIGHUP
after the grace): what the store keeps of them is the truth.

A stopped run lets the rows in flight finish their attempt (`_cli`). When it cannot
wait (the operator insists, the grace runs out), the process ends while the sending
threads are in the middle of an exchange: whatever they would have written is lost.
Left as it was, such a row is `in_flight` with no attempt counted and nothing "maybe
applied", held by a process that no longer exists: `ops show` says it was never sent,
and the summary counts it nowhere. So before the run reports, each row this process
holds is written as it stands:

- its attempt was handed to the transport (the client's `on_attempt` said so, and no
  `on_attempt_end` yet): `indeterminate`, that attempt counted, maybe applied, sent
  then (an unguarded server's in-flight hold counts from it);
- held, no attempt under way (claimed, about to be sent): its lease given back, as it
  was (`not_sent`, or `indeterminate` if it may have been applied before).

From the moment a run is abandoned, no attempt of it starts: the attempt hook raises
(`Abandoned`) before anything is sent, so nothing written here is overtaken by a send.
A row another process holds is left alone.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from .. import State
from .._errors import IdemError
from .._seam import of_this_process
from ..clock import Clock
from ..hooks import AttemptEndEvent, AttemptEvent, Hooks
from ..store import OperationRecord, Progress, Store

__all__ = ["Abandoned", "InFlight"]

EVIDENCE = "the run was stopped while this attempt was at the server: it may have been applied"


class Abandoned(IdemError):
    """Raised from a row's attempt hook once the run is abandoned: nothing more is sent."""


@dataclass(frozen=True, slots=True)
class _Attempt:
    #: 1-based, counting earlier calls' attempts (`AttemptEvent.attempt`)
    number: int
    #: when it was handed to the transport (the run's clock)
    at: float


class InFlight:
    """The attempts the transport holds, by operation id, as the rows' hooks tell them;
    and the store's records of what a run cut short leaves (`abandon`)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._sending: dict[str, _Attempt] = {}
        self._abandoned = False

    def hooks(self, operation_id: str, others: Hooks) -> Hooks:
        """A row's hooks (`others`, with these): each attempt noted as handed over, and
        as ended."""

        def attempt(event: AttemptEvent) -> None:
            with self._lock:
                if self._abandoned:
                    raise Abandoned("the batch was stopped: no attempt is started")
                self._sending[operation_id] = _Attempt(event.attempt, self._clock.time())

        def ended(_event: AttemptEndEvent) -> None:
            with self._lock:
                self._sending.pop(operation_id, None)

        return dataclasses.replace(others, on_attempt=attempt, on_attempt_end=ended)

    def abandon(self, store: Store, operation_ids: list[str]) -> int:
        """Stop every attempt from starting, and write each of `operation_ids` that
        this process holds as it stands (see the module docstring); how many attempts
        were in flight."""
        with self._lock:
            self._abandoned = True
            sending = dict(self._sending)
        for operation_id in operation_ids:
            record = store.get(operation_id)
            if record is None or record.state.finished or record.lease_owner is None:
                continue
            if not of_this_process(record.lease_owner):
                continue  # another process's: it records its own
            _write(store, record, sending.get(operation_id), self._clock.time())
        return len(sending)


def _write(
    store: Store, record: OperationRecord, attempt: _Attempt | None, now: float
) -> OperationRecord:
    assert record.lease_owner is not None
    if attempt is not None:
        progress = Progress(
            attempts=max(record.attempts, attempt.number),
            maybe_applied=True,
            evidence=EVIDENCE,
            not_before=record.not_before,
            now=now,
            sent_at=attempt.at,
        )
        state = State.INDETERMINATE
    else:
        progress = Progress(
            attempts=record.attempts,
            maybe_applied=record.maybe_applied,
            evidence=record.evidence or "the run was stopped before it was sent",
            not_before=record.not_before,
            now=now,
        )
        state = State.INDETERMINATE if record.maybe_applied else State.NOT_SENT
    return store.finish(
        record.operation_id, owner=record.lease_owner, state=state, progress=progress
    )
