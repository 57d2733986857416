"""Histories in which a clock, or the way the client watches it, still makes the
product pay twice or misreport. Each is a strict xfail until the product is fixed."""

from __future__ import annotations

import contextlib
import datetime
import time
import types
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import idemclient._ops_cli
from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    Outcome,
    ReconcileRequired,
    State,
)
from idemclient.cli import main
from idemclient.errors import StoreError
from idemclient.inbox import SQLiteInbox
from idemclient.store import SQLiteStore
from idemclient.transport import IdempotentTransport

from .fakes import OK, FakePSP, SetClock, error, forgets, status

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
DAY = 24 * 3600.0
HOUR = 3600.0
NOW = 1_800_000_000.0


def _client(psp: FakePSP, store: str | Path, clock: ManualClock) -> Client:
    return Client(store=store, clock=clock, transport=psp.transport(), base_url="https://psp.test")


def _pay(c: Client, reference: str = "order-1042") -> Outcome:
    return c.post("/v1/payments", json={**PAYMENT, "reference": reference}, operation_id=reference)


def test_an_operation_not_sent_at_the_step_and_applied_later_is_not_sent_again(
    tmp_path: Path,
) -> None:
    # Recorded by a clock two days fast and not sent (connect errors); the clock is set
    # right (the running client sees it, but marks only what may have been applied);
    # an hour later it is sent and maybe applied; two days on it looks an hour old,
    # the server forgot the key a day ago, and it is sent again.
    psp = FakePSP(*[error(httpx.ConnectError)] * 8, *[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = 2 * DAY
    with _client(psp, store, clock) as c:
        with pytest.raises(NotSent):
            _pay(c)
        clock.offset = 0.0  # NTP sets the clock right; the process runs on
        clock.advance(HOUR)
        with pytest.raises(Indeterminate):
            _pay(c)  # the step is seen here; then sent, and maybe applied
        clock.advance(DAY + HOUR)  # the server keeps keys 24 h from this first send
        forgets(psp)
        clock.advance(DAY)
        with pytest.raises(ReconcileRequired):
            _pay(c)
    assert sum(psp.effects.values()) == 1


def _transport_client(psp: FakePSP, store: Path, clock: ManualClock) -> httpx.Client:
    return httpx.Client(
        transport=IdempotentTransport(psp.transport(), store=store, clock=clock),
        base_url="https://psp.test",
    )


def _send(c: httpx.Client) -> httpx.Response:
    return c.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": "key-order-1042"})


def test_a_transport_started_behind_the_stores_times_keeps_the_step(tmp_path: Path) -> None:
    # A host two days fast records a payment, maybe applied, and stops. Its clock is
    # set right at boot; a service built on IdempotentTransport (no Client, no wrap())
    # starts an hour later, behind the store's times, and even meets the payment
    # "recorded ahead of this clock", yet keeps nothing. Two days later the record
    # looks an hour old, the server forgot its key a day ago: sent again.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with (
        _transport_client(psp, store, ManualClock(NOW + 2 * DAY)) as c,
        pytest.raises(Indeterminate),
    ):
        _send(c)
    clock = ManualClock(NOW + HOUR)
    with _transport_client(psp, store, clock) as c:
        with pytest.raises(ReconcileRequired, match="seen to go back"):
            _send(c)  # the start saw the store's times ahead, and kept the step
        clock.advance(DAY + HOUR)
        forgets(psp)
        clock.advance(DAY)
        with pytest.raises(ReconcileRequired):
            _send(c)
    assert sum(psp.effects.values()) == 1


def test_small_steps_back_that_add_up_past_the_margin_are_seen(tmp_path: Path) -> None:
    # A clock an hour fast is brought back in steps of 200 s (under the 300 s the watch
    # tolerates), one between each two payments, as a stepping time daemon or an
    # operator nudging it would. Nothing is marked: 24 h later, by true time, the
    # maybe-applied record looks 23 h old (inside the retention, with the 300 s margin)
    # while the server, which counts from the true time, forgot its key.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = HOUR
    with _client(psp, store, clock) as c:
        with pytest.raises(Indeterminate):
            _pay(c)
        for n in range(18):
            clock.offset -= 200.0
            clock.advance(60)
            _pay(c, f"o-{n}")
        assert clock.offset == 0.0
        stepped = c.store.get("order-1042")
        assert stepped is not None
        clock.advance(DAY - 18 * 60 + 600)  # true age: a day and ten minutes
        forgets(psp)
        with pytest.raises(ReconcileRequired):
            _pay(c)
    assert psp.effects[stepped.key] == 1


def two_hosts_one_fast_that_goes_away(store: str | Path) -> FakePSP:
    """Host B runs all along with a right clock. Host A, two days fast, records a
    payment on the shared store, maybe applied, and goes away for good. B meets it
    an hour later ("recorded ahead of this clock": looked up) but keeps nothing, and
    never starts again to compare its clock with the store's times; two days later
    the record looks an hour old, the server forgot its key a day ago: B sends it
    again. Returns the PSP, for its effects."""
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    clock_b = ManualClock(NOW - 60)
    with _client(psp, store, clock_b) as host_b:
        with (
            _client(psp, store, ManualClock(NOW + 2 * DAY)) as host_a,
            pytest.raises(Indeterminate),
        ):
            _pay(host_a)
        clock_b.advance(HOUR)
        with pytest.raises(ReconcileRequired, match="ahead of this clock"):
            _pay(host_b)
        clock_b.advance(DAY + HOUR)
        forgets(psp)
        clock_b.advance(DAY)
        with contextlib.suppress(ReconcileRequired):
            _pay(host_b)  # looked up, as it should be; or sent again
    return psp


def test_a_long_running_client_keeps_a_record_another_clock_made_ahead(tmp_path: Path) -> None:
    psp = two_hosts_one_fast_that_goes_away(tmp_path / "c.db")
    assert sum(psp.effects.values()) == 1


def test_one_start_a_month_fast_does_not_stop_the_next_months_retries(tmp_path: Path) -> None:
    # Nuisance, never a second payment: one start with a clock a month fast (a host
    # booted with a bad clock, set right a minute later) leaves the store's high-water
    # mark a month ahead. Every later start for a month sees a "step back" and marks
    # every maybe-applied payment, even one recorded minutes ago by a right clock and
    # still well inside the server's key retention: its retry under the same key is
    # refused for a look-up by hand.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    with _client(psp, store, ManualClock(NOW + 30 * DAY)):
        pass
    with _client(psp, store, ManualClock(NOW + 60)):
        pass  # the step is seen and kept here: nothing was unfinished
    with _client(psp, store, ManualClock(NOW + 120)) as c, pytest.raises(Indeterminate):
        _pay(c)  # recorded by a right clock
    with _client(psp, store, ManualClock(NOW + 600)) as c:
        outcome = c.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert outcome.replayed  # the same key, within minutes: the server's stored answer
    assert sum(psp.effects.values()) == 1


def test_a_step_the_store_failed_to_keep_is_kept_at_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The running client sees the clock set right at its next payment, but the store
    # is busy for that one write ("database is locked"): that payment fails, nothing
    # sent. The watch has already counted the step as reported; the next payments go
    # through, nothing is kept, and two days later the maybe-applied payment recorded
    # by the fast clock looks young and is sent again after the server forgot its key.
    psp = FakePSP(*[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = 2 * DAY
    with _client(psp, store, clock) as c:
        with pytest.raises(Indeterminate):
            _pay(c)
        clock.offset = 0.0
        busy = {"left": 1}
        keep = SQLiteStore.clock_went_back

        def once_busy(self: SQLiteStore, *, step: float, now: float) -> int:
            if busy["left"]:
                busy["left"] -= 1
                raise StoreError(self.path, "database is locked")
            return keep(self, step=step, now=now)

        monkeypatch.setattr(SQLiteStore, "clock_went_back", once_busy)
        with pytest.raises(StoreError):
            _pay(c, "order-1043")
        _pay(c, "order-1043")  # the caller tries again: it goes through
        clock.advance(2 * DAY)
        forgets(psp)
        with pytest.raises(ReconcileRequired):
            _pay(c)
    assert sum(psp.effects.values()) == 2  # order-1042 once, order-1043 once


@pytest.mark.xfail(
    strict=True,
    reason="outside what the inbox can see: a reap by a clock a month fast is, to it, a"
    " month of idle time (docs/inbox.md, Retention: reap on a host kept on NTP)",
)
def test_one_inbox_reap_a_month_fast_does_not_forget_ids_inside_the_window(tmp_path: Path) -> None:
    # The store's reaping goes by its high-water mark, so one start a month fast drops
    # nothing; the inbox's does not. A reaping job runs once on a host whose clock is a
    # month fast; the clock is set right; the PSP redelivers a webhook an hour after
    # the first delivery (its acknowledgement was lost): the handler runs again.
    clock = SetClock()
    calls: list[str] = []
    with SQLiteInbox(tmp_path / "app.db", clock=clock) as inbox:
        inbox.process("psp", "evt_1", lambda tx: calls.append("evt_1"))
        clock.offset = 31 * DAY
        inbox.reap()
        clock.offset = 0.0
        clock.advance(HOUR)
        inbox.process("psp", "evt_1", lambda tx: calls.append("evt_1"))
    assert calls == ["evt_1"]


class _MonthFast(datetime.datetime):
    """The wall clock of a host 40 days fast, as `datetime.datetime.now` reads it."""

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _MonthFast:
        return cls.fromtimestamp(time.time() + 40 * DAY, tz)


@pytest.mark.xfail(
    strict=True,
    reason="outside what the command can see: by a clock 40 days fast, a payment finished"
    " yesterday is, to it, 40 days old in an idle store (docs/reference/cli.md, ops purge)",
)
def test_purge_older_than_on_a_fast_clock_keeps_what_the_store_saw_recently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's reaping goes by its high-water mark; `ops purge --older-than 30` does
    # not. Run on a host 40 days fast, it deletes a payment finished yesterday (its key
    # with it). The application issues that operation id again (a job retried): a new
    # key, a second payment.
    psp = FakePSP()
    store = tmp_path / "c.db"
    yesterday = time.time() - DAY
    with _client(psp, store, ManualClock(yesterday)) as c:
        _pay(c)
    # The command's own wall clock (it has no clock to inject): 40 days fast.
    fast = types.SimpleNamespace(datetime=_MonthFast, UTC=datetime.UTC)
    monkeypatch.setattr(idemclient._ops_cli, "datetime", fast)
    result = CliRunner().invoke(
        main, ["ops", "purge", "--store", str(store), "--older-than", "30", "--yes"]
    )
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    with _client(psp, store, ManualClock(yesterday + DAY)) as c:
        _pay(c)
    assert sum(psp.effects.values()) == 1


def test_a_step_forward_and_back_between_two_calls_of_a_running_client(tmp_path: Path) -> None:
    # A service runs with a right clock. The host's clock jumps two days ahead and back
    # while it is idle: its watch, comparing one reading with the next, sees wall time
    # and monotonic time moved alike. Meanwhile a short job on the same host and store
    # recorded a payment, maybe applied, dated two days ahead, and exited (its own clock
    # never stepped back while it ran). The service meets the payment "ahead of its
    # clock" and keeps nothing; two days later it looks young: sent again.
    psp = FakePSP(OK, *[error(httpx.ReadTimeout, apply=True)] * 8)
    store = tmp_path / "c.db"
    clock = SetClock()
    with _client(psp, store, clock) as service:
        _pay(service, "o-0")  # a first payment: the service is running
        clock.offset = 2 * DAY
        job_clock = ManualClock(clock.time())
        with _client(psp, store, job_clock) as job, pytest.raises(Indeterminate):
            _pay(job)
        clock.advance(job_clock.monotonic() - clock.monotonic())
        clock.offset = 0.0
        clock.advance(HOUR)
        with pytest.raises(ReconcileRequired, match="ahead of this clock"):
            _pay(service)
        clock.advance(DAY + HOUR)
        forgets(psp)
        clock.advance(DAY)
        with contextlib.suppress(ReconcileRequired):
            _pay(service)
    key = psp.keys[1]  # the job's payment
    assert key is not None
    assert psp.effects[key] == 1


def test_a_retry_after_recorded_by_a_fast_clock_does_not_hold_a_payment_for_days(
    tmp_path: Path,
) -> None:
    # Nuisance, and a false evidence: the server asks for two minutes (429,
    # Retry-After: 120, more than the call's deadline): the client stops and records
    # "no retry before now + 120 s", by a clock two days fast. The clock is set right.
    # Five minutes later the payment (never applied) is refused for two more days,
    # "the server asked for no retry before" a time the server never said.
    psp = FakePSP(status(429, retry_after="120"))
    store = tmp_path / "c.db"
    clock = SetClock()
    clock.offset = 2 * DAY
    with _client(psp, store, clock) as c:
        with pytest.raises(NotSent):
            _pay(c)
        clock.offset = 0.0
        clock.advance(300)
        outcome = _pay(c)
    assert outcome.state is State.SUCCEEDED
    assert sum(psp.effects.values()) == 1
