"""Log records tell operators the truth without giving away a secret: one redaction for
logs, spans and errors, tested with each form a secret takes in a URL; fields
namespaced as ``idemclient.*`` (the bare names kept one release, deprecated)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy
from idemclient.hooks import drop_legacy_fields
from idemclient.otel import otel_hooks
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "inv-7"}
SECRET = "s3cr3t-VALUE"

#: (base URL, path): each form a credential takes in a URL.
FORMS = {
    "user and password": (f"http://merchant:{SECRET}@psp.test", "/v1/payments"),
    "a token as the user": (f"http://{SECRET}@psp.test", "/v1/payments"),
    "access_token": ("http://psp.test", f"/v1/payments?access_token={SECRET}"),
    "api_key": ("http://psp.test", f"/v1/payments?api_key={SECRET}&currency=EUR"),
    "sig": ("http://psp.test", f"/v1/payments?sig={SECRET}"),
    "X-Amz-Signature": ("http://psp.test", f"/v1/payments?X-Amz-Signature={SECRET}"),
    "client_secret": ("http://psp.test", f"/v1/payments?client_secret={SECRET}"),
}


def _everything_in(record: logging.LogRecord) -> str:
    """The record's message and every attribute it carries, as text."""
    return record.getMessage() + " " + " ".join(map(str, vars(record).values()))


@pytest.fixture
def spans() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


@pytest.mark.parametrize("form", FORMS)
def test_no_secret_in_a_url_reaches_a_log_record_a_span_or_an_error(
    form: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = spans
    base_url, path = FORMS[form]
    server = ReferenceServer(clock=ManualClock())
    server.drop(times=2)  # applied, never answered: the call ends indeterminate

    def looked_up_fails(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            raise httpx.ConnectError("refused", request=request)
        return server.transport.handle_request(request)

    hooks = otel_hooks(tracer_provider=provider, meter_provider=MeterProvider())
    errors: list[str] = []
    with (
        caplog.at_level(logging.DEBUG, logger="idemclient"),
        Client(
            store=tmp_path / "c.db",
            transport=httpx.MockTransport(looked_up_fails),
            base_url=base_url,
            headers={"Authorization": "Bearer merchant-1"},
            clock=ManualClock(),
            hooks=hooks,
            policy=RetryPolicy(max_attempts=2),
            server_clock=False,
        ) as client,
    ):
        with pytest.raises(Indeterminate) as sent:
            client.post(path, json=PAYMENT, operation_id="order-1", reference="inv-7")
        errors.append(str(sent.value))
        with pytest.raises(Indeterminate) as looked:
            client.reconcile("order-1", lookup=path + "&reference={reference}")
        errors.append(str(looked.value))
    attempts = [r for r in caplog.records if getattr(r, "idemclient.event", "") == "attempt"]
    assert len(attempts) == 2
    assert "psp.test" in attempts[0].getMessage()
    for record in caplog.records:
        assert SECRET not in _everything_in(record), (form, record.getMessage())
    for span in exporter.get_finished_spans():
        assert SECRET not in json.dumps(dict(span.attributes or {}), default=str), form
    for error in errors:
        assert SECRET not in error, (form, error)
    assert "GET " in errors[1]  # the look-up's URL is named, redacted


def test_fields_are_namespaced_and_the_bare_names_kept_one_release(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ReferenceServer(clock=ManualClock())
    with (
        caplog.at_level(logging.DEBUG, logger="idemclient"),
        Client(
            store=tmp_path / "c.db",
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": "Bearer merchant-1"},
            clock=ManualClock(),
            server_clock=False,
        ) as client,
    ):
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    events = [getattr(r, "idemclient.event", None) for r in caplog.records]
    assert events == ["attempt", "outcome"]
    attempt, done = caplog.records
    assert getattr(attempt, "idemclient.key") == outcome.key
    assert getattr(attempt, "idemclient.url") == "http://psp.test/v1/payments"
    assert getattr(done, "idemclient.state") == "succeeded"
    assert getattr(done, "idemclient.operation_id") == "order-1"
    # Deprecated, kept for one release: the bare names.
    assert done.event == "outcome"  # type: ignore[attr-defined]
    assert done.key == outcome.key  # type: ignore[attr-defined]


class StructlogLike(logging.Formatter):
    """What structlog's ProcessorFormatter (with ExtraAdder) does: the message is `event`,
    then the record's extras are added over it."""

    def format(self, record: logging.LogRecord) -> str:
        standard = vars(logging.makeLogRecord({}))
        extras = {k: v for k, v in vars(record).items() if k not in standard}
        return json.dumps({"event": record.getMessage(), **extras}, default=str)


def test_drop_legacy_fields_keeps_a_formatter_s_own_event(tmp_path: Path) -> None:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(StructlogLike())
    handler.addFilter(drop_legacy_fields)
    logger = logging.getLogger("idemclient")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        server = ReferenceServer(clock=ManualClock())
        with Client(
            store=tmp_path / "c.db",
            transport=server.transport,
            base_url="http://psp.test",
            headers={"Authorization": "Bearer merchant-1"},
            clock=ManualClock(),
            server_clock=False,
        ) as client:
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    (line,) = [json.loads(line) for line in lines]
    assert line["event"].startswith("operation order-1")  # the message, not overwritten
    assert line["idemclient.event"] == "outcome"
    assert line["idemclient.state"] == "succeeded"
    assert "key" not in line
    assert "state" not in line
