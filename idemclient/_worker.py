"""Blocking calls (the store) for an asyncio event loop, in a few threads of our own.

`anyio.to_thread.run_sync` costs about four times what a queue and
`loop.call_soon_threadsafe` cost (benchmarks/instructions.py measures the async
client): a capacity limiter, a task group and a checkpoint per call. The async client
makes two such calls per operation (the intent before the send, the answer after), so
under asyncio they go to `Workers` (one set per event loop): a `SimpleQueue` read by
up to `max_threads` threads (40, as anyio's limit), started as calls come and ended
after `idle` seconds with nothing to do. Under
another event loop (trio), `to_thread` is anyio's.

The promise is the one `_transport.to_thread` keeps: a call that has started runs to
its end, and its caller, cancelled meanwhile, hears of the cancellation only once it
has returned (what it wrote must be known before the caller acts on the cancellation);
a call cancelled before a thread took it never runs, unless it is shielded (the write
that gives a cut-short call's lease back: it runs, and the cancellation waits for it).

A write queued with `later` is not awaited: it runs in one of the threads, in the
order it was queued, and every call queued after it (a read, a write of the same
operation, the store's close) waits in its thread for it to end first, so that what
the loop asks next sees what it wrote. The loop never waits for it; `flush` waits for
every write queued so far, and so does the interpreter's exit (`atexit`: a thread of
ours is a daemon, which would be stopped mid-way), and the exit of a `multiprocessing`
child started by fork, which ends with `os._exit` and runs no `atexit` handler (its
finalizers: `_exit_waits`). A write that fails is handed to the `failed` its writer
gave (run in the thread), never raised there.

A process forked while threads were running (a web server's workers forked from an app
that has paid, `multiprocessing` with fork) has none of them: in the child, each
`Workers` starts afresh, with no thread, no count of threads and an empty queue (the
calls queued in the parent are the parent's, for loops the child does not run), so its
first call starts a thread rather than wait for one that does not exist.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import heapq
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

__all__ = ["Workers", "flush_all", "here", "to_thread", "unwritten_elsewhere"]

T = TypeVar("T")

#: How often a cancelled caller looks again for the end of its call (real seconds).
_POLL = 0.001
#: How long the interpreter's exit waits for the writes still queued (real seconds).
AT_EXIT = 30.0


class _Job(Generic[T]):
    """A call whose caller awaits it."""

    __slots__ = ("abandoned", "after", "call", "ended", "future", "lock", "loop", "started")

    def __init__(self, call: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.lock = threading.Lock()
        self.started = False
        self.abandoned = False
        #: read by a cancelled caller, which polls it (no event to make for every call)
        self.ended = False
        #: the number of the last write queued before it: every write up to it must end
        #: before it starts (0: none)
        self.after = 0

    def run(self) -> None:
        with self.lock:
            if self.abandoned:
                return
            self.started = True
        try:
            result = self.call()
        except BaseException as exc:  # handed to the caller, whatever it is
            self._tell(_fail, exc)
        else:
            self._tell(_succeed, result)
        finally:
            self.ended = True

    def _tell(self, how: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
        # A closed loop (RuntimeError) has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(how, self.future, value)


class _Write:
    """A call queued and not awaited (see the module docstring)."""

    __slots__ = ("call", "failed", "number")

    #: a write waits for no other: two writes of one operation always have a call
    #: between them (its admission), which waits for the first
    after = 0

    def __init__(
        self, call: Callable[[], object], failed: Callable[[BaseException], None], number: int
    ):
        self.call = call
        self.failed = failed
        #: its place in its `Workers`' queue of writes (1, 2, ...)
        self.number = number

    def run(self) -> None:
        try:
            self.call()
        except BaseException as exc:  # told to its writer, never lost in the thread
            self.failed(exc)


def _succeed(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Workers:
    """Threads that run blocking calls for event loops (see the module docstring)."""

    def __init__(self, max_threads: int = 40, idle: float = 10.0) -> None:
        self._max = max_threads
        self._idle = idle
        self._start_afresh()
        _ALL.add(self)

    def _start_afresh(self) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any] | _Write] = queue.SimpleQueue()
        #: guards the counts of threads (a plain lock: a semaphore costs several times
        #: as much, on every call)
        self._lock = threading.Lock()
        #: threads waiting for work, none of them promised a call yet
        self._idle_threads = 0
        self._threads = 0
        #: writes are numbered as they are queued (`_queued`: the last number given); a
        #: call waits for every write up to the last one queued before it, so it keeps
        #: one number, never a copy of the writes pending (which would make each call
        #: cost as much as the queue is long). `_unwritten`: a heap of the numbers of
        #: writes not yet ended, whose first is the oldest unended (writes end out of
        #: order, in several threads: one that ends before an older one waits in
        #: `_ended_early` until the older ends). `_written` tells of their ends to the
        #: calls waiting for them (`_waiters`), under `_writes`.
        self._queued = 0
        self._unwritten: list[int] = []
        self._ended_early: set[int] = set()
        self._writes = threading.Lock()
        self._written = threading.Condition(self._writes)
        self._waiters = 0

    async def run(self, call: Callable[[], T], *, shielded: bool = False) -> T:
        """`call()` in one of the threads, awaited, after the writes queued before it;
        see the module docstring for what a cancellation does. `shielded`: never
        abandoned, even by a cancellation that comes before a thread took it (the write
        that leaves a cut-short call's record true): the cancellation waits for its end."""
        job = _Job(call, asyncio.get_running_loop())
        if self._unwritten:
            job.after = self._queued  # read and written in this loop's thread only
        self._submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            with job.lock:
                job.abandoned = not job.started and not shielded
            if not job.abandoned:
                # Started (or shielded): it runs to its end, and the cancellation
                # waits for it.
                while not job.ended:
                    try:
                        await asyncio.sleep(_POLL)
                    except asyncio.CancelledError:
                        continue
            raise

    def later(self, call: Callable[[], object], failed: Callable[[BaseException], None]) -> None:
        """`call()` in one of the threads, queued and not awaited: every call queued
        after it waits for its end. What it raises goes to `failed`, in the thread."""
        with self._writes:
            self._queued += 1
            write = _Write(call, failed, self._queued)
            heapq.heappush(self._unwritten, write.number)
        if not _exit_waits_here:
            _exit_waits()
        self._submit(write)

    async def flush(self) -> None:
        """Wait (without blocking the loop) for every write queued so far to end."""
        if self._unwritten:
            await self.run(_nothing, shielded=True)

    def wait_written(self, timeout: float) -> bool:
        """Block until every write queued so far has ended (not those queued meanwhile:
        a loop that goes on paying never empties the queue), at most `timeout` seconds;
        whether they all have."""
        give_up = time.monotonic() + timeout
        with self._written:
            queued = self._queued
            self._waiters += 1
            try:
                while self._unwritten and self._unwritten[0] <= queued:
                    left = give_up - time.monotonic()
                    if left <= 0:
                        return False
                    self._written.wait(left)
            finally:
                self._waiters -= 1
        return True

    def _submit(self, job: _Job[Any] | _Write) -> None:
        self._jobs.put(job)
        with self._lock:
            if self._idle_threads:
                self._idle_threads -= 1
                return  # a waiting thread takes it
            if self._threads >= self._max:
                return  # a busy thread takes it next
            self._threads += 1
        threading.Thread(target=self._work, name="idemclient-store", daemon=True).start()

    def _after(self, last: int) -> None:
        # Every write queued before this call was taken by a thread before it (one
        # queue, first in first out): waiting here for their ends never waits for a
        # write that no thread will run.
        with self._writes:
            if not self._unwritten or self._unwritten[0] > last:
                return
            self._waiters += 1
            try:
                while self._unwritten and self._unwritten[0] <= last:
                    self._written.wait()
            finally:
                self._waiters -= 1

    def _ended(self, write: _Write) -> None:
        with self._writes:
            unwritten = self._unwritten
            if unwritten[0] != write.number:
                self._ended_early.add(write.number)
                return  # an older write still runs: nobody waits on this one alone
            heapq.heappop(unwritten)
            while unwritten and unwritten[0] in self._ended_early:
                self._ended_early.discard(heapq.heappop(unwritten))
            if self._waiters:  # calls waiting for it, or for all (`wait_written`)
                self._written.notify_all()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle)
            except queue.Empty:
                # Idle: end, unless a call was just handed to this thread's count (its
                # submitter counted on this thread, still among `_threads`): it is taken
                # next.
                with self._lock:
                    if self._idle_threads:
                        self._idle_threads -= 1
                        if self._jobs.empty():
                            self._threads -= 1
                            return
                continue
            if job.after:
                self._after(job.after)
            job.run()
            if type(job) is _Write:
                self._ended(job)
            with self._lock:
                self._idle_threads += 1


