"""When a look-up's "nothing found" may say "never applied" (`_reconcile.still_in_flight`):
not while the server may still be running an attempt that may have been applied, that
is, until the server profile's `in_flight_for` has passed since the last such send, plus
the clock skew allowed between the store's hosts (`CLOCK_SKEW`: the send may have been
stamped by a host that much slow)."""

from __future__ import annotations

from typing import Any

import pytest

from idemclient import State
from idemclient._reconcile import last_sent, still_in_flight
from idemclient._store import OperationRecord, new_owner, release_owner
from idemclient._time import CLOCK_SKEW, in_flight_until

NOW = 1_800_000_000.0
WINDOW = 900.0
#: how long after a stored send a look-up's "none" is not believed
HELD = WINDOW + CLOCK_SKEW


def record(**changes: Any) -> OperationRecord:
    fields: dict[str, Any] = {
        "operation_id": "op",
        "key": "k",
        "method": "POST",
        "url": "https://psp.test/v1/payments",
        "headers": (),
        "body": b"{}",
        "fingerprint": "f",
        "reference": "r",
        "state": State.INDETERMINATE,
        "attempts": 1,
        "maybe_applied": True,
        "evidence": "",
        "not_before": None,
        "lease_owner": None,
        "lease_expires": None,
        "response": None,
        "created_at": NOW - 5_000,
        "updated_at": NOW - 4_000,
        "finished_at": None,
        "sent_at": NOW - 60,
    }
    fields.update(changes)
    return OperationRecord(**fields)


def test_a_recent_send_that_may_have_been_applied_holds_the_look_up_s_none() -> None:
    assert last_sent(record(), now=NOW) == NOW - 60
    assert still_in_flight(record(), now=NOW, in_flight_for=WINDOW) == NOW - 60 + HELD


def test_once_in_flight_for_and_the_skew_have_passed_none_found_is_never_applied() -> None:
    assert still_in_flight(record(), now=NOW + HELD - 60, in_flight_for=WINDOW) is None
    assert still_in_flight(record(sent_at=NOW - HELD), now=NOW, in_flight_for=WINDOW) is None


@pytest.mark.parametrize(
    ("sender_offset", "held_until"),
    [
        # The sending host was 290 s slow: its stamp is 290 s early, the send 290 s later
        # than it looks here; the skew covers it (the server's in_flight_for is whole).
        (-290.0, NOW - 290.0 + HELD),
        # The sending host was 290 s fast: its stamp is late, so the window only ends
        # later than it must (safe: a none is believed late, never early).
        (+290.0, NOW + 290.0 + HELD),
    ],
)
def test_a_send_stamped_by_a_skewed_host_is_held_for_the_server_s_whole_window(
    sender_offset: float, held_until: float
) -> None:
    true_send = NOW
    stamped = record(sent_at=true_send + sender_offset)
    until = still_in_flight(stamped, now=NOW, in_flight_for=WINDOW)
    assert until == held_until
    # Read by a host whose clock is right, the server has had its whole in_flight_for
    # from the true send before the none counts.
    assert until >= true_send + WINDOW
    assert still_in_flight(stamped, now=true_send + WINDOW - 1, in_flight_for=WINDOW) is not None


def test_one_rule_says_when_a_stored_send_stops_counting_as_in_flight() -> None:
    assert in_flight_until(NOW, WINDOW) == NOW + WINDOW + CLOCK_SKEW
    assert in_flight_until(NOW, 0.0) == NOW + CLOCK_SKEW


def test_nothing_that_may_have_been_applied_holds_nothing() -> None:
    never = record(state=State.NOT_SENT, maybe_applied=False, sent_at=None, updated_at=NOW)
    assert last_sent(never, now=NOW) is None
    assert still_in_flight(never, now=NOW, in_flight_for=WINDOW) is None


def test_the_age_of_the_record_is_not_the_age_of_its_last_send() -> None:
    # Made a week ago, sent again a minute ago: the minute counts.
    old = record(created_at=NOW - 7 * 86_400, updated_at=NOW - 7 * 86_400, sent_at=NOW - 60)
    assert still_in_flight(old, now=NOW, in_flight_for=WINDOW) is not None
    # Stopped a second ago without sending (a gate, a look-up's write): no send then.
    stopped = record(updated_at=NOW - 1, sent_at=NOW - 2 * HELD)
    assert still_in_flight(stopped, now=NOW, in_flight_for=WINDOW) is None


def test_a_record_from_before_sent_at_stands_on_its_last_write() -> None:
    legacy = record(sent_at=None, updated_at=NOW - 30)
    assert still_in_flight(legacy, now=NOW, in_flight_for=WINDOW) == NOW - 30 + HELD


def test_an_owner_in_flight_may_be_sending_until_its_lease_ends() -> None:
    alive = new_owner()
    try:
        live = record(
            state=State.IN_FLIGHT,
            maybe_applied=False,
            sent_at=None,
            updated_at=NOW - 10,
            lease_owner=alive,
            lease_expires=NOW + 120,
        )
        assert last_sent(live, now=NOW) == NOW + 120
    finally:
        release_owner(alive)


@pytest.mark.parametrize("expires", [NOW - 30, NOW + 120])
def test_an_owner_dead_or_out_of_its_lease_sent_no_later_than_either(expires: float) -> None:
    gone = new_owner()
    release_owner(gone)  # its call ended: dead, whatever its lease says
    dead = record(
        state=State.IN_FLIGHT,
        maybe_applied=False,
        sent_at=None,
        updated_at=NOW - 100,
        lease_owner=gone,
        lease_expires=expires,
    )
    assert last_sent(dead, now=NOW) == min(expires, NOW)


def test_a_none_is_judged_as_of_when_it_was_asked_not_when_it_is_read() -> None:
    # Asked 10 s before the window ends, read 20 s after: the server may have run the
    # send between the question and the end of the window, so the answer says nothing.
    sent = NOW - HELD + 10
    asked_early = still_in_flight(
        record(sent_at=sent), now=NOW + 20, in_flight_for=WINDOW, asked_at=NOW
    )
    assert asked_early == sent + HELD
    # Asked once the window had passed: believed, however late it is read.
    assert (
        still_in_flight(record(sent_at=sent), now=NOW + 60, in_flight_for=WINDOW, asked_at=NOW + 10)
        is None
    )
    # A question time after the reading (a clock gone back) is no leave: read as now.
    assert (
        still_in_flight(record(sent_at=sent), now=NOW, in_flight_for=WINDOW, asked_at=NOW + 60)
        is not None
    )
