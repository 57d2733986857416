"""What operators see is true: the store latency histogram reads back the real quantile,
every settlement reports through the hooks, a span carries the key the wire carried and
ends with its call however the call ends, and the HTTP semantic conventions hold.

Read back through the public interface only: `otel_hooks` with the SDK's in-memory
exporters, the client's `Hooks`, and log records."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, NotSent, RetryPolicy, State
from idemclient.hooks import EndEvent, Hooks, StoreEvent
from idemclient.otel import otel_hooks
from idemclient.policy import RetryBudget
from idemclient.testing import ReferenceServer

from ..support.shop import BY_REFERENCE
from .test_otel import Telemetry

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "inv-7"}
AUTH = {"Authorization": "Bearer merchant-1"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def server() -> ReferenceServer:
    return ReferenceServer(clock=ManualClock())


def _client(
    cls: Any, tmp_path: Path, transport: Any, hooks: Hooks, *, base_url: str = "http://psp.test",
    **options: Any,
) -> Any:  # fmt: skip
    return cls(
        store=tmp_path / "c.db",
        transport=transport,
        base_url=base_url,
        headers=AUTH,
        clock=ManualClock(),
        hooks=hooks,
        rng=random.Random(7),
        # Every request a test's transport sees is an attempt (no time probe first).
        server_clock=False,
        **options,
    )


def _histogram(telemetry: Telemetry, name: str) -> list[HistogramDataPoint]:
    data = telemetry.reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    points = metric.data.data_points
                    found += [p for p in points if isinstance(p, HistogramDataPoint)]
    return found


def histogram_quantile(q: float, bounds: tuple[float, ...], counts: list[int]) -> float:
    """Prometheus's `histogram_quantile` over one histogram: the bucket where the rank
    falls, linearly interpolated between its bounds (the first bucket from 0)."""
    total = sum(counts)
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if seen + count >= rank and count:
            if index >= len(bounds):  # the +Inf bucket: its lower bound
                return bounds[-1]
            lower = 0.0 if index == 0 else bounds[index - 1]
            return lower + (bounds[index] - lower) * (rank - seen) / count
        seen += count
    return math.nan


def _bucket_of(value: float, bounds: tuple[float, ...]) -> tuple[float, float]:
    lower = 0.0
    for bound in bounds:
        if value <= bound:
            return lower, bound
        lower = bound
    return lower, math.inf


# -- the store latency histogram -------------------------------------------------------


def test_the_store_latency_quantile_reads_back_the_real_one(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    seen: list[float] = []
    mine = Hooks(on_store=lambda event: seen.append(event.seconds))
    both = otel_hooks(
        mine, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    with _client(Client, tmp_path, server.transport, both) as client:
        for n in range(40):
            client.post("/v1/payments", json={**PAYMENT, "reference": f"inv-{n}"})
    points = _histogram(telemetry, "idemclient.store.duration")
    bounds = tuple(points[0].explicit_bounds)
    # Sub-millisecond to seconds, never the SDK's default (0, 5, 10, ... 10000).
    assert bounds[0] <= 0.0001
    assert 0.001 in bounds
    assert bounds[-1] >= 5
    counts = [sum(c) for c in zip(*(p.bucket_counts for p in points), strict=True)]
    assert sum(counts) == len(seen)
    estimated = histogram_quantile(0.99, bounds, counts)
    real = sorted(seen)[math.ceil(0.99 * len(seen)) - 1]
    lower, upper = _bucket_of(real, bounds)
    # The estimate lies in the bucket of the real 99th percentile.
    assert lower <= estimated <= upper, (estimated, real, bounds)
    assert estimated < 1.0  # a local SQLite commit, not the 4.95 s of default buckets


def test_without_bucket_advice_the_histogram_takes_the_default_and_says_so(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    """An OpenTelemetry API older than 1.23 takes no `explicit_bucket_boundaries_advisory`:
    the hooks still work, and a warning names the bounds to set in a View."""

    class OldMeter:
        def __init__(self, meter: Any) -> None:
            self.meter = meter

        def create_histogram(self, name: str, unit: str = "", description: str = "") -> Any:
            return self.meter.create_histogram(name, unit=unit, description=description)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.meter, name)

    class OldProvider:
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            return OldMeter(telemetry.meter_provider.get_meter(*args, **kwargs))

    hooks = otel_hooks(
        tracer_provider=telemetry.tracer_provider,
        meter_provider=OldProvider(),  # type: ignore[arg-type]
    )
    with (
        caplog.at_level(logging.WARNING, logger="idemclient.otel"),
        _client(Client, tmp_path, server.transport, hooks) as client,
    ):
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert any("set a View" in r.getMessage() for r in caplog.records)
    assert _histogram(telemetry, "idemclient.store.duration")


# -- settlements report through the hooks ----------------------------------------------


def _gauge(telemetry: Telemetry) -> list[Any]:
    return [v for _, v in telemetry.points("idemclient.operations.indeterminate")]


def test_the_indeterminate_gauge_is_exported_as_0_from_the_start(telemetry: Telemetry) -> None:
    telemetry.hooks()
    assert _gauge(telemetry) == [0]


def test_reconcile_reports_through_the_hooks_and_the_gauge_comes_down(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    told: list[Any] = []
    hooks = otel_hooks(
        Hooks(on_outcome=told.append),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    server.drop(times=2)  # applied, the answer lost twice: the call gives up
    with _client(
        Client, tmp_path, server.transport, hooks, policy=RetryPolicy(max_attempts=2)
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-9", reference="inv-7")
        assert _gauge(telemetry) == [1]
        telemetry.spans.clear()
        told.clear()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="idemclient"):
            settled = client.reconcile("order-9", lookup=BY_REFERENCE)
    assert settled.state is State.SUCCEEDED
    assert [o.state for o in told] == [State.SUCCEEDED]
    assert _gauge(telemetry) == [0]
    (span,) = telemetry.finished()
    assert span.attributes["idemclient.state"] == "succeeded"
    assert span.attributes["idemclient.key"] == settled.key
    records = [r for r in caplog.records if getattr(r, "idemclient.event", None) == "outcome"]
    assert [getattr(r, "idemclient.state") for r in records] == ["succeeded"]


def test_a_reconcile_that_cannot_tell_reports_too(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    told: list[Any] = []
    hooks = otel_hooks(
        Hooks(on_outcome=told.append),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    server.drop(times=2)
    with _client(
        Client, tmp_path, server.transport, hooks, policy=RetryPolicy(max_attempts=2)
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-9", reference="inv-7")
        told.clear()
        telemetry.spans.clear()
        server.answer(503, path="/v1/payments", times=1)  # the look-up fails
        with pytest.raises(Indeterminate):
            client.reconcile("order-9", lookup=BY_REFERENCE)
    assert [o.state for o in told] == [State.INDETERMINATE]
    assert _gauge(telemetry) == [1]  # still open: nothing settled it
    (span,) = telemetry.finished()
    assert span.status.status_code is StatusCode.ERROR


# -- the key a span carries -------------------------------------------------------------


def test_a_re_issued_operation_s_span_carries_the_key_sent(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=2)
    wire: list[str] = []

    def recorded(request: httpx.Request) -> httpx.Response:
        wire.append(request.headers["Idempotency-Key"])
        return server.transport.handle_request(request)

    transport = httpx.MockTransport(recorded)
    with _client(
        Client, tmp_path, transport, telemetry.hooks(), policy=RetryPolicy(max_attempts=2)
    ) as client:
        with pytest.raises(NotSent):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-5")
        telemetry.spans.clear()
        again = client.post("/v1/payments", json=PAYMENT, operation_id="order-5")
    assert again.state is State.SUCCEEDED
    (operation,) = [s for s in telemetry.finished() if s.name == "idemclient POST"]
    assert set(wire) == {again.key}
    assert operation.attributes["idemclient.key"] == again.key


def test_a_store_answered_operation_s_span_carries_its_stored_key(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    with _client(Client, tmp_path, server.transport, telemetry.hooks()) as client:
        first = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
        telemetry.spans.clear()
        again = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert again.from_store
    (operation,) = telemetry.finished()
    assert operation.attributes["idemclient.key"] == first.key == again.key


# -- every span ends with its call ---------------------------------------------------------


def _open_spans(telemetry: Telemetry, started: list[str]) -> list[str]:
    ended = {s.name for s in telemetry.finished()}
    return [name for name in started if name not in ended]


def _ended_with(telemetry: Telemetry, error_type: str) -> ReadableSpan:
    (operation,) = [s for s in telemetry.finished() if s.name == "idemclient POST"]
    assert operation.status.status_code is StatusCode.ERROR
    assert operation.attributes["error.type"] == error_type
    return operation


@pytest.mark.anyio
async def test_a_cancelled_async_call_ends_its_spans(tmp_path: Path, telemetry: Telemetry) -> None:
    entered = asyncio.Event()

    async def never_answers(request: httpx.Request) -> httpx.Response:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    ends: list[EndEvent] = []
    hooks = otel_hooks(
        Hooks(on_end=ends.append),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    async with _client(AsyncClient, tmp_path, httpx.MockTransport(never_answers), hooks) as client:
        task = asyncio.create_task(client.post("/v1/payments", json=PAYMENT))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Ended now, not at the next call.
        operation = _ended_with(telemetry, "asyncio.exceptions.CancelledError")
        (attempt,) = [s for s in telemetry.finished() if s.name == "POST"]
        assert attempt.end_time is not None
        assert operation.end_time is not None
    assert [type(e.error) for e in ends] == [asyncio.CancelledError]


@pytest.mark.anyio
async def test_a_call_cut_by_wait_for_ends_its_spans(tmp_path: Path, telemetry: Telemetry) -> None:
    async def never_answers(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    transport = httpx.MockTransport(never_answers)
    async with _client(AsyncClient, tmp_path, transport, telemetry.hooks()) as client:
        with pytest.raises(TimeoutError):
            # The one real wait of this file: wait_for's own timer, kept short.
            await asyncio.wait_for(client.post("/v1/payments", json=PAYMENT), timeout=0.05)
        _ended_with(telemetry, "asyncio.exceptions.CancelledError")
        assert len(telemetry.finished()) == 2  # the operation and its attempt


def test_ctrl_c_during_an_attempt_ends_its_spans(tmp_path: Path, telemetry: Telemetry) -> None:
    def interrupted(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    transport = httpx.MockTransport(interrupted)
    with _client(Client, tmp_path, transport, telemetry.hooks()) as client:
        with pytest.raises(KeyboardInterrupt):
            client.post("/v1/payments", json=PAYMENT)
        _ended_with(telemetry, "KeyboardInterrupt")
        (attempt,) = [s for s in telemetry.finished() if s.name == "POST"]
        assert attempt.attributes["error.type"] == "KeyboardInterrupt"


@pytest.mark.parametrize("hook", ["on_start", "on_attempt", "on_attempt_end", "on_retry"])
def test_a_raising_user_hook_ends_the_spans(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry, hook: str
) -> None:
    def broken(event: object) -> None:
        raise HookBroke

    server.answer(503, times=1)  # so that there is a retry
    hooks = otel_hooks(
        Hooks(**{hook: broken}),
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    with _client(Client, tmp_path, server.transport, hooks) as client:
        with pytest.raises(HookBroke):
            client.post("/v1/payments", json=PAYMENT)
        operation = _ended_with(telemetry, f"{__name__}.HookBroke")
        assert operation.end_time is not None
        # Every span started has ended: none is left for the next call to close.
        assert all(s.end_time is not None for s in telemetry.finished())
        telemetry.spans.clear()
    assert telemetry.finished() == []


class HookBroke(Exception):
    """What a user's hook raises."""


