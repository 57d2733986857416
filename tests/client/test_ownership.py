"""Leases and what callers know: "maybe applied" is knowledge that the record keeps
whoever holds the lease; a caller whose lease was taken over says so; a store that
fails after an attempt may have arrived is reported as indeterminate.

Owners are paused at a gate inside the PSP's handler, never by racing threads against
real time: the clock is a `ManualClock`, and each wait on a gate is bounded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    ReconcileRequired,
    RetryPolicy,
    State,
)
from idemclient._intent import intent_for
from idemclient._time import CLOCK_SKEW
from idemclient.errors import StoreUnavailable
from idemclient.hooks import Hooks
from idemclient.profiles import named
from idemclient.store import SQLiteStore

from .two_callers import BOUND, Background, paused_past_its_lease

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


@dataclass
class Step:
    """What one request meets: applied first or not, then an answer or an error, after
    an optional gate that holds the caller until the test opens it."""

    apply: bool = True
    status: int | None = 201
    error: type[httpx.TransportError] | None = None
    gate: threading.Event | None = None
    arrived: threading.Event = field(default_factory=threading.Event)


class GatedPSP:
    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.effects: Counter[str] = Counter()
        self.keys: list[str | None] = []
        self.lock = threading.Lock()

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)  # a client's time probe: no Date here, nothing done
        key = request.headers.get("idempotency-key")
        with self.lock:
            self.keys.append(key)
            step = self.steps.pop(0) if self.steps else Step()
        assert key is not None
        replayed = key in self.effects
        if step.apply and not replayed:
            with self.lock:
                self.effects[key] += 1
        step.arrived.set()
        if step.gate is not None:
            assert step.gate.wait(BOUND), "the test never opened the gate"
        if step.error is not None:
            raise step.error("scripted", request=request)
        assert step.status is not None
        headers = {"Idempotent-Replayed": "true"} if replayed and step.apply else {}
        body = json.dumps({"id": "pay_1", **json.loads(request.read())})
        return httpx.Response(step.status, headers=headers, content=body)


def client(
    psp: GatedPSP, store: Path | SQLiteStore, clock: ManualClock, **options: object
) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        **options,  # type: ignore[arg-type]
    )


def test_a_lease_taken_over_keeps_maybe_applied_and_nobody_says_not_sent(tmp_path: Path) -> None:
    clock = ManualClock()
    slow = Step(apply=True, status=None, error=httpx.ReadTimeout, gate=threading.Event())
    refused = [Step(apply=False, status=None, error=httpx.ConnectError) for _ in range(8)]
    psp = GatedPSP(slow, *refused)
    with client(psp, tmp_path / "c.db", clock) as a, client(psp, tmp_path / "c.db", clock) as b:
        # A's answer is slow; its lease lapses
        owner_a = paused_past_its_lease(
            lambda: a.post("/v1/payments", json=PAYMENT, operation_id="op"), slow.arrived, clock
        )
        with pytest.raises(Indeterminate) as taken:  # B only ever failed to connect...
            b.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert taken.value.outcome.maybe_applied  # ...but it took over a send in flight
        assert slow.gate is not None
        slow.gate.set()
        owner_a.join()
        stored = a.operation("op")
    assert isinstance(owner_a.error, Indeterminate)
    assert not isinstance(owner_a.error, NotSent)
    assert stored is not None
    assert (stored.state, stored.maybe_applied) == (State.INDETERMINATE, True)
    assert sum(psp.effects.values()) == 1


@pytest.mark.parametrize(
    "late",
    [
        Step(apply=False, status=None, error=httpx.ReadTimeout),  # then stops at the deadline
        Step(apply=False, status=503),  # then wants to retry, and finds it finished
        # A final answer of its own (a refusal in front of the server) that comes after
        # another caller's success: the stored success is the answer, never the refusal
        # under the success's name (found by the checker, stripe, seed 884043066).
        Step(apply=False, status=403),
    ],
)
def test_an_owner_paused_past_its_lease_returns_what_another_finished(
    tmp_path: Path, late: Step
) -> None:
    clock = ManualClock()
    late.gate = threading.Event()
    psp = GatedPSP(late, Step(apply=True, status=201))
    with client(psp, tmp_path / "c.db", clock) as a, client(psp, tmp_path / "c.db", clock) as b:
        owner_a = paused_past_its_lease(
            lambda: a.post("/v1/payments", json=PAYMENT, operation_id="op"), late.arrived, clock
        )
        finished = b.post("/v1/payments", json=PAYMENT, operation_id="op")
        late.gate.set()
        owner_a.join()
    assert finished.state is State.SUCCEEDED
    assert owner_a.error is None, owner_a.error
    outcome = owner_a.result
    assert getattr(outcome, "state", None) is State.SUCCEEDED
    assert getattr(outcome, "from_store", None) is True
    assert getattr(outcome, "status_code", None) == 201
    assert sum(psp.effects.values()) == 1


def test_a_caller_that_lost_its_lease_says_so(tmp_path: Path) -> None:
    clock = ManualClock()
    a_first = Step(apply=False, status=503, gate=threading.Event())
    b_first = Step(apply=True, status=201, gate=threading.Event())
    psp = GatedPSP(a_first, b_first)
    with client(psp, tmp_path / "c.db", clock) as a, client(psp, tmp_path / "c.db", clock) as b:
        owner_a = paused_past_its_lease(
            lambda: a.post("/v1/payments", json=PAYMENT, operation_id="op"), a_first.arrived, clock
        )
        owner_b = Background(lambda: b.post("/v1/payments", json=PAYMENT, operation_id="op"))
        assert b_first.arrived.wait(BOUND)
        assert a_first.gate is not None
        assert b_first.gate is not None
        a_first.gate.set()  # A wants to retry, but B holds the lease now
        owner_a.join()
        b_first.gate.set()
        owner_b.join()
    assert isinstance(owner_a.error, Indeterminate)
    assert "took the operation over" in str(owner_a.error)
    assert getattr(owner_b.result, "state", None) is State.SUCCEEDED
    assert sum(psp.effects.values()) == 1


def dead_owner() -> str:
    """The owner name a process of this host (and PID namespace) wrote, and then exited."""
    done = subprocess.run(
        [sys.executable, "-c", "from idemclient._store import new_owner; print(new_owner())"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_a_dead_owners_send_counts_as_maybe_applied(tmp_path: Path) -> None:
    """A process SIGKILLed after the server applied its request leaves the record in
    flight; re-issued a day later, it is never sent again blindly."""
    clock = ManualClock()
    psp = GatedPSP()
    path = tmp_path / "c.db"
    with client(psp, path, clock) as c:
        request = c.http.build_request("POST", "/v1/payments", json=PAYMENT)
        request.headers["Idempotency-Key"] = "k-dead-owner"
        intent = intent_for(request, request.read())
        now = clock.time()
        c.store.begin(intent, owner=dead_owner(), now=now, lease_until=now + 70)
    clock.advance(25 * 3600)
    with client(psp, path, clock) as c, pytest.raises(ReconcileRequired):
        c.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": "k-dead-owner"})
    assert psp.keys == []  # nothing sent: the server may have forgotten the key


class FillingStore(SQLiteStore):
    """A store whose disk fills up when the outcome is committed."""

    full = False

    def finish(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.full:
            raise StoreUnavailable(self.path, "cannot be used: database or disk is full")
        return super().finish(*args, **kwargs)  # type: ignore[arg-type]


def test_a_full_disk_at_the_outcome_commit_is_indeterminate_and_holds_nothing_back(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    psp = GatedPSP()
    store = FillingStore(tmp_path / "c.db")
    told: list[object] = []
    with client(psp, store, clock, hooks=Hooks(on_outcome=told.append)) as c:
        store.full = True
        with pytest.raises(Indeterminate) as raised:
            c.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert isinstance(raised.value.__cause__, StoreUnavailable)
        assert raised.value.outcome.last_status == 201
        assert "could not record" in raised.value.outcome.evidence
        store.full = False
        before = clock.monotonic()
        again = c.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert clock.monotonic() == before  # its own dead call's lease held nothing back
    store.close()
    assert (again.state, again.replayed) == (State.SUCCEEDED, True)
    assert sum(psp.effects.values()) == 1
    assert len(told) == 2


def test_a_lease_left_by_an_ended_call_is_not_waited_on_under_an_unguarded_server(
    tmp_path: Path,
) -> None:
    """GoCardless runs a second request beside one still running under its key: the
    lease an ended call left behind is not waited on (that call will record nothing),
    and nothing is sent until its attempt has had the server's in-flight time."""
    clock = ManualClock()
    psp = GatedPSP()
    store = FillingStore(tmp_path / "c.db")
    with client(psp, store, clock, profile="gocardless") as c:
        store.full = True
        with pytest.raises(Indeterminate):
            c.post("/v1/payments", json=PAYMENT, operation_id="op")
        store.full = False
        before = clock.monotonic()
        with pytest.raises(Indeterminate, match="the call of this process that held it has"):
            c.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert clock.monotonic() == before  # no wait on the store for that call's answer
        assert len(psp.keys) == 1  # nothing sent beside the first
        clock.advance(named("gocardless").in_flight_for + CLOCK_SKEW)
        again = c.post("/v1/payments", json=PAYMENT, operation_id="op")
    store.close()
    assert again.state is State.SUCCEEDED
    assert len(psp.keys) == 2
    assert sum(psp.effects.values()) == 1


