"""Time, injected: the `Clock` interface, the real one, and `ManualClock` for tests.

`ManualClock` is also importable from `idemclient` itself.
"""

from ._clock import Clock, ManualClock, SystemClock, set_testing

__all__ = ["Clock", "ManualClock", "SystemClock", "set_testing"]
