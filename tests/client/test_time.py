"""Time passing and clocks that jump: an operation id the store has known never gets a
second key, whatever the clock says at a client's start."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from idemclient import (
    AnswerNotKept,
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    ReconcileRequired,
    State,
    wrap,
)
from idemclient._clock import StepWatch
from idemclient.store import SQLiteStore

from .fakes import OK, FakePSP, SetClock, error, forgets

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
DAY = 24 * 3600.0
NOW = 1_800_000_000.0


def client(psp: FakePSP, store: Path, clock: ManualClock) -> Client:
    return Client(store=store, clock=clock, transport=psp.transport(), base_url="https://psp.test")


def test_an_operation_reissued_after_reaping_keeps_its_key_and_is_not_sent(tmp_path: Path) -> None:
    psp = FakePSP()
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        first = c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with client(psp, store, ManualClock(NOW + 8 * DAY)):
        pass  # reaping goes by the time the store had seen before: the next start reaps
    with client(psp, store, ManualClock(NOW + 8 * DAY + 60)) as c:
        again = c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert (again.key, again.state, again.from_store) == (first.key, State.SUCCEEDED, True)
    assert again.body_omitted  # what it said was reaped: flagged, never an empty body
    assert again.response is not None
    with pytest.raises(AnswerNotKept):
        again.response.json()
    assert len(psp.requests) == 1
    assert sum(psp.effects.values()) == 1
    with SQLiteStore(store) as opened:
        [record] = opened.operations()
    assert record.body == b""  # what was reaped: the bodies, not the operation
    assert record.response is not None
    assert record.response.body_omitted


def test_one_start_with_a_clock_a_month_fast_forgets_nothing(tmp_path: Path) -> None:
    psp = FakePSP()
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with client(psp, store, ManualClock(NOW + 30 * DAY)):
        pass  # a host whose clock was a month fast, once
    with client(psp, store, ManualClock(NOW + 60)):
        pass  # and the right time again
    with SQLiteStore(store) as opened:
        [record] = opened.operations()
    assert record.body != b""
    assert record.response is not None
    assert not record.response.body_omitted


def test_a_clock_that_went_back_is_reported_and_never_resends_blindly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c, pytest.raises(Indeterminate):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    sent = len(psp.requests)
    with (
        caplog.at_level(logging.WARNING, logger="idemclient"),
        client(psp, store, ManualClock(NOW - 2 * DAY)) as c,
        pytest.raises(ReconcileRequired, match="unknown"),
    ):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert "went back" in caplog.text
    assert len(psp.requests) == sent  # its age is unknown: looked up, never re-sent


def _maybe_applied(c: Client) -> None:
    with pytest.raises(Indeterminate):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")


@pytest.mark.parametrize("tolerance", [10.0, 300.0])
def test_a_step_watch_sees_the_wall_clock_set_back_until_the_step_is_kept(
    tolerance: float,
) -> None:
    clock = SetClock()
    watch = StepWatch(clock, tolerance=tolerance)
    clock.advance(60)
    assert watch.step_back() == 0.0  # both clocks moved alike
    clock.offset = 2 * DAY  # set forward (or a machine that slept): not a step back
    assert watch.step_back() == 0.0
    clock.offset = 0.0  # set right after running two days fast
    assert watch.step_back() == pytest.approx(2 * DAY)
    assert watch.step_back() == pytest.approx(2 * DAY)  # until the store has it
    watch.kept(2 * DAY)
    assert watch.step_back() == 0.0
    clock.offset = -tolerance / 2  # inside the tolerance
    assert watch.step_back() == 0.0
    clock.offset = -tolerance / 2 - tolerance - 1  # counted from where it was kept
    assert watch.step_back() == pytest.approx(tolerance / 2 + tolerance + 1)


def test_small_steps_back_add_up_and_a_step_forward_is_not_undone_by_one_back() -> None:
    clock = SetClock()
    watch = StepWatch(clock, tolerance=300)
    for _ in range(3):
        clock.offset -= 200  # each under the tolerance
        clock.advance(60)
        step = watch.step_back()
    assert step == pytest.approx(600)
    watch.kept(step)
    clock.offset += 3600  # forward an hour: the machine slept, or a clock set ahead
    assert watch.step_back() == 0.0
    clock.offset -= 3600  # and back
    assert watch.step_back() == pytest.approx(3600)


def test_a_step_back_before_the_first_call_is_seen_at_that_call() -> None:
    clock = SetClock()
    watch = StepWatch(clock, tolerance=300)
    clock.offset = -DAY
    assert watch.step_back() == pytest.approx(DAY)


@pytest.mark.parametrize("way", ["client", "wrap"])
def test_a_fast_clock_set_right_is_seen_at_the_next_start_and_its_payment_looked_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, way: str
) -> None:
    # Recorded two days fast and maybe applied; a client starts once the clock is right
    # (it sees the store's times ahead of it); two days later the record looks minutes
    # old, long after the server forgot its key. Sent again, it would be paid twice.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with _running(way, psp, store, ManualClock(NOW + 2 * DAY)) as c, pytest.raises(Indeterminate):
        _post(c, way)
    with (
        caplog.at_level(logging.WARNING, logger="idemclient"),
        _running(way, psp, store, ManualClock(NOW)),
    ):
        pass
    assert "went back" in caplog.text
    forgets(psp)
    sent = len(psp.requests)
    with (
        _running(way, psp, store, ManualClock(NOW + 2 * DAY + 60)) as c,
        pytest.raises(ReconcileRequired, match="seen to go back"),
    ):
        _post(c, way)
    assert len(psp.requests) == sent
    assert sum(psp.effects.values()) == 1
    with SQLiteStore(store) as opened:
        [record] = opened.operations()
    assert record.clock_stepped == pytest.approx(2 * DAY, abs=120)  # and the backoffs slept


def _post(c: Any, way: str, reference: str = "order-1042") -> Any:
    """Operation `reference`: by operation id through `Client`, by the caller's own key
    through a wrapped httpx client."""
    payment = {**PAYMENT, "reference": reference}
    if way == "client":
        return c.post("/v1/payments", json=payment, operation_id=reference)
    return c.post("/v1/payments", json=payment, headers={"Idempotency-Key": f"key-{reference}"})


def test_a_clock_set_two_days_slow_is_seen_at_the_next_start_and_its_payment_looked_up(
    tmp_path: Path,
) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        _maybe_applied(c)
    with client(psp, store, ManualClock(NOW - 2 * DAY)):
        pass  # set two days slow: the store's times are ahead of it
    forgets(psp)
    with (
        client(psp, store, ManualClock(NOW + 60)) as c,
        pytest.raises(ReconcileRequired, match="seen to go back"),
    ):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert sum(psp.effects.values()) == 1


def _running(way: str, psp: FakePSP, store: Path, clock: ManualClock) -> Any:
    if way == "wrap":
        return wrap(
            httpx.Client(transport=psp.transport(), base_url="https://psp.test"),
            store=store,
            clock=clock,
        )
    return client(psp, store, clock)


@pytest.mark.parametrize("way", ["client", "wrap"])
def test_a_running_client_sees_its_clock_set_right_and_never_pays_twice(
    tmp_path: Path, way: str
) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = 2 * DAY
    with _running(way, psp, store, clock) as c:
        with pytest.raises(Indeterminate):
            _post(c, way)
        clock.offset = 0.0  # NTP sets the clock right, the process runs on
        _post(c, way, "order-1043")
        clock.advance(2 * DAY)
        forgets(psp)
        sent = len(psp.requests)
        with pytest.raises(ReconcileRequired, match="seen to go back"):
            _post(c, way)
    assert len(psp.requests) == sent
    assert sum(psp.effects.values()) == 2  # order-1042 once, order-1043 once


def test_an_async_client_sees_its_clock_set_right_and_never_pays_twice(tmp_path: Path) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    clock = SetClock()
    clock.offset = 2 * DAY

    async def main() -> None:
        async with AsyncClient(
            store=tmp_path / "c.db",
            clock=clock,
            transport=psp.async_transport(),
            base_url="https://psp.test",
        ) as c:
            with pytest.raises(Indeterminate):
                await c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
            clock.offset = 0.0
            await c.post("/v1/payments", json={**PAYMENT, "reference": "o-2"}, operation_id="o-2")
            clock.advance(2 * DAY)
            forgets(psp)
            with pytest.raises(ReconcileRequired, match="seen to go back"):
                await c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")

    anyio.run(main)
    assert sum(psp.effects.values()) == 2


def test_a_step_back_marks_every_unfinished_operation_and_no_finished_one(
    tmp_path: Path,
) -> None:
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8, OK, *[error(httpx.ConnectError)] * 8)
    store = tmp_path / "c.db"
    with client(psp, store, ManualClock(NOW)) as c:
        _maybe_applied(c)
        c.post("/v1/payments", json={**PAYMENT, "reference": "o-2"}, operation_id="o-2")
        with pytest.raises(NotSent):
            c.post("/v1/payments", json={**PAYMENT, "reference": "o-3"}, operation_id="o-3")
    with client(psp, store, ManualClock(NOW - DAY)):
        pass
    with SQLiteStore(store) as opened:
        stepped = {r.operation_id: r.clock_stepped for r in opened.operations()}
    assert stepped["order-1042"] == pytest.approx(DAY, abs=120)  # and the backoffs slept
    assert stepped["o-2"] is None  # finished: never sent again
    # Not sent yet, but it may be sent and applied before it looks its age again.
    assert stepped["o-3"] == pytest.approx(DAY, abs=120)


@pytest.mark.parametrize("way", ["client", "async"])
def test_a_step_back_during_the_last_call_is_kept_as_the_client_closes(
    tmp_path: Path, way: str
) -> None:
    # The clock is set right while the process's last payment is on the wire; nothing
    # else is sent before it closes. Without the check at close, the next start (after
    # true time caught up with the record) sees nothing, and the payment is re-sent.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = 2 * DAY

    def set_right(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":  # the payment, not the time probe before it
            clock.offset = 0.0
        return psp.handler(request)

    if way == "client":
        with Client(
            store=store,
            clock=clock,
            transport=httpx.MockTransport(set_right),
            base_url="https://psp.test",
        ) as c:
            _maybe_applied(c)
    else:

        async def main() -> None:
            async with AsyncClient(
                store=store,
                clock=clock,
                transport=httpx.MockTransport(set_right),
                base_url="https://psp.test",
            ) as c:
                with pytest.raises(Indeterminate):
                    await c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")

        anyio.run(main)
    forgets(psp)
    with (
        client(psp, store, ManualClock(clock.time() + 2 * DAY + 60)) as c,
        pytest.raises(ReconcileRequired, match="seen to go back"),
    ):
        c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert sum(psp.effects.values()) == 1


def test_a_step_back_a_closed_store_cannot_keep_is_logged_and_closing_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SetClock()
    store = SQLiteStore(tmp_path / "c.db")
    c = Client(store=store, clock=clock, transport=FakePSP().transport())
    store.close()  # the caller's store, closed first
    clock.offset = -DAY
    with caplog.at_level(logging.ERROR, logger="idemclient"):
        c.close()
    assert "could not keep it" in caplog.text
