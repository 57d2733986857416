"""A call cut short (an `AsyncClient` call cancelled by `asyncio.wait_for` or
`task.cancel()`, a sync call stopped by Ctrl-C, a hook that raised) leaves a truthful
record, at every point from just before its intent is committed to its answer:

- nothing handed to the transport: `not_sent`, sendable at once by the next call, by
  `resume()` and by a new process, under every server profile (those whose server does
  not refuse a second request while the first runs included: there a false "maybe
  applied" would hold the payment back for the profile's whole `in_flight_for`);
- handed to the transport: maybe applied, and never sent again while the server may
  still be running it.

Each point is found by counting, never by timing: the store is a real SQLite store
behind a wrapper that interrupts its Nth call (before that call reaches the store, or
after it has landed: the commit that lands while the cancellation is on its way), the
clock interrupts its Nth sleep, the wire interrupts the request it is handed. The
reference server, speaking each profile, keeps the ledger: exactly one payment, and
never a second request for one that may have been applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

import idemclient
from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
)
from idemclient._time import CLOCK_SKEW
from idemclient.hooks import Hooks
from idemclient.profiles import named
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer
from tests.profiles.server_speakers import ALL, AUTH, BODY, PATH

#: the profiles whose server runs a second request beside the first (the false hold
#: showed there), and two that refuse it
UNGUARDED = ("paypal", "square", "gocardless", "wise", "django-idempotency-key")
OPERATION = "order-1042"
#: what every call sends (the end-to-end reference is what a look-up finds it by)
PAYMENT: dict[str, Any] = {"json": BODY, "operation_id": OPERATION, "reference": BODY["reference"]}
Raise = Callable[[], BaseException]


class Interrupted(Exception):
    """Raised by a test's interruption where a plain exception is wanted (a hook's)."""


class Wire(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The network to the in-process server: counts the operation requests it is
    handed (the time probe's HEAD aside), and may interrupt one as it is handed over."""

    def __init__(self, server: ReferenceServer) -> None:
        self.server = server
        self.handed = 0
        #: interrupt the request handed over as this number (1: the first), after the
        #: server has taken it (its answer lost with the interruption)
        self.cut_at: int | None = None
        self.cut: Raise = KeyboardInterrupt
        self.cancel: Callable[[], None] | None = None

    def _count(self, request: httpx.Request) -> bool:
        if request.method == "HEAD":
            return False
        self.handed += 1
        return self.handed == self.cut_at

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        cut = self._count(request)
        response = self.server.transport.handle_request(request)
        if cut:
            raise self.cut()
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        cut = self._count(request)
        response = await self.server.transport.handle_async_request(request)
        if cut:
            assert self.cancel is not None
            self.cancel()
            await asyncio.sleep(0)  # the cancellation is delivered here
        return response


class InterruptingStore:
    """A real SQLite store that interrupts its Nth call once armed: `before` it reaches
    the store, or `after` it has landed (its result lost). Every call counts, reads and
    writes alike. Async: `cut` runs in the worker thread, `landed` tells it whether
    the call has run."""

    def __init__(self, path: Path) -> None:
        self.inner = SQLiteStore(path)
        self.calls: list[str] = []
        self.armed = False
        self.at: int | None = None
        #: or: interrupt the first call of this name
        self.name: str | None = None
        self.when = "before"
        self.cut: Callable[[str], None] = _raise_keyboard_interrupt

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self.inner, name)
        if not callable(inner) or name == "close":
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.armed:
                return inner(*args, **kwargs)
            self.calls.append(name)
            here = len(self.calls) == self.at or (name == self.name and self.calls.count(name) == 1)
            if here and self.when == "before":
                self.cut(name)
            result = inner(*args, **kwargs)
            if here and self.when == "after":
                self.cut(name)
            return result

        return call

    def close(self) -> None:
        self.inner.close()


def _raise_keyboard_interrupt(_name: str) -> None:
    raise KeyboardInterrupt


