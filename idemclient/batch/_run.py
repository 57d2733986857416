"""Running a batch: derive every row's key, register all rows at once, then send them
with bounded concurrency through an idemclient client.

Each row's key comes from its natural identity (namespace, batch reference, row
reference, operation, value date), so the same file run again, on any machine, finds
the same keys: rows already finished are answered from the store without a network
call, unfinished ones are resumed with their keys, and the server deduplicates the
rest. A run may be killed at any moment; running it again finishes the file.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import anyio
import anyio.to_thread
import httpx

from .._call import CALL_OPTIONS, KEY_HEADER, OUTCOME, CallOptions, fingerprint, intent_for
from .._client import AsyncClient, Client
from .._errors import BatchInvalid, OperationMismatch, OutcomeError
from .._hooks import Hooks, RetryEvent
from .._keys import DEFAULT_NAMESPACE, key_from_identity
from .._outcome import Outcome, State
from .._store import Intent, Store
from ._report import Report, ReportRow
from ._rows import Batch, PayoutRow

__all__ = ["BatchProgress", "asubmit", "submit"]

#: Answers that are about the credentials, not the row: stop starting new rows.
_REFUSED_CREDENTIALS = frozenset({401, 407})


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


class _Tracker:
    """Counts as rows finish and retry; tells `on_progress`, one change at a time."""

    def __init__(self, total: int, on_progress: Callable[[BatchProgress], None] | None) -> None:
        self._lock = threading.Lock()
        self._on_progress = on_progress
        self._total = total
        self._states: dict[str, int] = {}
        self._replayed = 0
        self._retrying: set[str] = set()
        self.credentials_refused = False

    def hooks(self, key: str) -> Hooks:
        def retrying(_event: RetryEvent) -> None:
            with self._lock:
                self._retrying.add(key)
                self._tell()

        return Hooks(on_retry=retrying)

    def finished(self, key: str, outcome: Outcome) -> None:
        with self._lock:
            self._retrying.discard(key)
            state = outcome.state.value
            self._states[state] = self._states.get(state, 0) + 1
            self._replayed += outcome.replayed or outcome.from_store
            if outcome.last_status in _REFUSED_CREDENTIALS:
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
                indeterminate=states.get("indeterminate", 0),
                not_sent=states.get("not_sent", 0) + states.get("pending", 0),
                failed=states.get("failed", 0),
            )
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    path: str
    operation: str
    namespace: uuid.UUID

    def key(self, batch: Batch, row: PayoutRow) -> str:
        return key_from_identity(
            batch.reference,
            row.reference,
            self.operation,
            row.value_date.isoformat(),
            namespace=self.namespace,
        )

    def request(
        self, http: httpx.Client | httpx.AsyncClient, key: str, row: PayoutRow, hooks: Hooks | None
    ) -> httpx.Request:
        return http.build_request(
            "POST",
            self.path,
            content=_body(row),
            headers={KEY_HEADER: key, "Content-Type": "application/json"},
            extensions={
                CALL_OPTIONS: CallOptions(operation_id=key, reference=row.reference, hooks=hooks)
            },
        )

    def intents(
        self, http: httpx.Client | httpx.AsyncClient, batch: Batch, keys: Sequence[str]
    ) -> Iterator[Intent]:
        """Every row's intent, exactly as the transport will find it when the row is sent
        (same key, URL and body bytes, so the same fingerprint), without building an
        httpx request per row: the URL and headers are the same for every row. Made
        one at a time, as the store takes them."""
        template = intent_for(
            http.build_request("POST", self.path, headers={"Content-Type": "application/json"}),
            b"",
        )
        url = httpx.URL(template.url)
        for row, key in zip(batch.rows, keys, strict=True):
            body = _body(row)
            yield Intent(
                operation_id=key,
                key=key,
                key_given=True,
                method="POST",
                url=template.url,
                headers=template.headers,
                body=body,
                fingerprint=fingerprint("POST", url, body),
                reference=row.reference,
            )


def _body(row: PayoutRow) -> bytes:
    """The JSON body, encoded here rather than by httpx, so that the bytes registered
    and the bytes sent are the same whatever httpx version encodes JSON."""
    return _JSON.encode(row.payload()).encode()


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _registered(
    store: Store, batch: Batch, plan: _Plan, http: httpx.Client | httpx.AsyncClient, now: float
) -> list[str]:
    """Register every row in one transaction, or none (a row changed since it was first
    sent); return the rows' keys."""
    keys = [plan.key(batch, row) for row in batch.rows]
    try:
        store.register(plan.intents(http, batch, keys), now=now)
    except OperationMismatch as exc:
        row_of = {key: row.number for key, row in zip(keys, batch.rows, strict=True)}
        problems = [
            (
                row_of.get(operation_id, 0),
                "was submitted before with different content under the same key"
                " (same batch, reference, operation and value date); the first submission"
                " stands: use a new reference for a new payment",
            )
            for operation_id, _reason in exc.conflicts
        ]
        raise BatchInvalid(batch.source, problems) from exc
    return keys


