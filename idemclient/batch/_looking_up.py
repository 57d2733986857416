"""A run's second phase, look up (see `_run`): each row that needs it is asked on
the server by its reference, each answer judged and kept as it comes (recorded
through `_recording`), an earlier run's "nothing found" believed while it is young
(`_remembered`), and what refuses the batch or cuts the run short gathered."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from .. import State
from .._errors import BatchInvalid
from .._seam import Feed, Verdict, log_fields, redact_url, settings_of, shown_url
from ..store import NotFound, ServerTime
from ._identity import forms
from ._lookup import Asked, Asking, LookupRetry, LookupSettings, Trouble
from ._plan import SCOPE_ADVICE, RowAction, recorded_payload
from ._recording import Recording
from ._remembered import BELIEVED_FOR, believed, reading
from ._report import conflict_with, not_working, recorded_line, utc_text
from ._run_rows import At, RunRow, new_code, start_of
from ._run_state import RowFeed

__all__ = ["LookingUp"]

logger = logging.getLogger("idemclient.batch")


class LookingUp(Recording):
    """2. look up: ask the server before a row's first send; what it says is recorded."""

    def start_looking(self) -> bool:
        """Whether any row is to be looked up; if so, say so, and forget the kept
        "nothing found" answers too old to believe."""
        lookup = self.target.lookup
        count = self.status.count(At.ASK)
        self.counts.looked_up = count
        if lookup is None or not count:
            return False
        self.store.forget_not_found(asked_before=self.clock.time() - BELIEVED_FOR)
        template = lookup.template.replace("{reference}", "<reference>")
        self._notify(
            f"looking up {count} row(s) before sending (new to the store, never sent, maybe"
            " applied, finished elsewhere, or recorded past the key retention): GET"
            f" {template}"
        )
        self.looking.start(count)
        return True

    def askings(self) -> Feed:
        """The rows to look up, a chunk at a time; those whose "nothing found" an
        earlier run kept wait (`At.KEPT`) for `kept_askings`, to be judged once the
        server's time is known (`_remembered`)."""
        return RowFeed(self, (At.ASK,), self._to_ask)

    def _to_ask(self, start: int, stop: int) -> list[RunRow]:
        items = [item for item in self._planned(start, stop, (At.ASK,)) if self._still_asked(item)]
        kept = self._kept([item for item in items if _rememberable(item)])
        to_ask = []
        for item in items:
            if _looked_up_as(item)[0] in kept:
                self.status[item.index] = At.KEPT
            else:
                to_ask.append(item)
        return to_ask

    def time_probe(self) -> list[RunRow]:
        """One row whose kept answer waits, to ask first when the client does not know
        the server's time yet (no look-up was answered so far): its answer tells it,
        and the others are judged by it. None otherwise."""
        at = self.status.find(At.KEPT)
        if at < 0:
            return []
        items = self._planned(at, at + 1, (At.KEPT,))
        if not items or self._knows_server_time(items[0]):
            return []
        self.status[at] = At.ASK
        return items

    def kept_askings(self) -> Feed:
        """The rows `askings` held back, a chunk at a time: each whose kept "nothing
        found" is believed (`_remembered.believed`) is answered by it now; the others
        are to ask."""
        return RowFeed(self, (At.KEPT,), self._kept_to_ask)

    def _kept_to_ask(self, start: int, stop: int) -> list[RunRow]:
        items = [item for item in self._planned(start, stop, (At.KEPT,)) if self._still_asked(item)]
        kept = self._kept(items)
        now = self.clock.time()
        to_ask = []
        for item in items:
            found = kept.get(_looked_up_as(item)[0])
            if found is not None and _rememberable(item) and self._believed(item, found, now):
                self._tally("remembered")
                self.answered(item)
            else:
                self.status[item.index] = At.ASK
                to_ask.append(item)
        return to_ask

    def _still_asked(self, item: RunRow) -> bool:
        """Whether a row to look up is still one: planned again as the store has it
        now, another process may have finished it, or recorded it otherwise."""
        plan = item.plan
        if plan.look_up:
            return True
        self.looking.passed()
        if plan.decision is RowAction.DONE:
            assert plan.record is not None
            self._done(item, recorded_line(item, plan.record))
        elif plan.decision is RowAction.REFUSED:
            self._problem(item, f"reference {item.identity.reference!r} {plan.why}", plan.advice)
        else:
            self.status[item.index] = start_of(plan)
        return False

    def _knows_server_time(self, item: RunRow) -> bool:
        """Whether the client knows the look-up's server's time (an answer of it told
        it): a server that sends no `Date` leaves it unknown, and costs a probe a run."""
        url = httpx.URL(self._lookup_url(self.asking(item).url))
        try:
            settings = settings_of(self.http)
        except TypeError:  # not a wrapped client: judged by this clock alone
            return True
        return settings.server_times is None or settings.server_time(url, stamped=0.0) is not None

    def _server_time(self, item: RunRow, kept: NotFound) -> ServerTime | None:
        """The server's time now, if the client knows it, to judge `kept` by."""
        url = self._lookup_url(self.asking(item).url)
        try:
            return settings_of(self.http).server_time(httpx.URL(url), stamped=kept.asked_at)
        except TypeError:  # not a wrapped client: judged by this clock alone
            return None

    def _kept(self, items: Sequence[RunRow]) -> dict[str, NotFound]:
        """What the store keeps of the look-ups of `items` that found nothing."""
        if not items:
            return {}
        ids = [_looked_up_as(item)[0] for item in items]
        return {kept.operation_id: kept for kept in self.store.not_found(ids)}

    def _believed(self, item: RunRow, kept: NotFound, now: float) -> bool:
        """Answer a row's look-up with an earlier run's kept "nothing found", if it is
        believed (`_remembered.believed`)."""
        key = _looked_up_as(item)[1]
        asking = self.asking(item)
        if asking.refused is not None:
            return False
        url = self._lookup_url(asking.url)
        lookup = self.target.lookup
        assert lookup is not None
        if not believed(
            kept,
            key=key,
            url=url,
            how=_reading(lookup),
            sender=self._sender,
            now=now,
            retention=self.retention,
            server=self._server_time(item, kept),
        ):
            return False
        item.asked = Asked(
            asking.url,
            Verdict(
                "not_found",
                f"nothing found when it was asked, at {utc_text(kept.asked_at)} (an earlier"
                " run's look-up, kept)",
            ),
            None,
            kept.asked_at,
            server_at=kept.server_at,
            remembered=True,
        )
        return True

    def _lookup_url(self, url: str) -> str:
        """A look-up's URL as it is kept: absolute, without user, password or secret
        query values."""
        return str(redact_url(self.http.build_request("GET", url).url))

    def asking(self, item: RunRow) -> Asking:
        """One row's look-up (made when it is asked, not all at once): by the reference
        and key it was recorded with, if the store knows it."""
        lookup = self.target.lookup
        assert lookup is not None
        record = item.plan.record
        field = self.resolved.key.field
        payload = (
            recorded_payload(record, field) if record is not None else None
        ) or self.request_of(item.row, item.identity).payload
        return Asking(
            lookup,
            key=record.key if record is not None else item.identity.key,
            reference=(record.reference if record is not None else None) or item.identity.reference,
            payload=payload,
            policy=self.policy,
            clock=self.clock,
        )

    def asking_other_forms(self, item: RunRow) -> list[Asking]:
        """The row's look-ups by the other Unicode forms of its reference (its NFD form,
        where it differs): a payment an earlier version sent with the reference as its
        file had it is found by a server that compares bytes too. None for a row the
        store knows: it is asked as it was recorded."""
        if item.plan.record is not None:
            return []
        lookup = self.target.lookup
        assert lookup is not None
        payload = self.request_of(item.row, item.identity).payload
        return [
            Asking(
                lookup,
                key=item.identity.key,
                reference=form,
                payload=payload,
                policy=self.policy,
                clock=self.clock,
            )
            for form in forms(item.identity.reference)[1:]
        ]

    def _found_so_far(self) -> str:
        """What the look-ups kept before the batch was refused, in words."""
        found = self.counts.found + self.counts.found_unsettled
        if not found:
            return ""
        return f" ({found} payment(s) the look-ups found on the server are recorded as found)"

    def answered(self, item: RunRow) -> None:
        """Keep a row's look-up as it comes (see `_remembered`): a payment found is
        recorded as the row's outcome now (`_record_found`, `_settle_known`); a
        "nothing found" for a row never applied is kept; a row that may have been
        applied is settled by it, under the server's in-flight hold. What refuses the
        batch (other content, a look-up that does not work) is noted for
        `take_answers`."""
        asked = item.asked
        assert asked is not None
        verdict = asked.verdict
        self.looking.answered(verdict)
        if asked.trouble is not None:
            self._troubled(asked)
            return
        if verdict.finding in ("mismatch", "ambiguous"):
            self._problem(
                item,
                conflict_with(item, asked, self.request_of(item.row, item.identity).payload),
                SCOPE_ADVICE,
            )
            return
        decision = item.plan.decision
        if decision is RowAction.ELSEWHERE:
            if verdict.finding == "found":
                self._found_elsewhere(item)
            else:
                self._problem(
                    item,
                    f"reference {item.identity.reference!r} {item.plan.why}, and a look-up"
                    f" here does not find it (GET {shown_url(asked.url)}: {verdict.why})",
                    item.plan.advice,
                )
            return
        if decision is RowAction.NEW:
            if verdict.finding == "found":
                self._record_found(item)
            else:
                if not asked.remembered:
                    self._remember(item)
                self.status[item.index] = new_code(item.plan)
            return
        record = item.plan.record
        assert record is not None
        if verdict.finding == "not_found" and _rememberable(item):
            if not asked.remembered:
                self._remember(item)
            # Sent as it is (pointed at this run's URL first, if it is to be: `record`).
            self.status[item.index] = At.REOPEN if decision is RowAction.REOPEN else At.KNOWN
            return
        with self._holds(record.operation_id):
            reopened = None
            if decision is RowAction.REOPEN:
                reopened = self._reopen(item)
                if reopened is None:
                    return
                record = reopened
            if self._settle_known(item, verdict, record):
                self.status[item.index] = At.REOPENED if reopened else At.KNOWN

    def _problem(self, item: RunRow, why: str, advice: str = "") -> None:
        """A row that refuses the batch: why, and what to do (said once)."""
        with self._lock:
            self.status[item.index] = At.REFUSED
            self._problems.append((item.row.number, why))
            if advice:
                self._advices[advice] = None

    def _troubled(self, asked: Asked) -> None:
        """A look-up that did not work (`Trouble`): the first that will not work by
        waiting, else the one the server asked the longest wait for."""
        with self._lock:
            if asked.trouble is not Trouble.LATER:
                self._lasting = self._lasting or asked
            elif self._later is None or (asked.server_wait or 0.0) > (
                self._later.server_wait or 0.0
            ):
                self._later = asked

    def _remember(self, item: RunRow) -> None:
        """Keep a row's look-up that found nothing (`Store.remember_not_found`)."""
        asked, lookup = item.asked, self.target.lookup
        assert asked is not None
        assert lookup is not None
        operation_id, key = _looked_up_as(item)
        now = self.clock.time()
        self.store.remember_not_found(
            [
                NotFound(
                    operation_id,
                    key,
                    self._sender.mark(self._lookup_url(asked.url)),
                    _reading(lookup),
                    asked.at if asked.at is not None else now,
                    asked.server_at,
                )
            ],
            now=now,
        )

    def take_answers(self) -> None:
        """Refuse the batch when a look-up did not work or found other content; a
        look-up the server answered "later" cuts the run short instead (`cut_short`):
        nothing is sent, and the run is to be made again later."""
        if self._lasting is not None:
            raise BatchInvalid(
                self.batch.source, [(0, not_working(self._lasting) + self._found_so_far())]
            )
        if self._later is not None:
            self.cut_short = self._later
            return
        if self._problems:
            problems = [(0, advice) for advice in self._advices] + self._problems
            recorded = self._found_so_far()
            if recorded:
                problems.append((0, recorded.strip(" ()")))
            raise BatchInvalid(self.batch.source, sorted(problems, key=lambda p: p[0]))
        if self.counts.looked_up:
            found, kept = self.looking.found, self.counts.remembered
            self._notify(
                f"looked up {self.counts.looked_up} row(s): {found} found on the server"
                f" (recorded, not sent), {self.counts.looked_up - found} not found"
                + (f" ({kept} answered by an earlier run's look-up, kept)" if kept else "")
            )

    def lookup_retried(self, retry: LookupRetry) -> None:
        """A row's look-up is asked again: an INFO record, and the command's line."""
        logger.info(
            "look-up of %s asked again in %.3fs after attempt %d: %s",
            retry.reference,
            retry.wait,
            retry.attempt,
            retry.evidence,
            extra=log_fields(
                "lookup_retry",
                reference=retry.reference,
                url=shown_url(retry.url),
                attempt=retry.attempt,
                wait=retry.wait,
                evidence=retry.evidence,
            ),
        )
        if self.on_lookup_retry is not None:
            self.on_lookup_retry(retry.line())


def _looked_up_as(item: RunRow) -> tuple[str, str]:
    """The operation id and key a row is looked up (and sent) as: its record's, if the
    store knows it."""
    record = item.plan.record
    if record is not None:
        return record.operation_id, record.key
    return item.identity.operation_id, item.identity.key


def _rememberable(item: RunRow) -> bool:
    """Whether a look-up of this row that finds nothing sends it at once, so that
    such an answer is worth keeping (`_remembered`): nothing of it can have been
    applied anywhere, and it is no row finished elsewhere."""
    record = item.plan.record
    if item.plan.decision is RowAction.NEW:
        return True
    if item.plan.decision not in (RowAction.KNOWN, RowAction.REOPEN) or record is None:
        return False
    return not record.maybe_applied and record.state is not State.IN_FLIGHT


def _reading(lookup: LookupSettings) -> str:
    return reading(lookup.reference_field, lookup.rules.reliable_404)
