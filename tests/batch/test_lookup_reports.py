"""A batch row settled by its look-up reports through the client's hooks as a call's
outcome does: `on_outcome`, its log record, its span, and the indeterminate gauge
coming down."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from idemclient import Client, ManualClock, RetryPolicy, State, key_from_identity
from idemclient.batch import Batch, submit
from idemclient.hooks import Hooks
from idemclient.otel import otel_hooks
from idemclient.testing import ReferenceServer

DAY = 86_400.0


def _batch(n: int = 3) -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(n)
        ]
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as running:
        yield running


def _client(server: ReferenceServer, store: Path, clock: ManualClock, hooks: Hooks) -> Client:
    return Client(
        store=store,
        clock=clock,
        policy=RetryPolicy(max_attempts=2),
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
        hooks=hooks,
    )


def _gauge(reader: InMemoryMetricReader) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point.value
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "idemclient.operations.indeterminate"
        for point in metric.data.data_points
    ]


def test_rows_found_by_look_up_are_told_to_the_hooks(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    with _client(server, tmp_path / "a.db", clock, Hooks()) as first:
        submit(_batch(), first)
    server.advance(2 * DAY)
    server.reap()  # the server has forgotten the keys: a fresh store looks them up
    told: list[Any] = []
    with _client(server, tmp_path / "b.db", clock, Hooks(on_outcome=told.append)) as second:
        report = submit(_batch(), second)
    assert all(row.already_done for row in report.rows)
    assert sorted(o.operation_id for o in told) == [f"batch/payout/E{i:04d}" for i in range(3)]
    assert {o.state for o in told} == {State.SUCCEEDED}
    assert not any(o.from_store for o in told)


def test_an_indeterminate_row_settled_by_look_up_brings_the_gauge_down(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    reader = InMemoryMetricReader()
    hooks = otel_hooks(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader])
    )
    server.drop(key=key_from_identity("E0001", "payout"), times=2)  # applied, never answered
    with _client(server, tmp_path / "s.db", clock, hooks) as client:
        first = submit(_batch(), client)
        assert [row.state for row in first.rows] == ["succeeded", "indeterminate", "succeeded"]
        assert _gauge(reader) == [1]
        clock.advance(DAY)  # past the in-flight hold: the row is looked up, not sent
        again = submit(_batch(), client)
    assert [row.state for row in again.rows] == ["succeeded"] * 3
    assert _gauge(reader) == [0]
    assert len(server.ledger()) == 3