def _row_report(row: PayoutRow, outcome: Outcome) -> ReportRow:
    return ReportRow.of(row.number, row.reference, outcome)


def _unstarted(store: Store, key: str) -> Outcome:
    record = store.get(key)
    assert record is not None, "every row was registered before sending"
    return Outcome(
        operation_id=record.operation_id,
        key=record.key,
        state=record.state if record.state is not State.PENDING else State.NOT_SENT,
        attempts=record.attempts,
        evidence=record.evidence or "not started: the server refused the credentials",
        maybe_applied=record.maybe_applied,
        from_store=True,
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
) -> Report:
    """Submit every row of `batch` through `client`; return the per-row report.

    Raises `BatchInvalid` (nothing sent) if a row was submitted before with different
    content. Rows end in any state; `Report.exit_code` says what to do next.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    plan = _Plan(path, operation, namespace)
    now = client.settings.clock.time()
    keys = _registered(client.store, batch, plan, client.http, now)
    tracker = _Tracker(len(keys), on_progress)
    results: list[ReportRow | None] = [None] * len(keys)
    work = iter(range(len(keys)))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def worker() -> None:
        # A few threads pulling rows, not a future per row: a hundred thousand rows
        # cost a hundred thousand report lines, and nothing else.
        while not failures:
            with lock:
                index = next(work, None)
            if index is None:
                return
            row, key = batch.rows[index], keys[index]
            try:
                if tracker.credentials_refused:
                    outcome = _unstarted(client.store, key)
                else:
                    request = plan.request(client.http, key, row, tracker.hooks(key))
                    outcome = _send(client.http, request)
            except BaseException as exc:  # re-raised by the caller, not lost in a thread
                failures.append(exc)
                return
            tracker.finished(key, outcome)
            results[index] = _row_report(row, outcome)

    threads = [
        threading.Thread(target=worker, name=f"idemclient-batch-{n}", daemon=True)
        for n in range(min(concurrency, max(1, len(keys))))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return Report(batch=batch.reference, rows=tuple(r for r in results if r is not None))


def _send(http: httpx.Client, request: httpx.Request) -> Outcome:
    try:
        response = http.send(request)
    except OutcomeError as exc:
        return exc.outcome
    response.close()
    outcome = response.extensions[OUTCOME]
    assert isinstance(outcome, Outcome)
    return outcome


async def asubmit(
    batch: Batch,
    client: AsyncClient,
    *,
    path: str = "/v1/payouts",
    operation: str = "payout",
    namespace: uuid.UUID = DEFAULT_NAMESPACE,
    concurrency: int = 8,
    on_progress: Callable[[BatchProgress], None] | None = None,
) -> Report:
    """`submit` for an `AsyncClient`."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    plan = _Plan(path, operation, namespace)
    now = client.settings.clock.time()
    keys = await anyio.to_thread.run_sync(_registered, client.store, batch, plan, client.http, now)
    tracker = _Tracker(len(keys), on_progress)
    results: list[ReportRow | None] = [None] * len(keys)
    work = iter(range(len(keys)))

    async def worker() -> None:
        for index in work:  # tasks share one iterator: each row is taken once
            row, key = batch.rows[index], keys[index]
            if tracker.credentials_refused:
                outcome = await anyio.to_thread.run_sync(_unstarted, client.store, key)
            else:
                request = plan.request(client.http, key, row, tracker.hooks(key))
                try:
                    response = await client.http.send(request)
                except OutcomeError as exc:
                    outcome = exc.outcome
                else:
                    await response.aclose()
                    outcome = response.extensions[OUTCOME]
            tracker.finished(key, outcome)
            results[index] = _row_report(row, outcome)

    async with anyio.create_task_group() as group:
        for _ in range(min(concurrency, max(1, len(keys)))):
            group.start_soon(worker)
    return Report(batch=batch.reference, rows=tuple(r for r in results if r is not None))
