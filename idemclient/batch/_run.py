"""Running a batch: decide every row, look up what the store does not know, register,
then send with bounded concurrency through an idemclient client.

A run goes in phases, and nothing is sent before the last one:

1. plan (`_planning`): each row's identity (its reference within the batch's scope, see `_identity`)
   and what the store knows of it (`_plan.plan_row`), and for each row the store does
   not know, whether it holds the very same payment under another reference
   (`_duplicates`). A known reference with other content, a row that may have been
   applied at another URL or with other credentials, a row finished elsewhere without
   look-ups, or a duplicate refuses the whole batch (`BatchInvalid`, nothing recorded or
   sent);
2. look up (`_looking_up`): each row the store does not know, and each known one whose first send is
   to come, that may have been applied, that was finished elsewhere, or whose record is
   older than the server's key retention (`RetryPolicy.key_retention`), is looked up
   on the server by its reference (`_lookup`, judged by `_reconcile.judge`). Each
   answer is kept as it comes (`answered`): a payment found is recorded as the row's
   outcome, in one write, and is not sent; a row that may have been applied is settled
   by its answer; a "nothing found" for a row never applied is kept, and a run killed
   meanwhile believes it while it is young (`_remembered`). A look-up that does not
   work, a payment found with other content, or a row finished elsewhere and not found
   here refuses the batch; a look-up the server answers "later" cuts the run short;
3. record (`_recording`): rows never applied at a wrong URL or with other credentials are pointed at
   this run's (same key); the other new rows are registered in one transaction;
4. send (`_sending`): every unfinished row, with its key; the server deduplicates anything that was
   in flight. A run may be killed at any moment; running it again finishes the file.

Every URL the run records carries its digest of the credentials (`_sender`).

Each phase is a class of its own over what the phases share (`_run_state.RunState`:
the rows' codes, the counts, the rows planned again a chunk at a time); `_Run` puts
them in order and writes the report as things stand, each line in the words of
`_report`.

`submit` and `asubmit` run the phases in the calling thread or task; the command runs
them in a thread of their own so that Ctrl-C can stop them (`_Run.stop`) and still
write the report.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypedDict, Unpack

import httpx

from .. import AsyncClient, Client, State, __version__
from .._errors import BatchInvalid
from .._seam import (
    Blocking,
    Each,
    LookupRules,
    Op,
    arun,
    as_admin,
    profile_for,
    reconcile,
    retention_set,
)
from .._seam import run as run_op
from ..clock import Clock
from ..keys import DEFAULT_NAMESPACE
from ..policy import RetryPolicy
from ..profiles import DEFAULT as DEFAULT_PROFILE
from ..profiles import Profile
from ..store import Store
from . import _resave as resave
from ._identity import nfc
from ._lines import Stored
from ._looking_up import LookingUp
from ._lookup import DEFAULT_LOOKUP, LookupSettings, asked, works
from ._plan import RowAction
from ._planning import Planning
from ._progress_counts import BatchProgress
from ._report import (
    Report,
    recorded_line,
    refusal_reasons,
    report_line,
    utc_now,
    utc_text,
    whole_seconds,
)
from ._report_row import ReportRow
from ._resave import Held
from ._rows import Batch
from ._run_rows import At, RunRow, Target
from ._sending import Sending

__all__ = ["DEFAULT_LOOKUP", "BatchProgress", "asubmit", "submit"]


class _Run(Planning, LookingUp, Sending):
    """One run of a batch through a client, its phases in order (see the module
    docstring), and its report as things stand."""

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
        if item.plan.decision is RowAction.DONE:
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


def _name(source: str) -> str:
    return source.rsplit("/", 1)[-1]


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
    reconcile.fill(template, key="k", reference="r", name="the look-up")  # fails early
    if "{reference}" not in template and "{key}" not in template:
        raise ValueError(
            f"look-up {lookup!r} names no row: use {{reference}} (or {{key}}), e.g."
            " /v1/payouts?reference={reference}"
        )
    return LookupSettings(
        template,
        LookupRules(
            statuses=reconcile.DEFAULT_STATUSES if statuses is None else statuses,
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
