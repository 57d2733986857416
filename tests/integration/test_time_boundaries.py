"""Every time judgement the client makes, a second either side of its boundary, through
the public API against the reference server in process (its ledger counts the
payments), with the host's clock on either side of the clock that stamped what is
judged.

- Key retention: a maybe-applied operation is sent again under its key while its age
  plus `CLOCK_SKEW` is within the profile's retention, and looked up
  (`ReconcileRequired`, nothing sent) after. Its age is the oldest of its ages by this
  host's clock, by the server's clock from this host's stamp, and by the server's clock
  from the server's own time kept with the record, the server's time now read as the
  latest its whole-second `Date` allows: so the boundary comes `DATE_RESOLUTION` early,
  and, with this host's clock behind the server's by D, D early too (the safe way).
- In-flight hold (a server that does not guard a key in flight): a maybe-applied
  operation is not sent again until `in_flight_for` plus `CLOCK_SKEW` after its last
  send, by every clock that can measure it: this host's, the server's from this host's
  stamp (its `Date` read as the earliest it allows), the server's from its own time at
  the send (the latest its `Date` allowed then). So the hold ends `DATE_RESOLUTION`
  late, or with this host's clock ahead of the server's by D, D late (the safe way).
  A second before, the send waits for its end; a second after, it goes at once.
- Lease expiry: another process's lease, stamped by its host's clock, is waited on
  (nothing sent) until this host's clock reads its end, and taken over (sent under its
  key) after.
- Clock-step allowance: this host's clock reading `CLOCK_SKEW` earlier than the latest
  time the store has seen is not a step (the operation is sent again); a second more is
  (it is of unknown age: looked up, nothing sent), seen by a process that starts after
  the step (against the store's times) and by one that runs across it (against its
  monotonic clock).

"Either side": this host's clock 50 s ahead of the server's (or of the other process's
host), or 50 s behind it, all along. A judgement that mixed two clocks the other way,
or measured from the wrong stamp, moves its boundary the wrong way, and a side fails.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    Outcome,
    ReconcileRequired,
    RetryPolicy,
    State,
)
from idemclient._server_time import DATE_RESOLUTION
from idemclient._time import CLOCK_SKEW
from idemclient.store import SQLiteStore
from tests.checker.world import Clock

from .test_server_clock import BASE, Shop, _bearer, _paid_then_timed_out

#: The host's clock against the server's (or the other process's host's), all along
#: (less than a lease's span, so that a lease stamped by a host behind has not ended by
#: this host's clock as it is taken).
HOSTS = {"host ahead": 50.0, "host behind": -50.0}
#: One second before the boundary, and one after.
SIDES = {"before": -1.0, "after": 1.0}


@pytest.fixture
def shop(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Shop]:
    made = Shop(tmp_path, getattr(request, "param", "reference"))
    yield made
    made.close()


def _to(shop: Shop, when: float) -> None:
    """Move the world on until the host's clock reads `when`."""
    assert when >= shop.client_clock.time()
    shop.world.advance(when - shop.client_clock.time())


def _posts(shop: Shop) -> int:
    return shop.wire.sent.count("POST")


# -- key retention -----------------------------------------------------------------------


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("side", SIDES)
def test_key_retention(shop: Shop, host: str, side: str) -> None:
    shop.client_clock.offset = HOSTS[host]
    _paid_then_timed_out(shop, "client")
    retention = shop.profile.key_retention
    behind = max(0.0, -HOSTS[host])  # this host's clock behind the server's
    boundary = shop.record().created_at + retention - CLOCK_SKEW - DATE_RESOLUTION - behind
    _to(shop, boundary + SIDES[side])
    shop.wire.sent.clear()
    again = shop.pay("client")
    if side == "before":
        assert isinstance(again, Outcome), again
        assert (again.state, again.replayed) == (State.SUCCEEDED, True)
        assert _posts(shop) == 1
    else:
        assert isinstance(again, ReconcileRequired), again
        assert "retention" in str(again)
        assert _posts(shop) == 0
    assert shop.applied() == 1


def test_a_record_stamped_ahead_of_this_clock_within_the_skew_is_sent_again(
    shop: Shop,
) -> None:
    # Another host of the store, its clock two minutes ahead of this one's (within
    # CLOCK_SKEW, as the store's hosts may be), recorded the maybe-applied payment: its
    # stamp, and the store's latest time, are ahead of this clock. Not a clock gone
    # back: its age is judged as it looks, the key still held, and it is sent again
    # under it (replayed), not looked up. (Beyond the skew: `test_clock_step_allowance`.)
    shop.client_clock.offset = 120.0
    _paid_then_timed_out(shop, "client")
    record = shop.record()
    shop.client_clock.offset = 0.0  # this host: the server's time
    assert record.created_at > shop.client_clock.time()
    assert record.updated_at - shop.client_clock.time() < CLOCK_SKEW
    shop.wire.sent.clear()
    again = shop.pay("client")
    assert isinstance(again, Outcome), again
    assert (again.state, again.replayed) == (State.SUCCEEDED, True)
    assert _posts(shop) == 1
    assert shop.applied() == 1


