"""The servers' clocks, as their `Date` headers tell them: the latest `Date` each
origin sent a client, and when it came (on the monotonic clock).

What is judged with it (ages, holds, a look-up's "none") is in `_time`, with every
other judgement of time; the names are kept here too for the callers that read them
from this module.
"""

from __future__ import annotations

import threading

from ._forks import afresh_in_child
from ._time import (
    DATE_RESOLUTION,
    STAMP_SLACK,
    ServerTime,
    age,
    held_until,
    over_by_server,
    parse_date,
    went_back,
)

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

#: A probe of an origin that got no answer is not sent again for this long (monotonic
#: seconds): a server or gateway that never answers a HEAD must not cost every
#: operation the probe's timeout. Meanwhile operations are stamped by this clock alone.
ASK_AGAIN_AFTER = 300.0
#: How many origins a client keeps a `Date` of: the ones heard from longest ago are
#: forgotten first (asked again if needed). A client that also calls many other hosts
#: (a webhook sender's, say; every answer is noted) must not grow without bound.
MAX_ORIGINS = 1024

Origin = tuple[bytes, bytes, int | None]


class ServerTimes:
    """The latest `Date` each origin sent, and when it came (monotonic seconds).

    Noting one is a dictionary write under an uncontended lock (the hot path: every
    response); it is parsed only when a judgement asks (`at`). Shared by a client's
    transports and threads. At most `MAX_ORIGINS` origins are kept.

    A process forked while a thread held one of its locks (a web server's workers
    forked from an app that has paid) has no such thread: in the child, the locks are
    made afresh (`_forks`), and the questions its parent had out are not its own.
    What was heard stays: the monotonic clock runs on across a fork.
    """

    __slots__ = ("__weakref__", "_failed", "_lock", "_parsed", "_seen", "_turns")

    def __init__(self) -> None:
        #: None: the origin answered, with no `Date` (asking it again would not help)
        self._seen: dict[Origin, tuple[str, float] | None] = {}
        self._parsed: dict[str, float | None] = {}
        #: origins asked their time that gave no answer: when (monotonic)
        self._failed: dict[Origin, float] = {}
        self._locks_afresh()
        afresh_in_child(self)

    def _locks_afresh(self) -> None:
        #: one lock per origin, held by the caller asking it its time (this process's)
        self._turns: dict[Origin, threading.Lock] = {}
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
