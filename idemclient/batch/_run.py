"""Running a batch: decide every row, look up what the store does not know, register,
then send with bounded concurrency through an idemclient client.

A run goes in phases, and nothing is sent before the last one:

1. plan: each row's identity (its reference within the batch's scope, see `_identity`)
   and what the store knows of it (`_plan.plan_row`), and for each row the store does
   not know, whether it holds the very same payment under another reference
   (`_duplicates`). A known reference with other content, a row that may have been
   applied at another URL or with other credentials, a row finished elsewhere without
   look-ups, or a twin refuses the whole batch (`BatchInvalid`, nothing recorded or
   sent);
2. look up: each row the store does not know, and each known one whose first send is
   to come, that may have been applied, that was finished elsewhere, or whose record is
   older than the server's key retention (`RetryPolicy.key_retention`), is looked up
   on the server by its reference (`_lookup`, judged by `_reconcile.judge`). Each
   answer is kept as it comes (`answered`): a payment found is recorded as the row's
   outcome, in one write, and is not sent; a row that may have been applied is settled
   by its answer; a "nothing found" for a row never applied is kept, and a run killed
   meanwhile believes it while it is young (`_remembered`). A look-up that does not
   work, a payment found with other content, or a row finished elsewhere and not found
   here refuses the batch; a look-up the server answers "later" cuts the run short;
3. record: rows never applied at a wrong URL or with other credentials are pointed at
   this run's (same key); the other new rows are registered in one transaction;
4. send: every unfinished row, with its key; the server deduplicates anything that was
   in flight. A run may be killed at any moment; running it again finishes the file.

Every URL the run records carries its digest of the credentials (`_sender`).

`submit` and `asubmit` run the phases in the calling thread or task; the command runs
them in a thread of their own so that Ctrl-C can stop them (`_Run.stop`) and still
write the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import httpx

from .. import _reconcile
from .._client import AsyncClient, Client, read_existing
from .._clock import Clock
from .._errors import BatchInvalid, OperationMismatch, OutcomeError, ReconcileRequired
from .._hooks import log_fields
from .._keys import DEFAULT_NAMESPACE
from .._operations import (
    Blocking,
    Close,
    Each,
    Feed,
    Op,
    arun,
    fingerprints,
    intent_for,
    profile_for,
    send_registered,
    settings_of,
)
from .._operations import run as run_op
from .._outcome import Outcome, State
from .._policy import RetryPolicy, retention_set
from .._profile import Profile, Resolved
from .._reconcile import LookupRules, Verdict
from .._redaction import redact_url, shown_url
from .._server_time import DATE_RESOLUTION, ServerTime
from .._store import Intent, NotFound, OperationRecord, Store, StoredResponse, as_admin
from .._version import __version__
from ..profiles import DEFAULT as DEFAULT_PROFILE
from . import _resave as resave
from ._abandon import Abandoned, InFlight
from ._advice import Commands, rerun_settles
from ._corrections import CORRECTED_MARK, correcting
from ._duplicates import TWIN_ADVICE, Paths, by_tail, tails_of, twin_problem, twins
from ._identity import (
    RowIdentity,
    forms,
    identify,
    legacy_key,
    nfc,
    other_ids,
    recorded,
    scoped,
)
from ._kin import Kin
from ._lines import Lines, Stored
from ._lookup import (
    DEFAULT_LOOKUP,
    Asked,
    Asking,
    LookupRetry,
    LookupSettings,
    Trouble,
    asked,
    works,
)
from ._plan import (
    JSON_BODY,
    SCOPE_ADVICE,
    Request,
    RowPlan,
    Step,
    encode_body,
    legacy_candidates,
    past_retention,
    plan_row,
    recorded_payload,
)
from ._progress_counts import BatchProgress, LookingProgress, SendingProgress, Stopped
from ._remembered import BELIEVED_FOR, believed, reading
from ._report import (
    Report,
    changed_line,
    conflict_with,
    evidence_after,
    found_id,
    found_reason,
    not_working,
    reason_of,
    recorded_line,
    refusal_reasons,
    report_line,
    unsettled_line,
    utc_now,
    utc_text,
    whole_seconds,
)
from ._report_row import ReportRow
from ._resave import HELD_ADVICE, Held
from ._rows import Batch, PayoutRow
from ._run_rows import (
    CHUNK,
    KNOWN_CODES,
    NEW_CODES,
    NEW_PLAN,
    SENDING,
    At,
    RunCounts,
    RunRow,
    Target,
    new_code,
    recorded_intent,
    start_of,
)
from ._sender import Sender, credentials_of, target_of

__all__ = ["DEFAULT_LOOKUP", "BatchProgress", "asubmit", "submit"]

logger = logging.getLogger("idemclient.batch")


_BUDGET = "retry budget"


class _Run:
    """One run of a batch through a client; see the module docstring."""

    def __init__(
        self,
        batch: Batch,
        *,
        store: Store,
        clock: Clock,
        policy: RetryPolicy,
        http: httpx.Client | httpx.AsyncClient,
        target: Target,
        resolved: Resolved | None = None,
        retention: float | None = None,
        concurrency: int,
        on_progress: Callable[[BatchProgress], None] | None,
        notify: Callable[[str], None] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.batch = batch
        self.store = store
        self.clock = clock
        self.policy = policy
        self.resolved = resolved or DEFAULT_PROFILE.resolve("POST", target.path, policy.methods)
        if not self.resolved.keyed:
            raise ValueError(
                f"the {self.resolved.profile.name} profile's server takes no key at"
                f" POST {target.path}: the batch command sends only what it can send once"
            )
        self.retention = retention if retention is not None else policy.key_retention
        self.http = http
        self.target = target
        self.concurrency = concurrency
        self.stopping = threading.Event()
        self.tracker = SendingProgress(len(batch.rows), on_progress, self.stopping)
        #: the attempts the transport holds, for a run cut short for good (`abandon`)
        self.in_flight = InFlight(clock)
        #: the operations this run's threads hold now (being sent, or settled by a
        #: look-up): what an abandoned run writes as it stands (`abandon`)
        self._holding: set[str] = set()
        self.looking = LookingProgress(on_progress)
        self._notify = notify or (lambda text: logger.info("%s", text))
        #: told each look-up retry (the command's --verbose), beside its log record
        self.on_lookup_retry: Callable[[str], None] | None = None
        #: where each row is (`At`), and the report's lines, out of memory (`_lines`)
        self.status = bytearray(len(batch.rows))
        self.lines = Lines()
        self.counts = RunCounts()
        #: what refuses the batch, met as the look-ups are answered (row number, why)
        self._problems: list[tuple[int, str]] = []
        self._advices: dict[str, None] = {}  # said once each, in the order met
        #: a look-up that does not work; one the server answered "later" (the longest
        #: wait asked for)
        self._lasting: Asked | None = None
        self._later: Asked | None = None
        #: when the run planned: every later phase plans a chunk again as of then
        self._planned_at = 0.0
        #: what the plan found, by step, for a dry run's summary
        self.steps: Counter[str] = Counter()
        self.started = utc_now()
        self.metadata = dict(metadata or {})
        self._template: Intent | None = None
        #: the URL every new row is recorded with (marked with the credentials' digest)
        #: and the fingerprint of a body POSTed there: made once, for every row
        self._marked = ""
        self._fingerprint: Callable[[bytes], str] | None = None
        self._sender = Sender(None)
        #: this file's references (in NFC), made when first asked (`_of_this_file`)
        self._references: frozenset[str] | None = None
        self._lock = threading.Lock()  # the counts the sending threads change
        #: the judge of a known row's other content: a correction? (`_corrections`)
        self._correct = correcting(self.resolved.profile, self._corrections_of)
        #: the commands the run prints for its rows, whole (`_advice`)
        self.commands = Commands.of(
            store=store.path,
            base_url=http.base_url,
            path=target.path,
            lookup=target.lookup,
            profile=self.resolved.profile,
        )
        #: a look-up the server answered "later" (or not at all): nothing is sent
        self.cut_short: Asked | None = None
        self._cut_short_said: str | None = None

    def stop(self) -> None:
        """Start no new row, and stop each row at its next retry (Ctrl-C)."""
        self.stopping.set()

    def abandon(self) -> int:
        """The run is cut short for good (its process ends): no attempt starts, and each
        row this process holds is written as it stands (`_abandon`); how many were in
        flight."""
        self.stop()
        with self._lock:
            held = list(self._holding)
        return self.in_flight.abandon(self.store, held)

    def close(self) -> None:
        """Let the report's lines go (once the report is written, or read)."""
        self.lines.close()

    # -- a chunk at a time -----------------------------------------------------------

    def _chunks(self, codes: Collection[At] | None = None) -> Iterator[tuple[int, int]]:
        """The rows a chunk at a time, as (start, stop): those with a row at one of
        `codes`, if given."""
        total = len(self.status)
        wanted = None if codes is None else [bytes([code]) for code in codes]
        for start in range(0, total, CHUNK):
            stop = min(total, start + CHUNK)
            if wanted is None or any(code in self.status[start:stop] for code in wanted):
                yield start, stop

    def _planned(self, start: int, stop: int, codes: Collection[At] | None = None) -> list[RunRow]:
        """Rows `start` to `stop` (those at one of `codes`, if given), each with what the
        store knows of it now, planned as of when the run planned (`plan_row`)."""
        batch, target, sender = self.batch, self.target, self._sender
        status = self.status
        indexes = [i for i in range(start, stop) if codes is None or status[i] in codes]
        chunk = batch.rows[start:stop]  # one read, where the rows are on disk
        rows = [chunk[i - start] for i in indexes]
        identities = [
            identify(row, scope=batch.scope, operation=target.operation, namespace=target.namespace)
            for row in rows
        ]
        # Under each Unicode form its reference may have been recorded in (`_identity`).
        known = self.store.find(
            operation_ids=[o for i in identities for o in (i.operation_id, *other_ids(i))],
            references=[form for i in identities for form in forms(i.bare)],
        )
        by_id = {record.operation_id: record for record in known}
        by_reference: dict[str, list[OperationRecord]] = defaultdict(list)
        for record in known:
            if record.reference is not None:
                by_reference[nfc(record.reference)].append(record)
        items = []
        for index, row, identity in zip(indexes, rows, identities, strict=True):
            found = recorded(by_id, identity)
            if isinstance(found, str):  # recorded under two forms of one reference
                items.append(RunRow(index, row, identity, RowPlan(Step.REFUSED, why=found)))
                continue
            plan = plan_row(
                identity,
                functools.partial(self.request_of, row, identity),
                known=found,
                legacy=legacy_candidates(by_reference.get(identity.bare, ()), identity),
                scope=batch.scope,
                legacy_key=None
                if batch.scope is None
                else legacy_key(
                    row,
                    batch_reference=batch.scope,
                    operation=target.operation,
                    namespace=target.namespace,
                ),
                now=self._planned_at,
                retention=self.retention,
                look_up=target.lookup is not None,
                other_credentials=lambda record: sender.other(record.url),
                profile=self.resolved.profile.name,
                commands=self.commands,
                correct=self._correct,
            )
            # A corrected content sent under a key of its own is that identity's.
            items.append(RunRow(index, row, plan.identity or identity, plan))
        return items

    def each_planned(self) -> Iterator[RunRow]:
        """Every row, planned as the store has it now, a chunk at a time (a dry run's
        rows)."""
        for start, stop in self._chunks():
            yield from self._planned(start, stop)

    def _new_row(self, index: int, row: PayoutRow) -> RunRow:
        """A row the store did not know when the run planned (`index`, `row`): its
        identity alone."""
        batch, target = self.batch, self.target
        identity = identify(
            row, scope=batch.scope, operation=target.operation, namespace=target.namespace
        )
        return RunRow(index, row, identity, NEW_PLAN)

    def _tally(self, name: str, by: int = 1) -> None:
        """Add to one of the counts: rows are answered by several threads at once."""
        with self._lock:
            setattr(self.counts, name, getattr(self.counts, name) + by)

    # -- 1. plan ---------------------------------------------------------------------

    def plan(self) -> None:
        """Decide every row (a chunk at a time): a known reference with other content, a
        row that may have been applied elsewhere, or a twin refuses the batch
        (`BatchInvalid`, nothing recorded or sent); a row done is reported now."""
        batch, target = self.batch, self.target
        now = self.clock.time()
        request = self.http.build_request(
            "POST", target.path, headers={"Content-Type": "application/json"}
        )
        template = intent_for(request, b"")
        self._template = template
        url = httpx.URL(template.url)
        self._sender = Sender(credentials_of(request, self.http.auth))
        self._marked = self._sender.mark(str(url))
        self._fingerprint = fingerprints("POST", url, content_type=JSON_BODY)
        self._planned_at = now
        problems: list[tuple[int, str]] = []
        twinned: list[tuple[int, str]] = []
        holds: list[tuple[int, str]] = []
        # A store that holds no reference (a file's first run) holds no payment under
        # another reference: nothing to check, and no value of the file to keep.
        kin = None if target.new_payments is True or not self.store.references(limit=1) else Kin()
        try:
            for start, stop in self._chunks():
                if self.stopping.is_set():  # interrupted: the rows not planned are told so
                    return
                items = self._planned(start, stop)
                for item in items:
                    plan, identity = item.plan, item.identity
                    self.steps[plan.step.value] += 1
                    self.steps["looked up"] += plan.look_up
                    if plan.step is Step.REFUSED:
                        problems.append(
                            (item.row.number, f"reference {identity.reference!r} {plan.why}")
                        )
                        if plan.advice and (0, plan.advice) not in problems:
                            problems.insert(0, (0, plan.advice))
                        self.status[item.index] = At.REFUSED
                    elif plan.step is Step.DONE:
                        assert plan.record is not None
                        self._done(item, recorded_line(item, plan.record))
                    else:
                        self.status[item.index] = start_of(plan)
                        if kin is not None and plan.step is Step.NEW:
                            # In every Unicode form a reference may be recorded in.
                            kin.add(form for value in tails_of(item.row) for form in forms(value))
            if kin is not None:
                gathered = kin.gather(self.store)
                resave.backfill(self.store, target.operation)  # rows without a digest yet
                for start, stop in self._chunks(NEW_CODES):
                    items = self._planned(start, stop, NEW_CODES)
                    # Twins only where a reference ended with one of the file's values.
                    twins_here = self._twins(items, kin) if gathered else []
                    twinned += twins_here
                    holds += self._resaved(items, {number for number, _ in twins_here})
        finally:
            if kin is not None:
                kin.close()
        if problems or twinned or holds:
            # Held, and nothing else wrong: the operator's word is awaited (its own exit).
            refused = Held if not (problems or twinned) else BatchInvalid
            if any("other content" in why for _, why in problems):
                problems.insert(0, (0, SCOPE_ADVICE))
            if twinned:
                problems[:0] = [(0, TWIN_ADVICE), *twinned]
            if holds:
                problems[:0] = [(0, HELD_ADVICE), *holds]
            raise refused(batch.source, sorted(problems, key=lambda p: p[0]))

    def _resaved(self, items: Sequence[RunRow], twinned: set[int]) -> list[tuple[int, str]]:
        """Of `items`, the new rows whose payment the store holds under another
        reference (`_resave`), but those the operator names new payments, and the twins
        said already: found through the store's index of payment digests."""
        new = [
            item
            for item in items
            if item.plan.step is Step.NEW
            and item.row.number not in twinned
            and not self.target.is_new_payment(item)
        ]
        if not new:
            return []
        rows = (
            (item.row.number, item.identity.reference, item.identity.bare, self._digest(item))
            for item in new
        )
        by_number = {item.row.number: item for item in new}
        held = []
        for twin in resave.held(self.store, self.target.operation, rows, self._of_this_file):
            self.status[by_number[twin.number].index] = At.REFUSED
            held.append((twin.number, twin.why()))
        return held

    def _of_this_file(self, reference: str) -> bool:
        """Whether `reference` (in NFC) is one of this file's: made once, when a payment
        under another reference is first found (rare)."""
        if self._references is None:
            batch = self.batch
            self._references = frozenset(scoped(batch.scope, row.reference) for row in batch.rows)
        return reference in self._references

    def _digest(self, item: RunRow) -> str:
        """The digest of the payment a row makes (`_resave`)."""
        payload = self.request_of(item.row, item.identity).payload
        return resave.payment_digest(payload, item.identity.reference)

    def _twins(self, items: Sequence[RunRow], kin: Kin) -> list[tuple[int, str]]:
        """Of `items`, the new rows whose very content the store holds under another
        reference (`_duplicates`), among the operations `kin` gathered for their values."""
        new = [
            item
            for item in items
            if item.plan.step is Step.NEW and not self.target.is_new_payment(item)
        ]
        wanted = (form for item in new for value in tails_of(item.row) for form in forms(value))
        named = kin.of(wanted) if new else ()
        if not named:
            return []
        records = {r.operation_id: r for r in self.store.find(operation_ids=named)}
        index = by_tail(map(recorded_intent, records.values()), self.target.operation)
        if not index:
            return []
        paths = Paths()
        problems = []
        for item in new:
            listed = twins(
                item.identity, item.row, self.request_of(item.row, item.identity), index, paths
            )
            # As the store has them now (one purged meanwhile is no twin any more).
            stored = [records[t.operation_id] for t in listed if t.operation_id in records]
            if stored:
                self.status[item.index] = At.REFUSED
                problems.append((item.row.number, twin_problem(item.identity, stored)))
        return problems

    def _corrections_of(self, identity: RowIdentity) -> list[OperationRecord]:
        """The corrections of a row the store holds (`_corrections`)."""
        mark = f"{identity.operation_id}{CORRECTED_MARK}"
        found = self.store.find(references=[identity.reference])
        return [record for record in found if record.operation_id.startswith(mark)]

    def request_of(self, row: PayoutRow, identity: RowIdentity) -> Request:
        """The request this run sends for a row the store does not hold as it is."""
        assert self._template is not None, "planned first"
        payload = row.payload(identity.reference)
        field = self.resolved.key.field
        if field is None:
            return Request(self._template.url, encode_body(payload), payload)
        # The profile's server reads the key from the body: it is sent there.
        body = encode_body({**payload, field: identity.key})
        return Request(self._template.url, body, payload, key_field=field, key=identity.key)

    # -- 2. look up ------------------------------------------------------------------

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
        return _Rows(self, (At.ASK,), self._to_ask)

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
        return _Rows(self, (At.KEPT,), self._kept_to_ask)

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
        if plan.step is Step.DONE:
            assert plan.record is not None
            self._done(item, recorded_line(item, plan.record))
        elif plan.step is Step.REFUSED:
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
        step = item.plan.step
        if step is Step.ELSEWHERE:
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
        if step is Step.NEW:
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
            self.status[item.index] = At.REOPEN if step is Step.REOPEN else At.KNOWN
            return
        with self._holds(record.operation_id):
            reopened = None
            if step is Step.REOPEN:
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

    # -- 3. record -------------------------------------------------------------------

    def record(self) -> None:
        """Point the rows never applied at another URL at this run's, and register the
        new rows, in one transaction (a chunk at a time inside it). What the look-ups
        found is recorded already, as each came (`answered`)."""
        for start, stop in self._chunks((At.REOPEN,)):
            for item in self._planned(start, stop, (At.REOPEN,)):
                if item.plan.step is not Step.REOPEN:  # reopened meanwhile, by another
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
            headers=_HEADERS,
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
        self._tell(_reconcile.settled(record, response))
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
        watched_since = settings_of(self.http).watched_since
        server_at = _reconcile.answered_at(asked.response)
        running = (
            verdict.finding == "not_found"
            and _reconcile.still_in_flight(
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
        server_now = (
            None
            if server_at is None or record.created_at >= watched_since
            else server_at + DATE_RESOLUTION
        )
        if unfinished and not past_retention(
            record, now=now, retention=self.retention, server_now=server_now
        ):
            return True
        lookup = self.target.lookup
        try:
            taken = _reconcile.take(self.store, self.clock, record.operation_id)
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
            outcome = _reconcile.apply(
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
                by_reference=lookup is not None and _reconcile.by_reference_alone(lookup.template),
                watched_since=watched_since,
            )
        except OutcomeError as exc:
            self._tell(exc.outcome)
            reconcile = False
            named = _reconcile.kept_payment(record)
            if verdict.finding == "not_found" and not running and named is not None:
                # Its 409 names the payment made under its key: this look-up misses it.
                # Every rerun would ask the same look-up and get the same "none".
                reconcile = True
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
            self._done(item, dataclasses.replace(line, reconcile=reconcile))
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

    # -- 4. send ---------------------------------------------------------------------

    def sendings(self) -> Feed:
        """The rows to send, a chunk at a time, in the file's order: a new row as it
        was registered, a known one as the store holds it now."""
        return _Rows(self, SENDING, self._to_send)

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
                if record is None or item.plan.step is Step.REFUSED:
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

    @contextlib.contextmanager
    def _holds(self, operation_id: str) -> Iterator[None]:
        """While a thread of the run may hold `operation_id`'s lease (see `abandon`)."""
        with self._lock:
            self._holding.add(operation_id)
        try:
            yield
        finally:
            with self._lock:
                self._holding.discard(operation_id)

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

    def _done(self, item: RunRow, line: ReportRow) -> None:
        self.lines.put(item.index, line)
        self.status[item.index] = At.DONE
        self.tracker.finished(line.key, line)

    # -- the report ------------------------------------------------------------------

    def report(self, *, interrupted: bool = False, refused: BatchInvalid | None = None) -> Report:
        """The report as things stand: rows not done yet are shown as the store has
        them (an interrupted run), or as not sent when it does not know them. A batch
        `refused` shows each row it names as not sent, with the reason."""
        why = {} if refused is None else refusal_reasons(refused)
        done = bytes([At.DONE])
        for start, stop in self._chunks():
            if self.status[start:stop] == done * (stop - start):
                continue
            # As the store has them now (a chunk at a time): their line, not kept.
            undone = [code for code in At if code not in (At.DONE, At.UNPLANNED)]
            items = {item.index: item for item in self._planned(start, stop, undone)}
            chunk = self.batch.rows[start:stop]
            for index in range(start, stop):
                if self.status[index] == At.DONE:
                    continue
                row, item = chunk[index - start], items.get(index)
                if item is None:  # stopped while planning
                    line = ReportRow(
                        row.number, row.reference, "", State.NOT_SENT.value, None, None, 0,
                        False, "not sent: interrupted before it was recorded",
                    )  # fmt: skip
                elif row.number in why:
                    line = self._refused(item, why[row.number])
                elif refused is not None:
                    line = self._not_sent_for_others(item)
                else:
                    line = self._not_done(item)
                self.lines.put(index, line)
        counts = self.counts
        notes = []
        if self.cut_short is not None:
            notes.append(self._cut_short_why())
        if counts.waited:
            what = "not sent" if counts.waited_not_sent == counts.waited else "not settled"
            longest = counts.longest_wait
            beyond = (
                f", longer than a row may wait ({whole_seconds(self._patience())} s)"
                if longest > self._patience()
                else ""
            )
            notes.append(
                f"{counts.waited} row(s) {what}: the server asked to wait"
                f" {whole_seconds(longest)} s (Retry-After){beyond}: run the same command again"
                f" after {utc_text(counts.wait_until)}"
            )
        if counts.found:
            notes.append(f"{counts.found} found on the server by look-up (recorded, not sent)")
        if counts.found_unsettled:
            notes.append(
                f"{counts.found_unsettled} found on the server but not final yet (not sent)"
            )
        if counts.reopened:
            notes.append(
                f"{counts.reopened} never applied at an earlier URL, path or token, sent"
                " again under their keys"
            )
        if counts.corrected:
            notes.append(
                f"{counts.corrected} refused or never sent in an earlier run, and corrected"
                " in the file since, sent again with their corrected content (under a new"
                " key where the server may keep the refusal under the old one)"
            )
        if counts.not_started:
            notes.append(f"{counts.not_started} not started after the server refused the token")
        if counts.budget:
            notes.append(
                f"{counts.budget} stopped by the client's retry budget before their attempts"
                " ran out (run again, or give it more: --retry-budget)"
            )
        metadata = {
            **self.metadata,
            "source": self.batch.source,
            "batch_reference": self.batch.scope,
            "operation": self.target.operation,
            "path": self.target.path,
            "namespace": str(self.target.namespace),
            "lookup": None if self.target.lookup is None else self.target.lookup.template,
            "key_retention_seconds": self.retention,
            "profile": self.resolved.profile.name,
            "store": self.store.path,
            "started_at": self.started,
            "finished_at": utc_now(),
            "idemclient": __version__,
            "looked_up": counts.looked_up,
            "found_by_lookup": counts.found,
            "reopened": counts.reopened,
            "corrected": counts.corrected,
            "stopped_by_retry_budget": counts.budget,
            "lookups_cut_short": None if self.cut_short is None else self._cut_short_why(),
        }
        return Report(
            batch=self.batch.scope or _name(self.batch.source),
            rows=Stored(self.lines, len(self.batch.rows)),
            metadata=metadata,
            notes=tuple(notes),
            interrupted=interrupted,
            refused=refused is not None,
            held=isinstance(refused, Held),
        )

    def _refused(self, item: RunRow, why: str) -> ReportRow:
        """A row the batch was refused for: not sent. Unsettled, it is as the store has
        it (maybe applied stays indeterminate); finished, it is not done here (a row
        paid at a sandbox is not paid here, one paid with other content is not this
        one): not sent."""
        # Held as a payment made under another reference: the operator's word awaited.
        reason = why if why.startswith(resave.HELD) else f"refused, not sent: {why}"
        record = item.plan.record
        if record is not None and not record.state.finished:
            return recorded_line(item, record, reason=reason, replayed=False)
        return report_line(
            item,
            key=item.identity.key if record is None else record.key,
            state=State.NOT_SENT,
            status=None,
            resource=None,
            replayed=False,
            reason=reason,
            attempts=0 if record is None else record.attempts,
        )

    def _not_sent_for_others(self, item: RunRow) -> ReportRow:
        """A row of a batch refused for other rows: as the store has it (nothing was
        sent; a row done before stays done)."""
        reason = "not sent: the batch was refused (see why in the errors); nothing was sent"
        record = item.plan.record
        if item.plan.step is Step.DONE:
            return recorded_line(item, record)
        return recorded_line(item, record, key=item.identity.key, reason=reason, replayed=False)

    def _not_done(self, item: RunRow) -> ReportRow:
        """A row the run did not finish (interrupted, or cut short): as the store has
        it."""
        record = item.plan.record
        maybe = record is not None and (record.maybe_applied or record.state is State.IN_FLIGHT)
        if self.cut_short is not None:
            reason = f"not sent: {self._cut_short_why()}"
        elif maybe:
            reason = "interrupted while being sent: may have been applied; run again"
        else:
            reason = "not sent: interrupted; run again"
        return recorded_line(
            item,
            record,
            key=item.identity.key if record is None else record.key,
            reason=reason,
            replayed=False,
        )

    def _cut_short_why(self) -> str:
        """Why nothing was sent when the server answered a look-up "later": said once,
        the same for every row and the summary."""
        if self._cut_short_said is None:
            self._cut_short_said = self._cut_short_words()
        return self._cut_short_said

    def _cut_short_words(self) -> str:
        asked = self.cut_short
        assert asked is not None
        got = (
            f"HTTP {asked.response.status_code}"
            if asked.response is not None
            else asked.verdict.why
        )
        tries = f" ({asked.attempts} attempt(s))" if asked.attempts > 1 else ""
        when = "later"
        wait = asked.server_wait
        asked_for = ""
        if wait is not None and wait > 0:
            asked_for = (
                f", and the server asked to wait {whole_seconds(wait)} s (Retry-After), longer"
                f" than a row may wait ({whole_seconds(self._patience())} s)"
            )
            when = f"after {utc_text(self.clock.time() + wait)}"
        return (
            f"the look-ups were cut short: GET {asked.url} got {got}{tries}{asked_for}; the"
            f" server is busy or unavailable, and nothing was sent: run the same command"
            f" again {when}"
        )

    def _patience(self) -> float:
        """The longest wait for the server a row's retries take on."""
        return min(self.policy.deadline, self.policy.max_retry_after)


class _Rows:
    """A run's rows at one of `codes`, a chunk at a time (a `Feed`): `ready(start,
    stop)` makes the jobs of the rows `start` to `stop` (planned as the store has them
    now), an empty chunk skipped."""

    def __init__(
        self,
        run: _Run,
        codes: Collection[At],
        ready: Callable[[int, int], list[RunRow]],
    ) -> None:
        self._chunks = run._chunks(codes)
        self._ready = ready

    def next_chunk(self) -> list[RunRow]:
        for start, stop in self._chunks:
            jobs = self._ready(start, stop)
            if jobs:
                return jobs
        return []


def _reopened_why(record: OperationRecord) -> tuple[str, bool]:
    """Why a record was pointed at this run's URL, as `_Run._reopen` wrote it, and
    whether that was its corrected content (`_corrections`)."""
    evidence = record.evidence
    if _CORRECTED in evidence:
        return evidence.partition(_CORRECTED)[2], True
    return evidence.partition(_REOPENED)[2], False


#: What the evidence of a record pointed at this run's URL says, before why: at
#: another URL or with other credentials, or with its corrected content.
_REOPENED = " under the same key: "
_CORRECTED = " with its corrected content, under the same key: "


# -- report lines ----------------------------------------------------------------------


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
    if item.plan.step is Step.NEW:
        return True
    if item.plan.step not in (Step.KNOWN, Step.REOPEN) or record is None:
        return False
    return not record.maybe_applied and record.state is not State.IN_FLIGHT


def _reading(lookup: LookupSettings) -> str:
    return reading(lookup.reference_field, lookup.rules.reliable_404)


def _name(source: str) -> str:
    return source.rsplit("/", 1)[-1]


_HEADERS = (("content-type", "application/json"),)


# -- driving a run -----------------------------------------------------------------------


def _phases(run: _Run) -> Op[Report]:
    """Every phase of `run`, as one step (see `_operations`): in this thread and a few
    worker threads for `submit`, awaiting for `asubmit`. The rows go through each
    phase a chunk at a time (`Feed`)."""
    yield Blocking(run.plan)
    if run.stopping.is_set():  # stopped while planning: nothing was recorded or sent
        stopped: Report = yield Blocking(run.report, kwargs={"interrupted": True})
        return stopped
    stop_asking = threading.Event()

    def ask(item: RunRow) -> Op[None]:
        timing = (run.clock, run.policy.attempt_timeout, run.lookup_retried, run.looking.waiting)
        item.asked = yield from asked(run.asking(item), *timing)
        for other in run.asking_other_forms(item):  # a decomposed reference (`_identity`)
            if item.asked.verdict.finding != "not_found":
                break
            also = yield from asked(other, *timing)
            if also.verdict.finding != "not_found":
                item.asked = also
        if not works(item.asked.verdict):
            stop_asking.set()  # the look-up does not work: stop asking
        yield Blocking(run.answered, (item,))
        item.asked = None  # kept as it came: its answer is not held

    if (yield Blocking(run.start_looking)):
        yield Each(run.askings(), ask, run.concurrency, run.stopping, stop_asking.is_set)
        if not (run.stopping.is_set() or stop_asking.is_set()):
            # Kept answers are judged once the server's time is known (its answers
            # tell it): where nothing was asked yet, one row is asked first.
            first = yield Blocking(run.time_probe)
            yield Each(first, ask, run.concurrency, run.stopping, stop_asking.is_set)
            yield Each(run.kept_askings(), ask, run.concurrency, run.stopping, stop_asking.is_set)
    if run.stopping.is_set():
        interrupted: Report = yield Blocking(run.report, kwargs={"interrupted": True})
        return interrupted
    run.take_answers()
    if run.cut_short is None:
        yield Blocking(run.record)
        yield Each(run.sendings(), run.send, run.concurrency, run.stopping)
    report: Report = yield Blocking(run.report, kwargs={"interrupted": run.stopping.is_set()})
    return report


def run_sync(run: _Run, client: httpx.Client) -> Report:
    """Every phase of `run`, in this thread (and a few worker threads)."""
    return run_op(_phases(run), client)


def _lookup_settings(
    lookup: str | None,
    path: str,
    statuses: Mapping[str, State] | None,
    reliable_404: bool,
    reference_field: str = "reference",
) -> LookupSettings | None:
    if lookup is None:
        return None
    if not reference_field:
        raise ValueError("the look-up's reference field must be named, e.g. reference")
    template = lookup.replace("{path}", path)
    _reconcile.fill(template, key="k", reference="r", name="the look-up")  # fails early
    if "{reference}" not in template and "{key}" not in template:
        raise ValueError(
            f"look-up {lookup!r} names no row: use {{reference}} (or {{key}}), e.g."
            " /v1/payouts?reference={reference}"
        )
    return LookupSettings(
        template,
        LookupRules(
            statuses=_reconcile.DEFAULT_STATUSES if statuses is None else statuses,
            reliable_404=reliable_404,
        ),
        reference_field,
    )


class SubmitOptions(TypedDict, total=False):
    """What `submit` and `asubmit` take beside the batch and the client (see `submit`)."""

    path: str
    operation: str
    namespace: uuid.UUID
    concurrency: int
    on_progress: Callable[[BatchProgress], None] | None
    lookup: str | None
    statuses: Mapping[str, State] | None
    reliable_404: bool
    reference_field: str
    new_payments: bool | Collection[str]


def make_run(
    batch: Batch,
    client: Client | AsyncClient,
    *,
    notify: Callable[[str], None] | None = None,
    metadata: Mapping[str, Any] | None = None,
    **options: Unpack[SubmitOptions],
) -> _Run:
    """A run of `batch` through `client`; options not given are `submit`'s defaults.
    The rows speak the profile the client speaks at its base URL's host (refused there,
    before anything is recorded, where a chosen one contradicts it: `ProfileMismatch`)."""
    path = options.get("path", _defaults(submit)["path"])
    return run_on(
        batch,
        store=as_admin(client.settings.store, needed_by="a batch"),
        clock=client.settings.clock,
        policy=client.policy,
        http=client.http,
        notify=notify,
        metadata=metadata,
        profile=profile_for(client.http, "POST", path),
        **options,
    )


def run_on(
    batch: Batch,
    *,
    store: Store,
    clock: Clock,
    policy: RetryPolicy,
    http: httpx.Client | httpx.AsyncClient,
    notify: Callable[[str], None] | None = None,
    metadata: Mapping[str, Any] | None = None,
    profile: Profile = DEFAULT_PROFILE,
    **options: Unpack[SubmitOptions],
) -> _Run:
    """`make_run` from a client's parts: a store, its clock, policy and server profile,
    and the httpx client rows would be sent through (a dry run plans on a store it only
    reads)."""
    given: dict[str, Any] = {**_defaults(submit), **options}
    path, operation = given["path"], given["operation"]
    namespace, concurrency = given["namespace"], given["concurrency"]
    on_progress, lookup, statuses = given["on_progress"], given["lookup"], given["statuses"]
    reliable_404, reference_field = given["reliable_404"], given["reference_field"]
    new_payments = given["new_payments"]
    if not operation or "\x1f" in operation:
        raise ValueError(f"operation {operation!r} must be a non-empty name")
    resolved = profile.resolve("POST", path, policy.methods)
    return _Run(
        batch,
        store=store,
        clock=clock,
        policy=policy,
        resolved=resolved,
        retention=policy.key_retention if retention_set(policy) else resolved.key_retention,
        http=http,
        target=Target(
            path,
            operation,
            namespace,
            _lookup_settings(lookup, path, statuses, reliable_404, reference_field),
            _new_payments(batch, new_payments),
        ),
        concurrency=concurrency,
        on_progress=on_progress,
        notify=notify,
        metadata=metadata,
    )


def submit(
    batch: Batch,
    client: Client,
    *,
    path: str = "/v1/payouts",
    operation: str = "payout",
    namespace: uuid.UUID = DEFAULT_NAMESPACE,
    concurrency: int = 8,
    on_progress: Callable[[BatchProgress], None] | None = None,
    lookup: str | None = DEFAULT_LOOKUP,
    statuses: Mapping[str, State] | None = None,
    reliable_404: bool = False,
    reference_field: str = "reference",
    new_payments: bool | Collection[str] = False,
) -> Report:
    """Submit every row of `batch` through `client`; return the per-row report.

    Each row is its reference (within `batch.scope`), sent under the key
    ``uuid5(namespace, reference, operation)``, or under the key the store already
    holds for it. Before a row the store does not know (or knows from longer ago than
    `client.policy.key_retention`, or may have been applied) is first sent, its
    reference is looked up on the server: `lookup` is a URL template with `{reference}`
    (and `{path}`, this path); None sends without looking up, which pays twice whatever
    the server paid without this store knowing it. A found payment is recorded as what
    it came to (`statuses`, `reliable_404`: see `Client.reconcile`) and not sent; it
    counts as this row only if it shows the row's reference in `reference_field` (or
    its key in ``idempotency_key``).

    A row finished at another origin or with other credentials is done only if the
    look-up finds it here. A row the store does not know whose very content (every
    column, the value date included) it holds under another reference (the file
    submitted before with another scope or reference column) is refused; one whose
    payment (every column but its reference, read as a person reads it) the store
    holds under another reference (a file re-saved by a spreadsheet: `00123` read as
    `123`) is held (`Report.exit_code` 6). Unless `new_payments` says they are new
    payments: True for every row, or the references (as the file has them) of those
    that are. A look-up the server answers
    "later" (429, 503, another 5xx, no answer), once its attempts run out, cuts the
    run short: nothing is sent, and the report (exit code 3) says so and how long the
    server asked to wait.

    Raises `BatchInvalid` (nothing sent) when a known reference comes with other
    content, when the look-up does not work, when the server holds the reference with
    other content, for a row finished elsewhere and not found here, and for a row whose
    content or payment the store holds under another reference. Rows end in any state;
    `Report.exit_code` says what to do next.
    """
    run = make_run(
        batch,
        client,
        path=path,
        operation=operation,
        namespace=namespace,
        concurrency=concurrency,
        on_progress=on_progress,
        lookup=lookup,
        statuses=statuses,
        reliable_404=reliable_404,
        reference_field=reference_field,
        new_payments=new_payments,
    )
    try:
        return run_sync(run, client.http).materialized()
    finally:
        run.close()


async def asubmit(batch: Batch, client: AsyncClient, **options: Unpack[SubmitOptions]) -> Report:
    """`submit` for an `AsyncClient`: the same options, the same phases, awaited."""
    unknown = sorted(set(options) - set(SubmitOptions.__annotations__))
    if unknown:
        # As a misspelt keyword of `submit` is: refused, never sent with a default.
        raise TypeError(f"asubmit() got an unexpected keyword argument {unknown[0]!r}")
    run = make_run(batch, client, **options)
    try:
        report: Report = await arun(_phases(run), client.http)
        return report.materialized()
    finally:
        run.close()


# What `help()` and `inspect.signature` show: `submit`'s options, for an `AsyncClient`.
asubmit.__signature__ = inspect.signature(submit).replace(  # type: ignore[attr-defined]
    parameters=[
        parameter.replace(annotation="AsyncClient") if parameter.name == "client" else parameter
        for parameter in inspect.signature(submit).parameters.values()
    ]
)


def _new_payments(batch: Batch, given: bool | Collection[str]) -> bool | frozenset[str]:
    """`new_payments` as a run takes it: True, False, or the references named (in NFC),
    each of which must be a row of the batch."""
    if isinstance(given, bool):
        return given
    if isinstance(given, str):
        raise TypeError("new_payments takes True, or the references of rows (a list), not one str")
    named = frozenset(nfc(str(reference)) for reference in given)
    unknown = sorted(named - {row.reference for row in batch.rows if row.reference in named})
    if unknown:
        raise ValueError(
            f"--new-payment names no row of the file: {', '.join(map(repr, unknown))} (give a"
            " row's reference as the file has it)"
        )
    return named


def _defaults(function: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of `function` that have defaults, with them."""
    return dict(function.__kwdefaults__ or {})