# -- the HTTP semantic conventions -------------------------------------------------------


def test_attempt_spans_follow_the_http_conventions(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=1)
    calls = {"n": 0}

    def first_fails(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused", request=request)
        return server.transport.handle_request(request)

    transport = httpx.MockTransport(first_fails)
    with _client(Client, tmp_path, transport, telemetry.hooks()) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    spans = telemetry.finished()
    attempts = sorted(
        (s for s in spans if s.name == "POST"), key=lambda s: s.attributes["idemclient.attempt"]
    )
    assert len(attempts) == 3
    # server.port always (the URL names none: the scheme's default)
    assert {s.attributes["server.port"] for s in spans} == {80}
    # http.request.resend_count only on a resend
    assert "http.request.resend_count" not in attempts[0].attributes
    assert [a.attributes["http.request.resend_count"] for a in attempts[1:]] == [1, 2]
    # error.type on the attempts that failed, and only there
    assert attempts[0].attributes["error.type"] == "httpx.ConnectError"
    assert attempts[1].attributes["error.type"] == "503"
    assert "error.type" not in attempts[2].attributes
    durations = _histogram(telemetry, "http.client.request.duration")
    by_error = {p.attributes.get("error.type"): p for p in durations}
    assert set(by_error) == {"httpx.ConnectError", "503", None}
    assert sum(p.count for p in durations) == 3
    ok = by_error[None].attributes
    assert ok["http.request.method"] == "POST"
    assert ok["server.address"] == "psp.test"
    assert ok["server.port"] == 80
    assert ok["http.response.status_code"] == 201
    assert ok["url.scheme"] == "http"
    assert tuple(durations[0].explicit_bounds)[:3] == (0.005, 0.01, 0.025)


def test_the_retry_budget_running_out_is_counted(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=5)
    with (
        _client(
            Client, tmp_path, server.transport, telemetry.hooks(), budget=RetryBudget(1)
        ) as client,
        pytest.raises(NotSent),
    ):
        client.post("/v1/payments", json=PAYMENT)
    points = telemetry.points("idemclient.retry_budget.exhausted")
    assert [v for _, v in points] == [1]
    assert points[0][0] == {"http.request.method": "POST", "server.address": "psp.test"}


def test_store_events_and_end_events_reach_your_hooks(
    tmp_path: Path, server: ReferenceServer
) -> None:
    stores: list[StoreEvent] = []
    ends: list[EndEvent] = []
    with _client(
        Client, tmp_path, server.transport, Hooks(on_store=stores.append, on_end=ends.append)
    ) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert stores
    assert [(e.key, e.error, e.budget_spent) for e in ends] == [(outcome.key, None, False)]