class InterruptingClock(ManualClock):
    """A `ManualClock` whose Nth sleep (once armed) is interrupted."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.naps = 0
        self.at: int | None = None
        self.cancel: Callable[[], None] | None = None

    def sleep(self, seconds: float) -> None:
        if self.armed:
            self.naps += 1
            if self.naps == self.at:
                raise KeyboardInterrupt
        super().sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        if self.armed:
            self.naps += 1
            if self.naps == self.at:
                assert self.cancel is not None
                self.cancel()
                await asyncio.sleep(0)
        await super().asleep(seconds)


@dataclass
class Shop:
    """One application's store and its PSP (the reference server speaking `profile`),
    on one `ManualClock`. Every client is a process of the application: a fresh client
    on the same store file."""

    profile: str
    tmp: Path
    clock: InterruptingClock = field(default_factory=InterruptingClock)

    def __post_init__(self) -> None:
        self.server = ReferenceServer(profile=self.profile, clock=self.clock)
        self.wire = Wire(self.server)
        self.path = self.tmp / "shop.db"
        self.store = InterruptingStore(self.path)

    def options(self, **more: Any) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "transport": self.wire,
            "base_url": "http://psp.test",
            "headers": AUTH,
            "profile": self.profile,
            # One 503 first (see `pay`): the call sleeps once between its attempts.
            "policy": RetryPolicy(max_attempts=3),
            **more,
        }

    def client(self, store: Any = None) -> Client:
        return Client(store=store if store is not None else self.store, **self.options())

    def aclient(self) -> AsyncClient:
        return AsyncClient(store=self.store, **self.options())

    def post(self, client: Client) -> idemclient.Outcome:
        return client.post(PATH[self.profile], **PAYMENT)

    def record(self) -> Any:
        with SQLiteStore(self.path) as store:
            return store.get(OPERATION)

    def payments(self) -> int:
        return len(self.server.ledger())

    def close(self) -> None:
        self.store.close()
        self.server.close()


@pytest.fixture
def shops(tmp_path: Path) -> Iterator[Callable[[str], Shop]]:
    made: list[Shop] = []

    def make(profile: str) -> Shop:
        where = tmp_path / f"shop-{len(made)}"
        where.mkdir()
        shop = Shop(profile, where)
        made.append(shop)
        return shop

    yield make
    for shop in made:
        shop.close()


def follow_up(shop: Shop, how: str) -> object:
    """Pay again after the interruption, as `how` says: the same client's next call
    (`again`), `resume()`, or a new process (`new`). Its outcome or error."""
    try:
        record = shop.record()
        if how == "resume" and record is not None and not record.state.finished:
            with shop.client() as client:
                (outcome,) = client.resume()
                return outcome
        with shop.client(store=shop.path if how == "new" else None) as client:
            return shop.post(client)
    except (Indeterminate, NotSent) as error:
        return error


def check_truthful(shop: Shop, how: str, where: str) -> None:
    """What an interrupted call left, then what paying again comes to: nothing handed
    to the transport is `not_sent` and paid at once; something handed over is never
    sent again while the server may still run it; one payment in the end."""
    handed = shop.wire.handed
    record = shop.record()
    if handed == 0:
        assert record is None or (
            record.state is State.NOT_SENT
            and not record.maybe_applied
            and record.lease_owner is None
            and record.attempts == 0
        ), (where, record)
    assert shop.payments() <= 1, where
    shop.store.armed = shop.clock.armed = False
    shop.wire.cut_at = None
    before = shop.wire.handed
    outcome = follow_up(shop, how)
    if handed == 0:
        # Nothing was sent: paid at once, whatever the profile.
        assert getattr(outcome, "state", None) is State.SUCCEEDED, (where, outcome)
        assert shop.payments() == 1, (where, outcome)
        return
    held = getattr(outcome, "state", None) is State.INDETERMINATE  # as resume() says it
    if isinstance(outcome, Indeterminate) or held:
        # Held: nothing sent beside what may still be running at the server.
        assert shop.wire.handed == before, (where, outcome)
        shop.clock.advance(named(shop.profile).in_flight_for + CLOCK_SKEW + 1)
        with shop.client() as client:
            (outcome,) = client.resume()
            if getattr(outcome, "state", None) is State.INDETERMINATE:
                # Held past its server's key retention (django-idempotency-key keeps a
                # key 300s): settled by a look-up, never sent again.
                assert shop.wire.handed == before, (where, outcome)
                lookup = f"{PATH[shop.profile]}?reference={{reference}}"
                outcome = client.reconcile(OPERATION, lookup=lookup)
                if outcome.state is State.NOT_SENT:  # found never applied: paid now
                    outcome = shop.post(client)
    assert getattr(outcome, "state", None) is State.SUCCEEDED, (where, outcome)
    assert shop.payments() == 1, (where, outcome)


# -- sync: Ctrl-C at every store call -------------------------------------------------------


def _store_calls(shops: Callable[[str], Shop], profile: str) -> int:
    """How many store calls a first payment makes (its first attempt answered 503)."""
    shop = shops(profile)
    shop.server.answer(503, times=1)
    with shop.client() as client:
        shop.store.armed = True
        assert shop.post(client).state is State.SUCCEEDED
    return len(shop.store.calls)


@pytest.mark.parametrize("profile", ALL)
def test_ctrl_c_at_each_store_call_leaves_a_truthful_record(
    shops: Callable[[str], Shop], profile: str
) -> None:
    calls = _store_calls(shops, profile)
    assert calls >= 3  # begin, the retry's record, the answer's
    for at in range(1, calls + 1):
        for when in ("before", "after"):
            for how in ("again", "resume", "new"):
                shop = shops(profile)
                shop.server.answer(503, times=1)
                where = f"{profile}: Ctrl-C {when} store call {at}, then {how}"
                with shop.client() as client:
                    shop.store.armed, shop.store.at, shop.store.when = True, at, when
                    with contextlib.suppress(KeyboardInterrupt):
                        shop.post(client)
                    if how == "again":
                        check_truthful(shop, how, where)
                        continue
                check_truthful(shop, how, where)


@pytest.mark.parametrize("profile", UNGUARDED)
def test_ctrl_c_as_the_intent_commits_leaves_it_not_sent_and_payable_at_once(
    shops: Callable[[str], Shop], profile: str
) -> None:
    # The case users met: interrupted as the intent's commit returns. Not "maybe
    # applied, may be sent again in 1200s": nothing was sent.
    shop = shops(profile)
    with shop.client() as client:
        shop.store.armed, shop.store.name, shop.store.when = True, "begin", "after"
        with pytest.raises(KeyboardInterrupt):
            shop.post(client)
        record = shop.record()
        assert (record.state, record.maybe_applied, record.attempts) == (State.NOT_SENT, False, 0)
        assert record.lease_owner is None
        assert record.not_before is None
        assert "KeyboardInterrupt" in record.evidence
        shop.store.armed = False
        assert shop.post(client).state is State.SUCCEEDED
    assert shop.wire.handed == 1
    assert shop.payments() == 1


@pytest.mark.parametrize("profile", ["reference", *UNGUARDED])
def test_ctrl_c_at_each_sleep_and_at_the_hand_over(
    shops: Callable[[str], Shop], profile: str
) -> None:
    # The sleep between the 503 and the retry: the 503 said nothing was applied. The
    # hand-over: the server took the request and its answer is lost, maybe applied.
    for point in ("sleep", "first hand-over", "second hand-over"):
        for how in ("again", "resume", "new"):
            shop = shops(profile)
            shop.server.answer(503, times=1)
            where = f"{profile}: Ctrl-C at the {point}, then {how}"
            if point == "sleep":
                shop.clock.armed, shop.clock.at = True, 1
            else:
                shop.wire.cut_at = 1 if point == "first hand-over" else 2
            with shop.client() as client, pytest.raises(KeyboardInterrupt):
                shop.post(client)
            record = shop.record()
            if point == "sleep":
                assert (record.state, record.maybe_applied) == (State.NOT_SENT, False), where
            else:  # its answer lost with the interruption: maybe applied
                assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True), where
            check_truthful(shop, how, where)


def test_a_hook_that_interrupts_before_the_send_leaves_nothing_sent(
    shops: Callable[[str], Shop],
) -> None:
    # Ctrl-C (or an exception) in the attempt hook, which runs before the request is
    # handed to the transport: no attempt was made, none is counted.
    for profile in UNGUARDED:
        for cut in (KeyboardInterrupt, Interrupted):
            shop = shops(profile)

            def stop(_event: object, cut: type[BaseException] = cut) -> None:
                raise cut

            with (
                Client(store=shop.store, **shop.options(hooks=Hooks(on_attempt=stop))) as client,
                pytest.raises(cut),
            ):
                shop.post(client)
            record = shop.record()
            assert (record.state, record.maybe_applied, record.attempts) == (
                State.NOT_SENT,
                False,
                0,
            ), (profile, cut, record)
            assert shop.wire.handed == 0
            check_truthful(shop, "new", f"{profile}: {cut.__name__} in the attempt hook")


# -- sync: Ctrl-C at every line of the client's own code ---------------------------------


#: The client's own modules a Ctrl-C is tried at each line of: the flow, its decisions,
#: its drivers and the client around them. The store's inside is tried at its calls
#: (above): inside a `with` block, a signal's landing between the block and its exit is
#: a limit of Python itself, not something a library can close.
ENGINE = (
    "_flow.py",
    "_admission.py",
    "_following.py",
    "_call.py",
    "_intent.py",
    "_reading.py",
    "_deciding.py",
    "_telling.py",
    "_clock_steps.py",
    "_transport.py",
    "_operations.py",
    "_client.py",
    "_exchange.py",
)


class LineInterrupt:
    """Raise KeyboardInterrupt at the Nth line the client's own code runs (as a signal
    arriving between two of its lines would), from the start of the operation's store
    admission until the flow hands the request over (`Call.sending`: from there to the
    transport, a few lines of its driver, a signal counts as sent: the safe side)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.lines = 0
        self.window = False
        self.over = False
        self.fired = False
        self.where = ""

    def __call__(self, frame: FrameType, event: str, _arg: object) -> Any:
        if self.fired or self.over:
            return None
        code = frame.f_code
        ours = code.co_filename.endswith(ENGINE) and "idemclient" in code.co_filename
        if event == "call":
            if code.co_name == "begin" and "idemclient" in code.co_filename:
                self.window = True
            if code.co_name == "sending" and self.window:
                self.over = True  # handed over: maybe applied from here on
                return None
            return self if ours else None
        if event == "line" and self.window and ours:
            self.lines += 1
            if self.lines == self.at:
                self.fired = True
                self.where = f"{Path(code.co_filename).name}:{frame.f_lineno}"
                raise KeyboardInterrupt
        return self


