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
import os
import threading
from dataclasses import dataclass

__all__ = [
    "ASK_AGAIN_AFTER",
    "DATE_RESOLUTION",
    "MAX_ORIGINS",
    "STAMP_SLACK",
    "ServerTime",
    "ServerTimes",
    "age",
    "held_until",
    "over_by_server",
    "parse_date",
    "went_back",
]

#: `Date` has whole seconds: the server's time is up to this much after what it says.
DATE_RESOLUTION = 1.0
#: How far a stamp may be ahead of the server's time and still be measured from: the
#: clock skew allowed between hosts (`_call.CLOCK_SKEW`, the same value). Further
#: ahead, it was made by a clock running fast, and its elapsed time is unknown.
STAMP_SLACK = 300.0
#: A probe of an origin that got no answer is not sent again for this long (monotonic
#: seconds): a server or gateway that never answers a HEAD must not cost every
#: operation the probe's timeout. Meanwhile operations are stamped by this clock alone.
ASK_AGAIN_AFTER = 300.0
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


class ServerTimes:
    """The latest `Date` each origin sent, and when it came (monotonic seconds).

    Noting one is a dictionary write under an uncontended lock (the hot path: every
    response); it is parsed only when a judgement asks (`at`). Shared by a client's
    transports and threads. At most `MAX_ORIGINS` origins are kept.
    """

    __slots__ = ("_failed", "_lock", "_parsed", "_pid", "_seen", "_turns")

    def __init__(self) -> None:
        #: None: the origin answered, with no `Date` (asking it again would not help)
        self._seen: dict[Origin, tuple[str, float] | None] = {}
        self._parsed: dict[str, float | None] = {}
        #: origins asked their time that gave no answer: when (monotonic)
        self._failed: dict[Origin, float] = {}
        #: one lock per origin, held by the caller asking it its time (this process's)
        self._turns: dict[Origin, threading.Lock] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def ask(self, origin: Origin, monotonic: float) -> bool:
        """Whether a caller about to send to `origin` is to ask it its time: not if the
        origin answered already, nor if it was asked less than `ASK_AGAIN_AFTER` ago
        and gave no answer. One caller asks at a time (`turn`): a worker resuming
        hundreds of operations at once asks once, and the others read its answer."""
        with self._lock:
            if origin in self._seen:
                return False
            failed = self._failed.get(origin)
            return failed is None or monotonic - failed >= ASK_AGAIN_AFTER

    def turn(self, origin: Origin) -> threading.Lock:
        """The lock a caller holds while it asks `origin` its time."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: a question its parent had out is not its own, and
                # the lock of it would stay held here for ever.
                self._turns, self._pid = {}, os.getpid()
            turn = self._turns.get(origin)
            if turn is None:
                if len(self._turns) >= MAX_ORIGINS:  # drop the ones nobody holds
                    self._turns = {o: t for o, t in self._turns.items() if t.locked()}
                turn = self._turns[origin] = threading.Lock()
            return turn

    def answered(self, origin: Origin, monotonic: float, *, heard: bool) -> None:
        """The question to `origin` came back: with an answer (`heard`, noted by
        `heard`), or with none (not asked again for `ASK_AGAIN_AFTER`)."""
        with self._lock:
            if heard:
                self._failed.pop(origin, None)
            else:
                self._failed[origin] = monotonic
                while len(self._failed) > MAX_ORIGINS:
                    del self._failed[next(iter(self._failed))]

    def heard(
        self, origin: Origin, raw: str | None, received: float, age: str | None = None
    ) -> None:
        """`origin` answered at monotonic `received`, with `Date: raw` (None: with no
        `Date`, which leaves one heard before as it was) and `Age: age`, if a cache
        answered (RFC 9111 section 5.1: seconds since the origin made the answer, whose
        `Date` is as old; a value that is not a number of seconds, of at most ten
        digits, is none)."""
        seen = self._seen
        if age is not None and (age := age.strip()).isdigit() and len(age) <= 10:
            received -= int(age)  # as if it had come when the origin made it
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
        """`origin` answered this client: with its time, or with none to give."""
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
