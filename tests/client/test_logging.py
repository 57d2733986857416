"""Log records carry their facts as attributes (`extra=`), not only in the message: a
JSON formatter or structlog gets fields. A replay from the store says so."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from idemclient import Client, ManualClock, RetryPolicy, State
from idemclient.errors import Indeterminate
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "inv-7"}


def _client(tmp_path: Path, server: ReferenceServer, **options: object) -> Client:
    return Client(
        store=tmp_path / "c.db",
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer merchant-1"},
        clock=ManualClock(),
        rng=random.Random(7),  # a fixed draw: the logged wait is one number, above 0
        **options,  # type: ignore[arg-type]
    )


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_attempts_retries_and_outcomes_carry_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ReferenceServer(clock=ManualClock())
    server.answer(503, times=1)
    with (
        caplog.at_level(logging.DEBUG, logger="idemclient"),
        _client(tmp_path, server) as client,
    ):
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    attempts = _events(caplog, "attempt")
    assert [r.attempt for r in attempts] == [1, 2]  # type: ignore[attr-defined]
    assert {r.operation_id for r in attempts} == {"order-42"}  # type: ignore[attr-defined]
    assert {r.key for r in attempts} == {outcome.key}  # type: ignore[attr-defined]
    (retry,) = _events(caplog, "retry")
    assert retry.levelno == logging.INFO
    assert retry.operation_id == "order-42"  # type: ignore[attr-defined]
    assert retry.key == outcome.key  # type: ignore[attr-defined]
    assert retry.attempt == 1  # type: ignore[attr-defined]
    assert retry.wait > 0  # type: ignore[attr-defined]
    assert retry.evidence.startswith("HTTP 503")  # type: ignore[attr-defined]
    (done,) = _events(caplog, "outcome")
    assert done.state == "succeeded"  # type: ignore[attr-defined]
    assert done.attempt == 2  # type: ignore[attr-defined]
    assert done.status == 201  # type: ignore[attr-defined]
    assert done.from_store is False  # type: ignore[attr-defined]
    assert done.evidence.startswith("HTTP 201")  # type: ignore[attr-defined]
    assert "from the store" not in done.getMessage()
    assert "store has it" not in done.getMessage()


def test_a_replay_from_the_store_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = ReferenceServer(clock=ManualClock())
    with _client(tmp_path, server) as client:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
        with caplog.at_level(logging.DEBUG, logger="idemclient"):
            again = client.post("/v1/payments", json=PAYMENT, operation_id="order-42")
    assert again.from_store
    assert not _events(caplog, "attempt")
    (done,) = _events(caplog, "outcome")
    assert done.from_store is True  # type: ignore[attr-defined]
    assert "the store has it (nothing sent now)" in done.getMessage()


def test_an_indeterminate_outcome_is_a_warning_with_its_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ReferenceServer(clock=ManualClock())
    server.drop(times=2)
    with (
        caplog.at_level(logging.INFO, logger="idemclient"),
        _client(tmp_path, server, policy=RetryPolicy(max_attempts=2)) as client,
        pytest.raises(Indeterminate),
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="order-9")
    (done,) = _events(caplog, "outcome")
    assert done.levelno == logging.WARNING
    assert done.state == State.INDETERMINATE.value  # type: ignore[attr-defined]
    assert done.operation_id == "order-9"  # type: ignore[attr-defined]


def test_a_json_formatter_gets_the_fields(tmp_path: Path) -> None:
    """What a JSON log pipeline does with a record: its attributes, as they are."""
    lines: list[str] = []

    class Json(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = ("event", "operation_id", "key", "attempt", "state", "evidence", "wait")
            lines.append(json.dumps({f: getattr(record, f, None) for f in fields}))

    handler = Json()
    logger = logging.getLogger("idemclient")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        server = ReferenceServer(clock=ManualClock())
        server.answer(500, times=1)
        with _client(tmp_path, server) as client:
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    retry, outcome = (json.loads(line) for line in lines)
    assert retry["event"] == "retry"
    assert retry["operation_id"] == "order-1"
    assert retry["wait"] > 0
    assert retry["attempt"] == 1
    assert outcome["event"] == "outcome"
    assert outcome["state"] == "succeeded"
