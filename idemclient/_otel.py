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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ._hooks import AttemptEndEvent, AttemptEvent, Hooks, RetryEvent, StartEvent, StoreEvent
from ._outcome import Outcome, State
from ._redaction import redact_url
from ._version import __version__

__all__ = ["telemetry_hooks"]

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


_current: contextvars.ContextVar[_Open | None] = contextvars.ContextVar(
    "idemclient_otel_operation", default=None
)


def _where(url: str) -> tuple[str, int | None, str]:
    parsed = httpx.URL(url)
    return parsed.host, parsed.port, str(redact_url(parsed))


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
        self.store_duration = meter.create_histogram(
            "idemclient.store.duration",
            unit="s",
            description="Store calls (each one commits), as the caller waits for them.",
        )
        self._lock = threading.Lock()
        self._unsettled: set[str] = set()
        self._warned = False

    # -- the hooks ---------------------------------------------------------------------

    def start(self, event: StartEvent) -> None:
        stale = _current.get()
        if stale is not None:
            # A call that ended without an outcome (its store failed before anything
            # was sent, or it was cut short): its span ends here, marked so.
            self._end(stale, Status(StatusCode.ERROR, "ended without an outcome"))
        host, port, url = _where(event.url)
        attributes: dict[str, Any] = {
            "http.request.method": event.method,
            "server.address": host,
            "url.full": url,
            "idemclient.operation_id": event.operation_id,
        }
        if port is not None:
            attributes["server.port"] = port
        if self.record_key:
            attributes["idemclient.key"] = event.key
        span = self.tracer.start_span(f"idemclient {event.method}", attributes=attributes)
        _current.set(_Open(event.operation_id, span, event.method, host))

    def attempt(self, event: AttemptEvent) -> None:
        host, port, url = _where(event.url)
        self.attempts.add(1, {"http.request.method": event.method, "server.address": host})
        opened = self._open(event.operation_id, event.method, url)
        if opened.attempt is not None:
            opened.attempt.end()
        attributes: dict[str, Any] = {
            "http.request.method": event.method,
            "server.address": host,
            "url.full": url,
            "idemclient.attempt": event.attempt,
            "http.request.resend_count": event.attempt - 1,
            "idemclient.timeout": event.timeout,
        }
        if port is not None:
            attributes["server.port"] = port
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
        if event.status is not None:
            opened.attempt.set_attribute("http.response.status_code", event.status)
        opened.attempt.set_attribute("idemclient.classification", event.classification)
        opened.attempt.set_attribute("idemclient.evidence", event.evidence)
        opened.attempt.set_attribute("idemclient.maybe_applied", event.maybe_applied)
        if event.classification != "succeeded":
            opened.attempt.set_status(Status(StatusCode.ERROR, event.classification))

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
            if self.record_key:
                span.set_attribute("idemclient.key", outcome.key)
        else:
            _current.set(None)
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

    return Hooks(
        on_start=both(telemetry.start, inner.on_start),
        on_attempt=both(telemetry.attempt, inner.on_attempt),
        on_attempt_end=both(telemetry.attempt_end, inner.on_attempt_end),
        on_retry=both(telemetry.retry, inner.on_retry),
        on_outcome=both(telemetry.outcome, inner.on_outcome),
        on_store=both(telemetry.store, inner.on_store),
    )
