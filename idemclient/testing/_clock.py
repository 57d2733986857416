"""The reference server's sense of time: leases, TTLs and delays all read one clock.

Two clocks share one protocol. `ManualClock` never moves by itself, so a test can
expire a lease or a key by advancing it, and "sleeping" on it is instantaneous.
`SystemClock` follows the wall clock plus an offset, so a live server can still be
pushed forward through `/_sandbox/clock` while real time keeps running.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]

#: 2023-11-14T22:13:20Z: a fixed, recognisable start so stored timestamps are stable.
DEFAULT_START = 1_700_000_000.0


@runtime_checkable
class Clock(Protocol):
    """What the server needs from time. Seconds since the Unix epoch, as floats."""

    def now(self) -> float:
        """The current time."""
        ...

    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds` (never backwards) and return the new now."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass: instantly on a manual clock, really on the system clock."""
        ...


def _check_step(seconds: float) -> float:
    step = float(seconds)
    # A clock that can go backwards would let a held lease look fresh again.
    if not step >= 0.0 or step == float("inf"):
        raise ValueError(f"a clock only moves forward by a finite amount, not {seconds!r}")
    return step


class ManualClock:
    """A clock that only moves when told to. Thread-safe."""

    __slots__ = ("_lock", "_now")

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._lock = threading.Lock()
        self._now = float(start)

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        step = _check_step(seconds)
        with self._lock:
            self._now += step
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"


class SystemClock:
    """Wall-clock time plus an offset that `advance` grows. Thread-safe."""

    __slots__ = ("_lock", "_offset")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0

    def now(self) -> float:
        with self._lock:
            offset = self._offset
        return time.time() + offset

    def advance(self, seconds: float) -> float:
        step = _check_step(seconds)
        with self._lock:
            self._offset += step
        return self.now()

    def sleep(self, seconds: float) -> None:
        time.sleep(_check_step(seconds))

    def __repr__(self) -> str:
        return f"SystemClock(offset={self._offset!r})"
