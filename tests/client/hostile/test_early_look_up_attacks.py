"""Attacks on the rule that a look-up's "not found" right after a send that may have
been applied does not settle `not_sent` (the server may still be running that send):
paths around it that would let an operation be reported never applied, and sent again,
while an attempt of it may still be made by the server."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    RetryPolicy,
    State,
    StoreError,
    _reconcile,
    profiles,
)
from idemclient._time import CLOCK_SKEW, LEASE_MARGIN
from idemclient.cli import main
from idemclient.errors import StoreUnavailable
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer, serve

from ...support.shop import BY_REFERENCE, shop_client

PAYMENT = {"amount": 700, "currency": "EUR", "reference": "inv-9"}
WINDOW = profiles.reference.in_flight_for
#: how long after a stored send a look-up's "none" is not believed: the server's
#: in_flight_for, and the skew allowed between the clocks of the store's hosts
HELD = WINDOW + CLOCK_SKEW
DAY = 86_400.0


_client = partial(shop_client, max_attempts=1)


@pytest.fixture
def psp(tmp_path: Path) -> Iterator[tuple[Client, Client, ReferenceServer, ManualClock]]:
    """Two callers (two processes) on one store, and the server."""
    clock = ManualClock()
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer(clock=clock))
        one = stack.enter_context(_client(server, clock, tmp_path / "s.db"))
        two = stack.enter_context(_client(server, clock, tmp_path / "s.db"))
        yield one, two, server, clock


def _pay(client: Client) -> Any:
    return client.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")


def _not_sent(client: Client, server: ReferenceServer, clock: ManualClock) -> None:
    """Leave "o" not_sent, not maybe applied: refused, looked up, found never applied."""
    server.answer(500, path="/v1/payments")
    with pytest.raises(Indeterminate):
        _pay(client)
    clock.advance(HELD)
    settled = client.reconcile("o", lookup=BY_REFERENCE)
    assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)


def test_a_send_between_a_look_ups_read_and_its_lease_is_not_judged_by_the_stale_read(
    psp: tuple[Client, Client, ReferenceServer, ManualClock],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A look-up reads the operation (not_sent, never sent since), then leases it; in
    # between, another caller sends it: the server admits it and dies before running
    # it. The look-up finds nothing, judged by what it read before that send: "never
    # applied", not_sent. The server's recovery makes the payment; past its retention
    # the not_sent operation is sent again: paid twice.
    one, two, server, clock = psp
    _not_sent(one, server, clock)
    store = one.store
    claim = store.claim

    def other_caller_sends_first(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.undo()
        server.crash("ADMITTED", path="/v1/payments")
        with pytest.raises(Indeterminate):
            _pay(two)
        return claim(*args, **kwargs)

    monkeypatch.setattr(store, "claim", other_caller_sends_first)
    with pytest.raises(Indeterminate, match="may still be running it"):
        one.reconcile("o", lookup=BY_REFERENCE)
    record = store.get("o")
    assert record is not None
    assert record.maybe_applied
    clock.advance(HELD)
    server.recover()
    clock.advance(2 * DAY)
    server.reap()
    assert one.reconcile("o", lookup=BY_REFERENCE).state is State.SUCCEEDED
    assert _pay(one).state is State.SUCCEEDED  # from the store
    assert len(server.ledger()) == 1


def test_ops_reconcile_does_not_judge_an_own_profiles_operation_by_the_default_window(
    tmp_path: Path,
) -> None:
    # Sent under the application's own profile, whose server may run a request for an
    # hour. `idemclient ops reconcile` knew nothing of that profile and judged by the
    # default's fifteen minutes: twenty minutes after a send the server admitted and had
    # not begun, it settled the operation not_sent, and the server then made the payment.
    own = dataclasses.replace(profiles.reference, name="my-psp", in_flight_for=3600.0)
    path = tmp_path / "s.db"
    with serve() as live:
        live.server.crash("ADMITTED", path="/v1/payments")
        with (
            Client(
                store=path,
                clock=ManualClock(start=time.time() - 1200.0),  # sent twenty minutes ago
                base_url=live.url,
                headers={"Authorization": "Bearer shop-1"},
                profile=own,
                policy=RetryPolicy(max_attempts=1),
            ) as client,
            pytest.raises(Indeterminate),
        ):
            _pay(client)
        result = CliRunner().invoke(
            main,
            ["ops", "reconcile", "o", "--store", str(path), "--url", live.url,
             "--token", "shop-1", "--lookup", BY_REFERENCE],
        )  # fmt: skip
        assert result.exit_code == 2, result.stdout
        assert "own profile" in result.stderr
        with SQLiteStore(path) as store:
            record = store.get("o")
        assert record is not None
        assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)


def test_a_host_ahead_does_not_make_a_send_of_a_correct_clock_look_old(tmp_path: Path) -> None:
    # A send at T by a host whose clock is right; then a host an hour ahead opens the
    # store (its time becomes the store's latest), and a process on the right host
    # starts a minute later: it reads an hour's step back, and brought every send time
    # back by that hour. The send of a minute ago looked an hour old: a look-up that
    # found nothing settled it not_sent while the server was still running it.
    clock = ManualClock()
    path = tmp_path / "s.db"
    with ReferenceServer(clock=clock) as server:
        server.crash("ADMITTED", path="/v1/payments")
        with _client(server, clock, path) as client, pytest.raises(Indeterminate):
            _pay(client)
        ahead = ManualClock(start=clock.time() + 3600.0)
        with _client(server, ahead, path):
            pass
        clock.advance(60.0)
        with _client(server, clock, path) as client:
            with pytest.raises(Indeterminate, match="may still be running it"):
                client.reconcile("o", lookup=BY_REFERENCE)
            clock.advance(HELD)
            server.recover()
            clock.advance(2 * DAY)
            server.reap()
            assert client.reconcile("o", lookup=BY_REFERENCE).state is State.SUCCEEDED
            assert len(server.ledger()) == 1


class _DiesAfterSending(SQLiteStore):
    """A process that dies once its attempt is on the wire: nothing after the send is
    written (its row stays in flight, under its lease)."""

    dead = False

    def record_attempt(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            raise StoreUnavailable(self.path, "the process died")
        return super().record_attempt(*args, **kwargs)

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            raise StoreUnavailable(self.path, "the process died")
        return super().finish(*args, **kwargs)


def test_an_early_look_up_does_not_lift_the_hold_of_an_owner_that_died_in_flight(
    tmp_path: Path,
) -> None:
    # Under a profile whose server runs a second request beside the first, a call that
    # takes over from an owner that died in flight holds the operation for the
    # profile's in_flight_for. A look-up in between (nothing found yet) gave the row
    # back with no owner: the next call no longer saw a takeover, and sent at once,
    # beside the request the server was still to run: paid twice.
    name = profiles.reference.replace(name="reference-unguarded", guards_in_flight=False)
    clock = ManualClock()
    path = tmp_path / "s.db"
    with ReferenceServer(clock=clock, profile=name) as server:
        server.crash("ADMITTED", path="/v1/payments")
        dying = _DiesAfterSending(path)
        with _client(server, clock, dying, profile=name) as first:
            dying.dead = True
            with pytest.raises((Indeterminate, StoreError)):
                _pay(first)
        dying.close()
        with _client(server, clock, path, profile=name) as second:
            clock.advance(10.0)
            with pytest.raises(Indeterminate, match="may still be running it"):
                second.reconcile("o", lookup=BY_REFERENCE)
            with pytest.raises(Indeterminate, match="in_flight_for"):
                _pay(second)  # held: the first request may still run at the server
            clock.advance(60.0)
            server.recover()  # it does
            assert len(server.ledger()) == 1


def test_a_look_up_killed_while_it_held_the_row_does_not_count_as_a_send(
    psp: tuple[Client, Client, ReferenceServer, ManualClock],
) -> None:
    one, _two, server, clock = psp
    _not_sent(one, server, clock)
    # A reconciler takes the row for its look-up and dies before it answers.
    _reconcile.take(one.store, clock, "o")
    clock.advance(LEASE_MARGIN + 1.0)
    settled = one.reconcile("o", lookup=BY_REFERENCE)
    assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)


def test_a_send_stamped_by_a_slow_host_is_not_believed_never_applied_early(
    tmp_path: Path,
) -> None:
    slow_sender_history(tmp_path / "s.db")


def test_a_send_stamped_by_a_fast_host_is_held_by_its_stamp_then_settled(
    tmp_path: Path,
) -> None:
    fast_sender_history(tmp_path / "s.db")


# A SQLite file is read by one host's clock, but that clock can be set right forward
# (nothing detects a step forward): a send stamped before is then as early as a slow
# host's. The same histories run on a PostgreSQL store shared by hosts
# (tests/postgres/test_clock_attacks_postgres.py).


def slow_sender_history(path: Path | str) -> None:
    """Hosts sharing a store may be CLOCK_SKEW apart. A send stamped by a host 290 s
    slow looked 290 s older to a host whose clock is right: its look-up's "none" was
    believed 290 s before the server had had its in_flight_for, the operation settled
    not_sent while the server could still run it, and it was paid again."""
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:
        server.crash("ADMITTED", path="/v1/payments")
        slow = ManualClock(start=clock.time() - 290.0)  # within the skew: no step seen
        with _client(server, slow, path) as sender, pytest.raises(Indeterminate):
            _pay(sender)
        clock.advance(WINDOW - 100.0)  # the server may still be running it
        with _client(server, clock, path) as looker:
            with pytest.raises(Indeterminate, match="may still be running it") as early:
                looker.reconcile("o", lookup=BY_REFERENCE)
            # Not before the server's whole in_flight_for from the true send.
            assert early.value.outcome.not_before is not None
            assert early.value.outcome.not_before >= clock.time() + 100.0
            server.recover()  # it does run it
            clock.advance(2 * DAY)
            server.reap()
            assert looker.reconcile("o", lookup=BY_REFERENCE).state is State.SUCCEEDED
            assert _pay(looker).state is State.SUCCEEDED  # from the store
        assert len(server.ledger()) == 1


def fast_sender_history(path: Path | str) -> None:
    """The other direction: the sending host was 290 s fast, so its stamp is late and
    the send looks younger than it is. The window only ends later than it must (a none
    is believed late, never early), and it does end: the operation settles not_sent."""
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:
        server.answer(500, path="/v1/payments")  # answered before anything ran
        fast = ManualClock(start=clock.time() + 290.0)  # within the skew: no step seen
        sent = fast.time()
        with _client(server, fast, path) as sender, pytest.raises(Indeterminate):
            _pay(sender)
        clock.advance(WINDOW + 10.0)  # the server surely ended it, the stamp says not
        with _client(server, clock, path) as looker:
            with pytest.raises(Indeterminate, match="may still be running it") as early:
                looker.reconcile("o", lookup=BY_REFERENCE)
            assert early.value.outcome.not_before == sent + HELD
            clock.advance(sent + HELD - clock.time())
            settled = looker.reconcile("o", lookup=BY_REFERENCE)
            assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)
            assert _pay(looker).state is State.SUCCEEDED  # sent again with its key
        assert len(server.ledger()) == 1


def test_a_reconciler_killed_every_time_settles_after_one_window_not_never(
    psp: tuple[Client, Client, ReferenceServer, ManualClock],
) -> None:
    # A send that may have been applied (the server admitted it and died before running
    # it; it never recovers). A reconciler on a timer is killed each time while it
    # holds the row for its look-up. Each takeover of its lease used to count as a
    # send: the send time moved to the dead lease's end, and the next look-up's "none"
    # waited another in_flight_for, for ever.
    one, _two, server, clock = psp
    server.crash("ADMITTED", path="/v1/payments")
    with pytest.raises(Indeterminate):
        _pay(one)
    sent = clock.time()
    for _ in range(int(HELD // (LEASE_MARGIN + 1.0)) + 5):  # bounded: a window and more
        _reconcile.take(one.store, clock, "o")  # killed before it answers
        clock.advance(LEASE_MARGIN + 1.0)
        if clock.time() >= sent + HELD:
            break
        with pytest.raises(Indeterminate, match="may still be running it") as early:
            one.reconcile("o", lookup=BY_REFERENCE)
        assert early.value.outcome.not_before == sent + HELD  # never pushed on
    settled = one.reconcile("o", lookup=BY_REFERENCE)
    assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)
    assert len(server.ledger()) == 0


def test_a_send_killed_in_flight_is_still_taken_over_as_a_send(tmp_path: Path) -> None:
    # The look-up's mark is the look-up's alone: a sender that dies in flight may have
    # sent until its lease's end, and a look-up's "none" counts only a window after.
    clock = ManualClock()
    path = tmp_path / "s.db"
    with ReferenceServer(clock=clock) as server:
        server.crash("ADMITTED", path="/v1/payments")
        dying = _DiesAfterSending(path)
        with _client(server, clock, dying) as first:  # type: ignore[arg-type]
            dying.dead = True
            with pytest.raises((Indeterminate, StoreError)):
                _pay(first)
        dying.close()
        with SQLiteStore(path) as store:
            held = store.get("o")
        assert held is not None
        assert (held.state, held.maybe_applied, held.lease_look_up) == (
            State.IN_FLIGHT,
            False,
            False,
        )
        with _client(server, clock, path) as second:
            clock.advance(10.0)
            found_dead = clock.time()  # it may have sent until then
            with pytest.raises(Indeterminate, match="may still be running it") as early:
                second.reconcile("o", lookup=BY_REFERENCE)
            record = second.store.get("o")
            assert record is not None
            assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
            assert record.sent_at == found_dead
            assert early.value.outcome.not_before == found_dead + HELD
            clock.advance(HELD)
            settled = second.reconcile("o", lookup=BY_REFERENCE)
            assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)


def test_a_send_after_a_killed_look_up_of_a_never_sent_operation_goes_at_once(
    tmp_path: Path,
) -> None:
    # Under a server that runs a second request beside the first, a call that takes
    # over from a sender waits for that sender's attempt. A look-up's lease is no such
    # sender: the operation, never sent, is sent at once, and once.
    unguarded = profiles.reference.replace(name="reference-unguarded", guards_in_flight=False)
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=unguarded) as server:
        client = _client(server, clock, tmp_path / "s.db", profile=unguarded)
        with client:
            _not_sent(client, server, clock)
            _reconcile.take(client.store, clock, "o")  # killed before it answers
            clock.advance(LEASE_MARGIN + 1.0)
            assert _pay(client).state is State.SUCCEEDED
            assert len(server.ledger()) == 1


def test_a_look_up_and_a_second_look_up_or_send_do_not_both_hold_the_row(
    psp: tuple[Client, Client, ReferenceServer, ManualClock],
) -> None:
    one, two, server, clock = psp
    _not_sent(one, server, clock)
    taken = _reconcile.take(one.store, clock, "o")  # live: its look-up is under way
    assert isinstance(taken, _reconcile.Taken)
    with pytest.raises(Indeterminate, match="being looked up by another caller"):
        two.reconcile("o", lookup=BY_REFERENCE)
    record = two.store.get("o")
    assert record is not None
    assert (record.state, record.lease_owner, record.lease_look_up) == (
        State.NOT_SENT,
        taken.owner,
        True,
    )
    # A send waits for the look-up's lease (never sent beside it), then goes once.
    assert _pay(two).state is State.SUCCEEDED
    assert clock.time() >= record.lease_expires  # type: ignore[operator]
    assert len(server.ledger()) == 1
