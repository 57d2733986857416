"""The signals that stop `batch submit`: Ctrl-C (SIGINT), SIGTERM (a service manager,
`kill`) and SIGHUP (the terminal went away: an SSH session dropped).

Each is taken as Ctrl-C is, and the command exits with 128 and the signal's number
(130, 143, 129) once it has written its summary and its report. A signal the command
was started with ignored stays ignored: `nohup` (SIGHUP) and a shell's background job
(SIGINT) mean "go on".

Until the run starts, a signal is raised in the main thread as a `KeyboardInterrupt`
that says which it was (`Stop`): it cuts short what the command is waiting on (the
start-up check of the server). Once the run has started, signals are only noted
(`Told`): the main thread waits for the run's end or the next signal, and no
exception can come between the steps that write what the run came to (the store's
records of rows cut short, the report): a third Ctrl-C must not leave half of it
written. So is it while the not-started report is written (`held`).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = [
    "Stop",
    "Told",
    "held",
    "signal_of",
    "stopping_on_signals",
    "told_by_signals",
    "wait_until",
]

#: Besides SIGINT, which Python raises as `KeyboardInterrupt` already.
_STOPPING = (signal.SIGTERM, signal.SIGHUP)


class Stop(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(interrupt: BaseException) -> int:
    """The signal an interrupt came from (SIGINT for a plain `KeyboardInterrupt`)."""
    return interrupt.signum if isinstance(interrupt, Stop) else int(signal.SIGINT)


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Stop(signum)


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP stop the command as Ctrl-C does (unless the
    command was started with them ignored)."""
    previous = {}
    try:
        for signum in _STOPPING:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _raise)
    except ValueError:  # not the main thread: signals are not ours to take
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP are ignored (what the run came to is
    being written); as they were after."""
    previous = {}
    try:
        for signum in (signal.SIGINT, *_STOPPING):
            previous[signum] = signal.signal(signum, signal.SIG_IGN)
    except ValueError:
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Told:
    """The signals received since the run started, in order.

    The handler only notes the signal: it takes no lock. It runs in the main thread
    between two of its steps, wherever that thread was, inside a lock too (an
    `Event.wait` holds its condition's lock between its own steps): a handler that set
    an event would wait for that lock for ever, and the command would never end. The
    main thread looks at what was noted in short waits of its own (`wait_until`)."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.signals.append(signum)


#: How long the main thread waits before it looks again at the signals noted (seconds).
_LOOK_AGAIN = 0.05


def wait_until(ready: Callable[[], bool], timeout: float | None = None) -> None:
    """In the main thread: wait until `ready()`, at most `timeout` seconds (None: no
    limit), looking again every `_LOOK_AGAIN` seconds. A sleep holds no lock, so a
    signal's handler that runs meanwhile never waits for one (see `Told`)."""
    end = None if timeout is None else time.monotonic() + timeout
    while not ready():
        left = _LOOK_AGAIN if end is None else min(_LOOK_AGAIN, end - time.monotonic())
        if left <= 0:
            return
        time.sleep(left)


@contextlib.contextmanager
def told_by_signals() -> Iterator[Told]:
    """While inside, SIGINT, SIGTERM and SIGHUP (those not ignored at start) are noted,
    never raised; as they were after."""
    told = Told()
    previous = {}
    try:
        for signum in (signal.SIGINT, *_STOPPING):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, told)
    except ValueError:
        pass
    try:
        yield told
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