@pytest.mark.parametrize("profile", ["reference", "paypal"])
def test_ctrl_c_at_each_line_before_the_hand_over(
    shops: Callable[[str], Shop], profile: str
) -> None:
    at = 0
    while True:
        at += 1
        shop = shops(profile)
        tracer = LineInterrupt(at)
        with shop.client(store=shop.path) as client:
            sys.settrace(tracer)
            try:
                shop.post(client)
            except KeyboardInterrupt:
                assert tracer.fired
            finally:
                sys.settrace(None)
        check_truthful(shop, "new", f"{profile}: Ctrl-C at line {at}, {tracer.where}")
        if not tracer.fired:
            break  # every line up to the hand-over was tried
    assert at > 50  # the window was seen


# -- async: cancelled at every store call, sleep and hand-over ------------------------------


class Canceller:
    """Cancels the call's task as `task.cancel()` does, or as `asyncio.timeout` (what
    `asyncio.wait_for` is built on) does when its time is up: `fire`, on the loop."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.task: asyncio.Task[Any] | None = None
        self.timeout: asyncio.Timeout | None = None

    def fire(self) -> None:
        if self.task is not None and self.task.done():
            return  # the call has ended: nothing left to cut short
        if self.how == "cancel":
            assert self.task is not None
            self.task.cancel()
        else:
            assert self.timeout is not None
            self.timeout.reschedule(asyncio.get_running_loop().time())

    async def delivered(self) -> None:
        """Fire, and come back once the task has been thrown its CancelledError."""
        self.fire()
        for _ in range(5):  # the timer's turn, then the task's
            await asyncio.sleep(0)

    def from_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """`delivered`, from a worker thread (a store call's): what the thread does
        next (its commit) lands after the cancellation has reached the call."""
        asyncio.run_coroutine_threadsafe(self.delivered(), loop).result(timeout=10)


async def _cancelled_payment(shop: Shop, canceller: Canceller, arm: Callable[[], None]) -> None:
    """One payment through an `AsyncClient`, cut short by `canceller` where `arm` says:
    raises the CancelledError (task.cancel) or TimeoutError (a timeout) the caller
    would see."""
    loop = asyncio.get_running_loop()
    shop.store.cut = lambda _name: canceller.from_thread(loop)
    shop.clock.cancel = shop.wire.cancel = canceller.fire
    async with shop.aclient() as client:
        arm()

        async def pay() -> object:
            if canceller.how == "cancel":
                return await client.post(PATH[shop.profile], **PAYMENT)
            async with asyncio.timeout(None) as timeout:
                canceller.timeout = timeout
                return await client.post(PATH[shop.profile], **PAYMENT)

        canceller.task = asyncio.ensure_future(pay())
        await canceller.task


def _async_points(shops: Callable[[str], Shop], profile: str) -> int:
    shop = shops(profile)
    shop.server.answer(503, times=1)

    async def pay() -> idemclient.Outcome:
        async with shop.aclient() as client:
            shop.store.armed = True
            return await client.post(PATH[profile], **PAYMENT)

    assert asyncio.run(pay()).state is State.SUCCEEDED
    # the last, the final answer's write, is queued behind the answer (docs/client.md)
    assert shop.store.calls[-1] == "finish"
    return len(shop.store.calls)


@pytest.mark.parametrize("profile", ["reference", *UNGUARDED])
@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_an_async_call_cancelled_at_each_point_leaves_a_truthful_record(
    shops: Callable[[str], Shop], profile: str, how: str
) -> None:
    calls = _async_points(shops, profile)
    points = [("store", at, when) for at in range(1, calls + 1) for when in ("before", "after")]
    points += [("sleep", 1, ""), ("wire", 1, ""), ("wire", 2, "")]
    for kind, at, when in points:
        for follow in ("again", "resume", "new"):
            shop = shops(profile)
            shop.server.answer(503, times=1)

            def arm(shop: Shop = shop, kind: str = kind, at: int = at, when: str = when) -> None:
                if kind == "store":
                    shop.store.armed, shop.store.at, shop.store.when = True, at, when
                elif kind == "sleep":
                    shop.clock.armed, shop.clock.at = True, at
                else:
                    shop.wire.cut_at = shop.wire.handed + at

            where = f"{profile}: {how} at {kind} {at} {when}, then {follow}"
            expected = asyncio.CancelledError if how == "cancel" else TimeoutError
            if kind == "store" and at == calls:
                # The final answer's write, queued and not awaited: the call has its
                # outcome before the write runs, and no cancellation reaches it there.
                asyncio.run(_cancelled_payment(shop, Canceller(how), arm))
            else:
                with pytest.raises(expected):
                    asyncio.run(_cancelled_payment(shop, Canceller(how), arm))
            check_truthful(shop, follow, where)


@pytest.mark.parametrize("profile", UNGUARDED)
def test_wait_for_timing_out_as_the_intent_commits_leaves_it_not_sent(
    shops: Callable[[str], Shop], profile: str
) -> None:
    # asyncio.wait_for itself, its timeout reached while the intent's commit runs in
    # its worker thread; the commit lands after the cancellation reached the call.
    shop = shops(profile)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task: asyncio.Task[Any] | None = None

        def commit_late(_name: str) -> None:
            async def cancelled_and_thrown_in() -> None:
                assert task is not None
                while not task.cancelling():  # until wait_for has cancelled the call
                    await asyncio.sleep(0.001)
                for _ in range(5):  # and the cancellation has been thrown in
                    await asyncio.sleep(0)

            waiting = asyncio.run_coroutine_threadsafe(cancelled_and_thrown_in(), loop)
            waiting.result(timeout=10)  # a bound on a test gone wrong, never relied on

        shop.store.cut = commit_late
        async with shop.aclient() as client:
            shop.store.armed, shop.store.name, shop.store.when = True, "begin", "before"
            task = asyncio.ensure_future(client.post(PATH[profile], **PAYMENT))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(task, timeout=0.05)

    asyncio.run(main())
    record = shop.record()
    assert (record.state, record.maybe_applied, record.lease_owner) == (State.NOT_SENT, False, None)
    assert shop.wire.handed == 0
    check_truthful(shop, "again", f"{profile}: wait_for at the intent's commit")


# -- another process, a second process on the same store, time passing ----------------------

CHILD = Path(__file__).with_name("ctrl_c_child.py")


@pytest.mark.parametrize("profile", ["paypal", "gocardless"])
def test_a_process_stopped_by_ctrl_c_at_the_commit_leaves_it_payable_by_the_next(
    shops: Callable[[str], Shop], profile: str
) -> None:
    # A real SIGINT to a real process, once its intent is committed: the process ends
    # on KeyboardInterrupt, and the next process (a new client on the store) pays at
    # once, nothing having been sent; and later, as at once.
    shop = shops(profile)
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(shop.path), profile, PATH[profile]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "committed"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode != 0, err
    assert "KeyboardInterrupt" in err, err
    assert "sent" not in out
    record = shop.record()
    assert (record.state, record.maybe_applied, record.attempts) == (State.NOT_SENT, False, 0)
    assert record.lease_owner is None
    shop.clock.advance(3600.0)  # time passing changes nothing: never sent, never held
    with shop.client(store=shop.path) as client:
        before = shop.clock.time()
        assert shop.post(client).state is State.SUCCEEDED
        assert shop.clock.time() == before  # sent at once: no wait, no hold
    assert shop.payments() == 1


def test_a_second_process_waits_for_the_interrupted_one_then_pays_once(
    shops: Callable[[str], Shop],
) -> None:
    # Process A commits its intent and is stopped before it sends; process B, on the
    # same store, finds A's live lease meanwhile (nothing sent), then pays at once
    # once A's interruption has given the lease back.
    shop = shops("paypal")
    committed, go_on = threading.Event(), threading.Event()

    def pause_then_interrupt(name: str) -> None:
        committed.set()
        assert go_on.wait(10)
        raise KeyboardInterrupt

    shop.store.armed, shop.store.name, shop.store.when = True, "begin", "after"
    shop.store.cut = pause_then_interrupt
    stopped: list[BaseException] = []

    def process_a() -> None:
        with shop.client() as client:
            try:
                shop.post(client)
            except BaseException as exc:
                stopped.append(exc)

    a = threading.Thread(target=process_a)
    a.start()
    try:
        assert committed.wait(10)
        with Client(store=shop.path, **shop.options(clock=ManualClock())) as b:
            with pytest.raises(Indeterminate, match="another caller"):
                shop.post(b)  # A holds it: B waits within its deadline, sends nothing
            assert shop.wire.handed == 0
            go_on.set()
            a.join(10)
            assert not a.is_alive()
            assert [type(e) for e in stopped] == [KeyboardInterrupt]
            outcome = shop.post(b)
    finally:
        go_on.set()
        a.join(10)
    assert (outcome.state, outcome.attempts) == (State.SUCCEEDED, 1)
    assert shop.wire.handed == 1
    assert shop.payments() == 1
