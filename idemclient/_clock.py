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

    Between two readings, wall time and monotonic time move alike; when wall time moves
    less than monotonic time by more than `tolerance` seconds, the wall clock was set
    back (after running fast, or to a slow time) by about the difference. A wall clock
    set forward, or a machine that slept, moves wall time more: that is not a step back.
    NTP's slewing moves wall time by at most half a millisecond a second, far inside
    any tolerance between two readings of a running client.
    """

    def __init__(self, clock: Clock, tolerance: float) -> None:
        self._clock = clock
        self._tolerance = tolerance
        self._lock = threading.Lock()
        # The first reading: a step from now on, before the first call too, is seen.
        self._last = (clock.time(), clock.monotonic())

    def step_back(self) -> float:
        """Seconds the wall clock went back since the last reading, if more than the
        tolerance; else 0.0. Each step is reported once."""
        wall, mono = self._clock.time(), self._clock.monotonic()
        with self._lock:
            last, self._last = self._last, (wall, mono)
        behind = (mono - last[1]) - (wall - last[0])
        return behind if behind > self._tolerance else 0.0
