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

A process forked while threads were running (a web server's workers forked from an app
that has paid, `multiprocessing` with fork) has none of them: in the child, each
`Workers` starts afresh, with no thread, no count of threads and an empty queue (the
calls queued in the parent are the parent's, for loops the child does not run), so its
first call starts a thread rather than wait for one that does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")

#: How often a cancelled caller looks again for the end of its call (real seconds).
_POLL = 0.001


class _Job(Generic[T]):
    __slots__ = ("abandoned", "call", "ended", "future", "lock", "loop", "started")

    def __init__(self, call: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.lock = threading.Lock()
        self.started = False
        self.abandoned = False
        self.ended = threading.Event()

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
            self.ended.set()

    def _tell(self, how: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
        # A closed loop (RuntimeError) has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(how, self.future, value)


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
        self._jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        #: one count per thread waiting for work (as `ThreadPoolExecutor` keeps it)
        self._waiting = threading.Semaphore(0)
        self._threads = 0

    async def run(self, call: Callable[[], T], *, shielded: bool = False) -> T:
        """`call()` in one of the threads, awaited; see the module docstring for what a
        cancellation does. `shielded`: never abandoned, even by a cancellation that
        comes before a thread took it (the write that leaves a cut-short call's record
        true): the cancellation waits for its end."""
        job = _Job(call, asyncio.get_running_loop())
        self._submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            with job.lock:
                job.abandoned = not job.started and not shielded
            if not job.abandoned:
                # Started (or shielded): it runs to its end, and the cancellation
                # waits for it.
                while not job.ended.is_set():
                    try:
                        await asyncio.sleep(_POLL)
                    except asyncio.CancelledError:
                        continue
            raise

    def _submit(self, job: _Job[Any]) -> None:
        self._jobs.put(job)
        if self._waiting.acquire(blocking=False):
            return  # a waiting thread takes it
        with self._lock:
            if self._threads >= self._max:
                return  # a busy thread takes it next
            self._threads += 1
        threading.Thread(target=self._work, name="idemclient-store", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle)
            except queue.Empty:
                # Idle: end, unless a call was just handed to this thread's count.
                if self._waiting.acquire(blocking=False):
                    with self._lock:
                        # A call queued since (its submitter counted on this thread,
                        # still among `_threads`) keeps it: it is taken next.
                        if self._jobs.empty():
                            self._threads -= 1
                            return
                continue
            job.run()
            self._waiting.release()


#: every `Workers` of this process, started afresh in a forked child
_ALL: weakref.WeakSet[Workers] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for workers in list(_ALL):
        workers._start_afresh()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