async def to_thread(call: Callable[[], T], *, shielded: bool = False) -> T:
    """`call()` (a store call, or anything else that blocks) in a worker thread, to its
    end. A cancellation that comes while it runs is delivered once it has returned: a
    thread cannot be stopped, and what it writes (an intent's commit, the lease it
    takes) must be known before the caller acts on the cancellation, or the record
    left behind would be made before the write it should follow. A cancellation that
    comes before the thread has started it means it never runs, unless `shielded`: a
    write that leaves a cut-short call's record true (its lease given back) runs
    however often its caller is cancelled, and the cancellation waits for it. Under
    asyncio, in `_worker.Workers`' threads (a quarter of the cost of anyio's)."""
    workers = here()
    if workers is not None:
        return await workers.run(call, shielded=shielded)
    lock = threading.Lock()
    started = False
    abandoned = False
    ended = threading.Event()

    def run() -> T:
        nonlocal started
        with lock:
            if abandoned:
                raise _Abandoned
            started = True
        try:
            return call()
        finally:
            ended.set()

    try:
        return await anyio.to_thread.run_sync(run)
    except BaseException:
        with lock:
            abandoned = not started and not shielded
        if not abandoned:
            with anyio.CancelScope(shield=True):
                while not ended.is_set():
                    await anyio.sleep(_THREAD_POLL)
        raise


