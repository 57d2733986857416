"""Hostile Retry-After values, served by the reference server: a safe fallback to the
client's own backoff, or a stop with the server's time recorded; never a crash, never
an early retry, never a sleep past the deadline.

Client and in-process server share one ManualClock, so every wait the client takes is
recorded and no real time passes; the socket variant runs the same table over a real
connection (uvicorn must carry each raw value verbatim).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, NotSent, RetryPolicy, State
from idemclient._retry_after import MAX_SERVER_WAIT
from idemclient.testing import LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, exactly_once, payment

DEADLINE = 30.0
POLICY = RetryPolicy(deadline=DEADLINE, max_attempts=5)
# Before retry n the jitter window is [0, 0.25 * 2^(n-1)]: with two refusals, at most 0.5 s.
BACKOFF_CEILING = 0.5


@dataclass(frozen=True)
class Case:
    #: "fallback": ignored, the client's own backoff; "honoured": waited at least this
    #: long; "stop": the wait cannot fit, so nothing is slept and the time is recorded
    expect: str
    floor: float = 0.0


RETRY_AFTER = {
    "-5": Case("fallback"),  # negative
    "-0": Case("fallback"),  # negative zero
    "NaN": Case("fallback"),
    "nan": Case("fallback"),
    "inf": Case("fallback"),
    "-Infinity": Case("fallback"),
    "1e20": Case("fallback"),  # exponent notation is not delta-seconds
    "1E3": Case("fallback"),
    "0x10": Case("fallback"),  # hexadecimal
    "1_000": Case("fallback"),  # Python's digit grouping
    "": Case("fallback"),  # empty
    "   ": Case("fallback"),  # blank
    "soon": Case("fallback"),  # garbage
    "5 seconds": Case("fallback"),
    "1.2.3": Case("fallback"),
    "0": Case("fallback"),  # "now": nothing to wait for beyond the backoff
    "1.5": Case("honoured", 1.5),  # fractional seconds are read, and are a floor
    "Wed, 21 Oct 2015 07:28:00 GMT": Case("fallback"),  # a date in the past
    "Thu, 01 Jan 1970 00:00:00 GMT": Case("fallback"),  # the epoch
    "Mon, 99 Foo 2026 99:99:99 GMT": Case("fallback"),  # a date that is not one
    "Sun, 06 Nov 1994 08:49:37 GMT, 5": Case("fallback"),  # two values in one
    "99999999999999999999999999": Case("stop"),  # clamped to a year: over the limits
    "Fri, 31 Dec 9999 23:59:59 GMT": Case("stop"),  # far future: clamped to a year
}

RETRY_AFTER_MS = {
    "-1": Case("fallback"),
    "NaN": Case("fallback"),
    "1e20": Case("fallback"),
    "garbage": Case("fallback"),
    "": Case("fallback"),
    "2500": Case("honoured", 2.5),
    "99999999999999999999999": Case("stop"),
}


@dataclass
class Env:
    server: ReferenceServer
    clock: ManualClock
    url: str
    transport: httpx.BaseTransport | None


@pytest.fixture(scope="module")
def shared_live() -> Iterator[tuple[ManualClock, LiveServer]]:
    """One socket server for the module (starting uvicorn costs more than a test)."""
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server, serve(server) as live:
        yield clock, live


@pytest.fixture(params=["in-process", "socket"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    if request.param == "in-process":
        clock = ManualClock()
        with ReferenceServer(clock=clock) as server:
            yield Env(server, clock, "http://psp.test", server.transport)
        return
    clock, live = request.getfixturevalue("shared_live")
    live.server.reset()
    clock.sleeps.clear()
    yield Env(live.server, clock, live.url, None)


def _run(env: Env, tmp_path: Path, case: Case, n: int, figures: Figures) -> None:
    options = {} if env.transport is None else {"transport": env.transport}
    with Client(
        store=tmp_path / f"client-{n}.db",
        clock=env.clock,
        policy=POLICY,
        base_url=env.url,
        headers={"Authorization": "Bearer merchant-1"},
        **options,  # type: ignore[arg-type]
    ) as client:
        started = env.clock.time()
        reference = f"r-{n}"
        if case.expect == "stop":
            with pytest.raises(NotSent) as caught:
                client.post(PATH, json=payment(reference), operation_id=reference)
            outcome = caught.value.outcome
            assert outcome.state is State.NOT_SENT
            assert outcome.not_before is not None
            assert math.isfinite(outcome.not_before)
            # The far-future date and the huge number are both clamped to one year.
            assert outcome.not_before <= started + MAX_SERVER_WAIT + 1
            assert env.clock.sleeps == []  # stopped at once, did not wait
            # A resume honours the recorded time: nothing is sent, still no sleep.
            [resumed] = client.resume()
            assert resumed.state is State.NOT_SENT
            assert env.clock.sleeps == []
            assert env.server.ledger() == ()
            assert env.server.pending_faults() == 1  # the second refusal was never asked for
        else:
            outcome = client.post(PATH, json=payment(reference), operation_id=reference)
            assert outcome.state is State.SUCCEEDED
            assert outcome.attempts == 3
            sleeps = env.clock.sleeps
            assert len(sleeps) == 2
            assert all(math.isfinite(s) and s >= 0 for s in sleeps)
            if case.expect == "honoured":
                assert all(s >= case.floor for s in sleeps)  # a floor, never shortened
            else:
                assert all(s <= BACKOFF_CEILING for s in sleeps)  # its own backoff
            [entry] = env.server.ledger()
            assert exactly_once(entry)
        assert sum(env.clock.sleeps) < DEADLINE
    figures.count("hostile input", retry_after_values_served=2 - (case.expect == "stop"))


@pytest.mark.parametrize(("raw", "case"), RETRY_AFTER.items(), ids=list(RETRY_AFTER))
def test_a_hostile_retry_after_is_survived(
    env: Env, tmp_path: Path, raw: str, case: Case, figures: Figures
) -> None:
    env.server.answer(503, times=2, path=PATH, retry_after=raw)
    _run(env, tmp_path, case, 0, figures)


@pytest.mark.parametrize(("raw", "case"), RETRY_AFTER_MS.items(), ids=list(RETRY_AFTER_MS))
def test_a_hostile_retry_after_ms_is_survived(
    env: Env, tmp_path: Path, raw: str, case: Case, figures: Figures
) -> None:
    env.server.answer(429, times=2, path=PATH, headers={"retry-after-ms": raw})
    _run(env, tmp_path, case, 0, figures)
