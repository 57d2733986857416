"""The server's clock as a second opinion (`_server_time`): an age is the older of the
two clocks', a hold is over only once over by both, and a server time that is missing,
garbled or wrong either way never judges less safely than the local clock alone."""

from __future__ import annotations

import math
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient._call import CLOCK_SKEW
from idemclient._reconcile import answered_at, still_in_flight
from idemclient._server_time import (
    DATE_RESOLUTION,
    STAMP_SLACK,
    ServerTime,
    ServerTimes,
    age,
    held_until,
    over_by_server,
    parse_date,
)
from idemclient.batch._plan import past_retention

from .test_look_up_in_flight import HELD, NOW, WINDOW, record

DAY = 86_400.0
ORIGIN = (b"https", b"psp.test", None)


def server(at: float) -> ServerTime:
    return ServerTime(low=at, high=at + DATE_RESOLUTION)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Wed, 02 Dec 2026 06:00:00 GMT", 1796191200.0),  # IMF-fixdate, what servers send
        ("Wednesday, 02-Dec-26 06:00:00 GMT", 1796191200.0),  # obsolete RFC 850 form
        ("Wed Dec  2 06:00:00 2026", None),  # asctime: no zone said, not known to be GMT
        ("Wed, 02 Dec 2026 06:00:00 -0000", None),  # "-0000": no zone said
        ("Wed, 02 Dec 2026 07:00:00 +0100", 1796191200.0),  # a zone, honoured
        ("", None),  # empty
        ("yesterday", None),  # garbage
        ("Wed, 32 Dec 2026 06:00:00 GMT", None),  # no such day
        ("Wed, 02 Dec 99999 06:00:00 GMT", None),  # out of range
    ],
)
def test_an_http_date_is_read_or_refused(raw: str, expected: float | None) -> None:
    assert parse_date(raw) == expected


def test_what_the_reference_server_writes_is_read_back() -> None:
    assert parse_date(formatdate(NOW, usegmt=True)) == NOW


@pytest.mark.parametrize(
    ("server_at", "expected"),
    [
        (None, 5 * DAY),  # no Date: the local age, as before
        (NOW + 2 * DAY, 7 * DAY + DATE_RESOLUTION),  # this clock set two days back
        (NOW, 5 * DAY + DATE_RESOLUTION),  # the clocks agree: up to the Date's second more
        (NOW - 3 * DAY, 5 * DAY),  # a server clock slow: never younger than locally
    ],
)
def test_an_age_is_the_older_of_the_two_clocks(server_at: float | None, expected: float) -> None:
    seen = None if server_at is None else server(server_at)
    assert age(NOW - 5 * DAY, now=NOW, server=seen) == expected


@pytest.mark.parametrize(
    ("server_at", "expected"),
    [
        (None, NOW + 100),  # no Date: the local hold, as before
        (NOW - 3600, NOW + 3700),  # this clock stepped an hour forward: held an hour more
        (NOW, NOW + 100),  # the clocks agree
        (NOW + 3600, NOW + 100),  # a server clock fast: never ends sooner than locally
    ],
)
def test_a_hold_is_over_only_once_over_by_both_clocks(
    server_at: float | None, expected: float
) -> None:
    seen = None if server_at is None else server(server_at)
    # Sent at NOW - 1100 (a right clock then), held 1200 s.
    assert held_until(NOW + 100, since=NOW - 4000, now=NOW, server=seen) == expected


def test_a_hold_over_by_this_clock_alone_is_not_over() -> None:
    # Stamped at NOW - 4000 by a clock then right, read after it was stepped an hour on.
    assert held_until(NOW - 2800, since=NOW - 4000, now=NOW, server=server(NOW - 3600)) == (
        NOW + 800
    )


def test_a_hold_stamped_ahead_of_the_server_s_clock_is_this_clock_s() -> None:
    # A host thirty days fast all along stamps its sends thirty days ahead of the
    # server: measured from that stamp, the server's time would hold for thirty days.
    # It cannot say how long ago such a send was, so this clock judges, as before.
    sent = NOW - 60
    assert held_until(sent + 1200, since=sent, now=NOW, server=server(NOW - 30 * DAY)) == (
        sent + 1200
    )
    assert over_by_server(sent + 1200, since=sent, server_at=NOW - 30 * DAY)
    assert not over_by_server(sent + 1200, since=sent, server_at=sent + 600)
    assert over_by_server(sent + 1200, since=sent, server_at=sent + 1200)
    assert over_by_server(sent + 1200, since=sent, server_at=None)
    # Within the hosts' skew (and the Date's lost second) ahead, it is measured from.
    assert not over_by_server(sent + 1200, since=sent, server_at=sent - STAMP_SLACK)
    assert held_until(sent + 1200, since=sent, now=NOW, server=server(sent - STAMP_SLACK)) > (
        sent + 1200
    )


