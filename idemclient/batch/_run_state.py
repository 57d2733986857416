"""What a run holds between its phases, and how each phase goes through the rows a
chunk at a time (`RunState`, the base of every phase of `_run._Run`): the rows'
codes (`_run_rows.At`), the report's lines on disk, the counts, and the rows planned
again, as the store has them now, when a phase needs them (`RunState._planned`)."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import httpx

from .._seam import Resolved, origin_of, settings_of
from ..clock import Clock
from ..policy import RetryPolicy
from ..profiles import DEFAULT as DEFAULT_PROFILE
from ..store import Intent, OperationRecord, ServerTime, Store
from . import _resave as resave
from ._abandon import InFlight
from ._advice import Commands
from ._corrections import CORRECTED_MARK, correcting
from ._identity import RowIdentity, forms, identify, legacy_key, nfc, other_ids, recorded
from ._lines import Lines
from ._lookup import Asked
from ._plan import Request, RowAction, RowPlan, encode_body, legacy_candidates, plan_row
from ._progress_counts import BatchProgress, LookingProgress, SendingProgress
from ._report import utc_now
from ._report_row import ReportRow
from ._rows import Batch, PayoutRow
from ._run_rows import CHUNK, NEW_PLAN, At, RunCounts, RunRow, Target
from ._sender import Sender

__all__ = ["RowFeed", "RunState"]

logger = logging.getLogger("idemclient.batch")


class RunState:
    """One run of a batch through a client, as its phases share it (see `_run`)."""

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
        #: the server's time as the run planned, where the client knew it: its origin,
        #: that time, and the stamps it judges (`server_time_of`)
        self._planned_server: tuple[str, ServerTime, Callable[[float], bool]] | None = None
        #: what the plan found, by decision, for a dry run's summary
        self.decisions: Counter[str] = Counter()
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
                items.append(RunRow(index, row, identity, RowPlan(RowAction.REFUSED, why=found)))
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
                server_time=self.server_time_of,
            )
            # A corrected content sent under a key of its own is that identity's.
            items.append(RunRow(index, row, plan.identity or identity, plan))
        return items

    def plan_server_time(self, url: httpx.URL) -> None:
        """Note the server's time now, as the run plans, where the client knows it (an
        answer of `url`'s origin told it): each record the plan judges is judged by it
        too, as of then (`server_time_of`)."""
        try:
            settings = settings_of(self.http)
        except TypeError:  # not a wrapped client: judged by this clock alone
            return
        # Whatever the stamp (each record's is judged against the watch below).
        server = settings.server_time(url, stamped=-math.inf)
        if server is not None:
            self._planned_server = (origin_of(url), server, settings.watched)

    def server_time_of(self, record: OperationRecord) -> ServerTime | None:
        """The server's time as the run planned, to judge `record`'s age by
        (`_plan.past_retention`): None where the client did not know it, for a record
        of another origin, or one stamped while the client watched its clock (a step
        back since would have been seen: `Settings.watched`)."""
        planned = self._planned_server
        if planned is None:
            return None
        origin, server, watched = planned
        if watched(record.created_at) or origin_of(record.url) != origin:
            return None
        return server

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

    def _corrections_of(self, identity: RowIdentity) -> list[OperationRecord]:
        """The corrections of a row the store holds (`_corrections`)."""
        mark = f"{identity.operation_id}{CORRECTED_MARK}"
        found = self.store.find(references=[identity.reference])
        return [record for record in found if record.operation_id.startswith(mark)]

    def _digest(self, item: RunRow) -> str:
        """The digest of the payment a row makes (`_resave`)."""
        payload = self.request_of(item.row, item.identity).payload
        return resave.payment_digest(payload, item.identity.reference)

    def _done(self, item: RunRow, line: ReportRow) -> None:
        self.lines.put(item.index, line)
        self.status[item.index] = At.DONE
        self.tracker.finished(line.key, line)

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


class RowFeed:
    """A run's rows at one of `codes`, a chunk at a time (a `Feed`): `ready(start,
    stop)` makes the jobs of the rows `start` to `stop` (planned as the store has them
    now), an empty chunk skipped."""

    def __init__(
        self,
        run: RunState,
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
