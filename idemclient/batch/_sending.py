"""A run's last phase, send (see `_run`): every unfinished row, with its key, with
bounded concurrency through the client; each row's line written as it ends."""

from __future__ import annotations

import dataclasses

import httpx

from .. import Outcome, State
from .._errors import OutcomeError, ReconcileRequired
from .._seam import Blocking, Close, Feed, Op, read_existing, send_registered, settings_of
from ._abandon import Abandoned
from ._advice import rerun_settles
from ._plan import RowAction
from ._progress_counts import Stopped
from ._recording import Recording, _reopened_why
from ._report import changed_line, evidence_after, reason_of, recorded_line
from ._report_row import ReportRow
from ._run_rows import KNOWN_CODES, SENDING, At, RunRow, recorded_intent
from ._run_state import RowFeed

__all__ = ["Sending"]

_BUDGET = "retry budget"


class Sending(Recording):
    """4. send: every row not finished, under its recorded key."""

    def sendings(self) -> Feed:
        """The rows to send, a chunk at a time, in the file's order: a new row as it
        was registered, a known one as the store holds it now."""
        return RowFeed(self, SENDING, self._to_send)

    def _to_send(self, start: int, stop: int) -> list[RunRow]:
        known = KNOWN_CODES
        planned = (
            {item.index: item for item in self._planned(start, stop, known)}
            if any(bytes([code]) in self.status[start:stop] for code in known)
            else {}
        )
        jobs = []
        chunk = self.batch.rows[start:stop]
        for index in range(start, stop):
            code = self.status[index]
            if code == At.NEW:
                jobs.append(self._new_row(index, chunk[index - start]))
            elif code in known:
                item = planned[index]
                record = item.plan.record
                if record is None or item.plan.decision is RowAction.REFUSED:
                    self._done(item, changed_line(item, record))
                    continue
                item.outgoing = recorded_intent(record)
                if code == At.REOPENED:
                    # Why it was pointed at this run's URL, as its record says.
                    why, corrected = _reopened_why(record)
                    if corrected:
                        item.plan = dataclasses.replace(item.plan, corrected=why)
                    else:
                        item.reopened = why
                jobs.append(item)
        return jobs

    def send(self, item: RunRow) -> Op[None]:
        """Send one row with its key (a step, see `_operations`), and report it."""
        if self.stopping.is_set():
            return
        if self.tracker.credentials_refused:
            yield Blocking(self.not_started, (item,))
            return
        # A new row's intent is made again here, as it was registered.
        outgoing = item.outgoing or self._intent(item)
        hooks = self.in_flight.hooks(outgoing.operation_id, self.tracker.hooks(outgoing.key))
        with self._holds(outgoing.operation_id):
            try:
                sent = yield from send_registered(self.http, outgoing, hooks=hooks)
                # "Already done, here it is" (GoCardless): the resource says what it came to.
                sent = yield from read_existing(
                    settings_of(self.http), sent, httpx.URL(outgoing.url)
                )
            except (Stopped, Abandoned):
                yield Blocking(self.stopped, (item,))
                return
            if sent.response is not None:
                yield Close(sent.response)
            assert sent.outcome is not None
            self.sent(item, sent.outcome, sent.error)

    def sent(self, item: RunRow, outcome: Outcome, error: OutcomeError | None = None) -> None:
        budget = _BUDGET in outcome.evidence or _BUDGET in str(error or "")
        now = self.clock.time()
        # Left unsettled while the server's wait (Retry-After) still runs.
        waiting = not outcome.state.finished and (outcome.not_before or now) > now
        with self._lock:
            counts = self.counts
            counts.budget += budget
            counts.reopened += bool(item.reopened)
            counts.corrected += bool(item.plan.corrected)
            if waiting:
                assert outcome.not_before is not None
                counts.waited += 1
                counts.waited_not_sent += outcome.state is State.NOT_SENT
                counts.longest_wait = max(counts.longest_wait, outcome.not_before - now)
                counts.wait_until = max(counts.wait_until, outcome.not_before)
        reconcile = False
        if isinstance(error, ReconcileRequired):
            # Why it is not sent again: its age, or an answer sending again cannot explain.
            why = error.reason or "recorded longer ago than the server keeps keys"
            command = self.commands.reconcile(outcome.operation_id)
            if rerun_settles(self.target.lookup):
                then = (
                    "run the same command again: it is looked up by its reference first"
                    f" (or settle it now with `{command}`)"
                )
            else:
                # Sent without a look-up by reference, a rerun would stop here again.
                reconcile = True
                then = f"a rerun cannot settle it: settle it with `{command}`"
            reason = (
                f"may have been applied: never sent again ({why}{evidence_after(outcome)}); {then}"
            )
        else:
            reason = reason_of(outcome, budget=budget)
        if item.reopened:
            reason = f"sent again under its key to this run's URL ({item.reopened}); {reason}"
        if item.plan.corrected:
            reason = f"{item.plan.corrected}; {reason}"
        line = ReportRow.of(item.row.number, item.identity.reference, outcome, reason)
        if reconcile:
            line = dataclasses.replace(line, reconcile=True)
            self._notify(f"row {item.row.number} ({item.identity.reference}): {reason}")
        self._done(item, line)

    def not_started(self, item: RunRow) -> None:
        """A row not sent: the server refused the credentials, or the run was stopped."""
        record = item.outgoing or self._intent(item)
        stopped = self.stopping.is_set()
        if not stopped:
            with self._lock:
                self.counts.not_started += 1
        self._done(
            item,
            recorded_line(
                item,
                self.store.get(record.operation_id),
                key=record.key,
                reason="not sent: interrupted before it was started"
                if stopped
                else "not sent: the server refused the credentials (HTTP 401) for an"
                " earlier row; check the token",
                replayed=False,
            ),
        )

    def stopped(self, item: RunRow) -> None:
        """A row whose retries were cut short by `stop`."""
        outgoing = item.outgoing or self._intent(item)
        current = self.store.get(outgoing.operation_id)
        maybe = current is None or current.maybe_applied or current.state is State.IN_FLIGHT
        self._done(
            item,
            recorded_line(
                item,
                current,
                key=outgoing.key,
                reason="interrupted while being sent: "
                + ("may have been applied; run again" if maybe else "not applied; run again"),
                replayed=False,
            ),
        )