def test_the_stamp_slack_is_the_hosts_clock_skew() -> None:
    assert STAMP_SLACK == CLOCK_SKEW


@given(
    stamped=st.floats(-1e10, 1e10),
    now=st.floats(-1e10, 1e10),
    server_at=st.floats(-1e10, 1e10),
    span=st.floats(0, 1e7),
)
def test_a_server_time_never_judges_less_safely_than_this_clock_alone(
    stamped: float, now: float, server_at: float, span: float
) -> None:
    seen = server(server_at)
    assert age(stamped, now=now, server=seen) >= age(stamped, now=now, server=None)
    until = stamped + span
    held = held_until(until, since=stamped, now=now, server=seen)
    assert held >= held_until(until, since=stamped, now=now, server=None) == until
    # ... and holds at most one span (and the slack) past now: a server clock far
    # behind this one holds no longer than that.
    assert held <= max(until, now + span + DATE_RESOLUTION + STAMP_SLACK)


def test_a_date_heard_is_read_later_with_the_time_since_on_the_monotonic_clock() -> None:
    times = ServerTimes()
    assert not times.knows(ORIGIN)
    assert times.at(ORIGIN, 10.0) is None
    times.heard(ORIGIN, formatdate(NOW, usegmt=True), 5.0)
    assert times.knows(ORIGIN)
    assert times.at(ORIGIN, 65.0) == ServerTime(low=NOW + 60, high=NOW + 60 + DATE_RESOLUTION)
    assert times.at((b"https", b"other.test", None), 65.0) is None  # per origin
    times.heard(ORIGIN, formatdate(NOW + 600, usegmt=True), 100.0)  # the latest counts
    assert times.at(ORIGIN, 100.0) == server(NOW + 600)


def test_a_garbled_date_gives_no_server_time_but_counts_as_heard() -> None:
    # Heard: the process asked, and the server will not say; no probe for every call.
    times = ServerTimes()
    times.heard(ORIGIN, "not a date", 0.0)
    assert times.knows(ORIGIN)
    assert times.at(ORIGIN, 1.0) is None


def test_a_look_up_s_none_waits_until_the_window_is_over_by_the_server_s_clock_too() -> None:
    sent = record(sent_at=NOW - HELD - 60)  # over by this clock a minute ago
    assert still_in_flight(sent, now=NOW, in_flight_for=WINDOW) is None
    # Stepped ten minutes forward since: by the server's clock it was sent 660 s ago.
    until = still_in_flight(sent, now=NOW, in_flight_for=WINDOW, server_at=NOW - 600)
    assert until == NOW + 540
    # A server clock further behind than the send was stamped (a clock fast then) says
    # nothing of it: this clock judges.
    assert still_in_flight(sent, now=NOW, in_flight_for=WINDOW, server_at=NOW - DAY) is None
    # A server clock fast never shortens it.
    young = record(sent_at=NOW - 60)
    assert (
        still_in_flight(young, now=NOW, in_flight_for=WINDOW, server_at=NOW + DAY)
        == NOW - 60 + HELD
    )
    assert still_in_flight(sent, now=NOW, in_flight_for=WINDOW, server_at=NOW) is None


def test_a_look_up_s_answer_tells_the_server_s_time() -> None:
    import httpx

    assert answered_at(None) is None
    assert answered_at(httpx.Response(404)) is None
    assert answered_at(httpx.Response(404, headers={"date": "garbage"})) is None
    dated = httpx.Response(404, headers={"date": formatdate(NOW, usegmt=True)})
    assert answered_at(dated) == NOW


@pytest.mark.parametrize(
    ("server_now", "past"),
    [
        (None, False),  # five days old locally, inside seven
        (NOW + 2 * DAY, True),  # a week old by the server: this clock was set back
        (NOW - 2 * DAY, False),  # a server clock slow: still as old as locally
        (math.nan, False),  # nonsense compares false: the local age stands
    ],
)
def test_a_batch_row_is_past_retention_by_either_clock(
    server_now: float | None, past: bool
) -> None:
    row = record(created_at=NOW - 5 * DAY, clock_stepped=None)
    assert past_retention(row, now=NOW, retention=7 * DAY, server_now=server_now) is past
    assert CLOCK_SKEW < DAY  # the skew allowance does not decide these rows


def test_an_answer_without_a_date_counts_as_heard_and_keeps_an_earlier_date() -> None:
    # A server that sends no Date is not probed again and again; one that sent a Date
    # keeps it when a later answer (a proxy's, say) comes without one.
    times = ServerTimes()
    times.heard(ORIGIN, None, 0.0)
    assert times.knows(ORIGIN)
    assert times.at(ORIGIN, 1.0) is None
    times.heard(ORIGIN, formatdate(NOW, usegmt=True), 1.0)
    times.heard(ORIGIN, None, 2.0)
    assert times.at(ORIGIN, 1.0) == server(NOW)
