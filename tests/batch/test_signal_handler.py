"""The batch command's signal handler (`_signals.Told`): it runs in the main thread
between two of its steps, wherever that thread was, inside a lock too. A handler that
waited for a lock the interrupted thread holds would never return, and the command
would never end (seen: `batch submit` told twice, both of its threads waiting for the
lock of the event the main thread was waiting on)."""

from __future__ import annotations

import signal
import threading
import time

from idemclient.batch._signals import Told, wait_until

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on


def _locks_of(value: object) -> list[object]:
    """Every lock reachable from `value`'s attributes (an event's condition's lock too)."""
    found: list[object] = []
    for attribute in vars(value).values():
        if isinstance(attribute, threading.Event):
            found.append(attribute._cond)
        elif isinstance(attribute, threading.Condition | type(threading.Lock())):
            found.append(attribute)
    return found


def test_the_handler_returns_while_the_interrupted_thread_holds_any_lock_of_its_own() -> None:
    told = Told()
    returned = threading.Event()

    def interrupted_inside_its_locks() -> None:
        # What a signal does to a main thread inside `Event.wait`: the handler runs
        # while the thread holds the event's lock.
        held = _locks_of(told)
        for lock in held:
            lock.acquire()  # type: ignore[attr-defined]
        try:
            told(signal.SIGINT, None)
        finally:
            for lock in held:
                lock.release()  # type: ignore[attr-defined]
        returned.set()

    threading.Thread(target=interrupted_inside_its_locks, daemon=True).start()
    assert returned.wait(BOUND), "the handler waited for a lock its own thread held"
    assert told.signals == [signal.SIGINT]


def test_the_main_thread_sees_a_signal_noted_while_it_waits() -> None:
    told = Told()
    threading.Timer(0.01, told, args=(signal.SIGTERM, None)).start()
    started = time.monotonic()
    wait_until(lambda: bool(told.signals), BOUND)
    assert told.signals == [signal.SIGTERM]
    assert time.monotonic() - started < BOUND


def test_waiting_ends_at_its_timeout_when_nothing_comes() -> None:
    told = Told()
    wait_until(lambda: bool(told.signals), 0.01)
    assert told.signals == []
