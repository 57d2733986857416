"""Every judgement of time the client makes, in one place: pure functions of stamps.

Stamps are seconds since the epoch on a host's wall clock (kept in records, compared
across processes and hosts), and the server's time as its `Date` headers tell it. Two
things make them doubtful, and every rule here takes both in the safe direction:

- the hosts sharing a store may be up to `CLOCK_SKEW` apart, so a stamp may be that
  much later or earlier than it looks (a key's age that much more, a send that much
  later);
- a host's clock may have been stepped, or been wrong, while no client ran, which no
  record shows; the server's clock is then a second opinion (`age`, `held_until`,
  `over_by_server`).

The server's time. Origin servers with a clock send `Date` on every response (RFC 9110
section 6.6.1, one-second resolution). A transport keeps, per origin, the latest `Date`
it received and when it received it on the MONOTONIC clock (never the wall clock: that
is the one in doubt; see `_server_time.ServerTimes`). Reading the server's time later
costs one parse:

    server now = Date + (monotonic now - monotonic when it came)

within [that, that + 1 s] (the header drops the fraction). The judgements take both
clocks, each in the safe direction, so that a server clock that is wrong (either way)
is never less safe than judging by the local clock alone:

- an age (key retention) is the larger of the local age and the server's (upper bound);
- a hold (an attempt that may still run at the server) is over only once it is over by
  both clocks (the server's lower bound), and the time it ends is given on the local
  clock, so that it can be stored as a not-before.

The batch judges its records and its kept look-up answers by the same rules: a record
within a key's retention (`retained`), an answer young enough to believe again
(`younger_than`).

The server's time is read against local stamps (a record's `created_at`, `sent_at`):
that shows a step of this clock since the stamp, if the stamp was right. A stamp made
by a clock that was fast then, and set right before anything read a `Date`, is still
not seen (see docs/reliability.md); a stamp ahead of the server's time says the clock
was fast then, and the server's time is not used for its hold (unknowable elapsed
time; this clock judges, as before).
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass

__all__ = [
    "CLOCK_SKEW",
    "DATE_RESOLUTION",
    "LEASE_MARGIN",
    "STAMP_SLACK",
    "ServerTime",
    "age",
    "ahead",
    "held_until",
    "in_flight_until",
    "lease_holds",
    "lease_until",
    "look_up_none_until",
    "over_by_server",
    "parse_date",
    "retained",
    "watched",
    "went_back",
    "within_retention",
    "younger_than",
]

#: How far a record's time may be ahead of this clock before it counts as a clock that
#: went back (hosts sharing a PostgreSQL store are a little apart); the margin every
#: judgement of a stamp against another host's clock allows.
CLOCK_SKEW = 300.0
#: A lease outlives the call's deadline by this much, so an owner still finishing its
#: last attempt is never taken over; a dead owner's lease lapses soon after.
LEASE_MARGIN = 10.0
#: `Date` has whole seconds: the server's time is up to this much after what it says.
DATE_RESOLUTION = 1.0
#: How far a stamp may be ahead of the server's time and still be measured from: the
#: clock skew allowed between hosts (`CLOCK_SKEW`, the same value). Further ahead, it
#: was made by a clock running fast, and its elapsed time is unknown.
STAMP_SLACK = 300.0


# -- leases ---------------------------------------------------------------------------


def lease_until(now: float, *, remaining: float = 0.0, grace: float = 0.0) -> float:
    """When a lease taken at `now` ends: after the call's `remaining` time, a `grace`
    (the last attempt may still be reading its answer one read timeout after the
    deadline) and `LEASE_MARGIN`. A look-up's lease: `now` and the margin."""
    return now + max(0.0, remaining) + grace + LEASE_MARGIN


def lease_holds(expires: float | None, now: float) -> bool:
    """A lease ending at `expires` still holds at `now` (whoever holds it may still be
    sending): it is respected, not taken over."""
    return expires is not None and expires > now


# -- this host's clock against the store's times --------------------------------------


def ahead(stamp: float, now: float) -> float:
    """How far `stamp` (a time the store holds: a record's, the store's latest) is
    ahead of this clock's `now`, if by more than `CLOCK_SKEW`: a clock (this one now,
    or the one that wrote it) went back; else 0.0."""
    step = stamp - now
    return step if step > CLOCK_SKEW else 0.0


def within_retention(age: float, retention: float) -> bool:
    """Something `age` seconds old by this clock is still within a server's key
    `retention`, by every host's clock: the host that stamped it may have been up to
    `CLOCK_SKEW` fast, so its age may be that much more than it looks."""
    return age + CLOCK_SKEW <= retention


