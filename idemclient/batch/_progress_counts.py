"""Live counts while a batch runs, told to `on_progress` one change at a time: the
rows sent (`SendingProgress`) and the look-ups answered before (`LookingProgress`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import IdemError
from .._seam import Verdict
from ..hooks import Hooks, RetryEvent
from ._report_row import ReportRow

__all__ = ["BatchProgress", "LookingProgress", "SendingProgress", "Stopped"]


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """Live counts while a batch runs (given to `on_progress`)."""

    total: int
    done: int
    succeeded: int
    replayed: int
    retrying: int
    indeterminate: int
    not_sent: int
    failed: int
    #: done before this run (the store's answer, or a look-up's): nothing sent now
    already_done: int = 0
    #: what the counts are of: "sending" (every row of the batch), or "looking up"
    #: (the rows asked on the server before their first send: `done` of `total`
    #: answered, `retrying` asked again after an answer that said "later")
    phase: str = "sending"
    #: looking up: payments found on the server (recorded, not sent), and rows with
    #: none (an earlier run's answer, kept, counts too)
    found: int = 0
    not_found: int = 0


class Stopped(IdemError):
    """Raised from a row's retry hook once the run is asked to stop: the transport
    records where the row got to and gives its lease back."""


class SendingProgress:
    """Counts as rows finish and retry; tells `on_progress`, one change at a time."""

    def __init__(
        self,
        total: int,
        on_progress: Callable[[BatchProgress], None] | None,
        stopping: threading.Event,
    ) -> None:
        self._lock = threading.Lock()
        self._on_progress = on_progress
        self._stopping = stopping
        self._total = total
        self._states: dict[str, int] = {}
        self._replayed = 0
        self._already_done = 0
        self._retrying: set[str] = set()
        self.credentials_refused = False

    def hooks(self, key: str) -> Hooks:
        def retrying(_event: RetryEvent) -> None:
            if self._stopping.is_set():
                raise Stopped("the batch was interrupted")
            with self._lock:
                self._retrying.add(key)
                self._tell()

        return Hooks(on_retry=retrying)

    def finished(self, key: str, line: ReportRow) -> None:
        with self._lock:
            self._retrying.discard(key)
            self._states[line.state] = self._states.get(line.state, 0) + 1
            self._replayed += line.replayed
            self._already_done += line.already_done
            if line.credentials_refused:
                self.credentials_refused = True
            self._tell()

    def _tell(self) -> None:
        if self._on_progress is None:
            return
        states = self._states
        self._on_progress(
            BatchProgress(
                total=self._total,
                done=sum(states.values()),
                succeeded=states.get("succeeded", 0),
                replayed=self._replayed,
                retrying=len(self._retrying),
                indeterminate=states.get("indeterminate", 0) + states.get("in_flight", 0),
                not_sent=states.get("not_sent", 0) + states.get("pending", 0),
                failed=states.get("failed", 0),
                already_done=self._already_done,
            )
        )


class LookingProgress:
    """Counts the look-ups as they are answered; tells `on_progress` (phase "looking
    up"), one change at a time."""

    def __init__(self, on_progress: Callable[[BatchProgress], None] | None) -> None:
        self._lock = threading.Lock()
        self._on_progress = on_progress
        self.total = 0
        self.done = 0
        self.found = 0
        self.not_found = 0
        self._waiting = 0

    def start(self, total: int) -> None:
        with self._lock:
            self.total = total
            self._tell()

    def answered(self, verdict: Verdict) -> None:
        with self._lock:
            self.done += 1
            self.found += verdict.finding == "found"
            self.not_found += verdict.finding == "not_found"
            self._tell()

    def passed(self) -> None:
        """A row to look up that needs it no more (the store knows better now)."""
        with self._lock:
            self.done += 1
            self._tell()

    def waiting(self, now: bool) -> None:
        """A look-up waits to be asked again (`now`), or is asked again."""
        with self._lock:
            self._waiting += 1 if now else -1
            self._tell()

    def _tell(self) -> None:
        if self._on_progress is None or not self.total:
            return
        self._on_progress(
            BatchProgress(
                total=self.total,
                done=self.done,
                succeeded=0,
                replayed=0,
                retrying=self._waiting,
                indeterminate=0,
                not_sent=0,
                failed=0,
                phase="looking up",
                found=self.found,
                not_found=self.not_found,
            )
        )
