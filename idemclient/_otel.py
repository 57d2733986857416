"""OpenTelemetry spans and metrics, made from the client's hooks (`idemclient.otel`).

Each call of an operation is a span (`idemclient POST`), and each of its attempts a
child span (`POST`, kind CLIENT) from the attempt until the call decides what follows
it; a retry and the outcome are events on the operation's span. The operation that is
open is kept in a context variable, so threads and asyncio tasks each have their own,
and an operation handed back to httpx (a redirect, an auth flow) goes on in the same
span. Nothing here may break a payment: a failure of the telemetry is logged once and
dropped.

Metric attributes are few and bounded: the method, the host, the classification, the
state, the store call. Never a key, an operation id or a path (paths hold ids).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ._forks import afresh_in_child
from ._outcome import Outcome, State
from ._redaction import shown_url
from ._version import __version__
from .hooks import (
    AttemptEndEvent,
    AttemptEvent,
    EndEvent,
    Hooks,
    RetryEvent,
    StartEvent,
    StoreEvent,
)

__all__ = ["HTTP_DURATION_BUCKETS", "STORE_DURATION_BUCKETS", "telemetry_hooks"]

#: Bucket bounds (seconds) of `idemclient.store.duration`: a local commit takes well
#: under a millisecond, a remote database's some milliseconds, a stalled one seconds.
STORE_DURATION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Bucket bounds (seconds) of `http.client.request.duration`: those OpenTelemetry's
#: HTTP semantic conventions give it.
HTTP_DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
_DEFAULT_PORTS = {"http": 80, "https": 443}

SCOPE = "idemclient"
logger = logging.getLogger("idemclient.otel")

E = TypeVar("E")


@dataclass(slots=True)
class _Open:
    """The operation this thread or task has open, and its attempt in flight."""

    operation_id: str
    span: Span
    method: str
    host: str
    attempt: Span | None = None
    classification: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    #: the attempt in flight: its metric attributes, and when it was sent
    attempt_attrs: dict[str, Any] = field(default_factory=dict)
    attempt_started: float = 0.0


_current: contextvars.ContextVar[_Open | None] = contextvars.ContextVar(
    "idemclient_otel_operation", default=None
)
#: The operation this thread or task told the outcome of last: its call's end follows.
_told: contextvars.ContextVar[_Open | None] = contextvars.ContextVar(
    "idemclient_otel_told", default=None
)


def _where(url: str) -> tuple[str, int | None, str, str]:
    """Host, port (the scheme's default when the URL names none), redacted URL and
    scheme."""
    parsed = httpx.URL(url)
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS.get(parsed.scheme)
    return parsed.host, port, shown_url(parsed), parsed.scheme


def _histogram(
    meter: metrics.Meter, name: str, *, unit: str, description: str, buckets: tuple[float, ...]
) -> metrics.Histogram:
    """A histogram with its bucket bounds given as OpenTelemetry's advice (API 1.23 and
    later); an older API takes no advice: the SDK's default buckets then, unless the
    application sets a View, and a warning saying so."""
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:
        logger.warning(
            "this OpenTelemetry API takes no bucket advice (opentelemetry-api 1.23 or later"
            " does): %s has the SDK's default buckets; set a View with these bounds: %s",
            name,
            list(buckets),
        )
        return meter.create_histogram(name, unit=unit, description=description)


class _Telemetry:
    def __init__(
        self,
        tracer: trace.Tracer,
        meter: metrics.Meter,
        *,
        record_key: bool,
    ) -> None:
        self.tracer = tracer
        self.record_key = record_key
        self.attempts = meter.create_counter(
            "idemclient.attempts", unit="{attempt}", description="Attempts sent."
        )
        self.retries = meter.create_counter(
            "idemclient.retries",
            unit="{retry}",
            description="Retries decided, by the classification of the attempt before.",
        )
        self.outcomes = meter.create_counter(
            "idemclient.outcomes", unit="{operation}", description="Outcomes, by state."
        )
        self.indeterminate = meter.create_up_down_counter(
            "idemclient.operations.indeterminate",
            unit="{operation}",
            description="Operations this process saw end indeterminate and not yet settled.",
        )
        self.store_duration = _histogram(
            meter,
            "idemclient.store.duration",
            unit="s",
            description="Store calls (each one commits), as the caller waits for them.",
            buckets=STORE_DURATION_BUCKETS,
        )
        self.request_duration = _histogram(
            meter,
            "http.client.request.duration",
            unit="s",
            description="Duration of HTTP client requests (each attempt).",
            buckets=HTTP_DURATION_BUCKETS,
        )
        self.budget_spent = meter.create_counter(
            "idemclient.retry_budget.exhausted",
            unit="{retry}",
            description="Retries the client's retry budget refused (the call stopped there).",
        )
        # Exported from the start, at 0: a dashboard or an alert reads "none open", not
        # "no data", before the first operation ends indeterminate.
        self.indeterminate.add(0)
        self._unsettled: set[str] = set()
        self._warned = False
        self._locks_afresh()
        afresh_in_child(self)  # a forked child's calls count their outcomes too

    def _locks_afresh(self) -> None:
        # In a forked child too: a thread of its parent may have held it at the fork.
        self._lock = threading.Lock()

    # -- the hooks ---------------------------------------------------------------------

    def start(self, event: StartEvent) -> None:
        stale = _current.get()
        if stale is not None:
            # A call that ended without an outcome (its store failed before anything
            # was sent, or it was cut short): its span ends here, marked so.
            self._end(stale, Status(StatusCode.ERROR, "ended without an outcome"))
        host, port, url, _scheme = _where(event.url)
        attributes: dict[str, Any] = {
            "http.request.method": event.method,
            "server.address": host,
            "url.full": url,
            "idemclient.operation_id": event.operation_id,
        }
        if port is not None:
            attributes["server.port"] = port
        if self.record_key and event.key:
            # The key proposed: a re-issued operation's is the store's, set below once
            # known (its first attempt, or its outcome).
            attributes["idemclient.key"] = event.key
        span = self.tracer.start_span(f"idemclient {event.method}", attributes=attributes)
        _current.set(_Open(event.operation_id, span, event.method, host))

    def attempt(self, event: AttemptEvent) -> None:
        host, port, url, scheme = _where(event.url)
        self.attempts.add(1, {"http.request.method": event.method, "server.address": host})
        opened = self._open(event.operation_id, event.method, url)
        if self.record_key and event.key:
            opened.span.set_attribute("idemclient.key", event.key)
        if opened.attempt is not None:
            opened.attempt.end()
        attributes: dict[str, Any] = {
            "http.request.method": event.method,
            "server.address": host,
            "url.full": url,
            "idemclient.attempt": event.attempt,
            "idemclient.timeout": event.timeout,
        }
        if event.attempt > 1:  # a resend: the conventions want it only then
            attributes["http.request.resend_count"] = event.attempt - 1
        if port is not None:
            attributes["server.port"] = port
        opened.attempt_attrs = {
            "http.request.method": event.method,
            "server.address": host,
            "url.scheme": scheme,
        }
        if port is not None:
            opened.attempt_attrs["server.port"] = port
        opened.attempt_started = time.perf_counter()
        opened.attempt = self.tracer.start_span(
            event.method,
            context=trace.set_span_in_context(opened.span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    def attempt_end(self, event: AttemptEndEvent) -> None:
        opened = _current.get()
        if opened is None or opened.operation_id != event.operation_id:
            return
        opened.classification = event.classification
        if opened.attempt is None:
            return
        error_type = event.error
        if error_type is None and event.status is not None and event.status >= 400:
            error_type = str(event.status)
        if event.status is not None:
            opened.attempt.set_attribute("http.response.status_code", event.status)
            opened.attempt_attrs["http.response.status_code"] = event.status
        if error_type is not None:
            opened.attempt.set_attribute("error.type", error_type)
        opened.attempt.set_attribute("idemclient.classification", event.classification)
        opened.attempt.set_attribute("idemclient.evidence", event.evidence)
        opened.attempt.set_attribute("idemclient.maybe_applied", event.maybe_applied)
        if event.classification != "succeeded":
            opened.attempt.set_status(Status(StatusCode.ERROR, event.classification))
        self._record_duration(opened, error_type)

    def retry(self, event: RetryEvent) -> None:
        opened = _current.get()
        if opened is None or opened.operation_id != event.operation_id:
            return
        reason = opened.classification or "unknown"
        self.retries.add(
            1,
            {
                "http.request.method": opened.method,
                "server.address": opened.host,
                "idemclient.reason": reason,
            },
        )
        opened.span.add_event(
            "retry",
            {
                "idemclient.attempt": event.attempt,
                "idemclient.wait": event.wait,
                "idemclient.reason": reason,
                "idemclient.evidence": event.evidence,
                "idemclient.maybe_applied": event.maybe_applied,
            },
        )
        if opened.attempt is not None:
            opened.attempt.set_attribute("idemclient.wait", event.wait)
            opened.attempt.set_attribute("idemclient.outcome.state", "retrying")
            opened.attempt.end()
            opened.attempt = None

    def outcome(self, outcome: Outcome) -> None:
        state = outcome.state.value
        opened = _current.get()
        if opened is None or opened.operation_id != outcome.operation_id:
            # Told outside a call (a resume that refused to send, a reconcile): an
            # operation span of its own, begun and ended now.
            span = self.tracer.start_span("idemclient operation")
            opened = _Open(outcome.operation_id, span, method="", host="")
            span.set_attribute("idemclient.operation_id", outcome.operation_id)
        else:
            _current.set(None)
            _told.set(opened)
        if self.record_key:
            # The key the operation has: a re-issued one's is the store's, not the one
            # proposed as the call started.
            opened.span.set_attribute("idemclient.key", outcome.key)
        self._count_outcome(outcome, opened)
        if opened.attempt is not None:
            opened.attempt.set_attribute("idemclient.outcome.state", state)
        opened.span.set_attributes(
            {
                "idemclient.state": state,
                "idemclient.attempts": outcome.attempts,
                "idemclient.from_store": outcome.from_store,
                "idemclient.replayed": outcome.replayed,
                "idemclient.maybe_applied": outcome.maybe_applied,
            }
        )
        if outcome.last_status is not None:
            opened.span.set_attribute("http.response.status_code", outcome.last_status)
        if outcome.state is not State.SUCCEEDED:
            opened.span.set_attribute("error.type", state)
        opened.span.add_event(
            "outcome",
            {
                "idemclient.state": state,
                "idemclient.attempts": outcome.attempts,
                "idemclient.evidence": outcome.evidence,
                "idemclient.from_store": outcome.from_store,
            },
        )
        self._end(
            opened,
            Status(StatusCode.UNSET)
            if outcome.state is State.SUCCEEDED
            else Status(StatusCode.ERROR, state),
        )

    def end(self, event: EndEvent) -> None:
        """The call ended: a span still open (no outcome was told: cancelled,
        interrupted, a hook or the store raised) ends now, with what ended it."""
        opened = _current.get()
        told = _told.get()
        _told.set(None)
        if event.budget_spent:
            labels: dict[str, Any] = {}
            for known in (opened, told):
                if known is not None and known.operation_id == event.operation_id:
                    labels = {"http.request.method": known.method, "server.address": known.host}
            self.budget_spent.add(1, labels)
        if opened is None or opened.operation_id != event.operation_id:
            return
        _current.set(None)
        error = event.error
        name = "_OTHER" if error is None else _error_name(error)
        if opened.attempt is not None:
            opened.attempt.set_attribute("error.type", name)
            opened.attempt.set_status(Status(StatusCode.ERROR, name))
            self._record_duration(opened, name)
        if self.record_key and event.key:
            opened.span.set_attribute("idemclient.key", event.key)
        opened.span.set_attribute("error.type", name)
        self._end(opened, Status(StatusCode.ERROR, f"ended without an outcome: {name}"))

    def store(self, event: StoreEvent) -> None:
        self.store_duration.record(
            event.seconds,
            {"idemclient.store.call": event.call, "idemclient.store.failed": event.failed},
        )

    # -- helpers -----------------------------------------------------------------------

    def _open(self, operation_id: str, method: str, url: str) -> _Open:
        opened = _current.get()
        if opened is not None and opened.operation_id == operation_id:
            return opened
        # An attempt of an operation this context did not see start (hooks given to a
        # call that continues another's): an operation span from here on.
        self.start(StartEvent(operation_id, "", method, url))
        started = _current.get()
        assert started is not None
        return started

    def _record_duration(self, opened: _Open, error_type: str | None) -> None:
        """`http.client.request.duration` of the attempt in flight, once."""
        if not opened.attempt_attrs:
            return
        attributes = opened.attempt_attrs
        if error_type is not None:
            attributes["error.type"] = error_type
        self.request_duration.record(time.perf_counter() - opened.attempt_started, attributes)
        opened.attempt_attrs = {}

    def _count_outcome(self, outcome: Outcome, opened: _Open) -> None:
        labels: dict[str, Any] = {"idemclient.state": outcome.state.value}
        if opened.method:
            labels["http.request.method"] = opened.method
            labels["server.address"] = opened.host
        labels["idemclient.from_store"] = outcome.from_store
        self.outcomes.add(1, labels)
        with self._lock:
            if outcome.state is State.INDETERMINATE:
                if outcome.operation_id in self._unsettled:
                    return
                self._unsettled.add(outcome.operation_id)
                change = 1
            elif outcome.operation_id in self._unsettled:
                self._unsettled.discard(outcome.operation_id)
                change = -1
            else:
                return
        self.indeterminate.add(change)

    def _end(self, opened: _Open, status: Status) -> None:
        if opened.attempt is not None:
            opened.attempt.end()
            opened.attempt = None
        opened.span.set_status(status)
        opened.span.end()

    def abandon(self, event: StartEvent, error: BaseException) -> None:
        """A hook after ours raised as the call started: the call ends there, before
        anything is asked of the store, and so does its span."""
        opened = _current.get()
        if opened is not None and opened.operation_id == event.operation_id:
            _current.set(None)
            opened.span.set_attribute("error.type", _error_name(error))
            self._end(opened, Status(StatusCode.ERROR, "a hook raised as the call started"))

    def safely(self, handler: Callable[[E], None]) -> Callable[[E], None]:
        """`handler`, never raising: telemetry that fails must not fail a payment."""

        def call(event: E) -> None:
            try:
                handler(event)
            except Exception:
                if not self._warned:
                    self._warned = True
                    logger.warning("OpenTelemetry instrumentation failed", exc_info=True)

        return call


def telemetry_hooks(
    hooks: Hooks | None,
    *,
    tracer_provider: trace.TracerProvider | None,
    meter_provider: metrics.MeterProvider | None,
    record_key: bool,
) -> Hooks:
    """See `idemclient.otel.otel_hooks`."""
    telemetry = _Telemetry(
        trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider),
        metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider),
        record_key=record_key,
    )
    inner = hooks or Hooks()
    safe = telemetry.safely

    def both(mine: Callable[[E], None], theirs: Callable[[E], None] | None) -> Callable[[E], None]:
        ours = safe(mine)
        if theirs is None:
            return ours

        def call(event: E) -> None:
            ours(event)
            theirs(event)

        return call

    def starting(event: StartEvent) -> None:
        safe(telemetry.start)(event)
        if inner.on_start is not None:
            try:
                inner.on_start(event)
            except BaseException as exc:
                try:
                    telemetry.abandon(event, exc)
                except Exception:  # telemetry never fails a call, nor hides its error
                    logger.warning("OpenTelemetry instrumentation failed", exc_info=True)
                raise

    return Hooks(
        on_start=starting,
        on_attempt=both(telemetry.attempt, inner.on_attempt),
        on_attempt_end=both(telemetry.attempt_end, inner.on_attempt_end),
        on_retry=both(telemetry.retry, inner.on_retry),
        on_outcome=both(telemetry.outcome, inner.on_outcome),
        on_store=both(telemetry.store, inner.on_store),
        on_end=both(telemetry.end, inner.on_end),
    )


def _error_name(error: BaseException) -> str:
    """An error's class by its full name (`error.type`)."""
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