def here() -> Workers | None:
    """The store threads of the running asyncio event loop; None under another event
    loop (trio), whose calls go to anyio's threads (and whose writes are awaited)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    workers = _WORKERS.get(loop)
    if workers is None:
        workers = _WORKERS.setdefault(loop, Workers())
    return workers


#: The threads the async clients' store calls run in, one set per asyncio event loop
#: (as anyio's are): a call left waiting in a thread of a loop that is gone never holds
#: up another loop's.
_WORKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Workers] = (
    weakref.WeakKeyDictionary()
)


class _Abandoned(Exception):
    """A worker thread's call that its caller gave up before it started."""


#: How often a cancelled call looks again for the end of its store call (real seconds).
_THREAD_POLL = 0.001


def _nothing() -> None:
    return None


#: every `Workers` of this process, started afresh in a forked child
_ALL: weakref.WeakSet[Workers] = weakref.WeakSet()


def flush_all(timeout: float = AT_EXIT) -> bool:
    """Block until the writes queued in every `Workers` of this process have ended, at
    most `timeout` seconds in all; whether they all have."""
    give_up = time.monotonic() + timeout
    return all(workers.wait_written(max(0.0, give_up - time.monotonic())) for workers in list(_ALL))


def unwritten_elsewhere(workers: Workers | None) -> bool:
    """Whether a `Workers` of this process other than `workers` has writes queued."""
    return any(other._unwritten for other in list(_ALL) if other is not workers)


def _at_exit() -> None:
    if not flush_all():
        # The records of those writes stay as they were (in flight): maybe applied,
        # looked up or resumed under their keys, never sent under a new one.
        import logging

        logging.getLogger("idemclient").error(
            "the interpreter exits with store writes still queued after %.0fs: the"
            " operations they would have finished stay in flight in the store (maybe"
            " applied; resume or look them up)",
            AT_EXIT,
        )


atexit.register(_at_exit)

#: this process's exit waits for the queued writes where `atexit` does not run
#: (`_exit_waits`); made false again in a forked child
_exit_waits_here = False


def _exit_waits() -> None:
    """Make this process's end wait for its queued writes where no `atexit` handler runs:
    a `multiprocessing` child started by fork ends with `os._exit` once its target
    returns, after multiprocessing's own finalizers (registered in the child: those of
    its parent are dropped as it starts). Elsewhere `atexit` does (`_at_exit`)."""
    global _exit_waits_here
    _exit_waits_here = True
    util = sys.modules.get("multiprocessing.util")
    if util is not None:  # never imported here for this: a child has it already
        util.Finalize(None, _at_exit, exitpriority=0)


def _after_fork_in_child() -> None:
    global _exit_waits_here
    _exit_waits_here = False
    for workers in list(_ALL):
        workers._start_afresh()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
