"""Spans and Prometheus metrics for every payment, through OpenTelemetry.

Needs `pip install 'idemclient[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus`.
The reference server stands in for the PSP: it is busy once (503), then fails once
(500), and the payment goes through on the third attempt. The spans are kept in
memory and printed; the metrics are printed as Prometheus scrapes them (a real
application serves them with `prometheus_client.start_http_server(9464)`).
"""

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY, generate_latest

import idemclient
from idemclient.otel import otel_hooks
from idemclient.testing import ReferenceServer

spans = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader()])

idemclient.clock.set_testing(True)  # the example does not wait out the backoff
server = ReferenceServer()
server.answer(503, path="/v1/payments")  # busy: retried
server.answer(500, path="/v1/payments")  # failed: retried with the same key

with idemclient.Client(
    base_url="https://psp.test",
    transport=server.transport,
    headers={"Authorization": "Bearer sk_test_merchant"},
    store="payments.db",
    hooks=otel_hooks(tracer_provider=tracer_provider, meter_provider=meter_provider),
) as psp:
    outcome = psp.post(
        "/v1/payments",
        json={"amount": 4200, "currency": "EUR", "reference": "order-7"},
        operation_id="order-7",
    )
print("outcome:", outcome.state.value, "after", outcome.attempts, "attempts")

for span in sorted(spans.get_finished_spans(), key=lambda s: s.start_time or 0):
    attributes = span.attributes or {}
    if span.name.startswith("idemclient"):
        print(f"span {span.name}: {attributes['idemclient.state']}")
    else:
        print(
            f"  span {span.name} attempt {attributes['idemclient.attempt']}:"
            f" {attributes.get('http.response.status_code')}"
            f" {attributes.get('idemclient.classification')}"
        )

for line in generate_latest(REGISTRY).decode().splitlines():
    if line.startswith("idemclient_") and line.split("{")[0].endswith(("_total", "_count")):
        print(line)