def in_flight_until(sent: float, in_flight_for: float) -> float:
    """Until when an attempt sent at `sent` (a time the store holds) may still be running
    at the server: `in_flight_for` (the profile's: how long its server may still run a
    request), plus `CLOCK_SKEW`. The host that stamped `sent` may have been up to that
    much slow against the clock that reads it (another host of the store, or this one
    once its clock was set right, forward), and then the send is that much later than
    it looks. The one rule for every judgement of a stored send: a look-up's "none"
    believed (`look_up_none_until`), the hold of an operation that may have been
    applied (`Call.hold_in_flight`), a batch row's."""
    return sent + in_flight_for + CLOCK_SKEW


# -- the server's clock -----------------------------------------------------------------


def parse_date(raw: str) -> float | None:
    """Seconds since the epoch of an HTTP-date in the IMF-fixdate or RFC 850 form; None
    for a garbled one, or one without a zone that says it is UTC. The obsolete asctime
    form, which RFC 9110 says is GMT but names no zone, gives None too: a server still
    sending it may be sending its local time, and a zone guessed wrong by hours would
    stop every resumed operation as past the key retention (ahead), or be ignored
    (behind)."""
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": no zone said; an HTTP-date is always GMT
        return None
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class ServerTime:
    """The server's time now, as a `Date` read earlier tells it: at least `low`, at
    most `high` (the header's lost fraction)."""

    low: float
    high: float


def age(
    stamped: float, *, now: float, server: ServerTime | None, server_stamped: float | None = None
) -> float:
    """How old something stamped at `stamped` (on the local clock) is: the largest of its
    local age, its age by the server's clock measured from the local stamp (which shows
    this clock stepped since, if the stamp was right), and, where the record keeps
    `server_stamped` (the server's time when the stamp was made, a lower bound), its age
    on the server's clock alone (which shows the stamp was wrong, if the server's time
    then was right). Each is an upper bound if its clocks were right: the oldest
    stands, so one `Date` that was wrong (a node's clock ahead, a gateway's) never makes
    an operation younger than the others say. With no server time now, the local age,
    as before."""
    local = now - stamped
    if server is None:
        return local
    oldest = max(local, server.high - stamped)
    return oldest if server_stamped is None else max(oldest, server.high - server_stamped)


def held_until(
    until: float,
    *,
    since: float,
    now: float,
    server: ServerTime | None,
    server_since: float | None = None,
) -> float:
    """When a hold from `since` (a local stamp) to `until` is over by every clock that
    can measure it, on the local clock: `until` itself, or later if by the server's
    clock (its lower bound) it has `until - server.low` seconds still to run. With no
    server time, `until`, as before; the server's time adds nothing when `since` is
    ahead of it by more than `STAMP_SLACK`: that stamp was made by a clock ahead of the
    server's, which the server's time cannot measure from (a host's clock running fast
    all along would otherwise hold for as long as it is fast). So that measure holds at
    most `until - since + STAMP_SLACK` past now.

    Where the record keeps `server_since`, the server's time when `since` was stamped
    (its upper bound), the hold also runs as long on the server's clock from there:
    both ends are the server's own readings, so neither a stamp made by a clock that
    was wrong then nor a server clock off by a constant amount shortens it; it is over
    only once over by that measure too (a wrong `Date` at the send, a gateway's own,
    never ends it earlier than the others). A server time now before `server_since`
    says the server's clock went back since, or that one of the two readings was wrong
    (`went_back`): that measure adds nothing. It holds at most
    `until - since + 2 * DATE_RESOLUTION` past now.
    """
    if server is None:
        return until
    held = until
    if since <= server.high + STAMP_SLACK:
        held = max(held, now + (until - server.low))
    if server_since is not None and not went_back(server_since, server.low):
        held = max(held, now + (server_since + (until - since) - server.low))
    return held


def over_by_server(
    until: float, *, since: float, server_at: float | None, server_since: float | None = None
) -> bool:
    """A hold from `since` to `until` (local stamps) is over by the server's clock at
    `server_at` (a lower bound): by that clock measured from the local stamp (unless
    `since` is ahead of it: see `held_until`) and, with `server_since` (the server's
    time at `since`, kept with the record), on the server's clock alone (unless it went
    back). Where neither can say (no server time), it is left to this clock."""
    if server_at is None:
        return True
    if since <= server_at + DATE_RESOLUTION + STAMP_SLACK and server_at < until:
        return False
    if server_since is not None and not went_back(server_since, server_at):
        return server_at >= server_since + (until - since)
    return True