NEGATIVE_TIME = re.compile(r"-\d+(\.\d+)?\s?s\b")


def test_a_caller_whose_lease_was_taken_over_and_let_go_says_it_lost_it(tmp_path: Path) -> None:
    """A's attempt is slow; its lease lapses; B takes the operation over, tries three
    times and lets it go (indeterminate); then A's answer comes, with its deadline long
    past. A says it lost its lease to another caller, counts the attempts it made (one,
    not B's), and shows no negative time."""
    clock = ManualClock()
    a_first = Step(apply=False, status=503, gate=threading.Event())
    psp = GatedPSP(a_first, *(Step(apply=False, status=503) for _ in range(3)))
    path = tmp_path / "c.db"
    with (
        client(psp, path, clock) as a,
        client(psp, path, clock, policy=RetryPolicy(max_attempts=3)) as b,
    ):
        owner_a = paused_past_its_lease(
            lambda: a.post("/v1/payments", json=PAYMENT, operation_id="op"), a_first.arrived, clock
        )
        with pytest.raises(Indeterminate) as by_b:
            b.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert by_b.value.outcome.attempts == 3
        assert a_first.gate is not None
        a_first.gate.set()
        owner_a.join()
        stored = a.store.get("op")
    error = owner_a.error
    assert isinstance(error, Indeterminate), error
    assert not isinstance(error, NotSent)
    text = str(error)
    assert "lost its lease to another caller" in text, text
    assert "took the operation over" in text, text
    assert error.outcome.attempts == 1, text  # its own, not B's three
    assert "after 1 attempt(s)" in text, text
    assert error.outcome.evidence.startswith("HTTP 503"), error.outcome.evidence
    assert not NEGATIVE_TIME.search(text), text
    assert not NEGATIVE_TIME.search(error.outcome.evidence)
    assert stored is not None
    assert (stored.state, stored.maybe_applied, stored.lease_owner) == (
        State.INDETERMINATE,
        True,
        None,
    )
    assert psp.effects == Counter()


def test_a_deadline_passed_during_an_attempt_shows_no_negative_time(tmp_path: Path) -> None:
    """The answer to the last attempt comes after the deadline: the call stops, saying
    the deadline has passed, never "the -31.000s left"."""
    clock = ManualClock()

    def slow_then_busy(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)
        clock.advance(RetryPolicy().deadline + 31)  # the answer took that long
        return httpx.Response(503, headers={"Retry-After": "1"})

    with (
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=httpx.MockTransport(slow_then_busy),
            base_url="https://psp.test",
        ) as c,
        pytest.raises(NotSent) as stopped,
    ):
        c.post("/v1/payments", json=PAYMENT, operation_id="op")
    text = str(stopped.value)
    assert "deadline has passed" in text, text
    assert not NEGATIVE_TIME.search(text), text
