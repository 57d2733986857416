"""OpenTelemetry from the client's hooks (`idemclient.otel`), read back with the SDK's
in-memory span exporter and metric reader, against the reference server in process."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from idemclient import AsyncClient, Client, ManualClock, RetryPolicy, State
from idemclient.errors import Indeterminate
from idemclient.hooks import Hooks
from idemclient.otel import otel_hooks
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "inv-7"}
AUTH = {"Authorization": "Bearer merchant-1"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def hooks(self, **options: Any) -> Hooks:
        return otel_hooks(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, value) of each data point of metric `name`."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            value = getattr(point, "value", None)
                            if value is None:
                                value = point.count  # a histogram's
                            found.append((dict(point.attributes or {}), value))
        return found

    def all_attribute_values(self) -> set[str]:
        data = self.reader.get_metrics_data()
        values = set()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        values |= {str(v) for v in (point.attributes or {}).values()}
        return values


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


def _client(cls: Any, tmp_path: Path, server: ReferenceServer, hooks: Hooks, **options: Any) -> Any:
    return cls(
        store=tmp_path / "c.db",
        transport=server.transport,
        base_url="http://psp.test",
        headers=AUTH,
        clock=ManualClock(),
        hooks=hooks,
        rng=random.Random(7),  # a fixed draw: the recorded wait is one number, above 0
        **options,
    )


def _by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _check_retried_operation(spans: list[ReadableSpan], key: str) -> None:
    (operation,) = _by_name(spans, "idemclient POST")
    attempts = sorted(_by_name(spans, "POST"), key=lambda s: s.attributes["idemclient.attempt"])
    assert len(attempts) == 3
    assert operation.context is not None
    for attempt in attempts:
        assert attempt.parent is not None
        assert attempt.parent.span_id == operation.context.span_id
        assert attempt.kind is SpanKind.CLIENT
        assert attempt.attributes["http.request.method"] == "POST"
        assert attempt.attributes["server.address"] == "psp.test"
    first, second, last = attempts
    assert [a.attributes["idemclient.attempt"] for a in attempts] == [1, 2, 3]
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["idemclient.classification"] == "throttled"
    assert first.attributes["idemclient.wait"] > 0
    assert first.attributes["idemclient.outcome.state"] == "retrying"
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["idemclient.classification"] == "server_error"
    assert last.attributes["http.response.status_code"] == 201
    assert last.attributes["idemclient.classification"] == "succeeded"
    assert last.attributes["idemclient.outcome.state"] == "succeeded"
    assert "idemclient.wait" not in last.attributes
    assert operation.attributes["idemclient.key"] == key
    assert operation.attributes["idemclient.operation_id"] == "order-42"
    assert operation.attributes["idemclient.state"] == "succeeded"
    assert operation.attributes["idemclient.attempts"] == 3
    assert operation.status.status_code is StatusCode.UNSET
    events = [e.name for e in operation.events]
    assert events == ["retry", "retry", "outcome"]
    assert operation.events[0].attributes["idemclient.reason"] == "throttled"
    # No span's name holds a path.
    assert all("/" not in s.name for s in spans)


def _check_metrics(telemetry: Telemetry) -> None:
    assert sum(v for _, v in telemetry.points("idemclient.attempts")) == 3
    retries = {a["idemclient.reason"]: v for a, v in telemetry.points("idemclient.retries")}
    assert retries == {"throttled": 1, "server_error": 1}
    outcomes = {a["idemclient.state"]: v for a, v in telemetry.points("idemclient.outcomes")}
    assert outcomes == {"succeeded": 1}
    calls = {a["idemclient.store.call"] for a, _ in telemetry.points("idemclient.store.duration")}
    assert {"begin", "record_attempt", "finish"} <= calls


def test_an_operation_is_a_span_with_a_child_per_attempt(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=1)
    server.answer(500, times=1)
    with _client(Client, tmp_path, server, telemetry.hooks()) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert outcome.state is State.SUCCEEDED
    _check_retried_operation(telemetry.finished(), outcome.key)
    _check_metrics(telemetry)


@pytest.mark.anyio
async def test_an_async_operation_is_a_span_with_a_child_per_attempt(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=1)
    server.answer(500, times=1)
    async with _client(AsyncClient, tmp_path, server, telemetry.hooks()) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert outcome.state is State.SUCCEEDED
    _check_retried_operation(telemetry.finished(), outcome.key)
    _check_metrics(telemetry)


def test_the_key_can_be_left_out_of_the_spans(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    with _client(Client, tmp_path, server, telemetry.hooks(record_key=False)) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    for span in telemetry.finished():
        assert "idemclient.key" not in span.attributes
        assert outcome.key not in str(dict(span.attributes))


def test_a_replay_from_the_store_is_a_span_without_attempts(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    with _client(Client, tmp_path, server, telemetry.hooks()) as client:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
        telemetry.spans.clear()
        again = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert again.from_store
    (operation,) = telemetry.finished()
    assert operation.name == "idemclient POST"
    assert operation.attributes["idemclient.from_store"] is True
    outcomes = telemetry.points("idemclient.outcomes")
    assert {(a["idemclient.from_store"], v) for a, v in outcomes} == {(False, 1), (True, 1)}


def test_no_key_operation_id_or_path_with_ids_becomes_a_metric_label(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.answer(503, times=1)
    policy = RetryPolicy(max_attempts=2)
    with _client(Client, tmp_path, server, telemetry.hooks(), policy=policy) as client:
        paid = client.post("/v1/payments", json=PAYMENT, operation_id="order-secret-77")
        refused = client.post(
            "/v1/payments/pay_9f8e7d/refunds", json=PAYMENT, operation_id="refund-secret-78"
        )
    labels = telemetry.all_attribute_values()
    assert labels  # there are metrics, with attributes
    for secret in (paid.key, refused.key, "order-secret-77", "refund-secret-78", "pay_9f8e7d"):
        assert not any(secret in value for value in labels), (secret, labels)
    assert not any("/" in value for value in labels), labels


def test_indeterminate_operations_open_go_up_and_down(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    server.drop(times=2)  # applied, the answer lost: twice, so the call gives up
    with _client(
        Client, tmp_path, server, telemetry.hooks(), policy=RetryPolicy(max_attempts=2)
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-9")
        assert [v for _, v in telemetry.points("idemclient.operations.indeterminate")] == [1]
        (resumed,) = client.resume()
    assert resumed.state is State.SUCCEEDED
    assert [v for _, v in telemetry.points("idemclient.operations.indeterminate")] == [0]
    operation = [
        s for s in telemetry.finished() if s.attributes.get("idemclient.state") == "indeterminate"
    ]
    assert operation[0].status.status_code is StatusCode.ERROR


def test_a_failing_exporter_never_fails_a_payment(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    class Broken(SimpleSpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            raise RuntimeError("the collector is down")

    provider = TracerProvider()
    provider.add_span_processor(Broken(InMemorySpanExporter()))
    hooks = otel_hooks(tracer_provider=provider, meter_provider=telemetry.meter_provider)
    with _client(Client, tmp_path, server, hooks) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED


def test_your_own_hooks_are_still_called(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    seen: list[str] = []
    mine = Hooks(on_outcome=lambda o: seen.append(o.state.value))
    hooks = otel_hooks(
        mine, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    with _client(Client, tmp_path, server, hooks) as client:
        client.post("/v1/payments", json=PAYMENT)
    assert seen == ["succeeded"]
    assert telemetry.finished()


def test_the_module_imports_without_opentelemetry_and_names_the_extra() -> None:
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'opentelemetry' or name.startswith('opentelemetry.'):\n"
        "            raise ImportError('no opentelemetry here')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import idemclient, idemclient.otel\n"
        "try:\n"
        "    idemclient.otel.otel_hooks()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert "pip install 'idemclient[otel]'" in done.stdout, done.stdout + done.stderr


def _parented(spans: list[ReadableSpan], operations: set[str]) -> None:
    """Every attempt span is a child of its own operation's span."""
    by_span = {
        s.context.span_id: s.attributes["idemclient.operation_id"]
        for s in spans
        if s.name == "idemclient POST" and s.context is not None
    }
    assert set(by_span.values()) == operations
    attempts = [s for s in spans if s.name == "POST"]
    assert len(attempts) == 2 * len(operations)  # one 503, then the answer
    for attempt in attempts:
        assert attempt.parent is not None
        assert attempt.parent.span_id in by_span


