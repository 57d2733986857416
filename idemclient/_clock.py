"""Time, injected: wall time for records shared across processes, monotonic time for
deadlines, and sleeping. Tests pass a `ManualClock` so that nothing really sleeps.

The client and the reference server read the same clocks: one `ManualClock` shared by
both lets a test expire a server lease by letting the client "sleep" on it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from ._forks import afresh_in_child

__all__ = ["Clock", "ManualClock", "StepWatch", "SystemClock", "set_testing"]

_testing = False


def set_testing(testing: bool) -> None:
    """Switch off real sleeping for every `SystemClock` (for test suites).

    Deadlines still run on real time, and the bounded attempt counts still apply, so
    a retry loop under test finishes at once instead of waiting out its backoff.
    """
    global _testing
    _testing = testing


@runtime_checkable
class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (stored in records; compared across processes)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines)."""
        ...

    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...


def _forward(seconds: float) -> float:
    step = float(seconds)
    # A clock that could go back would make a held lease look fresh again.
    if not step >= 0.0 or step == float("inf"):
        raise ValueError(f"a clock only moves forward by a finite amount, not {seconds!r}")
    return step


class SystemClock:
    """The real clock, plus an offset that `advance` grows (for sandboxes and tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0

    def time(self) -> float:
        return time.time() + self._offset

    def monotonic(self) -> float:
        return time.monotonic() + self._offset

    def advance(self, seconds: float) -> float:
        """Move this clock forward by `seconds` (never back); returns the new time."""
        step = _forward(seconds)
        with self._lock:
            self._offset += step
        return self.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and not _testing:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        if seconds > 0 and not _testing:
            await anyio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to, or when something sleeps on it.

    Sleeping advances both wall and monotonic time at once and records the request in
    `sleeps`, so a test can check every wait without waiting.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._lock = threading.Lock()
        self._wall = start
        self._mono = 0.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` (never back); returns the new time."""
        step = _forward(seconds)
        with self._lock:
            self._wall += step
            self._mono += step
            return self._wall

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))

    def __repr__(self) -> str:
        return f"ManualClock(time={self.time()!r})"

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await anyio.lowlevel.checkpoint()


class StepWatch:
    """Notices a clock's wall time stepping back while a process runs.

    Wall time and monotonic time move alike, so their difference stays put; a wall
    clock set back (after running fast, or to a slow time) lowers it by the step. The
    watch keeps the highest difference seen: a clock set forward, or a machine that
    slept (monotonic time stops, wall time does not), raises it, and a fall from it of
    more than `tolerance` seconds is a step back, however many small steps it took.
    NTP's slewing moves both clocks alike. A step is reported until `kept` says the
    store has it, so a store that failed to take it is told again at the next call.
    """

    def __init__(self, clock: Clock, tolerance: float) -> None:
        self._clock = clock
        self._tolerance = tolerance
        self._locks_afresh()
        afresh_in_child(self)  # a forked child's calls take the lock too
        # The first reading: a step from now on, before the first call too, is seen.
        self._highest = clock.time() - clock.monotonic()

    def _locks_afresh(self) -> None:
        self._lock = threading.Lock()

    def step_back(self) -> float:
        """Seconds the wall clock is behind the highest point it was seen at, if more
        than the tolerance; else 0.0."""
        now = self._clock.time() - self._clock.monotonic()
        with self._lock:
            self._highest = max(self._highest, now)
            behind = self._highest - now
        return behind if behind > self._tolerance else 0.0

    def kept(self, step: float) -> None:
        """The store has kept a step of `step` seconds: watch from the point it fell to."""
        with self._lock:
            self._highest -= step
