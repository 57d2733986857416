"""The server's clock, as its `Date` headers tell it: a second opinion on time.

A stored operation's age, and how long ago its last attempt was sent, are read on this
host's wall clock. That clock may have been stepped while no client ran (set back two
days, or an hour forward), and then nothing in the store shows it: a maybe-applied
operation looks younger than the server's key retention when the server has let its
key go, or an in-flight hold looks over while the server still runs the attempt.

Origin servers with a clock send `Date` on every response (RFC 9110 section 6.6.1,
one-second resolution). A transport keeps, per origin, the latest `Date` it received
and when it received it on the MONOTONIC clock (never the wall clock: that is the one
in doubt). Reading the server's time later costs one parse:

    server now = Date + (monotonic now - monotonic when it came)

within [that, that + 1 s] (the header drops the fraction). The judgements take both
clocks, each in the safe direction, so that a server clock that is wrong (either way)
is never less safe than judging by the local clock alone:

- an age (key retention) is the larger of the local age and the server's (upper bound);
- a hold (an attempt that may still run at the server) is over only once it is over by
  both clocks (the server's lower bound), and the time it ends is given on the local
  clock, so that it can be stored as a not-before.

The server's time is read against local stamps (a record's `created_at`, `sent_at`):
that shows a step of this clock since the stamp, if the stamp was right. A stamp made
by a clock that was fast then, and set right before anything read a `Date`, is still
not seen (see docs/reliability.md); a stamp ahead of the server's time says the clock
was fast then, and the server's time is not used for its hold (unknowable elapsed
time; this clock judges, as before).
"""

from __future__ import annotations

import email.utils
import threading
from dataclasses import dataclass

__all__ = [
    "DATE_RESOLUTION",
    "MAX_ORIGINS",
    "STAMP_SLACK",
    "ServerTime",
    "ServerTimes",
    "age",
    "held_until",
    "over_by_server",
    "parse_date",
]

#: `Date` has whole seconds: the server's time is up to this much after what it says.
DATE_RESOLUTION = 1.0
#: How far a stamp may be ahead of the server's time and still be measured from: the
#: clock skew allowed between hosts (`_call.CLOCK_SKEW`, the same value). Further
#: ahead, it was made by a clock running fast, and its elapsed time is unknown.
STAMP_SLACK = 300.0
#: How many origins a client keeps a `Date` of: the ones heard from longest ago are
#: forgotten first (asked again if needed). A client that also calls many other hosts
#: (a webhook sender's, say; every answer is noted) must not grow without bound.
MAX_ORIGINS = 1024

Origin = tuple[bytes, bytes, int | None]


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


def age(stamped: float, *, now: float, server: ServerTime | None) -> float:
    """How old something stamped at `stamped` (on the local clock) is: the larger of its
    local age and its age by the server's clock (its upper bound). With no server time,
    the local age, as before."""
    local = now - stamped
    if server is None:
        return local
    return max(local, server.high - stamped)


def held_until(until: float, *, since: float, now: float, server: ServerTime | None) -> float:
    """When a hold from `since` (a local stamp) to `until` is over by both clocks, on
    the local clock: `until` itself, or later if by the server's clock (its lower bound)
    it has `until - server.low` seconds still to run. With no server time, `until`, as
    before; and so too when `since` is ahead of the server's time by more than
    `STAMP_SLACK`: that stamp was made by a clock ahead of the server's, which the
    server's time cannot measure from (a host's clock running fast all along would
    otherwise hold for as long as it is fast), so it adds nothing, and never holds less
    than this clock alone. So a hold is at most `until - since + STAMP_SLACK` past now.
    """
    if server is None or since > server.high + STAMP_SLACK:
        return until
    return max(until, now + (until - server.low))


def over_by_server(until: float, *, since: float, server_at: float | None) -> bool:
    """A hold from `since` to `until` (local stamps) is over by the server's clock at
    `server_at` (a lower bound), or the server's clock cannot say (none, or `since` is
    ahead of it: see `held_until`), leaving it to this clock."""
    if server_at is None or since > server_at + DATE_RESOLUTION + STAMP_SLACK:
        return True
    return server_at >= until


class ServerTimes:
    """The latest `Date` each origin sent, and when it came (monotonic seconds).

    Noting one is a dictionary write under an uncontended lock (the hot path: every
    response); it is parsed only when a judgement asks (`at`). Shared by a client's
    transports and threads. At most `MAX_ORIGINS` origins are kept.
    """

    __slots__ = ("_lock", "_parsed", "_seen")

    def __init__(self) -> None:
        #: None: the origin answered, with no `Date` (asking it again would not help)
        self._seen: dict[Origin, tuple[str, float] | None] = {}
        self._parsed: dict[str, float | None] = {}
        self._lock = threading.Lock()

    def heard(self, origin: Origin, raw: str | None, received: float) -> None:
        """`origin` answered at monotonic `received`, with `Date: raw` (None: with no
        `Date`, which leaves one heard before as it was)."""
        seen = self._seen
        # Under the lock: a thread noting "no Date" must not overwrite one another just
        # noted, and one that forgets the oldest origin must not race an insert.
        with self._lock:
            if raw is not None:
                seen[origin] = (raw, received)
            elif origin not in seen:
                seen[origin] = None
            else:
                return
            while len(seen) > MAX_ORIGINS:
                del seen[next(iter(seen))]  # the oldest first noted

    def knows(self, origin: Origin) -> bool:
        """`origin` answered this process: with its time, or with none to give."""
        return origin in self._seen

    def at(self, origin: Origin, monotonic: float) -> ServerTime | None:
        """The server's time at monotonic `monotonic`, by the latest `Date` from
        `origin`; None if none came, or it was garbled."""
        seen = self._seen.get(origin)
        if seen is None:
            return None
        raw, received = seen
        with self._lock:
            if raw in self._parsed:
                date = self._parsed[raw]
            else:
                date = self._parsed[raw] = parse_date(raw)
                if len(self._parsed) > 64:  # one entry a second is plenty
                    self._parsed.clear()
        if date is None:
            return None
        elapsed = max(0.0, monotonic - received)
        return ServerTime(low=date + elapsed, high=date + elapsed + DATE_RESOLUTION)