def went_back(server_since: float, server_at: float) -> bool:
    """The server's clock read `server_at` (a lower bound) later than it read
    `server_since` (an upper bound) and is behind it by more than the two readings'
    whole seconds allow: it was set back in between."""
    return server_at + 2 * DATE_RESOLUTION < server_since


def watched(stamped: float, *, since: float | None) -> bool:
    """A stamp made at `stamped` was made while a client watched its clock for steps
    back, from `since` (when it started: `StepWatch`; None, or never reached: it does
    not watch). A step back since would have been seen and kept (`clock_went_back`), so
    that clock alone judges the stamp, as it always did: the server's time is not asked
    of it. A stamp made before, while no client may have been running to see a step,
    is judged by the server's `Date` too (`age`, `held_until`, `over_by_server`). The
    one rule for the client's calls (`Settings.watched`), a look-up's "none"
    (`_reconcile.still_in_flight`) and the batch's records."""
    return since is not None and stamped >= since


# -- ages: a key's retention, how long an answer is believed --------------------------


def retained(
    stamped: float,
    *,
    now: float,
    retention: float,
    server: ServerTime | None = None,
    server_stamped: float | None = None,
    after: float = 0.0,
    ahead_by: float = 0.0,
) -> bool:
    """Something stamped at `stamped` (on a host's clock; `server_stamped`: the
    server's time then, where it is kept) is still within a server's key `retention`
    at `now`, and `after` seconds later (when a send that waits first would go: every
    clock will have moved on by then): its age by every clock that can measure it
    (`age`) is, with the clock skew allowed (`within_retention`), and it is known. A
    stamp more than `ahead_by` after `now` says a clock went back since (this one), or
    stamped it ahead (another host's): the record may be any age, so it is not known to
    be within anything. The batch allows none; a client's call, which stops for a stamp
    ahead of its clock by more than the skew with a reason of its own (`ahead`), allows
    any here.

    The one judgement of a key's retention: a call's before each send that may reach a
    server that forgot the key (`_deciding.past_retention`), the batch's plan of its
    records (`batch._plan.past_retention`)."""
    if stamped > now + ahead_by:
        return False
    return within_retention(
        age(stamped, now=now, server=server, server_stamped=server_stamped) + max(0.0, after),
        retention,
    )


def younger_than(
    window: float,
    stamped: float,
    *,
    now: float,
    server: ServerTime | None = None,
    server_stamped: float | None = None,
) -> bool:
    """Something stamped at `stamped` on a host's clock, and at `server_stamped` on the
    server's (its `Date` then, a lower bound, where it was kept), is younger than
    `window` at `now` by every clock that can measure it:

    - measured from the host's stamp, by this clock and by the server's (`age`), plus
      `CLOCK_SKEW` (the host that stamped it may have been that much fast);
    - on the server's clock alone, from `server_stamped` (both readings the server's:
      no skew between hosts to allow for);

    and its age is known: not stamped in this clock's future, nor the server's clock
    gone back between its two readings (`went_back`). A look-up's "nothing found" is
    believed again only while this holds."""
    if stamped > now:
        return False
    if server is not None and server_stamped is not None:
        if went_back(server_stamped + DATE_RESOLUTION, server.low):
            return False
        if server.high - server_stamped >= window:
            return False
    return age(stamped, now=now, server=server) + CLOCK_SKEW < window


def look_up_none_until(
    sent: float,
    *,
    in_flight_for: float,
    now: float,
    asked_at: float | None = None,
    server_at: float | None = None,
    server_sent: float | None = None,
) -> float | None:
    """When a look-up that finds nothing of an attempt sent at `sent` says "never
    applied": None if it says so now, else the time (on this clock) from which it will:
    once the attempt's hold (`in_flight_until`) is over by this clock at the time the
    look-up was asked (`asked_at`, if before `now`: an answer given within the window
    says nothing of a send the server ran after it, whenever it is read) and by the
    server's clock when it answered (`server_at`, its `Date`, if it said; measured from
    `server_sent` too, the server's time at that send where the record keeps it)."""
    until = in_flight_until(sent, in_flight_for)
    asked = now if asked_at is None else min(now, asked_at)
    if asked >= until and over_by_server(
        until, since=sent, server_at=server_at, server_since=server_sent
    ):
        return None
    server = None if server_at is None else ServerTime(server_at, server_at + DATE_RESOLUTION)
    # The server's time is its answer's, as close to the question as this clock knows.
    return held_until(until, since=sent, now=asked, server=server, server_since=server_sent)
