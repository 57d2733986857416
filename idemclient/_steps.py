"""Who does a client step's effects: `run` in the calling thread, `arun` awaiting, with
every blocking call (the store) in a worker thread.

A step of a client (a resume, a reconcile, the batch's phases, the outbox's send) is a
generator of effects (`_effects`), written once for both worlds, so that a sync API and
its async twin are one piece of code and the event loop is never blocked; the
transports do the same with a request's flow (`_transport`). `pool` runs an `Each`
effect's jobs on threads.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import httpx

from ._effects import Blocking, Close, Each, Effect, Feed, Http, Sleep, adrive, drive
from ._worker import to_thread

__all__ = ["Op", "arun", "pool", "run"]

T = TypeVar("T")

#: A client's step: effects asked for, a value returned.
Op = Generator[Effect, Any, T]


def run(op: Op[T], client: httpx.Client) -> T:
    """Do what `op` asks, in this thread, until it returns."""
    returned: T = drive(op, functools.partial(_do, client=client))
    return returned


def _do(effect: Effect, client: httpx.Client) -> Any:
    if isinstance(effect, Blocking):
        return effect.fn(*effect.args, **effect.kwargs)
    if isinstance(effect, Http):
        return getattr(client, effect.name)(*effect.args, **effect.kwargs)
    if isinstance(effect, Close):
        return effect.response.close()
    if isinstance(effect, Sleep) and effect.clock is not None:
        return effect.clock.sleep(effect.seconds)
    if not isinstance(effect, Each):
        raise TypeError(f"not an effect of a client's step: {effect!r}")
    work = effect.work
    return pool(effect.count, effect.jobs, lambda job: run(work(job), client), effect)


async def arun(op: Op[T], client: httpx.AsyncClient) -> T:
    """Do what `op` asks, awaiting, with blocking calls in a worker thread."""
    returned: T = await adrive(op, functools.partial(_ado, client=client))
    return returned


async def _ado(effect: Effect, client: httpx.AsyncClient) -> Any:
    if isinstance(effect, Blocking):
        return await to_thread(functools.partial(effect.fn, *effect.args, **effect.kwargs))
    if isinstance(effect, Http):
        return await getattr(client, effect.name)(*effect.args, **effect.kwargs)
    if isinstance(effect, Close):
        return await effect.response.aclose()
    if isinstance(effect, Sleep) and effect.clock is not None:
        return await effect.clock.asleep(effect.seconds)
    if not isinstance(effect, Each):
        raise TypeError(f"not an effect of a client's step: {effect!r}")
    source = effect.jobs
    if isinstance(source, Sequence):
        jobs: Iterator[Any] = iter(source)
        more: Callable[[], list[Any]] | None = None
    else:
        jobs, more = iter(()), source.next_chunk
    taking = anyio.Lock()

    async def take() -> Any:
        nonlocal jobs, more
        job = next(jobs, _NONE)
        while job is _NONE and more is not None:
            async with taking:  # one worker asks for the next chunk, the others wait
                job = next(jobs, _NONE)
                if job is _NONE and more is not None:
                    chunk = await to_thread(more)  # after the answers' queued writes
                    if not chunk:
                        more = None
                    jobs = iter(chunk)
                    job = next(jobs, _NONE)
        return job

    async def worker() -> None:
        while not (effect.stop.is_set() or effect.also_stop()):
            job = await take()
            if job is _NONE:
                return
            await arun(effect.work(job), client)

    async with anyio.create_task_group() as group:
        for _ in range(effect.count):
            group.start_soon(worker)
    return None


_NONE = object()


def pool(count: int, jobs: Sequence[T] | Feed, work: Callable[[T], None], each: Each) -> None:
    """Run `work` on every job with `count` threads pulling from one queue, until done,
    `each.stop` is set or `each.also_stop()` is true; an error in a thread is re-raised
    here. A `Feed`'s next chunk is made by the thread that finds the last one taken."""
    stop, also_stop = each.stop, each.also_stop
    if isinstance(jobs, Sequence):
        iterator: Iterator[T] = iter(jobs)
        threads_wanted = min(count, max(1, len(jobs)))
    else:
        iterator = itertools.chain.from_iterable(iter(jobs.next_chunk, []))
        threads_wanted = count
    lock = threading.Lock()
    failures: list[BaseException] = []

    def worker() -> None:
        # A few threads pulling jobs, not a future per job: a hundred thousand rows
        # cost a hundred thousand report lines, and nothing else.
        while not failures and not stop.is_set() and not also_stop():
            with lock:
                job = next(iterator, None)
            if job is None:
                return
            try:
                work(job)
            except BaseException as exc:
                failures.append(exc)
                return

    threads = [
        threading.Thread(target=worker, name=f"idemclient-batch-{n}", daemon=True)
        for n in range(threads_wanted)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        stop.set()  # interrupted while waiting: the threads start nothing new
        raise
    if failures:
        raise failures[0]