# -- in-flight hold ----------------------------------------------------------------------


@pytest.mark.parametrize("shop", ["paypal"], indirect=True)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("side", SIDES)
def test_in_flight_hold(shop: Shop, host: str, side: str) -> None:
    shop.client_clock.offset = HOSTS[host]
    _paid_then_timed_out(shop, "client")
    record = shop.record()
    assert record.maybe_applied
    ahead = max(0.0, HOSTS[host])  # this host's clock ahead of the server's
    end = record.sent_at + shop.profile.in_flight_for + CLOCK_SKEW + max(DATE_RESOLUTION, ahead)
    _to(shop, end + SIDES[side])
    sent_at: list[float] = []

    def note(request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        if request.method == "POST":
            sent_at.append(shop.client_clock.time())
        return inner.handle_request(request)

    shop.through(note)
    again = shop.pay("client")
    assert isinstance(again, Outcome), again
    assert again.state is State.SUCCEEDED
    if side == "before":
        assert sent_at == [end]  # waited for the hold's end, not a second less
    else:
        assert sent_at == [end + 1.0]  # at once
    assert shop.applied() == 1


# -- lease expiry ------------------------------------------------------------------------


class _Held:
    """The first process's send, held on the wire (a process paused mid-send) until
    released; its lease is what a second process judges."""

    def __init__(self, shop: Shop) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self.first = True
        shop.through(self.handle)

    def handle(self, request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        if request.method == "POST" and self.first:
            self.first = False
            self.reached.set()
            assert self.release.wait(30), "never released"
        return inner.handle_request(request)


def _process(shop: Shop, clock: Clock, *, deadline: float) -> object:
    options: dict[str, Any] = {
        **shop.options(),
        "clock": clock,
        "policy": RetryPolicy(max_attempts=1, deadline=deadline),
    }
    try:
        with Client(base_url=BASE, transport=shop.wire, auth=_bearer, **options) as client:
            return client.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
    except Indeterminate as error:
        return error


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("side", SIDES)
def test_lease_expiry(shop: Shop, host: str, side: str) -> None:
    # The first process runs on a host whose clock is 100 s ahead of this one's, or
    # behind it: it stamps its lease's end by its own clock; this host judges it by
    # its own.
    theirs = Clock(shop.world, HOSTS[host])
    held = _Held(shop)
    results: list[object] = []
    first = threading.Thread(
        target=lambda: results.append(_process(shop, theirs, deadline=60.0)), daemon=True
    )
    first.start()
    try:
        assert held.reached.wait(30)
        lease_end = shop.record().lease_expires
        assert lease_end is not None
        _to(shop, lease_end + SIDES[side])
        # A second process on this host, whose call gives up waiting within a second.
        second = _process(shop, shop.client_clock, deadline=0.5)
        if side == "before":
            assert isinstance(second, Indeterminate), second
            assert "another caller" in str(second)
            assert shop.server.ledger() == ()  # nothing sent beside the held send
        else:
            assert isinstance(second, Outcome), second
            assert second.state is State.SUCCEEDED
            assert shop.applied() == 1  # taken over: sent under the first one's key
    finally:
        held.release.set()
        first.join(30)
    assert not first.is_alive()
    assert shop.applied() == 1


# -- clock-step allowance -----------------------------------------------------------------


@pytest.mark.parametrize("seen", ["at a start", "while running"])
@pytest.mark.parametrize("side", SIDES)
def test_clock_step_allowance(shop: Shop, seen: str, side: str) -> None:
    # A maybe-applied payment, and ten minutes later another, paid: the store's latest
    # time is the second's. The clock then reads CLOCK_SKEW (less or more a second)
    # earlier than that: the first payment's own stamp is not ahead of the clock, so
    # only the step tells that its age may be more than it looks.
    _paid_then_timed_out(shop, "client")
    shop.world.advance(600.0)
    assert isinstance(shop.pay("client", reference="inv-2"), Outcome)
    with SQLiteStore(shop.path) as store:
        latest = store.advance_clock(now=0.0)  # the latest time the store has seen
        first = store.get("inv-1")
    assert first is not None
    step_to = latest - CLOCK_SKEW - SIDES[side]  # before: 299 s back; after: 301 s
    assert first.created_at < step_to - CLOCK_SKEW  # not itself ahead of the clock
    shop.wire.sent.clear()
    if seen == "at a start":
        shop.client_clock.offset -= shop.client_clock.time() - step_to
        again: object = shop.pay("client")
    else:
        # A process that started before the step, and runs across it: its clock goes
        # back against its own monotonic clock.
        with Client(base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()) as c:
            shop.client_clock.offset -= shop.client_clock.time() - step_to
            try:
                again = c.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
            except Indeterminate as error:
                again = error
    if side == "before":
        assert isinstance(again, Outcome), again
        assert (again.state, again.replayed) == (State.SUCCEEDED, True)
        assert _posts(shop) == 1
    else:
        assert isinstance(again, ReconcileRequired), again
        assert "clock" in str(again)
        assert _posts(shop) == 0
    assert shop.applied() == 2
