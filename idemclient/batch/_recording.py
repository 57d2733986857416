"""A run's third phase, record (see `_run`), and the store's writes the look-ups
make as their answers come: a payment found recorded as the row's outcome, a row
settled or left unsettled by its answer, a row never applied pointed at this run's
URL (same key), the other new rows registered in one transaction."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from .. import Outcome, State
from .._errors import BatchInvalid, OperationMismatch, OutcomeError
from .._seam import DATE_RESOLUTION, Verdict, reconcile, settings_of, shown_url
from ..store import Intent, OperationRecord, ServerTime, StoredResponse
from ._plan import RowAction, past_retention
from ._report import found_id, found_reason, reason_of, recorded_line, report_line, unsettled_line
from ._report_row import ReportRow
from ._run_rows import At, RunRow
from ._run_state import RunState
from ._sender import target_of

__all__ = ["Recording"]

_JSON_CONTENT_TYPE = (("content-type", "application/json"),)


def _reopened_why(record: OperationRecord) -> tuple[str, bool]:
    """Why a record was pointed at this run's URL, as `Recording._reopen` wrote it, and
    whether that was its corrected content (`_corrections`)."""
    evidence = record.evidence
    if _CORRECTED in evidence:
        return evidence.partition(_CORRECTED)[2], True
    return evidence.partition(_REOPENED)[2], False


#: What the evidence of a record pointed at this run's URL says, before why: at
#: another URL or with other credentials, or with its corrected content.
_REOPENED = " under the same key: "

_CORRECTED = " with its corrected content, under the same key: "


class Recording(RunState):
    """3. record: what the store is told before anything is sent."""

    def record(self) -> None:
        """Point the rows never applied at another URL at this run's, and register the
        new rows, in one transaction (a chunk at a time inside it). What the look-ups
        found is recorded already, as each came (`answered`)."""
        for start, stop in self._chunks((At.REOPEN,)):
            for item in self._planned(start, stop, (At.REOPEN,)):
                if item.plan.decision is not RowAction.REOPEN:  # reopened meanwhile, by another
                    self.status[item.index] = At.KNOWN
                    continue
                if self._reopen(item) is not None:
                    self.status[item.index] = At.REOPENED
        if At.NEW in self.status or At.CORRECTION in self.status:
            self._register()

    def _register(self) -> None:
        def intents() -> Iterator[Intent]:
            for start, stop in self._chunks((At.NEW, At.CORRECTION)):
                chunk = self.batch.rows[start:stop]
                # A correction is planned again for its identity (`_corrections`): read
                # inside the registration's transaction.
                corrections = (
                    {item.index: item for item in self._planned(start, stop, (At.CORRECTION,))}
                    if bytes([At.CORRECTION]) in self.status[start:stop]
                    else {}
                )
                for index in range(start, stop):
                    if self.status[index] == At.NEW:
                        yield self._intent(self._new_row(index, chunk[index - start]))
                    elif index in corrections:
                        yield self._intent(corrections[index])

        try:
            self.store.register(intents(), now=self.clock.time())
            self._note_registered()
        except OperationMismatch as exc:
            named = {operation_id for operation_id, _why in exc.conflicts}
            numbers = {}
            for start, stop in self._chunks((At.NEW, At.CORRECTION)):
                for item in self._planned(start, stop, (At.NEW, At.CORRECTION)):
                    if item.identity.operation_id in named:
                        numbers[item.identity.operation_id] = item.row.number
            raise BatchInvalid(
                self.batch.source,
                [
                    (numbers.get(operation_id, 0), f"changed in the store while planning: {why}")
                    for operation_id, why in exc.conflicts
                ],
            ) from exc

    def _note_registered(self) -> None:
        """Keep the digest of each registered row's payment beside its record
        (`_resave`), a chunk at a time: a later file re-saved by a spreadsheet is found
        by it, whatever its references. After the registration's commit: a row left
        without one (the process killed between) is digested by the next run."""
        for start, stop in self._chunks((At.NEW, At.CORRECTION)):
            chunk = self.batch.rows[start:stop]
            items = [
                self._new_row(index, chunk[index - start])
                for index in range(start, stop)
                if self.status[index] == At.NEW
            ]
            if bytes([At.CORRECTION]) in self.status[start:stop]:
                items += self._planned(start, stop, (At.CORRECTION,))
            self._note_contents(items)

    def _note_contents(self, items: Sequence[RunRow]) -> None:
        """Keep the digest of each row's payment beside its record (`_resave`)."""
        self.store.note_contents((item.identity.operation_id, self._digest(item)) for item in items)

    def _intent(self, item: RunRow) -> Intent:
        """A new row's intent, exactly as the transport will find it when it is sent."""
        assert self._fingerprint is not None, "planned first"
        body = self.request_of(item.row, item.identity).body
        return Intent(
            operation_id=item.identity.operation_id,
            key=item.identity.key,
            key_given=True,
            method="POST",
            url=self._marked,
            headers=_JSON_CONTENT_TYPE,
            body=body,
            fingerprint=self._fingerprint(body),
            reference=item.identity.reference,
            profile=self.resolved.profile.name,
        )

    def _record_found(self, item: RunRow) -> None:
        """A row the store did not know, found on the server: recorded settled in one
        write (`Store.record_settled`), never sent."""
        asked = item.asked
        assert asked is not None
        verdict = asked.verdict
        if verdict.state is None:
            self._tally("found_unsettled")
            self._done(item, unsettled_line(item, item.identity.key, verdict))
            return
        response = asked.response
        intent = self._intent(item)
        try:
            record = self.store.record_settled(
                intent,
                state=verdict.state,
                evidence=(
                    f"found by look-up before sending: GET {shown_url(asked.url)}: {verdict.why}"
                ),
                now=self.clock.time(),
                response=None
                if response is None
                else StoredResponse.of(
                    response.status_code, tuple(response.headers.multi_items()), response.content
                ),
            )
        except OperationMismatch as exc:
            raise BatchInvalid(
                self.batch.source,
                [(item.row.number, f"changed in the store while this run planned it: {exc}")],
            ) from exc
        if not record.state.finished or record.attempts:
            # Another process recorded it first, and may be sending it: as it stands.
            self._done(item, recorded_line(item, record, replayed=False))
            return
        self._note_contents([item])
        self._tell(reconcile.settled(record, response))
        self._tally("found")
        self._done(item, recorded_line(item, record, reason=found_reason(verdict)))

    def _found_elsewhere(self, item: RunRow) -> None:
        """A row finished at another origin or with other credentials, and found here
        by its look-up: done here too, as the look-up says (nothing is written: the
        record stays what it was where it was finished)."""
        asked, record = item.asked, item.plan.record
        assert asked is not None
        assert record is not None
        verdict = asked.verdict
        if verdict.state is None:
            self._tally("found_unsettled")
            self._done(item, unsettled_line(item, record.key, verdict))
            return
        self._tally("found")
        response = asked.response
        self._done(
            item,
            report_line(
                item,
                key=record.key,
                state=verdict.state,
                status=None if response is None else response.status_code,
                resource=found_id(verdict),
                replayed=True,
                reason=f"{item.plan.why}; {found_reason(verdict)}",
                attempts=record.attempts,
            ),
        )

    def _settle_known(self, item: RunRow, verdict: Verdict, record: OperationRecord) -> bool:
        """Apply a look-up to a known record; True if the row is to be sent.

        Found and final: settled, not sent. Not found: no longer maybe applied, sent
        under its key. Found, not final yet, or not found while an attempt that may
        have been applied may still be running at the server (sent less than the
        profile's `in_flight_for`, and the hosts' clock skew, ago): while the record is
        within the server's key retention, sent under its key, still maybe applied (the
        server holds the key, and the key's answer finishes it); past it, left
        unsettled."""
        asked = item.asked
        assert asked is not None
        if verdict.finding == "not_found" and not record.maybe_applied:
            return True
        now = self.clock.time()
        # The look-up's answer says the server's time (its Date): both clocks judge a
        # record stamped before this client started watching its clock.
        settings = settings_of(self.http)
        watched_since = settings.watched_since
        server_at = reconcile.answered_at(asked.response)
        running = (
            verdict.finding == "not_found"
            and reconcile.still_in_flight(
                record,
                now=now,
                in_flight_for=self.resolved.profile.in_flight_for,
                asked_at=asked.at,
                server_at=server_at,
                watched_since=watched_since,
            )
            is not None
        )
        unfinished = running or (verdict.finding == "found" and verdict.state is None)
        server = (
            None
            if server_at is None or settings.watched(record.created_at)
            else ServerTime(server_at, server_at + DATE_RESOLUTION)
        )
        if unfinished and not past_retention(
            record, now=now, retention=self.retention, server=server
        ):
            return True
        lookup = self.target.lookup
        try:
            taken = reconcile.take(self.store, self.clock, record.operation_id)
        except OutcomeError as busy:  # another process is sending it right now
            self._done(
                item,
                ReportRow.of(
                    item.row.number,
                    item.identity.reference,
                    busy.outcome,
                    reason_of(busy.outcome, budget=False),
                ),
            )
            return False
        if isinstance(taken, Outcome):  # finished meanwhile
            self._done(item, ReportRow.of(item.row.number, item.identity.reference, taken))
            return False
        try:
            outcome = reconcile.apply(
                self.store,
                self.clock,
                taken,
                verdict,
                where=f"GET {shown_url(asked.url)}",
                response=asked.response,
                in_flight_for=self.resolved.profile.in_flight_for,
                # Asked before this lease was taken, maybe long before (every row is
                # asked first): its "none" is judged as of then.
                asked_at=asked.at if asked.at is not None else now,
                by_reference=lookup is not None and reconcile.by_reference_alone(lookup.template),
                watched_since=watched_since,
            )
        except OutcomeError as exc:
            self._tell(exc.outcome)
            only_by_hand = False
            named = reconcile.kept_payment(record)
            if verdict.finding == "not_found" and not running and named is not None:
                # Its 409 names the payment made under its key: this look-up misses it.
                # Every rerun would ask the same look-up and get the same "none".
                only_by_hand = True
                command = self.commands.reconcile(record.operation_id)
                reason = (
                    f"not found on the server ({verdict.why}), but the HTTP 409 it was"
                    f" answered names {named}, the payment made under its key (a replay):"
                    " not sent, not settled, and a rerun cannot settle it; look that"
                    f" payment up, and settle the row with `{command} --lookup TEMPLATE`,"
                    " a look-up that lists it"
                )
            elif running or verdict.finding == "not_found":  # not found yet, too late to send
                reason = (
                    f"not found on the server yet ({verdict.why}), but an attempt that may"
                    " have been applied may still be running there (the profile's"
                    " in_flight_for, and the clock skew allowed between the store's"
                    " hosts), and its key may be forgotten: not sent; run again later to"
                    " settle it"
                )
            else:  # found, not final yet: maybe applied from now on
                self._tally("found_unsettled")
                reason = (
                    f"found on the server, not final yet ({verdict.why}): not sent;"
                    f" run again later to settle it ({exc.outcome.state.words})"
                )
            line = report_line(
                item,
                key=record.key,
                state=State.INDETERMINATE,
                status=None,
                resource=found_id(verdict),
                replayed=False,
                reason=reason,
            )
            self._done(item, dataclasses.replace(line, reconcile=only_by_hand))
            return False
        self._tell(outcome)
        if outcome.state.finished:
            if verdict.finding == "found":
                self._tally("found")
                reason = found_reason(verdict)
            else:  # its answer, read as a replay, was the application's refusal
                reason = (
                    f"refused by the server, never applied: not sent again ({outcome.evidence};"
                    f" `{self.commands.show(item.identity.operation_id)}` shows the body)"
                )
            self._done(
                item,
                ReportRow.of(
                    item.row.number,
                    item.identity.reference,
                    outcome,
                    reason,
                    already_done=verdict.finding == "found",
                ),
            )
            return False
        return True  # not found: no longer maybe applied, sent again with its key

    def _tell(self, outcome: Outcome) -> None:
        """A row settled (or left unsettled) by its look-up, told to the client's hooks
        as every outcome is: a log record, a span, the indeterminate gauge."""
        try:
            hooks = settings_of(self.http).hooks
        except TypeError:  # a dry run's client: nothing is told
            return
        hooks.outcome(outcome)

    def _reopen(self, item: RunRow) -> OperationRecord | None:
        """Point a row never applied at another URL at this run's request, same key;
        the record as it is now (None: settled meanwhile, and reported)."""
        record = item.plan.record
        assert record is not None
        new = self._intent(item)
        intent = Intent(
            operation_id=record.operation_id,
            key=record.key,
            key_given=True,
            method="POST",
            url=new.url,
            headers=new.headers,
            body=new.body,
            fingerprint=new.fingerprint,
            reference=new.reference,
        )
        reopened = self.store.reopen(
            intent,
            evidence=(
                f"reopened for {intent.url}{_CORRECTED}{item.plan.corrected}"
                if item.plan.corrected
                else f"reopened for {intent.url}{_REOPENED}{item.plan.why}"
            ),
            now=self.clock.time(),
        )
        if reopened is not None:
            item.reopened = "" if item.plan.corrected else item.plan.why
            if item.plan.corrected:  # its content is another payment's now
                self.store.note_contents([(record.operation_id, self._digest(item))])
            return reopened
        # Changed since it was planned (another process): what is stored now decides.
        current = self.store.get(record.operation_id)
        if current is not None and current.state.finished:
            self._done(item, recorded_line(item, current))
            return None
        if current is None or target_of(current.url) != target_of(intent.url):
            raise BatchInvalid(
                self.batch.source,
                [(item.row.number, "changed in the store while this run planned it: run again")],
            )
        return current
