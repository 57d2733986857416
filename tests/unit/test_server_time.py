"""The server's clock as a second opinion (`_server_time`): an age is the older of the
two clocks', a hold is over only once over by both, and a server time that is missing,
garbled or wrong either way never judges less safely than the local clock alone."""

from __future__ import annotations

import math
from email.utils import formatdate

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient._forks import _after_fork_in_child
from idemclient._reconcile import answered_at, still_in_flight
from idemclient._server_time import (
    ASK_AGAIN_AFTER,
    DATE_RESOLUTION,
    MAX_ORIGINS,
    STAMP_SLACK,
    ServerTime,
    ServerTimes,
    age,
    held_until,
    over_by_server,
    parse_date,
    went_back,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch._plan import past_retention

from .test_look_up_in_flight import HELD, NOW, WINDOW, record

DAY = 86_400.0
HOUR = 3_600.0
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
    now = None if server_now is None else server(server_now)
    assert past_retention(row, now=NOW, retention=7 * DAY, server=now) is past
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


# -- the server's time kept with the record ------------------------------------------


def test_an_age_from_the_servers_recorded_time_sees_a_stamp_made_by_a_fast_clock() -> None:
    # Recorded by a clock two days fast, set right since: by its own stamp, and by the
    # server's time now against that stamp, it is an hour old. The server's time as it
    # was recorded says two days and an hour.
    stamped = NOW - HOUR + 2 * DAY
    assert age(stamped, now=NOW, server=server(NOW)) == pytest.approx(-2 * DAY + HOUR + 1)
    kept = NOW - 2 * DAY - HOUR
    assert age(stamped, now=NOW, server=server(NOW), server_stamped=kept) == 2 * DAY + HOUR + 1
    # With no server time now, the local age, as before (the record's is not enough).
    assert age(stamped, now=NOW, server=None, server_stamped=kept) == NOW - stamped


@pytest.mark.parametrize("offset", [-1790.0, 0.0, 1790.0, 3 * DAY])
def test_a_hold_from_the_servers_time_at_the_send_runs_its_span_on_the_servers_clock(
    offset: float,
) -> None:
    # Sent ten minutes ago; this clock stepped an hour forward since, where nothing
    # shows it: by it, the 15-minute hold is over. The server's clock, off by any
    # constant amount, read at the send and now, says five minutes are left.
    span = 900.0
    sent_local = NOW + HOUR - 600  # stamped before the step: an hour behind the clock now
    until = sent_local + span
    at_send = NOW - 600 + offset + DATE_RESOLUTION  # an upper bound, as the call keeps it
    seen = server(NOW + offset)
    held = held_until(until, since=sent_local, now=NOW + HOUR, server=seen, server_since=at_send)
    assert held == NOW + HOUR + 300 + DATE_RESOLUTION
    assert not over_by_server(until, since=sent_local, server_at=NOW + offset, server_since=at_send)
    assert over_by_server(
        until, since=sent_local, server_at=NOW + offset + 302, server_since=at_send
    )


def test_a_server_clock_set_back_since_the_send_cannot_measure_the_hold() -> None:
    # The server's Date at the send was a month ahead, and is right now: measured from
    # it, the hold would last a month. The server's clock went back; this one judges.
    until = NOW + 900
    ahead = NOW + 30 * DAY
    later = NOW + 1000  # over by this clock, and by the server's from the local stamp
    assert went_back(ahead, later)
    assert (
        held_until(until, since=NOW, now=later, server=server(later), server_since=ahead) == until
    )
    assert over_by_server(until, since=NOW, server_at=later, server_since=ahead)
    # Within the readings' whole seconds, it did not go back.
    assert not went_back(NOW + 2 * DATE_RESOLUTION, NOW)


@given(
    stamped=st.floats(-1e10, 1e10),
    now=st.floats(-1e10, 1e10),
    server_at=st.floats(-1e10, 1e10),
    server_since=st.floats(-1e10, 1e10),
    span=st.floats(0, 1e7),
)
def test_the_servers_recorded_time_never_judges_less_safely_than_this_clock_alone(
    stamped: float, now: float, server_at: float, server_since: float, span: float
) -> None:
    seen = server(server_at)
    local = age(stamped, now=now, server=None)
    kept = age(stamped, now=now, server=seen, server_stamped=server_since)
    assert kept >= local
    assert kept >= age(stamped, now=now, server=seen)  # never younger than without it
    until = stamped + span
    held = held_until(until, since=stamped, now=now, server=seen, server_since=server_since)
    assert held >= until
    assert held >= held_until(until, since=stamped, now=now, server=seen)  # never less
    if over_by_server(until, since=stamped, server_at=server_at, server_since=server_since):
        assert over_by_server(until, since=stamped, server_at=server_at)
    # ... and holds at most one span (and the slack, and the readings' seconds) past now.
    assert held <= max(until, now + span + STAMP_SLACK + 2 * DATE_RESOLUTION)


def test_one_question_per_origin_at_a_time_and_a_silent_origin_is_not_asked_again_soon() -> None:
    times = ServerTimes()
    turn = times.turn(ORIGIN)
    assert times.turn(ORIGIN) is turn  # one turn per origin, shared by its callers
    assert times.ask(ORIGIN, 0.0)
    times.answered(ORIGIN, 7.0, heard=False)  # no answer
    assert not times.ask(ORIGIN, 7.0 + ASK_AGAIN_AFTER - 1)
    assert times.ask(ORIGIN, 7.0 + ASK_AGAIN_AFTER)
    times.heard(ORIGIN, formatdate(NOW, usegmt=True), 401.0)
    times.answered(ORIGIN, 401.0, heard=True)
    assert not times.ask(ORIGIN, 402.0)  # answered: never asked again
    # Turns of origins nobody asks are let go when there are too many; a held one stays.
    with turn:
        for n in range(MAX_ORIGINS + 1):
            times.turn((b"https", f"h{n}.test".encode(), None))
        assert times.turn(ORIGIN) is turn


def test_a_forked_child_does_not_inherit_its_parents_question_out() -> None:
    # A pre-fork server: the parent's caller held the turn as the process forked. In
    # the child, nobody will release it: each call would wait the probe's whole time.
    # (What a forked child runs, called here: tests/client/test_forked_locks.py forks.)
    times = ServerTimes()
    held = times.turn(ORIGIN)
    held.acquire()
    _after_fork_in_child()
    fresh = times.turn(ORIGIN)
    assert fresh is not held
    assert fresh.acquire(blocking=False)


@pytest.mark.parametrize("wrong", [-HOUR, HOUR])
def test_a_wrong_date_at_the_send_never_ends_a_hold_the_other_measures_keep(
    wrong: float,
) -> None:
    # A gateway's own 504 (its clock an hour off) was the latest Date at the send: the
    # server's time kept with it is an hour off. The host's clock was then stepped an
    # hour forward unseen. The server's time now (right), against the local stamp of the
    # send, still says ten minutes: held, whatever the kept time says.
    span = 900.0
    sent_local = NOW - 600  # stamped by the host's clock while it was right
    until = sent_local + span
    kept = NOW - 600 + wrong + DATE_RESOLUTION
    held = held_until(
        until, since=sent_local, now=NOW + HOUR, server=server(NOW), server_since=kept
    )
    assert held >= NOW + HOUR + 300
    assert not over_by_server(until, since=sent_local, server_at=NOW, server_since=kept)


def test_a_node_ahead_at_the_intent_never_makes_an_operation_younger() -> None:
    # The HEAD reached a node three hours ahead; the host's clock was right then, and
    # set back three hours since, unseen. By the kept time and by the host's clock the
    # operation is 23 hours old; by the server's time now against its stamp, 26.
    stamped = NOW - 26 * HOUR
    now_local = NOW - 3 * HOUR
    kept = stamped + 3 * HOUR
    assert age(stamped, now=now_local, server=server(NOW), server_stamped=kept) >= 26 * HOUR


def test_a_cached_answer_s_date_is_read_with_its_age() -> None:
    # A cache answered with a copy made an hour ago: its Date is an hour old. The Age it
    # sends says so (RFC 9111); one that is not a number of seconds says nothing.
    times = ServerTimes()
    stale = formatdate(NOW - HOUR, usegmt=True)
    times.heard(ORIGIN, stale, 10.0, "3600")
    assert times.at(ORIGIN, 10.0) == server(NOW)
    times.heard(ORIGIN, stale, 20.0, "soon")
    assert times.at(ORIGIN, 20.0) == server(NOW - HOUR)
    times.heard(ORIGIN, formatdate(NOW - 3 * DAY, usegmt=True), 30.0, str(int(3 * DAY)))
    assert times.at(ORIGIN, 30.0) == server(NOW)
    times.heard(ORIGIN, stale, 40.0, "9" * 11)  # absurd: not read
    assert times.at(ORIGIN, 40.0) == server(NOW - HOUR)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Date", "Mon, 07 Dec 2026 22:00:00 GMT"), ("Content-Type", "application/json")],
        [("date", "Mon, 07 Dec 2026 22:00:00 GMT"), ("AGE", "30")],
        [("Age", "5"), ("Date", "a"), ("X-Other", "1"), ("date", "b"), ("age", "6")],
        [("Date", b"Mon, 07 Dec 2026 22:00:00 GMT"), ("X-Note", "café".encode())],
        [("Age", "7"), ("Server", b"\xe9t\xe9")],
    ],
)
def test_an_answer_s_date_and_age_are_read_as_httpx_reads_them(
    headers: list[tuple[str, object]],
) -> None:
    from idemclient._settings import _date_and_age

    read = httpx.Response(200, headers=headers).headers  # type: ignore[arg-type]
    expected = (read.get("date"), read.get("age"))
    # afresh: what httpx decodes, worked out by the one pass, not found cached
    fresh = httpx.Response(200, headers=headers).headers  # type: ignore[arg-type]
    assert _date_and_age(fresh) == expected