def test_threads_each_have_their_own_operation_span(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    ids = {f"order-{n}" for n in range(6)}
    for operation_id in ids:
        server.answer(503, times=1, key=f"key-{operation_id}")
    with (
        _client(Client, tmp_path, server, telemetry.hooks()) as client,
        ThreadPoolExecutor(max_workers=3) as pool,
    ):
        outcomes = list(
            pool.map(
                lambda operation_id: client.post(
                    "/v1/payments",
                    json={**PAYMENT, "reference": operation_id},
                    operation_id=operation_id,
                    headers={"Idempotency-Key": f"key-{operation_id}"},
                ),
                sorted(ids),
            )
        )
    assert {o.state for o in outcomes} == {State.SUCCEEDED}
    _parented(telemetry.finished(), ids)


@pytest.mark.anyio
async def test_asyncio_tasks_each_have_their_own_operation_span(
    tmp_path: Path, server: ReferenceServer, telemetry: Telemetry
) -> None:
    ids = {f"order-{n}" for n in range(6)}
    for operation_id in ids:
        server.answer(503, times=1, key=f"key-{operation_id}")
    async with _client(AsyncClient, tmp_path, server, telemetry.hooks()) as client:
        outcomes = await asyncio.gather(
            *(
                client.post(
                    "/v1/payments",
                    json={**PAYMENT, "reference": operation_id},
                    operation_id=operation_id,
                    headers={"Idempotency-Key": f"key-{operation_id}"},
                )
                for operation_id in sorted(ids)
            )
        )
    assert {o.state for o in outcomes} == {State.SUCCEEDED}
    _parented(telemetry.finished(), ids)
