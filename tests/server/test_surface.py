"""The public surface of idemclient.testing, the records, the clocks and the fixtures."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

import idemclient.testing as testing
from idemclient import ManualClock
from idemclient.clock import SystemClock
from idemclient.testing import (
    KeyRecord,
    LedgerEntry,
    LiveServer,
    RecoveryReport,
    ReferenceServer,
)


def test_all_is_sorted_complete_and_public() -> None:
    assert testing.__all__ == sorted(testing.__all__)
    for name in testing.__all__:
        assert not name.startswith("_")
        assert hasattr(testing, name), name


@pytest.mark.parametrize(
    "record",
    [
        LedgerEntry(
            "pay_1",
            "payment",
            "alice",
            "k",
            "inv-1",
            100,
            "EUR",
            "succeeded",
            "finished",
            "EXT2_DONE",
            1,
            1,
            1,
            2,
            ("H1", "H2", "H3"),
        ),
        KeyRecord(
            "alice", "k", "/v1/payments", "started", None, None, None, None, 1.5, 0, None, 1.0
        ),
        RecoveryReport(examined=3, resumed=2, finished=1, unresolved=1),
    ],
)
def test_records_round_trip_through_json(record: object) -> None:
    data = json.loads(json.dumps(record.to_json()))  # type: ignore[attr-defined]
    assert type(record).from_json(data) == record  # type: ignore[attr-defined]
    assert dataclasses.is_dataclass(record)
    first = dataclasses.fields(record)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, first, "changed")


def test_a_manual_clock_moves_only_forward_and_only_when_told() -> None:
    clock = ManualClock(100.0)
    assert clock.time() == 100.0
    clock.sleep(5)  # sleeping on it is advancing it
    assert clock.advance(2.5) == 107.5
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="forward"):
            clock.advance(bad)
    assert clock.time() == 107.5


def test_a_manual_clock_is_safe_to_advance_from_many_threads() -> None:
    clock = ManualClock(0.0)
    threads = [
        threading.Thread(target=lambda: [clock.advance(1) for _ in range(1000)]) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert clock.time() == 8000.0


def test_the_system_clock_follows_real_time_plus_an_offset() -> None:
    clock = SystemClock()
    before = clock.time()
    after = clock.advance(3600)
    assert after >= before + 3600
    assert after - before < 3600 + 60  # real time moved on only a little meanwhile
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_the_reference_server_fixture_is_fresh_with_a_manual_clock(
    reference_server: ReferenceServer,
) -> None:
    assert isinstance(reference_server.clock, ManualClock)
    assert reference_server.ledger() == ()
    assert reference_server.lease == 30.0
    assert reference_server.key_ttl == 24 * 3600.0


def test_the_live_fixture_serves_on_loopback(live_reference_server: LiveServer) -> None:
    assert live_reference_server.url.startswith("http://127.0.0.1:")
    assert isinstance(live_reference_server.server, ReferenceServer)
    assert live_reference_server.server.ledger() == ()
