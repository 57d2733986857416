"""What the checker stands on: external systems that forget, and a stated clock tolerance."""

from __future__ import annotations

import httpx
import pytest

from idemclient import ManualClock
from idemclient.testing import ReferenceServer

DAY = 24 * 3600.0
PAYMENT = {"amount": 100, "currency": "EUR", "reference": "r-1"}
HEADERS = {"Authorization": "Bearer shop-1", "Idempotency-Key": "k-1"}


def _pay(server: ReferenceServer) -> httpx.Response:
    with httpx.Client(transport=server.transport, base_url="https://psp.test") as http:
        return http.post("/v1/payments", json=PAYMENT, headers=HEADERS)


def test_a_payment_sent_again_past_the_external_retention_is_a_second_effect() -> None:
    with ReferenceServer(clock=ManualClock(), key_ttl=DAY, external_retention=2 * DAY) as server:
        assert _pay(server).status_code == 201
        server.advance(3 * DAY)
        assert server.reap() == 1  # the server forgot the key ...
        assert _pay(server).status_code == 201  # ... so this is a new payment
        first, second = server.ledger()
        assert (first.ext1_applied, first.ext2_applied) == (1, 1)
        # ... and the external systems, past their own retention, moved money again.
        assert (second.ext1_applied, second.ext2_applied) == (1, 1)


def test_external_systems_that_never_forget_hide_the_second_payment() -> None:
    with ReferenceServer(clock=ManualClock(), key_ttl=DAY) as server:
        assert _pay(server).status_code == 201
        server.advance(3 * DAY)
        server.reap()
        assert _pay(server).status_code == 201
        _first, second = server.ledger()
        assert (second.ext1_applied, second.ext2_applied) == (0, 0)  # no money moved


def test_within_its_retention_an_external_system_still_deduplicates() -> None:
    with ReferenceServer(clock=ManualClock(), key_ttl=DAY, external_retention=7 * DAY) as server:
        assert _pay(server).status_code == 201
        server.advance(3 * DAY)
        server.reap()
        _pay(server)
        assert [(e.ext1_applied, e.ext2_applied) for e in server.ledger()] == [(1, 1), (0, 0)]


class _Stepped(ManualClock):
    """A server clock that can be stepped back and forward, as NTP steps one."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


@pytest.mark.parametrize(("tolerance", "kept"), [(0.0, False), (3600.0, True)])
def test_a_clock_stepped_forward_within_the_tolerance_reaps_no_key_early(
    tolerance: float, kept: bool
) -> None:
    clock = _Stepped()
    clock.offset = -1800.0  # the clock that stamped the key was half an hour slow
    with ReferenceServer(clock=clock, key_ttl=DAY, clock_tolerance=tolerance) as server:
        assert server.clock_tolerance == tolerance
        assert _pay(server).status_code == 201
        clock.offset = 0.0  # set right
        server.advance(DAY - 60)  # less than the TTL has really passed
        assert server.reap() == (0 if kept else 1)
        assert (server.key_record("shop-1", "k-1") is not None) is kept


def test_the_tolerance_is_a_number_of_seconds() -> None:
    with pytest.raises(ValueError, match="clock tolerance"):
        ReferenceServer(clock_tolerance=-1.0)
    with pytest.raises(ValueError, match="external retention"):
        ReferenceServer(external_retention=0.0)


def test_recovery_past_the_external_retention_never_applies_twice() -> None:
    # Found by the checker: the server died after external system 1 applied the
    # instruction; eight days later, past that system's retention, the recovery probe
    # heard "never received" and called again: two charges. Now the row is left for an
    # operator: one charge, the payment unresolved (202 to a retry), never "succeeded".
    with ReferenceServer(clock=ManualClock(), lease=30.0, external_retention=3 * DAY) as server:
        server.crash("EXT1_CALLED")
        with pytest.raises(httpx.TransportError):
            _pay(server)
        server.advance(8 * DAY)
        report = server.recover()
        assert (report.resumed, report.finished) == (1, 0)
        server.advance(60.0)  # past the lease the sweep took
        assert _pay(server).status_code == 202
        server.advance(60.0)
        assert server.recover().finished == 0
        (entry,) = server.ledger()
        assert (entry.ext1_applied, entry.ext1_calls) == (1, 1)
        assert entry.key_state == "started"


def test_recovery_within_the_external_retention_finishes_once() -> None:
    with ReferenceServer(clock=ManualClock(), lease=30.0, external_retention=3 * DAY) as server:
        server.crash("EXT1_CALLED")
        with pytest.raises(httpx.TransportError):
            _pay(server)
        server.advance(DAY)
        assert server.recover().finished == 1
        (entry,) = server.ledger()
        assert (entry.ext1_applied, entry.ext2_applied, entry.status) == (1, 1, "succeeded")


def test_a_row_parked_by_a_failed_probe_keeps_the_time_its_instruction_was_sent() -> None:
    with ReferenceServer(clock=ManualClock(), lease=30.0, external_retention=3 * DAY) as server:
        server.crash("EXT1_CALLED")  # applied at external system 1, not recorded
        with pytest.raises(httpx.TransportError):
            _pay(server)
        sent_at = server.key_record("shop-1", "k-1").last_attempt_at  # type: ignore[union-attr]
        server.advance(8 * DAY)
        server.external_fault(1, "timeout")  # the sweep's probe gets no answer: parked
        assert server.recover().finished == 0
        assert server.key_record("shop-1", "k-1").last_attempt_at == sent_at  # type: ignore[union-attr]
        server.advance(60.0)
        assert server.recover().finished == 0  # "never received" now proves nothing
        (entry,) = server.ledger()
        assert (entry.ext1_applied, entry.ext1_calls) == (1, 1)
