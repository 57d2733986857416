"""A per-client retry budget: a token bucket that stops retry storms.

Every retry takes tokens (more for timeouts, which hold server resources longest);
every success gives one back. When a server is down for everyone, the bucket runs dry
after a bounded number of retries and calls stop retrying at once instead of
multiplying the load, until successes refill it.
"""

from __future__ import annotations

import threading

from ._forks import afresh_in_child

__all__ = ["RetryBudget"]


class RetryBudget:
    """Thread-safe token bucket shared by every call of one client."""

    def __init__(self, capacity: int = 500, *, refund: int = 1) -> None:
        if capacity < 0 or refund < 0:
            raise ValueError("RetryBudget: capacity and refund must be >= 0")
        self.capacity = capacity
        self.refund = refund
        self._tokens = capacity
        self._locks_afresh()
        afresh_in_child(self)  # a forked child's calls take the lock too

    def _locks_afresh(self) -> None:
        # In a forked child too: a thread of its parent may have held it at the fork.
        self._lock = threading.Lock()

    @property
    def tokens(self) -> int:
        with self._lock:
            return self._tokens

    def withdraw(self, cost: int) -> bool:
        """Take `cost` tokens for a retry; False (and nothing taken) if there are too few."""
        with self._lock:
            if cost > self._tokens:
                return False
            self._tokens -= cost
            return True

    def deposit(self) -> None:
        """A success: give back `refund` tokens, up to the capacity."""
        with self._lock:
            self._tokens = min(self.capacity, self._tokens + self.refund)

    @classmethod
    def unlimited(cls) -> RetryBudget:
        """A budget that never runs dry (attempts and deadline still bound each call)."""
        return cls(capacity=2**62)
