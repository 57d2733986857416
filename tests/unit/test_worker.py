"""`_worker.Workers`: the threads an async client's store calls run in under asyncio.
What matters is the promise of a cancelled call: started, it runs to its end before the
caller hears of the cancellation; not started, it never runs."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest

from idemclient._worker import Workers

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on


def test_calls_run_in_a_thread_and_give_back_their_result_or_error() -> None:
    workers = Workers(max_threads=2)

    async def main() -> None:
        assert await workers.run(threading.get_ident) != threading.get_ident()
        with pytest.raises(ZeroDivisionError):
            await workers.run(lambda: 1 // 0)
        doubled = [workers.run(functools.partial(int.__mul__, n, 2)) for n in range(50)]
        assert await asyncio.gather(*doubled) == [n * 2 for n in range(50)]

    asyncio.run(main())


def test_a_started_call_cancelled_runs_to_its_end_before_the_caller_hears() -> None:
    workers = Workers(max_threads=1)
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def write() -> None:
        started.set()
        assert release.wait(BOUND)
        done.append("written")

    async def main() -> None:
        task = asyncio.ensure_future(workers.run(write))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()  # still waiting for the write
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, BOUND)
        assert done == ["written"]

    asyncio.run(main())


def test_a_call_cancelled_before_a_thread_took_it_never_runs() -> None:
    workers = Workers(max_threads=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def busy() -> None:
        started.set()
        assert release.wait(BOUND)

    async def main() -> None:
        first = asyncio.ensure_future(workers.run(busy))
        while not started.is_set():
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(workers.run(lambda: ran.append("ran")))
        await asyncio.sleep(0.01)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        release.set()
        await asyncio.wait_for(first, BOUND)
        await workers.run(lambda: None)  # the queue has moved past the abandoned call

    asyncio.run(main())
    assert ran == []


def test_idle_threads_end_and_new_calls_start_them_again() -> None:
    workers = Workers(max_threads=2, idle=0.01)

    async def main() -> None:
        await workers.run(lambda: None)
        for _ in range(int(BOUND / 0.01)):
            if workers._threads == 0:
                break
            await asyncio.sleep(0.01)
        assert workers._threads == 0
        assert await workers.run(lambda: "again") == "again"

    asyncio.run(main())


def test_calls_left_waiting_in_one_event_loop_hold_up_no_other() -> None:
    # Every thread of one loop's set held (a store call waiting on a lock, a loop gone):
    # another loop's calls run in threads of their own, as anyio's do.
    from idemclient._transport import to_thread

    release = threading.Event()
    held = threading.Event()
    started: list[int] = []

    def wait() -> None:
        started.append(1)
        if len(started) == 40:
            held.set()
        assert release.wait(BOUND)

    def hold_every_thread() -> None:
        async def main() -> None:
            await asyncio.gather(*(to_thread(wait) for _ in range(40)))

        asyncio.run(main())

    other = threading.Thread(target=hold_every_thread, daemon=True)
    other.start()
    try:
        assert held.wait(BOUND)

        async def elsewhere() -> int:
            return await asyncio.wait_for(to_thread(lambda: 7), BOUND / 2)

        assert asyncio.run(elsewhere()) == 7
    finally:
        release.set()
        other.join(BOUND)


def test_a_shielded_call_cancelled_before_a_thread_took_it_runs_and_is_waited_for() -> None:
    workers = Workers(max_threads=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def busy() -> None:
        started.set()
        assert release.wait(BOUND)

    async def main() -> None:
        first = asyncio.ensure_future(workers.run(busy))
        while not started.is_set():
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(workers.run(lambda: ran.append("ran"), shielded=True))
        await asyncio.sleep(0.01)
        second.cancel()
        await asyncio.sleep(0.01)
        assert not second.done()  # waiting for its call, which no thread has taken yet
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(second, BOUND)
        assert ran == ["ran"]  # it ran before the cancellation was heard
        await asyncio.wait_for(first, BOUND)

    asyncio.run(main())


def test_a_queued_write_is_not_awaited_and_what_it_raises_goes_to_its_writer() -> None:
    workers = Workers(max_threads=2)
    release = threading.Event()
    failures: list[BaseException] = []
    order: list[str] = []

    def write() -> None:
        assert release.wait(BOUND)
        order.append("written")
        raise OSError("disk full")

    async def main() -> None:
        workers.later(write, failures.append)  # returns at once: nothing awaited
        assert order == []
        release.set()
        # queued after the write: runs once it has ended, in whichever thread
        assert await asyncio.wait_for(workers.run(lambda: list(order)), BOUND) == ["written"]
        await asyncio.wait_for(workers.flush(), BOUND)
        assert await workers.run(lambda: 42) == 42  # the threads go on

    asyncio.run(main())
    assert [str(error) for error in failures] == ["disk full"]
    assert workers.wait_written(BOUND)


def test_waiting_for_the_queued_writes_from_outside_the_loop() -> None:
    # What the interpreter's exit does (`flush_all`), and the deprecated sync read.
    workers = Workers(max_threads=1)
    release = threading.Event()
    done: list[str] = []

    def write() -> None:
        assert release.wait(BOUND)
        done.append("written")

    workers.later(write, lambda _error: None)
    assert not workers.wait_written(0.01)  # still held: not written, and said so
    release.set()
    assert workers.wait_written(BOUND)
    assert done == ["written"]


@pytest.mark.parametrize("held", ["first", "second"])
def test_a_call_waits_for_the_writes_queued_before_it_and_for_no_later_one(held: str) -> None:
    # Writes end out of order in several threads; each call keeps only the number of the
    # last write queued before it, and waits for the older one held or the newest.
    workers = Workers(max_threads=4)
    release = {name: threading.Event() for name in ("first", "second", "third")}
    order: list[str] = []

    def write(name: str) -> None:
        assert release[name].wait(BOUND)
        order.append(name)

    def queue(name: str) -> None:
        workers.later(functools.partial(write, name), lambda _error: None)

    async def main() -> None:
        queue("first")
        queue("second")
        ends_first = "second" if held == "first" else "first"
        release[ends_first].set()
        between = asyncio.ensure_future(workers.run(lambda: list(order)))
        await asyncio.sleep(0)  # queued now, behind the first two writes only
        queue("third")
        # A short real wait for something that must not happen (the call running while
        # a write queued before it holds): no clock of ours moves a worker thread.
        done, _ = await asyncio.wait({between}, timeout=0.05)
        assert not done
        release[held].set()
        # It runs while the third, queued after it, still holds.
        assert sorted(await asyncio.wait_for(between, BOUND)) == ["first", "second"]
        assert "third" not in order
        release["third"].set()
        await asyncio.wait_for(workers.flush(), BOUND)
        assert await workers.run(lambda: list(order)) == [ends_first, held, "third"]

    asyncio.run(main())
    assert workers.wait_written(BOUND)
