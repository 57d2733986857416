"""What the reference server needs of a clock: the client's clocks, plus `advance`.

Leases, TTLs and delays all read it. Share one `idemclient.ManualClock` between a
client and an in-process server, and time moves for both when the client sleeps.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ...clock import Clock

__all__ = ["ServerClock"]


@runtime_checkable
class ServerClock(Clock, Protocol):
    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds` (never back) and return the new time."""
        ...
