"""The two judgements of an age the batch makes, as the client makes its own (`_time`):
a record still within a server's key retention (`retained`), and a look-up's answer
young enough to believe again (`younger_than`).

Each boundary a second either side, with this host's clock 50 s ahead of the server's
and 50 s behind it, all along (the host stamped the record and reads it now; the
server's `Date` then and now is its own). An age is the oldest of this clock's, the
server's measured from the host's stamp (its `Date` now read as the latest it allows,
a second more than it says), and the server's alone (from its time at the stamp): with
this host's clock behind, the server's clock from the stamp is the oldest, by the 50 s
and the second; ahead, the second only (the server's time against its own).
"""

from __future__ import annotations

import pytest

from idemclient._time import (
    CLOCK_SKEW,
    DATE_RESOLUTION,
    ServerTime,
    retained,
    younger_than,
)

#: the server's time at the stamp (whole seconds, as a `Date` says)
STAMPED = 1_800_000_000.0
RETENTION = 86_400.0
WINDOW = 900.0
#: this host's clock against the server's, all along
HOSTS = {"host ahead": 50.0, "host behind": -50.0}
SIDES = {"before": -1.0, "after": 1.0}


def server_at(when: float) -> ServerTime:
    """The server's time when its `Date` says `when`."""
    return ServerTime(low=when, high=when + DATE_RESOLUTION)


def extra(host: float) -> float:
    """How much older than it is a record looks by the oldest measure, with this
    host's clock `host` seconds ahead of the server's: the `Date`'s lost second, and
    a host behind's lag (the server's clock measured from the host's stamp)."""
    return DATE_RESOLUTION + max(0.0, -host)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_a_record_is_retained_until_its_oldest_age_and_the_skew_reach_the_retention(
    host: float, side: float
) -> None:
    # The boundary in real seconds since the stamp: the retention, less the skew
    # allowed between hosts, less how much older the oldest measure makes it.
    elapsed = RETENTION - CLOCK_SKEW - extra(host) + side
    judged = retained(
        STAMPED + host,
        now=STAMPED + elapsed + host,
        retention=RETENTION,
        server=server_at(STAMPED + elapsed),
        server_stamped=STAMPED,
    )
    assert judged is (side < 0)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_with_no_server_time_a_record_is_retained_by_this_clock_and_the_skew(
    host: float, side: float
) -> None:
    elapsed = RETENTION - CLOCK_SKEW + side
    judged = retained(STAMPED + host, now=STAMPED + elapsed + host, retention=RETENTION)
    assert judged is (side < 0)


@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_a_record_stamped_in_this_clocks_future_is_of_unknown_age(side: float) -> None:
    # A second ahead of this clock: a clock went back, or the host that stamped it was
    # ahead; it may be any age. A second behind: one second old.
    judged = retained(STAMPED + side, now=STAMPED, retention=RETENTION)
    assert judged is (side < 0)


@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_a_record_whose_server_time_says_older_is_past_whatever_its_stamp_says(
    side: float,
) -> None:
    # Stamped by a clock two days fast, set right since: by its stamp, an hour old. The
    # server's time kept with it says how old it is.
    elapsed = RETENTION - CLOCK_SKEW - DATE_RESOLUTION + side
    judged = retained(
        STAMPED + 2 * RETENTION,
        now=STAMPED + 2 * RETENTION + 3_600,
        retention=RETENTION,
        server=server_at(STAMPED + elapsed),
        server_stamped=STAMPED,
    )
    assert judged is (side < 0)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_an_answer_is_young_until_its_age_from_its_stamp_and_the_skew_reach_the_window(
    host: float, side: float
) -> None:
    # Measured from the host's stamp (by this clock, and by the server's: its `Date`
    # now the latest it allows, and a host behind's lag), plus the skew; strictly
    # under. Ahead, this clock measures it (the second of the `Date` against a stamp
    # 50 s later is less than that), and the boundary is the window less the skew.
    from_stamp = max(0.0, DATE_RESOLUTION - host)
    elapsed = WINDOW - CLOCK_SKEW - from_stamp + side
    judged = younger_than(
        WINDOW,
        STAMPED + host,
        now=STAMPED + elapsed + host,
        server=server_at(STAMPED + elapsed),
        server_stamped=STAMPED,
    )
    assert judged is (side < 0)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_an_answer_kept_without_the_servers_time_is_measured_from_its_stamp(
    host: float, side: float
) -> None:
    # The answer came without a `Date`: the server's clock now still measures it from
    # this host's stamp (a clock set back since, while nothing ran, shows there).
    from_stamp = max(0.0, DATE_RESOLUTION - host)
    elapsed = WINDOW - CLOCK_SKEW - from_stamp + side
    judged = younger_than(
        WINDOW,
        STAMPED + host,
        now=STAMPED + elapsed + host,
        server=server_at(STAMPED + elapsed),
    )
    assert judged is (side < 0)


@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_an_answer_too_old_on_the_servers_clock_alone_is_not_young(side: float) -> None:
    # Stamped by a clock ten minutes fast, set right since: by its stamp it is young.
    # The server's two readings (its `Date` then, and now at most a second more than
    # it says) measure it, with no skew between hosts to allow for.
    elapsed = WINDOW - DATE_RESOLUTION + side
    judged = younger_than(
        WINDOW,
        STAMPED + 600,
        now=STAMPED + elapsed,
        server=server_at(STAMPED + elapsed),
        server_stamped=STAMPED,
    )
    assert judged is (side < 0)


@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_an_answer_from_before_the_servers_clock_went_back_is_of_unknown_age(
    side: float,
) -> None:
    # Its `Date` then, against the server's time now: up to the two readings' whole
    # seconds apart is one clock read twice; further, the server's clock was set back.
    now = STAMPED + 60
    kept = now + DATE_RESOLUTION + side  # the server's time when it answered
    judged = younger_than(WINDOW, now - 60, now=now, server=server_at(now), server_stamped=kept)
    assert judged is (side < 0)


@pytest.mark.parametrize("side", SIDES.values(), ids=SIDES.keys())
def test_an_answer_stamped_in_this_clocks_future_is_not_young(side: float) -> None:
    judged = younger_than(WINDOW, STAMPED + side, now=STAMPED)
    assert judged is (side < 0)
